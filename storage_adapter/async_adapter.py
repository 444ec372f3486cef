"""AsyncObjectStorageAdapter: the async twin of ObjectStorageAdapter, for asyncio code.

Same configuration, keys, errors, redaction, identity and guarantees as the sync adapter (it shares its
:class:`~storage_adapter.adapter.AdapterCore`); each I/O method is a coroutine, and the listings are async
iterators. It is typed against :class:`~storage_adapter.protocol.AsyncStorageAdapter`.

The I/O goes through the backend driver's async twin (:class:`~storage_adapter.driver.AsyncDriver`),
found by :func:`async_driver_of`, the one mechanism for every backend:

* a driver that offers its own (:class:`~storage_adapter.driver.NativeAsync`) uses it: memory and S3
  run on obstore's async calls, on the caller's event loop, with no thread per request;
* any other driver (local, whose mutations wait on directory ``flock`` s and fsync; a third-party
  backend's) gets :class:`~storage_adapter.threaded.ThreadedAsyncDriver`, which runs each of its calls
  in a bounded pool of worker threads, so a call that blocks never blocks the event loop.
"""

from __future__ import annotations

import builtins
import operator
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from storage_adapter.adapter import AdapterCore, opened_config
from storage_adapter.config import AdapterConfig
from storage_adapter.derived import (
    root_refused,
    validate_encoding,
    validate_limit,
    validate_min_age,
    validate_start_after,
)
from storage_adapter.driver import CREATE, OVERWRITE, AsyncDriver, Driver, NativeAsync, PutMode
from storage_adapter.errors import NotFoundError
from storage_adapter.keys import validate_prefix
from storage_adapter.listing import Listed, sort_listed
from storage_adapter.streams import AsyncObjectReader, Body, check_ranges
from storage_adapter.threaded import ThreadedAsyncDriver
from storage_adapter.types import DirListing, ObjectInfo, SkippedObject, Versioned


class AsyncDerivedOperations:
    """Mixin, the async twin of :class:`~storage_adapter.derived.DerivedOperations` (same meaning, same
    requests): needs the async ``read_bytes``, ``list_pages``, ``list`` and ``delete``, and ``backend``
    and ``url``."""

    if TYPE_CHECKING:  # what the class provides; declared for the type checker only

        @property
        def backend(self) -> str: ...
        @property
        def url(self) -> str: ...
        async def read_bytes(self, key: str) -> bytes: ...
        def list_pages(
            self, prefix: str = "", *, start_after: str | None = None
        ) -> AsyncIterator[builtins.list[ObjectInfo]]: ...
        async def list(self, prefix: str = "") -> builtins.list[ObjectInfo]: ...
        async def delete(self, key: str) -> None: ...

    async def read_text(self, key: str, encoding: str = "utf-8") -> str:
        encoding = validate_encoding(encoding, self.backend)
        return (await self.read_bytes(key)).decode(encoding)

    async def read_if_exists(self, key: str) -> bytes | None:
        try:
            return await self.read_bytes(key)
        except NotFoundError:  # absent; every other failure raises
            return None

    def iter_list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> AsyncIterator[ObjectInfo]:
        """The objects of ``list_pages(prefix, start_after=...)`` one at a time, at most ``limit`` of them
        (every argument is validated at the call, before any I/O)."""
        limit = validate_limit(limit, self.backend)
        return _flattened(self.list_pages(prefix, start_after=start_after), limit)

    async def delete_prefix(self, prefix: str) -> int:
        """As the sync one: one listing, then one ``delete`` per object."""
        if not validate_prefix(prefix, self.backend):  # "" or "/": the root
            raise root_refused(prefix, self.url, self.backend)
        listed = await self.list(prefix)
        for info in listed:
            await self.delete(info.key)
        return len(listed)


