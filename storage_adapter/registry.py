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

import builtins
import importlib.metadata
import threading
from collections.abc import AsyncGenerator, Callable, Generator, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable
from urllib.parse import SplitResult

from storage_adapter.errors import ConfigurationError
from storage_adapter.streams import AsyncRangeSource, BytesLike, RangeSource
from storage_adapter.types import Capabilities, ObjectInfo

if TYPE_CHECKING:
    from storage_adapter.config import AdapterConfig

ENTRY_POINT_GROUP = "storage_adapter.backends"


class Driver(Protocol):
    """The I/O of one backend, below the adapter. Keys arrive validated and relative to the adapter's
        root; the driver joins its own prefix. Conditional outcomes are values (None), not exceptions; every
        failure is translated into a :class:`~storage_adapter.errors.StorageError` naming the key. ``put``,
        ``put_if_absent`` and ``put_if_match`` return the new token in the form ``get_versioned``,
        ``head_token`` and ``list_pages`` report it, so it can be handed straight to ``put_if_match``.
    ``list_pages`` yields non-empty pages lazily, in the order of the adapter's ``list_pages``, from the
    object after the key ``start_after`` when given; ``delete_many`` deletes every key or raises
    :class:`~storage_adapter.errors.BatchDeleteError` naming those it could not.

    Ranges arrive checked (``storage_adapter.streams.check_ranges``): ``get_ranges`` applies the size
    (``streams.clip``) and reads them all from one version (ObjectChangedError otherwise);
    ``open_source`` pins one version for a reader; ``get_buffer`` reads without a copy into ``bytes``.
    ``put_stream*`` take an iterator of bytes-like chunks that may raise at any point: the object
    appears only complete, and a failure leaves nothing visible. A streamed conditional write the
    backend cannot honour raises UnsupportedOperationError having written nothing."""

    def get(self, key: str) -> bytes: ...
    def get_versioned(self, key: str) -> tuple[bytes, str]: ...
    def head_token(self, key: str) -> str: ...
    def list_pages(
        self, prefix: str, start_after: str | None = None
    ) -> Generator[list[ObjectInfo], None, None]: ...
    def list_dir(self, prefix: str) -> tuple[builtins.list[ObjectInfo], builtins.list[str]]: ...
    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> builtins.list[bytes]: ...
    def open_source(self, key: str) -> RangeSource: ...
    def get_buffer(self, key: str) -> memoryview: ...
    def put(self, key: str, data: bytes) -> str: ...
    def put_stream(self, key: str, chunks: Iterator[BytesLike]) -> str: ...
    def put_stream_if_absent(self, key: str, chunks: Iterator[BytesLike]) -> str | None: ...
    def put_stream_if_match(self, key: str, chunks: Iterator[BytesLike], token: str) -> str | None: ...
    def put_if_absent(self, key: str, data: bytes) -> str | None: ...
    def put_if_match(self, key: str, data: bytes, token: str) -> str | None: ...
    def delete(self, key: str) -> None: ...
    def delete_many(self, keys: Sequence[str]) -> None: ...
    def rename(self, src: str, dst: str) -> None: ...
    def remove_orphans(self, min_age_s: float) -> int: ...


