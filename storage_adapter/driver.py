"""The driver interface: the I/O a backend implements below the adapter.

A :class:`Driver` does one backend's reads and writes; the adapter above it validates keys, scrubs
secrets from errors, derives the operations built from these, and keeps the promises of
:class:`~storage_adapter.protocol.StorageAdapter`. :class:`AsyncDriver` is its asynchronous twin, and a
driver that has its own says so with :class:`NativeAsync`. A backend (:class:`~storage_adapter.registry.Backend`)
names the callable that builds its driver from an :class:`~storage_adapter.registry.AdapterConfig`.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncGenerator, Generator, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, TypeAlias, runtime_checkable

from storage_adapter.listing import Listed
from storage_adapter.streams import AsyncRangeSource, BytesLike, RangeSource


class PutKind(Enum):
    """What a put does to an object already at its key."""

    OVERWRITE = "overwrite"  # replace it (or create)
    CREATE = "create"  # write only where no object is
    MATCH = "match"  # replace only the version whose token is the mode's


@dataclass(frozen=True)
class PutMode:
    """How a put treats an existing object (object_store's ``PutMode``): :data:`OVERWRITE`,
    :data:`CREATE`, or ``PutMode.match(token)``. ``action`` names the adapter call it serves, for errors."""

    kind: PutKind
    token: str | None = None

    @classmethod
    def match(cls, token: str) -> PutMode:
        return cls(PutKind.MATCH, token)

    @property
    def conditional(self) -> bool:
        return self.kind is not PutKind.OVERWRITE

    @property
    def action(self) -> str:
        return _ACTIONS[self.kind]


_ACTIONS = {PutKind.OVERWRITE: "write", PutKind.CREATE: "write_if_absent", PutKind.MATCH: "write_if_match"}
OVERWRITE = PutMode(PutKind.OVERWRITE)
CREATE = PutMode(PutKind.CREATE)
# A put's body: the whole object, or its chunks (a stream).
PutBody: TypeAlias = bytes | Iterator[BytesLike]


class Driver(Protocol):
    """The I/O of one backend, below the adapter. Keys arrive validated and relative to the adapter's
        root; the driver joins its own prefix. Conditional outcomes are values (None), not exceptions; every
        failure is translated into a :class:`~storage_adapter.errors.StorageError` naming the key. ``put``
        returns the new token in the form ``get_versioned``, ``head_token`` and ``list_pages`` report it,
        so it can be handed straight to a put in mode ``PutMode.match(token)``.
    ``list_pages`` yields non-empty pages lazily, in the order of the adapter's ``list_pages``, from the
    object after the key ``start_after`` when given. A listing reports what the store holds by its exact
    name relative to the root, never renamed (a folder marker ``dir/`` is listed as ``dir/``, not
    ``dir``), and never fails because of a name: the adapter sorts out, by one rule for every backend
    (:mod:`storage_adapter.listing`), what it cannot address; an entry that is not an object at all (a
    symlink on local) is reported as a :class:`~storage_adapter.types.SkippedObject`. ``list_dir``
    returns the entries directly under the prefix and the child prefixes under which an object the
    adapter can address lives (``listing.is_listed_prefix``, ``sort_listed``); ``delete_many`` deletes every key or raises
    :class:`~storage_adapter.errors.BatchDeleteError` naming those it could not.

    Ranges arrive checked (``storage_adapter.streams.check_ranges``): ``get_ranges`` applies the size
    (``streams.clip``) and reads them all from one version (ObjectChangedError otherwise);
    ``open_source`` pins one version for a reader; ``get_buffer`` reads without a copy into ``bytes``.
    ``put`` is the one write, as object_store's: its :class:`PutMode` says what happens to an object
    already there (``OVERWRITE`` replaces it; ``CREATE`` writes only where none is, and returns None
    where one is, linearizably: exactly one of concurrent creates wins; ``match(token)`` replaces only
    the version with that token, and returns None where the object changed or is absent). Its body is
    bytes, or an iterator of bytes-like chunks that may raise at any point: the object appears only
    complete, and a failure leaves nothing visible. A streamed conditional put the backend cannot
    honour raises UnsupportedOperationError having written nothing."""

    def get(self, key: str) -> bytes: ...
    def get_versioned(self, key: str) -> tuple[bytes, str]: ...
    def head_token(self, key: str) -> str: ...
    def list_pages(
        self, prefix: str, start_after: str | None = None
    ) -> Generator[Sequence[Listed], None, None]: ...
    def list_dir(self, prefix: str) -> tuple[Sequence[Listed], builtins.list[str]]: ...
    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> builtins.list[bytes]: ...
    def open_source(self, key: str) -> RangeSource: ...
    def get_buffer(self, key: str) -> memoryview: ...
    def put(self, key: str, body: PutBody, mode: PutMode = OVERWRITE) -> str | None: ...
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
    worker threads); a streamed body's iterator may block, so ``put`` consumes one off the loop."""

    async def get(self, key: str) -> bytes: ...
    async def get_versioned(self, key: str) -> tuple[bytes, str]: ...
    async def head_token(self, key: str) -> str: ...
    def list_pages(
        self, prefix: str, start_after: str | None = None
    ) -> AsyncGenerator[Sequence[Listed], None]: ...
    async def list_dir(self, prefix: str) -> tuple[Sequence[Listed], builtins.list[str]]: ...
    async def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> builtins.list[bytes]: ...
    async def open_source(self, key: str) -> AsyncRangeSource: ...
    async def get_buffer(self, key: str) -> memoryview: ...
    async def put(self, key: str, body: PutBody, mode: PutMode = OVERWRITE) -> str | None: ...
    async def delete(self, key: str) -> None: ...
    async def delete_many(self, keys: Sequence[str]) -> None: ...
    async def rename(self, src: str, dst: str) -> None: ...
    async def remove_orphans(self, min_age_s: float) -> int: ...


class ForeignWriter(Protocol):
    """Writes and removes entries below an adapter's root by their exact names, not through the adapter:
    as another tool would (boto3, the AWS console, a shell). The contract plants with it what real buckets
    hold beside an adapter's objects (names no key can have, folder markers) to check that listings hold
    there (:mod:`storage_adapter.listing`). A backend offers one as ``Backend.foreign_writer``.

    ``put(name, data)`` stores ``data`` under the name relative to the root, byte for byte (a name ending
    in ``/`` with no bytes is a folder marker: on a file system, an empty directory); it raises
    UnsupportedOperationError, storing nothing, where the store cannot hold such a name at all.
    ``remove(name)`` removes it again (a missing one is fine). ``held()`` is the ground truth a check
    compares listings with: every entry below the root, by its exact name, with its size (a server may
    store a name otherwise than it was sent: SeaweedFS turns ``\\`` into ``/`` and drops the bytes of
    a name ending in ``/``)."""

    def put(self, name: str, data: bytes) -> None: ...
    def remove(self, name: str) -> None: ...
    def held(self) -> dict[str, int]: ...


@runtime_checkable
class NativeAsync(Protocol):
    """A :class:`Driver` with its own non-blocking twin: ``asynchronous()`` returns it (sharing the
    driver's store and state)."""

    def asynchronous(self) -> AsyncDriver: ...
