"""The contract, run against an async adapter: :class:`SyncBridge` drives any
:class:`~storage_adapter.protocol.AsyncStorageAdapter` through the sync
:class:`~storage_adapter.protocol.StorageAdapter` API, so every clause judges the async twin unchanged.

Each call runs its coroutine on a private event loop in a daemon thread (one per process, shared by every
bridge) and waits for it; the calling thread's context goes with it (``run_coroutine_threadsafe``
schedules the task in a copy of the caller's context), so an injected fault plan
(:mod:`storage_adapter.faults`) reaches the async driver, on the loop or in its worker threads. Racing
threads of a clause become concurrent tasks of that one loop: the async twin's guarantees are judged
under the concurrency it is meant for.

Factories for ``--storage-factory`` (and ``storage-adapter check``): :func:`open_bridged_async_adapter`.
"""

from __future__ import annotations

import asyncio
import builtins
import threading
from collections.abc import AsyncIterator, Coroutine, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from storage_adapter.async_adapter import open_async_adapter
from storage_adapter.protocol import AsyncStorageAdapter
from storage_adapter.streams import AsyncObjectReader, Body, ObjectReader
from storage_adapter.types import Capabilities, DirListing, ObjectInfo, SkippedObject, Versioned

T = TypeVar("T")

_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()
_LOOP_THREAD = "async-bridge-loop"


def _loop() -> asyncio.AbstractEventLoop:
    """The bridges' event loop, started in its daemon thread on first use."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name=_LOOP_THREAD, daemon=True).start()
            _LOOP = loop
        return _LOOP


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` on the bridges' loop, in a copy of the caller's context, and wait for it. From
    the loop's own thread (a bridge used inside a coroutine) that would wait forever: RuntimeError."""
    loop = _loop()
    if threading.current_thread().name == _LOOP_THREAD:
        coroutine.close()
        raise RuntimeError("a SyncBridge call from its own event loop would deadlock; await the adapter")
    return asyncio.run_coroutine_threadsafe(coroutine, loop).result()


def _synchronous(iterator: AsyncIterator[T]) -> Iterator[T]:
    """``iterator``'s items, each fetched on the loop when asked for; closing this closes it."""
    try:
        while True:
            item = run(_next(iterator))
            if item is None:
                return
            yield item[0]
    finally:
        closing = getattr(iterator, "aclose", None)
        if closing is not None:
            run(closing())


async def _next(iterator: AsyncIterator[T]) -> tuple[T] | None:
    try:
        return (await anext(iterator),)
    except StopAsyncIteration:
        return None


class _BridgedSource:
    """The async reader ``reader`` as the RangeSource of a sync ObjectReader: each read awaits it."""

    def __init__(self, reader: AsyncObjectReader) -> None:
        self._reader = reader
        self.size, self.token = reader.size, reader.token

    def read_into(self, offset: int, buffer: memoryview) -> int:
        return run(self._reader.read_at(offset, buffer))

    def close(self) -> None:
        run(self._reader.close())


class SyncBridge:
    """A :class:`~storage_adapter.protocol.StorageAdapter` that forwards every call to the async adapter
    ``inner`` (the calls' own validation included: a bad key raises from the coroutine, before any I/O).
    Pickles as its inner adapter; equal when the inner adapters are."""

    def __init__(self, inner: AsyncStorageAdapter) -> None:
        self.inner = inner

    def __reduce__(self) -> tuple[Any, ...]:
        return (SyncBridge, (self.inner,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SyncBridge) and other.inner == self.inner

    def __hash__(self) -> int:
        return hash(self.inner)

    def __repr__(self) -> str:
        return f"SyncBridge({self.inner!r})"

    @property
    def config(self) -> Any:
        """The inner adapter's configuration, if it has one (the secrets clause reads it)."""
        return getattr(self.inner, "config", None)

    @property
    def url(self) -> str:
        return self.inner.url

    @property
    def backend(self) -> str:
        return self.inner.backend

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    def child(self, prefix: str) -> SyncBridge:
        return SyncBridge(self.inner.child(prefix))

    def read_bytes(self, key: str) -> bytes:
        return run(self.inner.read_bytes(key))

    def read_text(self, key: str, encoding: str = "utf-8") -> str:
        return run(self.inner.read_text(key, encoding))

    def read_if_exists(self, key: str) -> bytes | None:
        return run(self.inner.read_if_exists(key))

    def read_versioned(self, key: str) -> Versioned:
        return run(self.inner.read_versioned(key))

    def read_range(self, key: str, start: int, end: int) -> bytes:
        return run(self.inner.read_range(key, start, end))

    def read_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> builtins.list[bytes]:
        return run(self.inner.read_ranges(key, ranges))

    def open_reader(self, key: str) -> ObjectReader:
        return ObjectReader(_BridgedSource(run(self.inner.open_reader(key))))

    def read_buffer(self, key: str) -> memoryview:
        return run(self.inner.read_buffer(key))

    def exists(self, key: str) -> bool:
        return run(self.inner.exists(key))

    def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        return run(self.inner.list(prefix))

    def list_pages(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> Iterator[builtins.list[ObjectInfo]]:
        # The inner call validates its arguments now, before any I/O.
        return _synchronous(self.inner.list_pages(prefix, start_after=start_after))

    def iter_list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> Iterator[ObjectInfo]:
        return _synchronous(self.inner.iter_list(prefix, start_after=start_after, limit=limit))

    def list_dir(self, prefix: str = "") -> DirListing:
        return run(self.inner.list_dir(prefix))

    def entry_pages(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> Iterator[builtins.list[ObjectInfo | SkippedObject]]:
        return _synchronous(self.inner.entry_pages(prefix, start_after=start_after))

    def skipped(self, prefix: str = "") -> builtins.list[SkippedObject]:
        return run(self.inner.skipped(prefix))

    def write(self, key: str, data: Body) -> str:
        return run(self.inner.write(key, data))

    def write_if_absent(self, key: str, data: Body) -> str | None:
        return run(self.inner.write_if_absent(key, data))

    def write_if_match(self, key: str, data: Body, token: str) -> str | None:
        return run(self.inner.write_if_match(key, data, token))

    def delete(self, key: str) -> None:
        run(self.inner.delete(key))

    def delete_many(self, keys: Iterable[str]) -> int:
        return run(self.inner.delete_many(keys))

    def rename(self, src: str, dst: str) -> None:
        run(self.inner.rename(src, dst))

    def delete_prefix(self, prefix: str) -> int:
        return run(self.inner.delete_prefix(prefix))

    def remove_orphans(self, min_age_s: float = 3600.0) -> int:
        return run(self.inner.remove_orphans(min_age_s))


def open_bridged_async_adapter(url: str, **options: Any) -> SyncBridge:
    """Contract factory: ``open_async_adapter(url, **options)`` behind a :class:`SyncBridge`."""
    return SyncBridge(open_async_adapter(url, **options))