class AsyncDriver(Protocol):
    """The asynchronous twin of :class:`Driver`: the same methods, with the same arguments, outcomes and
    errors, as coroutines (``list_pages`` an async generator). None of them may block the event loop.

    A backend does not declare one: :func:`storage_adapter.async_adapter.async_driver_of` gives every
    driver its twin, the driver's own where it offers one (:class:`NativeAsync`: memory and S3 over
    obstore's async calls), else the generic one that runs the driver's calls in worker threads (local,
    whose mutations wait on directory locks, and any third-party driver). ``open_source`` opens (pins)
    the version and returns an :class:`AsyncRangeSource` (the generic twin reads its driver's source in
    worker threads); a streamed body's iterator may block, so ``put_stream*`` consume it off the loop."""

    async def get(self, key: str) -> bytes: ...
    async def get_versioned(self, key: str) -> tuple[bytes, str]: ...
    async def head_token(self, key: str) -> str: ...
    def list_pages(
        self, prefix: str, start_after: str | None = None
    ) -> AsyncGenerator[list[ObjectInfo], None]: ...
    async def list_dir(self, prefix: str) -> tuple[builtins.list[ObjectInfo], builtins.list[str]]: ...
    async def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> builtins.list[bytes]: ...
    async def open_source(self, key: str) -> AsyncRangeSource: ...
    async def get_buffer(self, key: str) -> memoryview: ...
    async def put_stream(self, key: str, chunks: Iterator[BytesLike]) -> str: ...
    async def put_stream_if_absent(self, key: str, chunks: Iterator[BytesLike]) -> str | None: ...
    async def put_stream_if_match(self, key: str, chunks: Iterator[BytesLike], token: str) -> str | None: ...
    async def put(self, key: str, data: bytes) -> str: ...
    async def put_if_absent(self, key: str, data: bytes) -> str | None: ...
    async def put_if_match(self, key: str, data: bytes, token: str) -> str | None: ...
    async def delete(self, key: str) -> None: ...
    async def delete_many(self, keys: Sequence[str]) -> None: ...
    async def rename(self, src: str, dst: str) -> None: ...
    async def remove_orphans(self, min_age_s: float) -> int: ...


@runtime_checkable
class NativeAsync(Protocol):
    """A :class:`Driver` with its own non-blocking twin: ``asynchronous()`` returns it (sharing the
    driver's store and state)."""

    def asynchronous(self) -> AsyncDriver: ...


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
class Backend:
    """A kind of storage, registered by ``name`` for URLs of ``scheme``.

    ``locate(parts, url)`` turns a split URL into ``(location, prefix)`` (raising ConfigurationError);
    ``display_location`` is how the location is written back into the adapter's URL; ``check_options``
    validates resolved options together; ``driver(config)`` builds the I/O driver; ``configured`` adjusts
    the declared capabilities to an adapter's options; ``scratch()`` is a
    context manager yielding the URL of a private, throwaway instance (tests and the conformance check),
    or None when an instance needs a server (those come from ``backends``).
    """

    name: str
    scheme: str
    capabilities: Capabilities
    locate: Callable[[SplitResult, str], tuple[str, str]]
    driver: Callable[[AdapterConfig], Driver]
    options: Mapping[str, Option] = field(default_factory=lambda: MappingProxyType({}))
    display_location: Callable[[str], str] = field(default=str)
    check_options: Callable[[Mapping[str, Any], str], None] | None = None
    scratch: Callable[[], AbstractContextManager[str]] | None = None
    fsspec_peer: FsspecPeer | None = None
    configured: Callable[[Capabilities, AdapterConfig], Capabilities] | None = None

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
_LOCK = threading.Lock()
_entry_points_loaded = False


def register_backend(backend: Backend, *, replace: bool = False) -> Backend:
    """Register ``backend`` under its name and scheme; return it. Registering a different backend under a
    taken name or scheme raises ConfigurationError unless ``replace``."""
    with _LOCK:
        for table, key in ((_BY_NAME, backend.name), (_BY_SCHEME, backend.scheme)):
            taken = table.get(key)
            if taken is not None and taken is not backend and not replace:
                raise ConfigurationError(
                    f"backend {backend.name!r}: {key!r} is already registered by backend {taken.name!r}"
                )
        _BY_NAME[backend.name] = backend
        _BY_SCHEME[backend.scheme] = backend
    return backend


def unregister_backend(name: str) -> None:
    """Remove the backend registered as ``name`` (tests of third-party registration use this)."""
    with _LOCK:
        backend = _BY_NAME.pop(name, None)
        if backend is not None and _BY_SCHEME.get(backend.scheme) is backend:
            del _BY_SCHEME[backend.scheme]


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
