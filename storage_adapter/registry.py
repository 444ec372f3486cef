"""The backend registry: a backend is one registered object, looked up by name or URL scheme.

A :class:`Backend` says everything the adapter needs to know about a kind of storage: its URL scheme, how
a URL becomes a location and a key prefix, which options it takes (with their environment variables and
defaults), what it guarantees (:class:`~storage_adapter.types.Capabilities`), how to build the
:class:`Driver` that does its I/O, how to make a throwaway instance for tests, and optionally its fsspec
peer. Nothing outside this module (and the backends' own definitions) compares backend names.

Built-in backends (``memory``, ``local``, ``s3``) are registered when :mod:`storage_adapter` is
imported. A third-party package adds one either by calling :func:`register_backend` or by declaring an
entry point in the group ``storage_adapter.backends`` whose object is a :class:`Backend`; entry points
are loaded the first time a name or scheme is not found.
"""

from __future__ import annotations

import importlib.metadata
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import SplitResult

from storage_adapter.driver import Driver as _Driver
from storage_adapter.driver import ForeignWriter as _ForeignWriter
from storage_adapter.errors import ConfigurationError
from storage_adapter.keys import join_key, validate_prefix
from storage_adapter.redaction import MASK, Redactor
from storage_adapter.types import Capabilities

ENTRY_POINT_GROUP = "storage_adapter.backends"


@dataclass(frozen=True)
class Option:
    """One option a backend accepts: its type, the environment variables it falls back to (the first one
    set wins), its default, whether it is a secret (masked in every repr, message and report), and the
    group it resolves with: options of one group come from one source, so when the caller gives any of
    them, none of the others is taken from the environment (keys given explicitly are never combined with
    a session token or profile from the shell)."""

    kind: type
    env: tuple[str, ...] = ()
    default: Any = None
    secret: bool = False
    group: str = ""


@dataclass(frozen=True)
class FsspecPeer:
    """The fsspec implementation of a backend, run beside it in the conformance matrix (compared, never
    judged). ``filesystem(config)`` returns the filesystem and the adapter root's path inside it."""

    name: str
    capabilities: Capabilities
    filesystem: Callable[[AdapterConfig], tuple[Any, str]]


@dataclass(frozen=True)
class HadoopRoot:
    """How Hadoop's filesystems (Spark's own file writers) name an adapter's root: ``uri`` (``file:///...``,
    ``s3a://bucket/prefix``), the Hadoop ``settings`` that reach it, the ``filesystem_class`` the JVM must
    be able to load (None: one every Hadoop has) and, where the objects are files on this host,
    ``local_directory`` (files written there by a Hadoop writer, which never fsyncs, are made durable by
    whoever publishes them)."""

    uri: str
    settings: Mapping[str, str]
    filesystem_class: str | None = None
    local_directory: str | None = None


@dataclass(frozen=True)
class Backend:
    """A kind of storage, registered by ``name`` for URLs of ``scheme``.

    ``locate(parts, url)`` turns a split URL into ``(location, prefix)`` (raising ConfigurationError);
    ``display_location`` is how the location is written back into the adapter's URL; ``check_options``
    validates resolved options together; ``driver(config)`` builds the I/O driver; ``configured`` adjusts
    the declared capabilities to an adapter's options; ``create_container(config)`` creates the container
    (bucket) the config addresses, where the backend has one; ``scratch()`` is a
    context manager yielding the URL of a private, throwaway instance (tests and the conformance check),
    or None when an instance needs a server (those come from the test servers' package ``servers``);
    ``hadoop_root(config, url)`` names the adapter's root for Hadoop's filesystems (:class:`HadoopRoot`),
    None where none reaches the storage; ``foreign_writer(config)`` writes below the adapter's root by
    exact names, bypassing the adapter (:class:`~storage_adapter.driver.ForeignWriter`: what the contract
    plants as another tool's leftovers), None where nothing but the adapter reaches the storage.
    """

    name: str
    scheme: str
    capabilities: Capabilities
    locate: Callable[[SplitResult, str], tuple[str, str]]
    driver: Callable[[AdapterConfig], _Driver]
    options: Mapping[str, Option] = field(default_factory=lambda: MappingProxyType({}))
    display_location: Callable[[str], str] = field(default=str)
    check_options: Callable[[Mapping[str, Any], str], None] | None = None
    scratch: Callable[[], AbstractContextManager[str]] | None = None
    fsspec_peer: FsspecPeer | None = None
    configured: Callable[[Capabilities, AdapterConfig], Capabilities] | None = None
    # Creates the container a config addresses (an S3 bucket) if missing, one its credentials already own
    # counting as created; None where the backend has no container to create (``check --create-bucket``).
    create_container: Callable[[AdapterConfig], None] | None = None
    aliases: tuple[str, ...] = ()
    url_options: Callable[[SplitResult, str], Mapping[str, Any]] | None = None
    userinfo_names_location: bool = False
    hadoop_root: Callable[[AdapterConfig, str], HadoopRoot] | None = None
    foreign_writer: Callable[[AdapterConfig], _ForeignWriter] | None = None

    @property
    def schemes(self) -> tuple[str, ...]:
        """Every scheme this backend serves: its own first, then its aliases."""
        return (self.scheme, *self.aliases)

    def capabilities_for(self, config: AdapterConfig) -> Capabilities:
        """The capabilities of an adapter opened with ``config``: the declared ones, adjusted by
        ``configured`` where an option changes a guarantee (local ``durable=False``) or turns on a
        compatibility mode for a server bug (S3 ``unquoted_if_match``)."""
        return self.capabilities if self.configured is None else self.configured(self.capabilities, config)

    @property
    def secret_options(self) -> frozenset[str]:
        return frozenset(name for name, option in self.options.items() if option.secret)


