"""What the contract runs against: a named URL plus the factory that opens an adapter for it.

A target's ``factory`` is ``open_adapter`` unless given as ``module:function`` (any callable taking
``(url, **options)`` and returning an object with the ObjectStorageAdapter API), which is how peer
adapters and the planted-bug adapters join the same suite.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from storage_adapter.errors import ConfigurationError

DEFAULT_FACTORY = "storage_adapter:open_adapter"
EMBEDDED = ("memory", "local", "seaweedfs")


@dataclass(frozen=True)
class Target:
    """A backend under test. ``url`` is None for an embedded target resolved at session start."""

    name: str
    url: str | None = None
    factory: str = DEFAULT_FACTORY
    options: tuple[tuple[str, Any], ...] = field(default=(), repr=False)
    peer: bool = False  # peers are compared, never judged (they never affect an exit status)

    def open(self, url: str | None = None, **options: Any) -> Any:
        opener = load_factory(self.factory)
        return opener(url or self.url, **{**dict(self.options), **options})


def load_factory(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(f"adapter factory {spec!r} must look like 'package.module:function'")
    try:
        return getattr(importlib.import_module(module_name), attr)  # type: ignore[no-any-return]
    except (ImportError, AttributeError) as exc:
        raise ConfigurationError(f"cannot load adapter factory {spec!r}: {exc}") from exc


def parse_target(spec: str, factory: str = DEFAULT_FACTORY) -> Target:
    """``NAME=URL`` or ``URL`` (named after its scheme and location)."""
    name, sep, url = spec.partition("=")
    if not sep or "://" in name:
        url = spec
        name = spec.split("://", 1)[-1].strip("/").replace("/", "-") or spec
        name = f"{spec.split('://', 1)[0]}:{name}" if "://" in spec else name
    return Target(name=name, url=url, factory=factory)
