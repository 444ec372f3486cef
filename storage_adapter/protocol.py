"""The written contract: :class:`StorageAdapter`, what every adapter promises, method by method.

This protocol is the single source the contract suite (``contract_tests``), the engine, the idempotency
store, the peers and the workloads are typed against. :class:`~storage_adapter.ObjectStorageAdapter`
implements it over obstore; a downstream backend implements it (or registers a
:class:`~storage_adapter.registry.Backend`) and proves it by running the contract suite, which checks
each docstring below as executable clauses.

:class:`StorageAdapter` is synchronous; :class:`AsyncStorageAdapter` is its asynchronous twin, method for
method, with the same guarantees (implemented by
:class:`~storage_adapter.async_adapter.AsyncObjectStorageAdapter`).
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Protocol, runtime_checkable

from storage_adapter.streams import AsyncObjectReader, Body, ObjectReader
from storage_adapter.types import Capabilities, DirListing, ObjectInfo, SkippedObject, Versioned


@runtime_checkable
class StorageAdapter(Protocol):
    """Object storage under one root: keys are ``/``-separated paths relative to it.

    Guarantees every implementation keeps, on every backend (each is a clause of the contract suite):

    * **Safe keys.** Every key and prefix is validated before any I/O by the rules of
      :mod:`storage_adapter.keys`; a bad one raises :class:`~storage_adapter.errors.InvalidKeyError`
      (also a ``ValueError``). Nothing outside the root is ever read, written, listed or deleted.
    * **Every name listed reads back.** A listing shows an entry of the store as an object only if its
      name is a key (:mod:`storage_adapter.listing`); any other entry another tool left under the root (a
      name with a control character, ``a//b``, a folder marker ``dir/``, on local a symlink) never makes a
      listing fail and never shows up under another name: it is skipped and reported by ``skipped`` and
      ``DirListing.skipped``, never read, written or deleted through the adapter. A folder marker (a
      zero-byte object whose name ends in ``/``) is no object and makes no directory.
    * **Typed errors.** Every failure is a :class:`~storage_adapter.errors.StorageError` naming the key
      (or URL) and the backend, and never a credential. A missing object is
      :class:`~storage_adapter.errors.NotFoundError` (also a ``FileNotFoundError``); a transient failure
      (retry may succeed, a mutation's outcome is unknown) is
      :class:`~storage_adapter.errors.BackendUnavailableError`.
    * **Atomic visibility.** A reader sees an object's previous bytes or its new bytes, never a part.
    * **Ranges and streams keep these guarantees.** A ranged read, a reader and a no-copy read read one
      version of the object; a streamed write (a file object or an iterable of chunks) becomes visible
      only complete, and a stream that fails (raises, or yields something that is not bytes) leaves
      nothing visible.
    * **Linearizable mutations.** ``write``, ``write_if_absent``, ``write_if_match``, ``delete`` and
      ``rename`` of one key take effect in one instant between call and return, across threads and (where
      ``capabilities.shared_across_processes``) processes.
    * **Time order.** The ``last_modified`` a listing reports for an object never goes back across an
      operation that replaces it (``write``, ``write_if_match``, a streamed write, a ``rename`` onto
      it): a replacement is dated when it takes effect, never with the time of the bytes it moves.
    * **Pickling and identity.** An adapter pickles, and the copy addresses the same objects (process and
      Spark workers reopen it from its configuration). Equality and hash follow the place an adapter
      addresses, not how it was built: ``child("a").child("b") == child("a/b")``, and an adapter opened
      at a child's URL with the same options equals that child; adapters of different places are
      unequal.
    """

    # -- identity ------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """The root as a URL (``scheme://location/prefix``), never carrying a credential."""
        ...

    @property
    def backend(self) -> str:
        """The backend's registered name (``memory``, ``local``, ``s3``, ...), used in messages; over a
        user's own store (``open_adapter(store=...)``), the name its declared capabilities give."""
        ...

    @property
    def capabilities(self) -> Capabilities:
        """What this backend guarantees, declared up front. The contract checks each declaration."""
        ...

    def child(self, prefix: str) -> StorageAdapter:
        """An adapter rooted at ``prefix`` below this one: same store, same options. It creates nothing
        until it writes, and nothing it does reaches outside ``prefix``."""
        ...

    # -- reads ---------------------------------------------------------------------------------------
    def read_bytes(self, key: str) -> bytes:
        """The object's whole bytes. Raises NotFoundError if it does not exist."""
        ...

    def read_text(self, key: str, encoding: str = "utf-8") -> str:
        """The object decoded as text. Raises NotFoundError if it does not exist."""
        ...

    def read_if_exists(self, key: str) -> bytes | None:
        """The object's bytes, or None if (and only if) it does not exist; every other failure raises."""
        ...

    def read_versioned(self, key: str) -> Versioned:
        """The object's bytes together with the version token of exactly those bytes (never the token of
        another version). Raises NotFoundError if it does not exist."""
        ...

    def read_range(self, key: str, start: int, end: int) -> bytes:
        """The bytes ``[start, end)`` of the object, with Python-slice semantics for the end: an ``end``
        past the object is clipped to it. ``start`` and ``end`` are ints (not bools) with
        ``0 <= start <= end``, else :class:`~storage_adapter.errors.InvalidRangeError` (a ValueError)
        naming key, backend and range, before any I/O. A ``start`` past the object's end is
        InvalidRangeError naming the object's size (``start == size`` reads ``b""``); ``start == end``
        reads ``b""`` but a missing object is still NotFoundError. On S3 one GET with a Range header:
        the cost is the range, not the object."""
        ...

    def read_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> builtins.list[bytes]:
        """The bytes of each ``(start, end)`` range, in order, by ``read_range``'s rules; every range is
        validated before any I/O (an out-of-bounds start as soon as the size is known, before any
        further read). All come from ONE version of the object: S3 and memory pin the reads after the
        first to its ETag (If-Match), local reads one open file; if the object changed between two
        reads, :class:`~storage_adapter.errors.ObjectChangedError` and no parts at all."""
        ...

    def open_reader(self, key: str) -> ObjectReader:
        """A seekable binary reader (:class:`~storage_adapter.streams.ObjectReader`, an
        ``io.RawIOBase``: ``readinto``, ``read``, ``seek``/``tell``, ``size``, ``token``) over the
        object's current version, read lazily by range. It never returns bytes of two versions: reads
        racing a replace return the opened version (local) or raise ObjectChangedError (S3, memory).
        Raises NotFoundError now if the object does not exist. Close it (a context manager); a closed
        reader raises ValueError."""
        ...

    def read_buffer(self, key: str) -> memoryview:
        """The object's whole bytes as a read-only ``memoryview`` (format ``B``), without the copy into
        ``bytes`` that ``read_bytes`` makes: over obstore's own buffer (S3, memory) or a buffer the file
        was read straight into (local). One version of the object. Raises NotFoundError if absent."""
        ...

    def exists(self, key: str) -> bool:
        """True if an object is stored at ``key`` (a prefix with objects below it is not an object)."""
        ...

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        """Every object under ``prefix``, recursively, sorted by key. A prefix names whole segments:
        ``a/b`` lists ``a/b/...`` and never ``a/bc``. A missing prefix lists nothing."""
        ...

    def list_pages(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> Iterator[builtins.list[ObjectInfo]]:
        """What ``list(prefix)`` returns (same objects, same tokens, each once), in consecutive non-empty
        pages, each fetched only when the previous one has been taken: a caller that stops early never
        pays for the rest, and none holds more than one page of the listing. On S3 a page is one
        ListObjectsV2 request (1000 objects) and the order is the server's: key order on AWS S3, but
        SeaweedFS lists segment by segment (``a/x`` before ``a.txt``); memory and local stream in key
        order (local walks directories lazily). Each table or record prefix comes out contiguous either
        way; a caller needing strict key order sorts (``list`` does). Like ``list``, it never shows a
        write in flight; an object written or deleted while the pages are taken may or may not appear.

        ``start_after`` resumes a listing: given a key this listing returned (typically the last one a
        caller took), the pages hold exactly the objects that follow it in this order, so a huge prefix
        can be taken in bounded steps, across calls or processes, each object once. On S3 it is the
        request's StartAfter (the server skips what precedes it, nothing is fetched twice); on backends
        listing in key order (memory, local, AWS S3) any key may be given: the objects whose keys sort
        after it. It is a key (validated by the key rules, InvalidKeyError); the prefix and it are
        validated when this is called, before any I/O."""
        ...

    def iter_list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> Iterator[ObjectInfo]:
        """The objects of ``list_pages(prefix, start_after=start_after)``, one at a time: ``list(prefix)``
        without holding it. With ``limit`` (an int >= 0), at most that many: no page is fetched once the
        limit is reached. A ``limit`` that is not None or an int >= 0 (a bool, a float, a negative int)
        raises :class:`~storage_adapter.errors.InvalidArgumentError` (a ValueError) naming the backend;
        every argument is validated when this is called, before any I/O."""
        ...

    def list_dir(self, prefix: str = "") -> DirListing:
        """The objects directly under ``prefix`` and its child prefixes that hold at least one object
        (an emptied prefix, or one holding only folder markers or skipped entries, is never reported),
        each sorted; ``skipped``: the entries directly under ``prefix`` that listings leave out."""
        ...

    def entry_pages(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> Iterator[builtins.list[ObjectInfo | SkippedObject]]:
        """The pages of ``list_pages(prefix, start_after=...)`` (same requests, same objects in the same
        order) with, after the objects of each page, the entries of that page that listings leave out
        (:class:`~storage_adapter.types.SkippedObject`); a page holding only such entries is one too. For
        a caller that needs both in one pass (the engine's vacuum)."""
        ...

    def skipped(self, prefix: str = "") -> builtins.list[SkippedObject]:
        """Every entry under ``prefix`` (recursively) that listings leave out because the adapter cannot
        address it, sorted by name (:class:`~storage_adapter.types.SkippedObject`: its exact name, size,
        the reason and the broken rule): folder markers, names no key can have, and on local entries
        that are not regular files. The skipped entries of ``entry_pages(prefix)``: one listing; empty
        where another tool left nothing odd."""
        ...

    # -- mutations -----------------------------------------------------------------------------------
    def write(self, key: str, data: Body) -> str:
        """Atomically create or replace the object; return the token of the bytes written. A concurrent
        reader sees the old or the new object, never a part.

        ``data`` is bytes-like, a ``str`` (stored as UTF-8), a binary file object (read in chunks until it
        returns ``b""``; a read that returns anything else, None from a non-blocking stream with nothing
        ready included, is a chunk that is not bytes-like) or an iterable of bytes-like chunks. A
        streamed body is never held whole: local stages it in a file beside the key, S3 sends it as a
        multipart upload (one PUT when it fits in one part), and the object appears only once complete. If the stream raises, or yields a chunk
        that is not bytes-like (:class:`~storage_adapter.errors.InvalidBodyError`), nothing is visible
        and the previous object (if any) stays. Any other body, a closed file object or one in text mode is
        InvalidBodyError (also a TypeError) naming the key, before any I/O."""
        ...

    def write_if_absent(self, key: str, data: Body) -> str | None:
        """Create the object only if no object exists at ``key``. Among any number of concurrent callers
        exactly one wins and gets the token of the bytes it wrote (a non-empty str, the one
        ``read_versioned`` and ``list`` report for them, usable at once in ``write_if_match``); its bytes
        are wholly readable when it returns. The others get None and change nothing.

        A streamed body (see ``write``) is honoured as ``capabilities.streamed_conditional_write`` says:
        UNSUPPORTED refuses it with UnsupportedOperationError before any I/O; a stream longer than
        ``capabilities.streamed_conditional_limit`` is refused the same way, writing nothing."""
        ...

    def write_if_match(self, key: str, data: Body, token: str) -> str | None:
        """Compare-and-swap: replace the object only if its current token is ``token``; return the new
        token. Return None, writing nothing, when the object changed since ``token`` was read or does not
        exist. Linearizable with every other mutation of the key: no update is ever lost. Streamed bodies
        as for ``write_if_absent``. A token no call returned (not a non-empty str of an ETag's visible
        ASCII characters, at most 1024, or the wildcard ``*``) is InvalidTokenError before any I/O."""
        ...

    def delete(self, key: str) -> None:
        """Delete the object. Idempotent: deleting a missing object succeeds, and so does each of any
        number of concurrent deletes of one object. What a delete (or a rename, or a failed write) empties
        is left as if never used: nothing is listed there, and an object can be written at the name of an
        emptied prefix (no directory is left behind on a file system)."""
        ...

    def delete_many(self, keys: Iterable[str]) -> int:
        """Delete every key of ``keys`` (a missing one is fine, as for ``delete``); return how many
        distinct keys there were. Every key is validated before any I/O: one bad key raises
        InvalidKeyError naming it, deleting nothing. Not atomic: where the backend has a multi-object
        delete it sends one per batch of keys (``capabilities.batch_delete``), elsewhere single deletes a
        few at a time. Every key is attempted; if any could not be confirmed deleted,
        :class:`~storage_adapter.errors.BatchDeleteError` names each of them (and the backend): every
        key it does not name is deleted. Nothing else is ever touched."""
        ...

    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst``, replacing ``dst``. Raises NotFoundError, changing nothing, if ``src``
        does not exist. Renaming a key onto itself changes nothing: the object keeps its bytes and its
        token (NotFoundError if it does not exist). Atomic only where
        ``capabilities.atomic_rename``; elsewhere a copy then a delete (a crash between leaves both).
        Readers and listings racing it see the object move, never vanish: looking at ``src`` and then at
        ``dst`` they find it under at least one of them and, where atomic, looking at ``dst`` and then at
        ``src`` under at most one; never a part of it at ``dst``."""
        ...

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under the non-empty ``prefix``; return how many. Not atomic. A prefix
        names whole segments (``a`` never deletes ``ab/x``, nor an object named ``a``). The root (``""``
        or ``"/"``) is refused with InvalidKeyError (a ValueError) before any I/O, deleting nothing."""
        ...

    def remove_orphans(self, min_age_s: float = 3600.0) -> int:
        """Reclaim crash leftovers under this adapter's root that no reader can see (e.g. local staging
        files) and that are older than ``min_age_s``; return how many. Never touches a visible object
        or a write in flight, whatever ``min_age_s``. Always 0 where ``capabilities.reclaims_orphans``
        is False."""
        ...


@runtime_checkable
class AsyncStorageAdapter(Protocol):
    """The asynchronous twin of :class:`StorageAdapter`: the same methods, arguments, results, errors and
    guarantees (each method's are stated on its sync twin), for asyncio code.

    In addition:

    * **Never blocks the event loop.** No method blocks the thread running the loop while it waits for
      storage: I/O is awaited (memory and S3: obstore's async calls), and whatever can only block
      (local: directory ``flock`` s, fsync) runs in worker threads. Any number of calls may be in flight
      from one loop.
    * **Validation first.** Keys, prefixes, bodies and tokens are checked when the call starts, before any
      I/O; a listing's prefix when ``list_pages``/``iter_list`` is called, not at the first ``anext``.
    * **Cancellation.** Cancelling a call (or dropping a listing) is allowed; a cancelled mutation has the
      status of one that raised BackendUnavailableError: it took effect entirely or not at all (a
      reader never sees a part), and which one is unknown.
    * **Pickling and equality** as for the sync adapter; an async adapter never equals a sync one.
    """

    # -- identity ------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """As :attr:`StorageAdapter.url`."""
        ...

    @property
    def backend(self) -> str:
        """As :attr:`StorageAdapter.backend`."""
        ...

    @property
    def capabilities(self) -> Capabilities:
        """As :attr:`StorageAdapter.capabilities`: the same declaration as the sync adapter of the same
        configuration."""
        ...

    def child(self, prefix: str) -> AsyncStorageAdapter:
        """As :meth:`StorageAdapter.child` (no I/O, so not a coroutine)."""
        ...

    # -- reads ---------------------------------------------------------------------------------------
    async def read_bytes(self, key: str) -> bytes:
        """As :meth:`StorageAdapter.read_bytes`."""
        ...

    async def read_text(self, key: str, encoding: str = "utf-8") -> str:
        """As :meth:`StorageAdapter.read_text`."""
        ...

    async def read_if_exists(self, key: str) -> bytes | None:
        """As :meth:`StorageAdapter.read_if_exists`."""
        ...

    async def read_versioned(self, key: str) -> Versioned:
        """As :meth:`StorageAdapter.read_versioned`: the token of exactly the bytes returned."""
        ...

    async def read_range(self, key: str, start: int, end: int) -> bytes:
        """As :meth:`StorageAdapter.read_range`: InvalidRangeError before any I/O."""
        ...

    async def read_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> builtins.list[bytes]:
        """As :meth:`StorageAdapter.read_ranges`: every range from one version (ObjectChangedError)."""
        ...

    async def open_reader(self, key: str) -> AsyncObjectReader:
        """As :meth:`StorageAdapter.open_reader`, with coroutine reads
        (:class:`~storage_adapter.streams.AsyncObjectReader`: ``await read()``, ``await
        readinto()``, ``seek``, ``tell``, ``size``, ``token``, ``async with``)."""
        ...

    async def read_buffer(self, key: str) -> memoryview:
        """As :meth:`StorageAdapter.read_buffer`."""
        ...

    async def exists(self, key: str) -> bool:
        """As :meth:`StorageAdapter.exists`."""
        ...

    async def list(self, prefix: str = "") -> builtins.list[ObjectInfo]:
        """As :meth:`StorageAdapter.list`: recursive, sorted, whole segments."""
        ...

    def list_pages(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> AsyncIterator[builtins.list[ObjectInfo]]:
        """As :meth:`StorageAdapter.list_pages`, as an async iterator (``async for page in ...``): each
        page fetched only when the previous one has been taken. The arguments are validated at this
        call."""
        ...

    def iter_list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> AsyncIterator[ObjectInfo]:
        """As :meth:`StorageAdapter.iter_list`, as an async iterator."""
        ...

    async def list_dir(self, prefix: str = "") -> DirListing:
        """As :meth:`StorageAdapter.list_dir`."""
        ...

    def entry_pages(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> AsyncIterator[builtins.list[ObjectInfo | SkippedObject]]:
        """As :meth:`StorageAdapter.entry_pages`, as an async iterator."""
        ...

    async def skipped(self, prefix: str = "") -> builtins.list[SkippedObject]:
        """As :meth:`StorageAdapter.skipped`."""
        ...

    # -- mutations -----------------------------------------------------------------------------------
    async def write(self, key: str, data: Body) -> str:
        """As :meth:`StorageAdapter.write`: atomic replace, returns the token. A streamed body (a file
        object or an iterable of chunks, as for the sync adapter) is read in a worker thread, never on
        the loop."""
        ...

    async def write_if_absent(self, key: str, data: Body) -> str | None:
        """As :meth:`StorageAdapter.write_if_absent`: exactly one winner among any number of concurrent
        callers, tasks of one loop, threads and processes alike."""
        ...

    async def write_if_match(self, key: str, data: Body, token: str) -> str | None:
        """As :meth:`StorageAdapter.write_if_match`: linearizable compare-and-swap."""
        ...

    async def delete(self, key: str) -> None:
        """As :meth:`StorageAdapter.delete`: idempotent."""
        ...

    async def delete_many(self, keys: Iterable[str]) -> int:
        """As :meth:`StorageAdapter.delete_many`: every key validated before any I/O."""
        ...

    async def rename(self, src: str, dst: str) -> None:
        """As :meth:`StorageAdapter.rename`."""
        ...

    async def delete_prefix(self, prefix: str) -> int:
        """As :meth:`StorageAdapter.delete_prefix`: the root is refused."""
        ...

    async def remove_orphans(self, min_age_s: float = 3600.0) -> int:
        """As :meth:`StorageAdapter.remove_orphans`."""
        ...
