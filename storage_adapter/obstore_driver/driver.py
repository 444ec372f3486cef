"""The drivers of stores served by obstore (memory, S3, a user's own store): :class:`ObstoreDriver` and
its non-blocking twin :class:`ObstoreAsyncDriver`, which share the store, the read plans and the body
assembly. Every request runs inside the error boundary (:mod:`storage_adapter.translation`), which reads
obstore's exceptions as :mod:`storage_adapter.obstore_driver.errors` declares.

Methods take full store paths (root prefix already joined) plus the caller's key for messages. Conditional
outcomes that are not errors (a lost create, a failed precondition) come back as values, not exceptions.
"""

from __future__ import annotations

import asyncio
import builtins
import io
import itertools
import operator
import urllib.error
import urllib.request
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Iterable, Iterator, Sequence
from contextlib import closing, suppress
from datetime import UTC, datetime, timedelta
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any, TypeVar, cast

import obstore
from arro3.core import DataType
from obstore.exceptions import (
    AlreadyExistsError,
    BaseError,
    GenericError,
    PreconditionError,
)
from obstore.store import AzureStore, S3Store

from storage_adapter.batch import DELETE_BATCH, DELETE_WORKERS, LIST_PAGE, chunked, delete_each, side_by_side
from storage_adapter.config import AdapterConfig
from storage_adapter.driver import OVERWRITE, PutBody, PutMode
from storage_adapter.errors import (
    BatchDeleteError,
    NotFoundError,
    ObjectChangedError,
    StorageError,
    UnsupportedOperationError,
)
from storage_adapter.faults import recovering
from storage_adapter.keys import join_key
from storage_adapter.listing import is_listed_prefix, sort_listed
from storage_adapter.obstore_driver.errors import fault_point
from storage_adapter.obstore_driver.raw_listing import RawClient, RawEntry, RawPage, raw_client
from storage_adapter.streams import BytesLike, clip
from storage_adapter.threaded import ThreadedAsyncDriver, in_thread
from storage_adapter.translation import (
    REFUSALS,
    Translation,
    first_line,
    http_status,
    status_error_class,
    translatable,
)
from storage_adapter.types import ObjectInfo, object_infos

if TYPE_CHECKING:  # only in obstore's type stubs
    from obstore import GetOptions

# A GET body is copied into its final bytes in chunks of at least this size. Larger ones cost more than
# they save: obstore gathers each chunk from many HTTP frames, and 8 MiB chunks peaked at 1.2-1.3x the
# object, 1 MiB ones at 1.02-1.05x.
_READ_CHUNK = 1024 * 1024

# A streamed body goes out as one PUT when it ends within this many bytes, else as a multipart upload in
# parts of this size (object_store's default; S3's minimum part size is 5 MiB).
_PART = 5 * 1024 * 1024


def wrapped_driver(config: AdapterConfig, name: str) -> ObstoreDriver:
    """The driver of an adapter over a user's store (config option ``store``, a :class:`WrappedStore`),
    its messages naming the backend ``name``. On S3 it falls back to signed single deletes, as the ``s3``
    backend does; on Azure it quotes listed ETags, as the ``azure`` backend does; both list through the
    raw client, as those backends do."""
    store = config.option("store").store
    s3, azure = isinstance(store, S3Store), isinstance(store, AzureStore)
    return ObstoreDriver(
        config,
        lambda _config: store,
        signed_delete_timeout_s=60.0 if s3 else None,
        quote_listed_etags=azure,
        name=name,
    )


def _generator(pages: Iterator[RawPage]) -> Generator[RawPage, None, None]:
    """The raw client's pages as the generator they are (closed to release its connection)."""
    return cast("Generator[RawPage, None, None]", pages)


class _Body:
    """A GET's whole body as ``bytes``, assembled from its stream holding one copy of it (plus at most
    two chunks); fed chunk by chunk by the sync and the async GET alike.

    ``bytes(result.bytes())`` held two on S3: object_store gathers the body into one Rust buffer, then
    ``bytes`` copies it. obstore's stream hands over each chunk as a fresh Python ``bytes`` (a copy out of
    Rust; its zero-copy ``Bytes`` would need a second copy to become the promised ``bytes``), so:

    * a body that arrives as one chunk (every small object; an in-memory object is always one) is
      returned as it is;
    * a longer one is copied chunk by chunk into a ``bytes`` of the announced size held by a BytesIO,
      which writes in place while it is the only reference, and whose ``getvalue()`` returns that very
      object once it is exactly full (CPython since 3.5; elsewhere a copy, never a wrong result).
      ``truncate`` keeps a body shorter than announced exact.
    """

    __slots__ = ("_buffer", "_first", "_size")

    def __init__(self, result: Any) -> None:
        self._size = int(result.meta["size"])
        self._first: bytes | None = None
        self._buffer: io.BytesIO | None = None

    def add(self, chunk: bytes) -> None:
        if self._first is None:
            self._first = chunk
            return
        if self._buffer is None:
            self._buffer = io.BytesIO(bytes(self._size))
            self._buffer.write(self._first)
        self._buffer.write(chunk)

    def value(self) -> bytes:
        if self._buffer is None:
            return self._first or b""
        self._buffer.truncate()
        return self._buffer.getvalue()