async def _flattened(
    pages: AsyncIterator[builtins.list[ObjectInfo]], limit: int | None
) -> AsyncIterator[ObjectInfo]:
    """The objects of ``pages``, at most ``limit``: no page is fetched once the limit is reached."""
    if limit == 0:
        return
    count = 0
    async for page in pages:
        for info in page:
            yield info
            count += 1
            if count == limit:
                return


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
        self._async = async_driver_of(self._driver)

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

    async def read_range(self, key: str, start: int, end: int) -> bytes:
        return (await self.read_ranges(key, [(start, end)]))[0]

    async def read_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> builtins.list[bytes]:
        key = self._key(key)
        checked = check_ranges(ranges, key, self.backend)
        with self._scrubbed:
            return await self._async.get_ranges(key, checked)

    async def open_reader(self, key: str) -> AsyncObjectReader:
        key = self._key(key)
        with self._scrubbed:
            return AsyncObjectReader(await self._async.open_source(key), self._scrubbed)

    async def read_buffer(self, key: str) -> memoryview:
        key = self._key(key)
        with self._scrubbed:
            return await self._async.get_buffer(key)

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
        return self._sorted(infos)

    def list_pages(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> AsyncIterator[builtins.list[ObjectInfo]]:
        """The arguments are validated now, at the call, before any I/O (not at the first ``anext``)."""
        prefix = self._prefix(prefix)
        after = validate_start_after(start_after, self.backend)
        return self._pages(self._async.list_pages(prefix, after))

    async def _pages(
        self, pages: AsyncGenerator[Sequence[Listed], None]
    ) -> AsyncGenerator[builtins.list[ObjectInfo], None]:
        """As the sync adapter's: the objects of each page by the listing rule, empty pages dropped."""
        async for objects, _ in self._sorted_pages(pages):
            if objects:
                yield objects

    async def _sorted_pages(
        self, pages: AsyncGenerator[Sequence[Listed], None]
    ) -> AsyncGenerator[tuple[builtins.list[ObjectInfo], builtins.list[SkippedObject]], None]:
        # The driver's I/O happens inside each anext(), so each one runs under the redactor.
        try:
            while True:
                with self._scrubbed:
                    page = await anext(pages, None)
                if page is None:
                    return
                yield sort_listed(page)
        finally:
            with self._scrubbed:
                await pages.aclose()

    def entry_pages(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> AsyncIterator[builtins.list[ObjectInfo | SkippedObject]]:
        """As :meth:`ObjectStorageAdapter.entry_pages`; the arguments are validated at this call."""
        prefix = self._prefix(prefix)
        after = validate_start_after(start_after, self.backend)
        return self._entry_pages(self._async.list_pages(prefix, after))

    async def _entry_pages(
        self, pages: AsyncGenerator[Sequence[Listed], None]
    ) -> AsyncGenerator[builtins.list[ObjectInfo | SkippedObject], None]:
        async for objects, skipped in self._sorted_pages(pages):
            if objects or skipped:
                yield [*objects, *skipped]

    async def skipped(self, prefix: str = "") -> builtins.list[SkippedObject]:
        """As :meth:`ObjectStorageAdapter.skipped`: the skipped entries of ``entry_pages(prefix)``."""
        found = [e async for page in self.entry_pages(prefix) for e in page if isinstance(e, SkippedObject)]
        return sorted(found, key=operator.attrgetter("name"))

    async def list_dir(self, prefix: str = "") -> DirListing:
        prefix = self._prefix(prefix)
        with self._scrubbed:
            entries, prefixes = await self._async.list_dir(prefix)
        return self._dir_listing(entries, prefixes)

    # -- mutations ------------------------------------------------------------------------------------
    async def write(self, key: str, data: Body) -> str:
        key, body = self._write_args(key, data)
        with self._scrubbed:
            return self._written(key, await self._async.put(key, body, OVERWRITE))

    async def write_if_absent(self, key: str, data: Body) -> str | None:
        key, body = self._conditional_args(key, data, "write_if_absent")
        with self._scrubbed:
            return await self._async.put(key, body, CREATE)

    async def write_if_match(self, key: str, data: Body, token: str) -> str | None:
        key, body, token = self._match_args(key, data, token)
        with self._scrubbed:
            return await self._async.put(key, body, PutMode.match(token))

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
        min_age_s = validate_min_age(min_age_s, self.backend)
        with self._scrubbed:
            return await self._async.remove_orphans(min_age_s)


def open_async_adapter(
    url: str | None = None, *, store: Any = None, capabilities: Any = None, **options: Any
) -> AsyncObjectStorageAdapter:
    """Open an async adapter for ``url``, or over an obstore ``store`` with its declared
    ``capabilities``, exactly as :func:`~storage_adapter.adapter.open_adapter` opens a sync one (same
    arguments, options and errors). Opening builds the store as the sync adapter does."""
    return AsyncObjectStorageAdapter(opened_config(url, store, capabilities, options))
