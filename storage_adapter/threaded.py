"""The generic async twin of a driver: its own calls, each run in a bounded pool of worker threads.

:class:`ThreadedAsyncDriver` is the :class:`~storage_adapter.driver.AsyncDriver` of every driver that
offers no native one (local, whose mutations wait on directory ``flock`` s; any third-party backend), and
the base of the native ones, which inherit from it the calls they do not make natively (the ranged and
streamed I/O of the obstore driver). A call that blocks blocks a worker thread, never the event loop.
"""

from __future__ import annotations

import asyncio
import builtins
import contextvars
import functools
from collections.abc import AsyncGenerator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from typing import Any, TypeVar

from storage_adapter.driver import OVERWRITE, Driver, PutBody, PutMode
from storage_adapter.listing import Listed
from storage_adapter.streams import AsyncRangeSource, RangeSource

R = TypeVar("R")

# Threads running the calls of drivers without an async twin, shared by every adapter of the process.
# Bounded: a thousand concurrent local calls queue here (never on the event loop) instead of starting a
# thousand threads; 32 keeps the directory locks and fsyncs of a local store busy on any machine.
THREAD_WORKERS = 32
_POOL = ThreadPoolExecutor(max_workers=THREAD_WORKERS, thread_name_prefix="storage-adapter-async")


async def in_thread(call: Callable[..., R], *args: Any) -> R:
    """``call(*args)`` in a worker thread, under the caller's context (so an injected fault plan,
    :mod:`storage_adapter.faults`, follows the call), awaited without blocking the loop."""
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(
        _POOL, functools.partial(context.run, call, *args)
    )


class ThreadedSource:
    """A driver's :class:`~storage_adapter.streams.RangeSource` as an async one: each read (and the
    close) in a worker thread."""

    def __init__(self, source: RangeSource) -> None:
        self._source = source
        self.size, self.token = source.size, source.token  # one version's: they never change

    async def read_into(self, offset: int, buffer: memoryview) -> int:
        return await in_thread(self._source.read_into, offset, buffer)

    async def close(self) -> None:
        await in_thread(self._source.close)


class ThreadedAsyncDriver:
    """The async twin of any :class:`~storage_adapter.driver.Driver`: each call runs the driver's own
    in a worker thread (at most :data:`THREAD_WORKERS` at a time across the process). Same outcomes and
    errors as the driver, since it is the driver that runs; a listing's pages are fetched one
    ``next()`` per page, each in a worker thread."""

    def __init__(self, driver: Driver) -> None:
        self._driver = driver

    async def get(self, key: str) -> bytes:
        return await in_thread(self._driver.get, key)

    async def get_versioned(self, key: str) -> tuple[bytes, str]:
        return await in_thread(self._driver.get_versioned, key)

    async def head_token(self, key: str) -> str:
        return await in_thread(self._driver.head_token, key)

    async def list_pages(
        self, prefix: str, start_after: str | None = None
    ) -> AsyncGenerator[Sequence[Listed], None]:
        pages = self._driver.list_pages(prefix, start_after)  # a generator: no I/O until the first next()
        try:
            while (page := await in_thread(next, pages, None)) is not None:
                yield page
        finally:
            # Releases what the driver's generator holds open (local: directory descriptors), on the
            # loop: closing them waits for nothing, and an await here would let the loop's shutdown close
            # this generator a second time while the first close waits ("already running"). If a
            # cancelled next() still runs it in a worker thread, it closes once that call returns.
            with suppress(ValueError):  # "generator already executing"
                pages.close()

    async def list_dir(self, prefix: str) -> tuple[Sequence[Listed], builtins.list[str]]:
        return await in_thread(self._driver.list_dir, prefix)

    async def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> builtins.list[bytes]:
        return await in_thread(self._driver.get_ranges, key, ranges)

    async def open_source(self, key: str) -> AsyncRangeSource:
        return ThreadedSource(await in_thread(self._driver.open_source, key))

    async def get_buffer(self, key: str) -> memoryview:
        return await in_thread(self._driver.get_buffer, key)

    # A streamed body is consumed in the worker thread too: reading a file object or a generator may block.
    async def put(self, key: str, body: PutBody, mode: PutMode = OVERWRITE) -> str | None:
        return await in_thread(self._driver.put, key, body, mode)

    async def delete(self, key: str) -> None:
        await in_thread(self._driver.delete, key)

    async def delete_many(self, keys: Sequence[str]) -> None:
        await in_thread(self._driver.delete_many, keys)

    async def rename(self, src: str, dst: str) -> None:
        await in_thread(self._driver.rename, src, dst)

    async def remove_orphans(self, min_age_s: float) -> int:
        return await in_thread(self._driver.remove_orphans, min_age_s)