# The end of a range that covers any object (S3 and object_store clamp a range's end to the size).
_PAST_ANY_END = 1 << 62


def _whole_body(result: Any) -> bytes:
    body = _Body(result)
    for chunk in result.stream(min_chunk_size=_READ_CHUNK):
        body.add(chunk)
    return body.value()


async def _whole_body_async(result: Any) -> bytes:
    if int(result.meta["size"]) <= _READ_CHUNK:
        # One await for the whole (small) body instead of one per chunk plus one for the end of the
        # stream: each await of obstore's is a round trip between its runtime and the event loop.
        return bytes(await result.bytes_async())
    body = _Body(result)
    async for chunk in result.stream(min_chunk_size=_READ_CHUNK):
        body.add(chunk)
    return body.value()


def _gathered(chunks: Iterator[BytesLike], limit: int | None) -> tuple[bytes, Iterator[BytesLike] | None]:
    """The first bytes of ``chunks``: all of them and None when they end within ``limit`` bytes (None:
    no limit), else the first chunks past the limit and the iterator of the rest."""
    parts, size = [], 0
    for chunk in chunks:
        parts.append(chunk)
        size += len(chunk)
        if limit is not None and size > limit:
            return b"".join(parts), chunks
    return b"".join(parts), None


def _owned(chunks: Iterable[BytesLike]) -> Iterator[bytes]:
    """Each chunk as ``bytes``: a bytearray or memoryview the caller reuses must not change a part obstore
    still holds (``bytes(b)`` of a ``bytes`` is the object itself, no copy)."""
    for chunk in chunks:
        yield bytes(chunk)


class _Pin:
    """The version a multi-part read is pinned to: its ETag and size."""

    __slots__ = ("size", "token")

    def __init__(self, meta: Any) -> None:
        self.token, self.size = str(meta["e_tag"]), int(meta["size"])


# A read that takes several requests is planned once, as a generator that yields each request it needs and gets back
# the answer (or has the request's exception thrown in), and made by the sync driver's runner or its
# async twin's: the version pinning and size rules exist once for both. A request is a ranged GET's
# options (answered with the body's buffer and the response's metadata) or None, a HEAD (answered with
# the object's metadata).
R = TypeVar("R")
_Plan = Generator[Any, Any, R]


def _made(plan: _Plan[R], make: Callable[[Any], Any]) -> R:
    """The result of ``plan``, each of its requests made by ``make`` (blocking)."""
    step, answer = plan.send, None
    while True:
        try:
            request = step(answer)
        except StopIteration as done:
            return cast("R", done.value)
        try:
            step, answer = plan.send, make(request)
        except Exception as exc:  # the plan's to handle (a refused range, a moved version) or re-raise
            step, answer = plan.throw, exc


async def _made_async(plan: _Plan[R], make: Callable[[Any], Awaitable[Any]]) -> R:
    """The result of ``plan``, each of its requests made by awaiting ``make``: :func:`_made`'s twin."""
    step, answer = plan.send, None
    while True:
        try:
            request = step(answer)
        except StopIteration as done:
            return cast("R", done.value)
        try:
            step, answer = plan.send, await make(request)
        except Exception as exc:
            step, answer = plan.throw, exc