_BY_NAME: dict[str, Backend] = {}
_BY_SCHEME: dict[str, Backend] = {}


def _url_escaped(text: str) -> str:
    """``text`` for a URL's path: ``%`` (an escape when decoded), ``#`` (a fragment) and ``?`` (a query)
    escaped; every other character as it is (spaces and non-ASCII names stay readable)."""
    return text.replace("%", "%25").replace("#", "%23").replace("?", "%3F")


@dataclass(frozen=True)
class AdapterConfig:
    """A resolved adapter configuration. Equal configs address the same objects.

    ``backend`` is a registered backend's name; ``location`` is what the backend located from the URL
    (the opened directory, the bucket, the memory store's name); ``prefix`` is the key prefix inside it
    (set by ``child``: a child creates nothing until it writes). ``options`` holds resolved settings;
    secrets never appear in repr.
    """

    backend: str
    location: str
    prefix: str
    options: tuple[tuple[str, Any], ...] = field(default=())

    @property
    def spec(self) -> Backend:
        """The registered backend this configuration belongs to."""
        return backend_named(self.backend)

    @property
    def url(self) -> str:
        """The URL of this root and prefix: opening it gives an equal configuration (the URL's path was
        percent-decoded, so the three characters that would change how it parses are escaped again)."""
        spec = self.spec
        root = f"{spec.scheme}://{_url_escaped(spec.display_location(self.location))}"
        return root + (f"/{_url_escaped(self.prefix)}" if self.prefix else "")

    def option(self, name: str) -> Any:
        return dict(self.options).get(name)

    def public_options(self) -> dict[str, Any]:
        """Options with secrets masked: safe for repr, logs, reports and error messages."""
        secret = self.spec.secret_options
        return {k: (MASK if k in secret and v else v) for k, v in self.options}

    def secret_values(self) -> tuple[Any, ...]:
        """The values of the secret options that are set (what :class:`~storage_adapter.redaction.Redactor`
        masks in this adapter's errors)."""
        secret = self.spec.secret_options
        values = [v for k, v in self.options if k in secret and v]
        # An option may hold several secrets (a wrapped store's credentials).
        return tuple(s for v in values for s in (v if isinstance(v, tuple) else (v,)))

    def child(self, prefix: str) -> AdapterConfig:
        """The config of an adapter rooted at ``prefix`` below this one."""
        sub = validate_prefix(prefix, self.backend)
        return AdapterConfig(self.backend, self.location, join_key(self.prefix, sub), self.options)

    def __repr__(self) -> str:
        return f"AdapterConfig(url={self.url!r}, options={self.public_options()!r})"


_LOCK = threading.Lock()
_entry_points_loaded = False


def register_backend(backend: Backend, *, replace: bool = False) -> Backend:
    """Register ``backend`` under its name and schemes (its own and its aliases); return it. Registering a
    different backend under a taken name or scheme raises ConfigurationError unless ``replace``."""
    with _LOCK:
        keys = [(_BY_NAME, backend.name), *((_BY_SCHEME, scheme) for scheme in backend.schemes)]
        for table, key in keys:
            taken = table.get(key)
            if taken is not None and taken is not backend and not replace:
                raise ConfigurationError(
                    f"backend {backend.name!r}: {key!r} is already registered by backend {taken.name!r}"
                )
        for table, key in keys:
            table[key] = backend
    return backend


def unregister_backend(name: str) -> None:
    """Remove the backend registered as ``name`` (tests of third-party registration use this)."""
    with _LOCK:
        backend = _BY_NAME.pop(name, None)
        for scheme in backend.schemes if backend is not None else ():
            if _BY_SCHEME.get(scheme) is backend:
                del _BY_SCHEME[scheme]


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        backend = entry_point.load()
        if not isinstance(backend, Backend):
            raise ConfigurationError(
                f"entry point {entry_point.name!r} in {ENTRY_POINT_GROUP} is not a storage_adapter Backend"
            )
        register_backend(backend)


def _lookup(table: dict[str, Backend], key: str) -> Backend | None:
    found = table.get(key)
    if found is None:
        _load_entry_points()
        found = table.get(key)
    return found


def backend_named(name: str) -> Backend:
    """The backend registered as ``name``. Raises ConfigurationError listing the registered names."""
    found = _lookup(_BY_NAME, name)
    if found is None:
        raise ConfigurationError(f"unknown backend {name!r}; registered: {', '.join(backend_names())}")
    return found


def backend_for_scheme(scheme: str) -> Backend | None:
    """The backend serving URLs of ``scheme`` (lower case), or None."""
    return _lookup(_BY_SCHEME, scheme)


def backend_names() -> tuple[str, ...]:
    """The registered backends' names, in registration order."""
    _load_entry_points()
    return tuple(_BY_NAME)


def schemes() -> tuple[str, ...]:
    """The registered URL schemes, in registration order."""
    _load_entry_points()
    return tuple(_BY_SCHEME)


def registered() -> Iterator[Backend]:
    """Every registered backend, in registration order."""
    _load_entry_points()
    yield from tuple(_BY_NAME.values())


def environment_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of the environment variables of every registered backend's secret options."""
    env = os.environ if environ is None else environ
    return [
        env[var]
        for backend in registered()
        for option in backend.options.values()
        if option.secret
        for var in option.env
        if env.get(var)
    ]


def redact_environment(text: str, environ: Mapping[str, str] | None = None) -> str:
    """``text`` with the secret values found in the environment masked (for the CLI and its reports)."""
    return Redactor(environment_secrets(environ)).text(text)
