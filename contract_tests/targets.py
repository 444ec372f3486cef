"""What the contract runs against: a named URL plus the factory that opens an adapter for it.

A target's ``factory`` is ``open_adapter`` unless given as ``module:function`` (any callable taking
``(url, **options)`` and returning an object with the ObjectStorageAdapter API), which is how peer
adapters and the planted-bug adapters join the same suite.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from storage_adapter.config import reject_credentials_in_url
from storage_adapter.errors import ConfigurationError
from storage_adapter.protocol import StorageAdapter

DEFAULT_FACTORY = "storage_adapter:open_adapter"
EMBEDDED = ("memory", "local", "seaweedfs")


@dataclass(frozen=True)
class Target:
    """A backend under test: ``url`` opened by ``factory`` (``module:function``). ``url`` is None only for
    an embedded target of the pytest plugin, resolved when its session starts. Peers are compared, never
    judged (they never affect an exit status)."""

    name: str
    url: str | None = None
    factory: str = DEFAULT_FACTORY
    peer: bool = False

    @property
    def address(self) -> str:
        """The URL. Raises ValueError for an embedded target that has none yet."""
        if self.url is None:
            raise ValueError(f"target {self.name!r} is embedded: it has no URL until its session starts")
        return self.url

    def open(self, url: str | None = None, **options: Any) -> StorageAdapter:
        opener = load_factory(self.factory)
        return opener(url or self.address, **options)  # type: ignore[no-any-return]


def load_factory(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(f"adapter factory {spec!r} must look like 'package.module:function'")
    try:
        return getattr(importlib.import_module(module_name), attr)  # type: ignore[no-any-return]
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"cannot load adapter factory {spec!r}: {exc}") from exc


def parse_target(spec: str, factory: str = DEFAULT_FACTORY) -> Target:
    """``NAME=URL`` or ``URL`` (named after its scheme and location). Raises ConfigurationError, without
    echoing them, for credentials in the URL (``user:password@``): neither a target's URL nor the name
    derived from it ever carries credentials (only a userinfo that names a location, as abfs's
    ``container@account``)."""
    name, sep, url = spec.partition("=")
    named = bool(sep) and "://" not in name
    url = url if named else spec
    reject_credentials_in_url(url)
    if not named:
        name = spec.split("://", 1)[-1].strip("/").replace("/", "-") or spec
        name = f"{spec.split('://', 1)[0]}:{name}" if "://" in spec else name
    return Target(name=name, url=url, factory=factory)