class ObstoreDriver:
    """The driver of a backend served by one obstore store: thin and exception-translating.

    ``build_store(config)`` makes the store. Where it is an S3 or Azure store, listings go through the
    raw client (:mod:`storage_adapter.obstore_driver.raw_listing`), which sees every name as stored.

    ``signed_delete_timeout_s`` (S3) enables the single-object delete fallback: object_store 0.13 deletes
    even one key with the multi-object ``POST ?delete``, which some S3-compatible servers refuse (a
    permanent 4xx or 501). Once refused, this driver deletes each key with one DeleteObject sent to a URL
    obstore presigns (so it needs credentials), with that timeout.

    ``quote_listed_etags``: the store lists ETags without the quotes its other answers carry (Azure
    answers a PUT, GET or HEAD with ``"0x8D..."`` and lists ``0x8D...``); listed tokens are quoted, so a
    token compares equal whichever request returned it. (Azure has no StartAfter either: its raw client
    drops what precedes ``start_after`` itself.)
    """

    def __init__(
        self,
        config: AdapterConfig,
        build_store: Callable[[AdapterConfig], Any],
        *,
        signed_delete_timeout_s: float | None = None,
        quote_listed_etags: bool = False,
        name: str | None = None,
    ) -> None:
        self.name = name or config.backend
        self._prefix = config.prefix
        self._quote_listed_etags = quote_listed_etags
        self._signed_delete_timeout_s = signed_delete_timeout_s
        self._batch_delete_refused = False  # set once the server refused POST ?delete; never reset
        self._conditional_limit = config.spec.capabilities_for(config).streamed_conditional_limit
        try:
            self._store = build_store(config)
        except BaseException as exc:
            # obstore's errors and its panics (a BaseException) alike; ours and interrupts pass unchanged.
            if not translatable(exc):
                raise
            raise StorageError(
                f"cannot open {config.url} ({self.name}): {first_line(exc)}",
                key=config.url,
                backend=self.name,
            ) from exc
        self._raw_lists = isinstance(self._store, (S3Store, AzureStore))
        self._store_prefix = str(getattr(self._store, "prefix", None) or "").strip("/")

    def path(self, key: str) -> str:
        return join_key(self._prefix, key)

    def listed(self, prefix: str) -> str | None:
        """The store path a listing of ``prefix`` starts at (None: the whole store)."""
        return self.path(prefix) if prefix else self._prefix or None

    def relative(self, path: str) -> str:
        return path[len(self._prefix) + 1 :] if self._prefix else path

    @property
    def store(self) -> Any:
        return self._store

    @property
    def raw_lists(self) -> bool:
        """Whether listings go through the raw client (S3 and Azure stores)."""
        return self._raw_lists

    @cached_property
    def _raw(self) -> RawClient | None:
        """The raw client, made at the first listing: a store obstore opens but cannot reach (plain HTTP
        not allowed) fails there, as obstore's own first request would."""
        return raw_client(self._store, backend=self.name) if self._raw_lists else None

    @property
    def batch_delete_refused(self) -> bool:
        return self._batch_delete_refused

    def asynchronous(self) -> ObstoreAsyncDriver:
        """This driver's non-blocking twin over obstore's async calls (same store, same state)."""
        return ObstoreAsyncDriver(self)

    def translated(self, key: str, action: str) -> Translation:
        """A context manager translating obstore's (and the OS's) exceptions raised inside it."""
        return Translation(self.name, key, action)

    # -- reads ---------------------------------------------------------------------------------------
    def get(self, key: str) -> bytes:
        return self.get_versioned(key)[0]

    def get_versioned(self, key: str) -> tuple[bytes, str]:
        """The bytes and the token of exactly those bytes (one GET: the token comes with the body)."""
        with self.translated(key, "read"):
            fault_point("get")
            result = obstore.get(self._store, self.path(key))
            return _whole_body(result), str(result.meta["e_tag"])

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> builtins.list[bytes]:
        """One ranged GET per non-empty range (see :meth:`ranges_plan`)."""
        with self.translated(key, "read_range"):
            return _made(self.ranges_plan(key, ranges), partial(self.request, self.path(key)))

    def request(self, path: str, options: GetOptions | None) -> Any:
        """One request of a read plan, blocking: a HEAD's metadata, or a ranged GET's buffer and metadata."""
        if options is None:
            return obstore.head(self._store, path)
        result = obstore.get(self._store, path, options=options)
        return result.bytes(), result.meta

    def ranges_plan(self, key: str, ranges: Sequence[tuple[int, int]]) -> _Plan[builtins.list[bytes]]:
        """The requests of ``get_ranges``: the first ranged GET learns the version (ETag and size), every
        range is then checked against the size before the next request, and each later GET carries
        If-Match on that ETag (and its answer's ETag is compared too, for servers that ignore If-Match)."""
        parts: builtins.list[bytes] = []
        pin = None
        if not ranges:  # no bytes asked for, but of an object: a missing one is NotFoundError (a HEAD)
            fault_point("head")
            yield None
        for start, end in ranges:
            data, pin = yield from self.range_plan(key, start, end, pin)
            if not parts:
                for other in ranges:
                    clip(*other, pin.size, key, self.name)
            parts.append(bytes(data))
        return parts

    def range_plan(self, key: str, start: int, end: int, pin: _Pin | None) -> _Plan[tuple[Any, _Pin]]:
        """The requests for the bytes ``[start, end)`` (a buffer) of the version ``pin`` (None: the
        current one), and that version. A range that needs no bytes costs a HEAD when no version is
        pinned yet; a range the server refuses is checked against the size (one HEAD), as servers answer
        a start at or past the end with an error (416) where the contract reads b"" or names the size."""
        options: dict[str, Any] = {} if pin is None else {"if_match": pin.token}
        refused: BaseError | None = None
        # obstore takes no bound past 2**64; no object reaches _PAST_ANY_END, so a start there has no bytes
        # (the HEAD below names the size) and an end there reads to the end of the object.
        if start < end and start < _PAST_ANY_END and (pin is None or start < pin.size):
            try:
                fault_point("get")
                ranged = {**options, "range": (start, min(end, _PAST_ANY_END))}
                data, meta = yield cast("GetOptions", ranged)
                return data, self._same(key, _Pin(meta), pin)
            except (PreconditionError, FileNotFoundError) as exc:
                if pin is None and isinstance(exc, FileNotFoundError):
                    raise
                raise self._changed(key) from exc
            except BaseError as exc:
                if pin is not None:
                    raise
                refused = exc
        if pin is None:
            fault_point("head")
            pin = _Pin((yield None))
        clip(start, end, pin.size, key, self.name)
        if refused is not None and start < pin.size:
            raise refused
        return b"", pin

    def _same(self, key: str, got: _Pin, pin: _Pin | None) -> _Pin:
        if pin is not None and got.token != pin.token:
            raise self._changed(key)
        return got

    def _changed(self, key: str) -> ObjectChangedError:
        return ObjectChangedError(
            f"changed while read: {key!r} on {self.name} was replaced or deleted since its first part was read",
            key=key,
            backend=self.name,
        )

    def open_source(self, key: str) -> _ObstoreSource:
        """One HEAD for the version (ETag and size); each read is then one ranged GET pinned to it."""
        with self.translated(key, "open_reader"):
            fault_point("head")
            pin = _Pin(obstore.head(self._store, self.path(key)))
        return _ObstoreSource(self, key, pin)

    def get_buffer(self, key: str) -> memoryview:
        """obstore's own buffer of the body (``Bytes``, read-only), seen through a memoryview: no copy."""
        with self.translated(key, "read"):
            fault_point("get")
            return memoryview(obstore.get(self._store, self.path(key)).bytes())

    def head_token(self, key: str) -> str:
        with self.translated(key, "head"):
            fault_point("head")
            return str(obstore.head(self._store, self.path(key))["e_tag"])

    def list_pages(
        self, prefix: str, start_after: str | None = None
    ) -> Generator[builtins.list[ObjectInfo], None, None]:
        """One page per listing request, made when the page is asked for: the raw client's on S3 and
        Azure (every name exactly as stored, see :meth:`raw_pages`), else obstore's listing stream in
        batches of LIST_PAGE (object_store asks for pages of that size; a short batch is the last, so no
        request follows it). ``start_after`` is the server's StartAfter (S3) or object_store's offset."""
        if self._raw_lists:
            yield from self.raw_pages(prefix, start_after)
            return
        with self.translated(prefix, "list"):
            stream = iter(self.listing(prefix, start_after))
            while True:
                fault_point("list")
                batch = next(stream, None)
                if batch is None or not batch.num_rows:
                    return
                page = self.infos(batch)
                if page:
                    yield page
                if batch.num_rows < LIST_PAGE:
                    return

    def raw_pages(
        self, prefix: str, start_after: str | None = None
    ) -> Generator[builtins.list[ObjectInfo], None, None]:
        """The listing of ``prefix`` through the raw client, every name as the store holds it (obstore
        would refuse a whole page over one name its path type cannot parse, and list the folder marker
        ``dir/`` as ``dir``): one ListObjectsV2 / List Blobs request per page. Blocking: the async twin
        takes it page by page in worker threads."""
        raw = self._raw
        assert raw is not None
        listed = self.listed(prefix)
        pages = _generator(
            raw.pages(
                self.raw_prefix(listed),
                start_after=None if start_after is None else self.full(self.path(start_after)),
                page_size=LIST_PAGE,
            )
        )
        with self.translated(prefix, "list"), closing(pages):
            while True:
                fault_point("list")
                page = next(pages, None)
                if page is None:
                    return
                if page.entries:
                    yield self.raw_infos(page.entries)

    def full(self, path: str | None) -> str:
        """The name in the bucket of a store path (the store's own prefix joined, as obstore joins it)."""
        return "/".join(part for part in (self._store_prefix, path) if part)

    def raw_prefix(self, listed: str | None) -> str:
        """The raw client's prefix for a listing at the store path ``listed`` (None: the root)."""
        return f"{self.full(listed)}/" if listed or self._store_prefix else ""

    def raw_infos(self, entries: Sequence[RawEntry]) -> builtins.list[ObjectInfo]:
        """The raw client's entries as listed objects, named relative to the adapter's root."""
        cut = len(self.full(self._prefix)) + 1 if self._prefix or self._store_prefix else 0
        return [
            ObjectInfo(entry.path[cut:], entry.size, self._listed_token(entry), entry.last_modified)
            for entry in entries
        ]

    def _listed_token(self, entry: RawEntry) -> str:
        """A listed entry's token in the form every other answer gives it (``quote_listed_etags``)."""
        if entry.e_tag is None:
            raise StorageError(
                f"list on {self.name}: the server listed {entry.path!r} without an ETag", backend=self.name
            )
        quote = self._quote_listed_etags and not entry.e_tag.startswith('"')
        return f'"{entry.e_tag}"' if quote else entry.e_tag

    def listing(self, prefix: str, start_after: str | None) -> Any:
        """obstore's lazy listing of ``prefix`` in Arrow batches of LIST_PAGE objects (see :meth:`infos`),
        from after ``start_after``: iterated by the sync driver, async-iterated by its twin. No request
        is made until the first batch is asked for."""
        return obstore.list(
            self._store,
            self.listed(prefix),
            offset=None if start_after is None else self.path(start_after),
            chunk_size=LIST_PAGE,
            return_arrow=True,
        )

    def list_dir(self, prefix: str) -> tuple[builtins.list[ObjectInfo], builtins.list[str]]:
        """One delimited list and, beside it (concurrently), the first page of the recursive listing: a
        reported child prefix is a child only if an object the adapter can address lives under it (a
        folder marker, a name no key can have, or a directory an S3 server keeps after its last object
        went (SeaweedFS) make none). Every prefix an addressable object of that page lies under is
        confirmed by it, and when the page is the whole listing, every other reported prefix is not a
        child; the prefixes left (beyond the first page) are confirmed by listing each until its first
        addressable object, REQUEST_WORKERS at a time."""
        base = self.listed(prefix)
        calls: builtins.list[Callable[[], Any]] = [
            partial(self._delimited, prefix, base),
            partial(self._first_page, prefix),
        ]
        (entries, reported), first = side_by_side(calls)
        return entries, self._confirmed(prefix, [self.relative(p.rstrip("/")) for p in reported], first)

    def _delimited(self, key: str, base: str | None) -> tuple[builtins.list[ObjectInfo], builtins.list[str]]:
        """The entries directly under ``base`` and the child prefixes reported (store paths)."""
        raw = self._raw
        if raw is not None:
            entries: builtins.list[ObjectInfo] = []
            reported: builtins.list[str] = []
            pages = _generator(raw.pages(self.raw_prefix(base), delimiter="/"))
            cut = len(self._store_prefix) + 1 if self._store_prefix else 0
            with self.translated(key, "list_dir"), closing(pages):
                fault_point("list_with_delimiter")
                for page in pages:
                    entries += self.raw_infos(page.entries)
                    reported += [p[cut:] for p in page.common_prefixes]
            return entries, reported
        with self.translated(key, "list_dir"):
            fault_point("list_with_delimiter")
            result = obstore.list_with_delimiter(self._store, base, return_arrow=True)
            return self.infos(result["objects"]), list(result["common_prefixes"])

    def _first_page(self, prefix: str) -> builtins.list[ObjectInfo]:
        """The first LIST_PAGE entries of the recursive listing of ``prefix`` (one request on S3)."""
        with closing(self.list_pages(prefix)) as pages:
            return next(pages, [])

    def _confirmed(
        self, prefix: str, reported: builtins.list[str], page: builtins.list[ObjectInfo]
    ) -> builtins.list[str]:
        """The ``reported`` child prefixes of ``prefix`` (relative to the root) under which an object
        the adapter can address lives, given the first page of the recursive listing of ``prefix``."""
        start = len(prefix) + 1 if prefix else 0  # where a child's name begins in a key below prefix
        held: set[str] = set()
        for info in sort_listed(page)[0]:
            end = info.key.find("/", start)
            if end >= 0:
                held.add(info.key[:end])
        candidates = [p for p in reported if is_listed_prefix(p)]
        if len(page) < LIST_PAGE:  # the whole listing: nothing it does not show holds an object
            return [p for p in candidates if p in held]
        rest = [p for p in candidates if p not in held]
        confirmed = dict(
            zip(rest, side_by_side([partial(self._holds_objects, p) for p in rest]), strict=True)
        )
        return [p for p in candidates if p in held or confirmed[p]]

    def _holds_objects(self, prefix: str) -> bool:
        """Whether an object the adapter can address lives under ``prefix``: its listing, page by page,
        until the first one (one request where the first entry is one)."""
        with closing(self.list_pages(prefix)) as pages:
            return any(sort_listed(page)[0] for page in pages)

    def infos(self, listed: Any) -> builtins.list[ObjectInfo]:
        """The ObjectInfos of one of obstore's Arrow listings (a RecordBatch or a Table), built column by
        column (a listing's hot loop).

        The Arrow form is the lean one: obstore builds no dict and no datetime per object (which costs it
        about 1 µs each), and turning each column into Python values here costs no Python call per object.
        """
        count = listed.num_rows
        paths = listed.column("path").to_pylist()
        keys: Iterable[str] = paths
        if self._prefix:  # the root's prefix and its "/" cut off every path
            keys = map(operator.getitem, paths, itertools.repeat(slice(len(self._prefix) + 1, None)))
        # obstore lists times as UTC microseconds. Dividing by 1e6 leaves the float within 0.12 µs of the
        # exact instant (half an ulp at today's epoch seconds), and fromtimestamp rounds to the nearest
        # microsecond, so every time is exact; one C call per object instead of Arrow's datetime path.
        micros = listed.column("last_modified").cast(DataType.int64()).to_pylist()
        times = map(
            datetime.fromtimestamp,
            map(operator.truediv, micros, itertools.repeat(1e6)),
            itertools.repeat(UTC),
        )
        sizes = listed.column("size").to_pylist()
        tokens = listed.column("e_tag").to_pylist()
        return object_infos(count, keys, sizes, tokens, times)

    # -- mutations (memory and S3; local mutations go through LocalMutator) -------------------------------
    def put(self, key: str, body: PutBody, mode: PutMode = OVERWRITE) -> str | None:
        """One PUT, conditional as ``mode`` says (object_store's create and update modes: If-None-Match: *
        and If-Match). An unconditional stream longer than a part is a multipart upload (object_store
        completes it only once the body ended, so the object appears whole; a body that raises is never
        completed); a conditional stream is buffered for its one conditional PUT."""
        if not isinstance(body, bytes):
            if mode.conditional:
                body = self._one_request(key, body, mode.action)
            else:
                head, rest = _gathered(body, _PART)
                if rest is not None:
                    with self.translated(key, "write"):
                        fault_point("put")
                        chunks = _owned(itertools.chain([head], rest))
                        return str(
                            obstore.put(self._store, self.path(key), chunks, chunk_size=_PART)["e_tag"]
                        )
                body = head
        with self.translated(key, mode.action):
            try:
                fault_point("put")
                return str(
                    obstore.put(self._store, self.path(key), body, mode=self.obstore_mode(mode))["e_tag"]
                )
            except (AlreadyExistsError, PreconditionError, FileNotFoundError):
                # A lost create (S3 answers a lost If-None-Match race with 412, which object_store maps to
                # Precondition) or a stale or absent version: the condition's outcome, never an error.
                if mode.conditional:
                    return None
                raise

    def _one_request(self, key: str, chunks: Iterator[BytesLike], method: str) -> bytes:
        """A conditional streamed body, buffered for its one conditional PUT; UnsupportedOperationError,
        having written nothing, past ``capabilities.streamed_conditional_limit``."""
        body, rest = _gathered(chunks, self._conditional_limit)
        if rest is not None:
            raise UnsupportedOperationError(
                f"{method} of {key!r} on {self.name}: a streamed body over {self._conditional_limit} bytes "
                "cannot be written conditionally here (capabilities.streamed_conditional_limit)",
                key=key,
                backend=self.name,
            )
        return body

    def if_match_token(self, token: str) -> str:
        """The ETag to send in If-Match for ``token`` (a compatibility mode may rewrite it)."""
        return token

    def obstore_mode(self, mode: PutMode) -> Any:
        """``mode`` as obstore's put takes it: "overwrite", "create" or ``{"e_tag": ...}``."""
        if mode.token is not None:
            return {"e_tag": self.if_match_token(mode.token)}
        return "create" if mode.conditional else "overwrite"

    def delete(self, key: str) -> None:
        # Deletes are idempotent: a missing object (local raises, S3 and memory do not) is success.
        with self.translated(key, "delete"), suppress(FileNotFoundError):
            self._delete_path(self.path(key))

    def delete_many(self, keys: Sequence[str]) -> None:
        """One multi-object delete per DELETE_BATCH keys (S3 DeleteObjects; a missing key is no error).
        A batch that fails is not confirmed for any of its keys (S3 may have deleted some): every batch
        is attempted, then BatchDeleteError names the keys of the failed ones. Once the server refused
        the multi-object delete, single signed deletes instead, DELETE_WORKERS at a time."""
        failures: dict[str, StorageError] = {}
        for batch in chunked(keys, DELETE_BATCH):
            try:
                if self._deleted_at_once(batch):
                    continue
                delete_each(self.delete, batch, self.name)
            except BatchDeleteError as exc:
                failures.update(exc.errors)
            except StorageError as exc:
                failures.update(dict.fromkeys(batch, exc))
        if failures:
            raise BatchDeleteError.of(failures, self.name)

    def _deleted_at_once(self, batch: Sequence[str]) -> bool:
        """One multi-object delete of ``batch``: True when it deleted them all; False when single deletes
        must finish the batch. That is when the server refused the request (see :meth:`_multi_delete`),
        or named a key missing: S3 never does, but Azure's Blob Batch answers 404 for a missing blob, and
        obstore raises at the first such key without saying what became of the others; a single delete
        confirms each, taking a missing key as deleted."""
        try:
            with self.translated(batch[0], f"delete (with {len(batch) - 1} more keys)"):
                return self._multi_delete([self.path(key) for key in batch])
        except NotFoundError:
            return False

    def _multi_delete(self, paths: str | builtins.list[str]) -> bool:
        """One multi-object delete (object_store 0.13 sends POST ?delete even for one path). False,
        having deleted nothing, when the server refuses that request and the signed fallback is on; from
        then on it is never sent again."""
        if self._batch_delete_refused:
            return False
        try:
            fault_point("delete")
            obstore.delete(self._store, paths)
            return True
        except GenericError as exc:
            if not self.falls_back_from(exc):
                raise
            return False

    def falls_back_from(self, exc: GenericError) -> bool:
        """Whether the failed multi-object delete ``exc`` is the server's refusal of that request and
        the signed fallback is on; if so it is never sent again. Otherwise (no fallback here, or not a
        refusal of the call itself: missing bucket, denied, ...) the error stands."""
        status = http_status(exc)
        refused = status is not None and status_error_class(status) in REFUSALS
        if self._signed_delete_timeout_s is None or not refused:
            return False
        self._batch_delete_refused = True
        recovering("delete")
        return True

    def _delete_path(self, path: str) -> None:
        if self._multi_delete(path):
            return
        # Presigned for immediate use.
        fault_point("sign")
        self.signed_delete(obstore.sign(self._store, "DELETE", path, timedelta(minutes=5)))

    def signed_delete(self, url: str) -> None:
        """One DeleteObject to the presigned ``url``: it answers 204, and urllib raises HTTPError
        otherwise."""
        fault_point("signed_delete")
        urllib.request.urlopen(
            urllib.request.Request(url, method="DELETE"), timeout=self._signed_delete_timeout_s
        ).close()

    def rename(self, src: str, dst: str) -> None:
        """A copy then a delete (as object_store's own rename), the delete through :meth:`_delete_path`.
        A source deleted by someone else between the two is renamed all the same (the copy read it): S3
        deletes a missing key silently, Azure answers 404, which is no failure of the rename."""
        with self.translated(src, f"rename to {dst!r}"):
            fault_point("copy")
            obstore.copy(self._store, self.path(src), self.path(dst))
            with suppress(FileNotFoundError):
                self._delete_path(self.path(src))

    def remove_orphans(self, min_age_s: float) -> int:
        """Crash leftovers to reclaim: none here (S3 multipart leftovers belong to bucket lifecycle rules)."""
        return 0


