"""AsyncObjectStorageAdapter: the async twin of ObjectStorageAdapter, for asyncio code.

Same configuration, keys, errors, redaction, identity and guarantees as the sync adapter (it shares its
:class:`~storage_adapter.adapter.AdapterCore`); each I/O method is a coroutine, and the listings are async
iterators. It is typed against :class:`~storage_adapter.protocol.AsyncStorageAdapter`.

The I/O goes through the backend driver's async twin (:class:`~storage_adapter.registry.AsyncDriver`),
found by :func:`async_driver_of`, the one mechanism for every backend:

* a driver that offers its own (:class:`~storage_adapter.registry.NativeAsync`) uses it: memory and S3
  run on obstore's async calls, on the caller's event loop, with no thread per request;
* any other driver (local, whose mutations wait on directory ``flock`` s and fsync; a third-party
  backend's) gets :class:`ThreadedAsyncDriver`, which runs each of its calls in a bounded pool of worker
  threads, so a call that blocks never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import builtins
import contextvars
import functools
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

from storage_adapter.adapter import AdapterCore, opened_config
from storage_adapter.config import AdapterConfig
from storage_adapter.derived import root_refused
from storage_adapter.errors import NotFoundError
from storage_adapter.keys import validate_prefix
from storage_adapter.registry import AsyncDriver, Driver, NativeAsync
from storage_adapter.types import DirListing, ObjectInfo, Versioned

R = TypeVar("R")

# Threads running the calls of drivers without an async twin, shared by every adapter of the process.
# Bounded: a thousand concurrent local calls queue here (never on the event loop) instead of starting a
# thousand threads; 32 keeps the directory locks and fsyncs of a local store busy on any machine.
THREAD_WORKERS = 32
_POOL = ThreadPoolExecutor(max_workers=THREAD_WORKERS, thread_name_prefix="storage-adapter-async")


async def _in_thread(call: Callable[..., R], *args: Any) -> R:
    """``call(*args)`` in a worker thread, under the caller's context (so an injected fault plan,
    :mod:`storage_adapter.faults`, follows the call), awaited without blocking the loop."""
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(
        _POOL, functools.partial(context.run, call, *args)
    )


class ThreadedAsyncDriver:
    """The async twin of any :class:`~storage_adapter.registry.Driver`: each call runs the driver's own
    in a worker thread (at most :data:`THREAD_WORKERS` at a time across the process). Same outcomes and
    errors as the driver, since it is the driver that runs; a listing's pages are fetched one
    ``next()`` per page, each in a worker thread."""

    def __init__(self, driver: Driver) -> None:
        self._driver = driver

    async def get(self, key: str) -> bytes:
        return await _in_thread(self._driver.get, key)

    async def get_versioned(self, key: str) -> tuple[bytes, str]:
        return await _in_thread(self._driver.get_versioned, key)

    async def head_token(self, key: str) -> str:
        return await _in_thread(self._driver.head_token, key)

    async def list_pages(self, prefix: str) -> AsyncGenerator[builtins.list[ObjectInfo], None]:
        pages = self._driver.list_pages(prefix)  # a generator: no I/O until the first next()
        try:
            while (page := await _in_thread(next, pages, None)) is not None:
                yield page
        finally:
            await _in_thread(pages.close)  # releases what the driver holds open (local: directories)

    async def list_dir(self, prefix: str) -> tuple[builtins.list[ObjectInfo], builtins.list[str]]:
        return await _in_thread(self._driver.list_dir, prefix)

    async def put(self, key: str, data: bytes) -> str:
        return await _in_thread(self._driver.put, key, data)

    async def put_if_absent(self, key: str, data: bytes) -> str | None:
        return await _in_thread(self._driver.put_if_absent, key, data)

    async def put_if_match(self, key: str, data: bytes, token: str) -> str | None:
        return await _in_thread(self._driver.put_if_match, key, data, token)

    async def delete(self, key: str) -> None:
        await _in_thread(self._driver.delete, key)

    async def delete_many(self, keys: Sequence[str]) -> None:
        await _in_thread(self._driver.delete_many, keys)

    async def rename(self, src: str, dst: str) -> None:
        await _in_thread(self._driver.rename, src, dst)

    async def remove_orphans(self, min_age_s: float) -> int:
        return await _in_thread(self._driver.remove_orphans, min_age_s)


class AsyncDerivedOperations:
    """Mixin, the async twin of :class:`DerivedOperations` (same meaning, same requests): needs the async
    ``read_bytes``, ``list_pages``, ``list``, ``delete``, and ``backend`` and ``url``."""

    if TYPE_CHECKING:  # what the class provides; declared for the type checker only

        @property
        def backend(self) -> str: ...
        @property
        def url(self) -> str: ...
        async def read_bytes(self, key: str) -> bytes: ...
        def list_pages(self, prefix: str = "") -> AsyncIterator[builtins.list[ObjectInfo]]: ...
        async def list(self, prefix: str = "") -> builtins.list[ObjectInfo]: ...
        async def delete(self, key: str) -> None: ...

    async def read_text(self, key: str, encoding: str = "utf-8") -> str:
        return (await self.read_bytes(key)).decode(encoding)

    async def read_if_exists(self, key: str) -> bytes | None:
        try:
            return await self.read_bytes(key)
        except NotFoundError:  # absent; every other failure raises
            return None

    def iter_list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        """The objects of ``list_pages(prefix)`` one at a time (the prefix is validated at the call)."""
        return _flattened(self.list_pages(prefix))

    async def delete_prefix(self, prefix: str) -> int:
        """As the sync one: one listing, then one ``delete`` per object."""
        if not validate_prefix(prefix, self.backend):  # "" or "/": the root
            raise root_refused(prefix, self.url, self.backend)
        listed = await self.list(prefix)
        for info in listed:
            await self.delete(info.key)
        return len(listed)


async def _flattened(pages: AsyncIterator[builtins.list[ObjectInfo]]) -> AsyncIterator[ObjectInfo]:
    async for page in pages:
        for info in page:
            yield info


def async_driver_of(driver: Driver) -> AsyncDriver:
    """The async twin of ``driver``: its own where it offers one, else :class:`ThreadedAsyncDriver`."""
    return driver.asynchronous() if isinstance(driver, NativeAsync) else ThreadedAsyncDriver(driver)


class AsyncObjectStorageAdapter(AdapterCore, AsyncDerivedOperations):
    """The :class:`~storage_adapter.protocol.AsyncStorageAdapter` over any registered backend: the async
    twin of :class:`~storage_adapter.adapter.ObjectStorageAdapter`, with its keys rules (checked before
    any I/O, before the first ``await`` suspends), errors, redaction and guarantees.

    It pickles (reopened from its config) and compares equal to another async adapter of the same
    configuration, never to a sync one. Use :func:`open_async_adapter` to build one.
    """

    def __init__(self, config: AdapterConfig) -> None:
        super().__init__(config)
        self._async = async_driver_of(self._backend)

    def child(self, prefix: str) -> AsyncObjectStorageAdapter:
        """An adapter rooted at ``prefix`` below this one (same store, same options)."""
        return AsyncObjectStorageAdapter(self._config.child(prefix))

    # -- reads ----------------------------------------------------------------------------------------
    async def read_bytes(self, key: str) -> bytes:
        key = self._key(key)
        with self._scrubbed:
            return await self._async.get(key)

    async def read_versioned(self, key: str) -> Versioned:
        key = self._key(key)
        with self._scrubbed:
            data, token = await self._async.get_versioned(key)
        return Versioned(data=data, token=token)

    async def exists(self, key: str) -> bool:
        key = self._key(key)
        try:
            with self._scrubbed:
                await self._async.head_token(key)
        except NotFoundError:
            return False
        return True

    async def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        infos = [info async for page in self.list_pages(prefix) for info in page]
        return sorted(infos, key=lambda i: i.key)

    def list_pages(self, prefix: str = "") -> AsyncIterator[builtins.list[ObjectInfo]]:
        """The prefix is validated now, at the call, before any I/O (not at the first ``anext``)."""
        return self._pages(self._async.list_pages(self._prefix(prefix)))

    async def _pages(
        self, pages: AsyncGenerator[builtins.list[ObjectInfo], None]
    ) -> AsyncGenerator[builtins.list[ObjectInfo], None]:
        # The driver's I/O happens inside each anext(), so each one runs under the redactor.
        try:
            while True:
                with self._scrubbed:
                    page = await anext(pages, None)
                if page is None:
                    return
                yield page
        finally:
            with self._scrubbed:
                await pages.aclose()

    async def list_dir(self, prefix: str = "") -> DirListing:
        prefix = self._prefix(prefix)
        with self._scrubbed:
            objects, prefixes = await self._async.list_dir(prefix)
        return self._dir_listing(objects, prefixes)

    # -- mutations ------------------------------------------------------------------------------------
    async def write(self, key: str, data: bytes | str) -> str:
        key, body = self._write_args(key, data)
        with self._scrubbed:
            return await self._async.put(key, body)

    async def write_if_absent(self, key: str, data: bytes | str) -> str | None:
        key, body = self._write_args(key, data)
        with self._scrubbed:
            return await self._async.put_if_absent(key, body)

    async def write_if_match(self, key: str, data: bytes | str, token: str) -> str | None:
        key, body, token = self._match_args(key, data, token)
        with self._scrubbed:
            return await self._async.put_if_match(key, body, token)

    async def delete(self, key: str) -> None:
        key = self._key(key)
        with self._scrubbed:
            await self._async.delete(key)

    async def delete_many(self, keys: Iterable[str]) -> int:
        unique = self._unique_keys(keys)
        with self._scrubbed:
            await self._async.delete_many(unique)
        return len(unique)

    async def rename(self, src: str, dst: str) -> None:
        src, dst = self._key(src), self._key(dst)
        with self._scrubbed:
            if src == dst:  # as the sync adapter: only a check that the object exists
                await self._async.head_token(src)
                return
            await self._async.rename(src, dst)

    async def remove_orphans(self, min_age_s: float = 3600.0) -> int:
        with self._scrubbed:
            return await self._async.remove_orphans(min_age_s)


def open_async_adapter(
    url: str | None = None, *, store: Any = None, capabilities: Any = None, **options: Any
) -> AsyncObjectStorageAdapter:
    """Open an async adapter for ``url``, or over an obstore ``store`` with its declared
    ``capabilities``, exactly as :func:`~storage_adapter.adapter.open_adapter` opens a sync one (same
    arguments, options and errors). Opening builds the store as the sync adapter does."""
    return AsyncObjectStorageAdapter(opened_config(url, store, capabilities, options))