class ObstoreAsyncDriver(ThreadedAsyncDriver):
    """The :class:`~storage_adapter.driver.AsyncDriver` of an :class:`ObstoreDriver`: the same requests
    over obstore's async calls, on the caller's event loop, through the same translation (panics
    included) and fault points; the ranged reads follow the sync driver's own read plans. It shares its
    sync driver's store, paths and state (a refused multi-object delete is refused for both). In worker
    threads (inherited from ThreadedAsyncDriver): the presigned single delete (plain ``urllib``), the
    confirmed ``list_dir`` and the streamed writes, whose body is an iterator that may block and whose
    multipart uploads are the sync driver's."""

    def __init__(self, sync: ObstoreDriver) -> None:
        super().__init__(sync)
        self._sync = sync
        self._store = sync.store

    def _translated(self, key: str, action: str) -> Translation:
        return self._sync.translated(key, action)

    # -- reads ---------------------------------------------------------------------------------------
    async def get(self, key: str) -> bytes:
        """The whole object in ONE await (see :meth:`_whole`), copied into ``bytes``.

        The price: obstore gathers the body into one buffer that is then copied into the ``bytes``, so a
        large body is held twice for a moment (``get_versioned`` streams it into one copy); a large
        object is better read with ``read_buffer`` (no copy) or a reader."""
        return bytes(await self._whole(key))

    async def get_buffer(self, key: str) -> memoryview:
        """obstore's own buffer of the whole object (see :meth:`_whole`), seen through a memoryview."""
        return memoryview(await self._whole(key))

    async def _whole(self, key: str) -> Any:
        """obstore's buffer of the whole object in ONE await: a GET of the range from 0 past any end
        (which every store clamps to the object), where a plain GET takes two (the response, then its
        body), and each await is a round trip between obstore's runtime and the event loop that costs
        the loop more than a small GET does. The one object such a range cannot name is an empty one (a
        range must start before the end): the store refuses it, and the plain GET answers instead."""
        path = self._sync.path(key)
        with self._translated(key, "read"):
            fault_point("get")
            try:
                return await obstore.get_range_async(self._store, path, start=0, end=_PAST_ANY_END)
            except GenericError:
                # The refused range of an empty object (416 on S3), or a failure obstore gives no class
                # (its retries spent): the plain GET reads the object or raises its own error. Every
                # classified error (missing, denied, ...) has already been raised, translated.
                pass
            fault_point("get")
            return await (await obstore.get_async(self._store, path)).bytes_async()

    async def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> builtins.list[bytes]:
        """The sync driver's plan (:meth:`ObstoreDriver.ranges_plan`), its requests awaited."""
        with self._translated(key, "read_range"):
            return await _made_async(
                self._sync.ranges_plan(key, ranges), partial(self.request, self._sync.path(key))
            )

    async def request(self, path: str, options: GetOptions | None) -> Any:
        """:meth:`ObstoreDriver.request`'s twin: a HEAD's metadata, or a ranged GET's buffer and metadata."""
        if options is None:
            return await obstore.head_async(self._store, path)
        result = await obstore.get_async(self._store, path, options=options)
        return await result.bytes_async(), result.meta

    async def open_source(self, key: str) -> _ObstoreAsyncSource:
        """One HEAD for the version (ETag and size); each read is then one ranged GET pinned to it."""
        with self._translated(key, "open_reader"):
            fault_point("head")
            pin = _Pin(await obstore.head_async(self._store, self._sync.path(key)))
        return _ObstoreAsyncSource(self, _ObstoreSource(self._sync, key, pin))

    async def get_versioned(self, key: str) -> tuple[bytes, str]:
        with self._translated(key, "read"):
            fault_point("get")
            result = await obstore.get_async(self._store, self._sync.path(key))
            return await _whole_body_async(result), str(result.meta["e_tag"])

    async def head_token(self, key: str) -> str:
        with self._translated(key, "head"):
            fault_point("head")
            return str((await obstore.head_async(self._store, self._sync.path(key)))["e_tag"])

    async def list_pages(
        self, prefix: str, start_after: str | None = None
    ) -> AsyncGenerator[builtins.list[ObjectInfo], None]:
        """As :meth:`ObstoreDriver.list_pages`: one request per page, made when it is asked for (the raw
        client's in a worker thread, page by page)."""
        if self._sync.raw_lists:
            async for page in super().list_pages(prefix, start_after):
                yield cast("builtins.list[ObjectInfo]", page)
            return
        with self._translated(prefix, "list"):
            stream = self._sync.listing(prefix, start_after)
            while True:
                fault_point("list")
                batch = await anext(stream, None)
                if batch is None or not batch.num_rows:
                    return
                page = self._sync.infos(batch)
                if page:
                    yield page
                if batch.num_rows < LIST_PAGE:
                    return

    async def list_dir(self, prefix: str) -> tuple[builtins.list[ObjectInfo], builtins.list[str]]:
        """As :meth:`ObstoreDriver.list_dir` (the same requests), in a worker thread."""
        return await in_thread(self._sync.list_dir, prefix)

    # -- mutations -----------------------------------------------------------------------------------
    async def put(self, key: str, body: PutBody, mode: PutMode = OVERWRITE) -> str | None:
        """As the sync driver's ``put``; a streamed body is consumed off the loop, in a worker thread."""
        if not isinstance(body, bytes):
            return await super().put(key, body, mode)
        with self._translated(key, mode.action):
            try:
                fault_point("put")
                done = await obstore.put_async(
                    self._store, self._sync.path(key), body, mode=self._sync.obstore_mode(mode)
                )
                return str(done["e_tag"])
            except (AlreadyExistsError, PreconditionError, FileNotFoundError):  # as the sync driver
                if mode.conditional:
                    return None
                raise

    async def delete(self, key: str) -> None:
        with self._translated(key, "delete"), suppress(FileNotFoundError):
            await self._delete_path(self._sync.path(key))

    async def delete_many(self, keys: Sequence[str]) -> None:
        """As :meth:`ObstoreDriver.delete_many`: one multi-object delete per batch, single signed deletes
        (DELETE_WORKERS at a time) once the server refused it; BatchDeleteError names the failures."""
        failures: dict[str, StorageError] = {}
        for batch in chunked(keys, DELETE_BATCH):
            try:
                with self._translated(batch[0], f"delete (with {len(batch) - 1} more keys)"):
                    if await self._multi_delete([self._sync.path(key) for key in batch]):
                        continue
            except NotFoundError:
                pass  # a key named missing: single deletes finish the batch (ObstoreDriver._deleted_at_once)
            except StorageError as exc:
                failures.update(dict.fromkeys(batch, exc))
                continue
            failures.update(await self._delete_each(batch))
        if failures:
            raise BatchDeleteError.of(failures, self._sync.name)

    async def _delete_each(self, keys: builtins.list[str]) -> dict[str, StorageError]:
        """``delete`` of every key, DELETE_WORKERS at a time; the keys that failed, with their errors."""
        slots = asyncio.Semaphore(DELETE_WORKERS)

        async def delete(key: str) -> StorageError | None:
            async with slots:
                try:
                    await self.delete(key)
                except StorageError as exc:
                    return exc
                return None

        outcomes = await asyncio.gather(*(delete(key) for key in keys))
        return {key: exc for key, exc in zip(keys, outcomes, strict=True) if exc is not None}

    async def _multi_delete(self, paths: str | builtins.list[str]) -> bool:
        if self._sync.batch_delete_refused:
            return False
        try:
            fault_point("delete")
            await obstore.delete_async(self._store, paths)
            return True
        except GenericError as exc:
            if not self._sync.falls_back_from(exc):
                raise
            return False

    async def _delete_path(self, path: str) -> None:
        if await self._multi_delete(path):
            return
        fault_point("sign")
        url = await obstore.sign_async(self._store, "DELETE", path, timedelta(minutes=5))
        await in_thread(self._sync.signed_delete, url)

    async def rename(self, src: str, dst: str) -> None:
        with self._translated(src, f"rename to {dst!r}"):
            fault_point("copy")
            await obstore.copy_async(self._store, self._sync.path(src), self._sync.path(dst))
            with suppress(FileNotFoundError):  # deleted meanwhile: renamed all the same (as the sync driver)
                await self._delete_path(self._sync.path(src))

    async def remove_orphans(self, min_age_s: float) -> int:
        return self._sync.remove_orphans(min_age_s)


class _ObstoreSource:
    """A reader's source on memory and S3: ranged GETs pinned to one version (If-Match on its ETag, and
    the answer's ETag compared): ObjectChangedError once that version is replaced or deleted."""

    def __init__(self, driver: ObstoreDriver, key: str, pin: _Pin) -> None:
        self.driver, self.key, self._pin = driver, key, pin
        self.size, self.token = pin.size, pin.token

    def plan(self, offset: int, length: int) -> _Plan[tuple[Any, _Pin]]:
        """The requests of one read: ``length`` bytes from ``offset``, of the opened version only."""
        return self.driver.range_plan(self.key, offset, offset + length, self._pin)

    def read_into(self, offset: int, buffer: memoryview) -> int:
        driver = self.driver
        with driver.translated(self.key, "read"):
            data, _ = _made(self.plan(offset, len(buffer)), partial(driver.request, driver.path(self.key)))
        return _filled(buffer, data)

    def close(self) -> None:
        """Nothing held open: each read is its own request."""


class _ObstoreAsyncSource:
    """A :class:`_ObstoreSource` for the async reader: the same reads, their requests awaited."""

    def __init__(self, twin: ObstoreAsyncDriver, source: _ObstoreSource) -> None:
        self._twin, self._source = twin, source
        self.size, self.token = source.size, source.token

    async def read_into(self, offset: int, buffer: memoryview) -> int:
        source = self._source
        with source.driver.translated(source.key, "read"):
            plan = source.plan(offset, len(buffer))
            data, _ = await _made_async(plan, partial(self._twin.request, source.driver.path(source.key)))
        return _filled(buffer, data)

    async def close(self) -> None:
        """Nothing held open: each read is its own request."""


def _filled(buffer: memoryview, data: Any) -> int:
    """``buffer`` filled from its start with ``data`` (a read's bytes, never longer): how many."""
    view = memoryview(data)
    buffer[: len(view)] = view
    return len(view)
