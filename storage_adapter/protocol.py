"""The written contract: :class:`StorageAdapter`, what every adapter promises, method by method.

This protocol is the single source the contract suite (``contract_tests``), the engine, the idempotency
store, the peers and the workloads are typed against. :class:`~storage_adapter.ObjectStorageAdapter`
implements it over obstore; a downstream backend implements it (or registers a
:class:`~storage_adapter.registry.Backend`) and proves it by running the contract suite, which checks
each docstring below as executable clauses.

It is synchronous. An asynchronous twin will mirror it method for method, with the same guarantees.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Iterator
from typing import Protocol, runtime_checkable

from storage_adapter.types import Capabilities, DirListing, ObjectInfo, Versioned


@runtime_checkable
class StorageAdapter(Protocol):
    """Object storage under one root: keys are ``/``-separated paths relative to it.

    Guarantees every implementation keeps, on every backend (each is a clause of the contract suite):

    * **Safe keys.** Every key and prefix is validated before any I/O by the rules of
      :mod:`storage_adapter.keys`; a bad one raises :class:`~storage_adapter.errors.InvalidKeyError`
      (also a ``ValueError``). Nothing outside the root is ever read, written, listed or deleted.
    * **Typed errors.** Every failure is a :class:`~storage_adapter.errors.StorageError` naming the key
      (or URL) and the backend, and never a credential. A missing object is
      :class:`~storage_adapter.errors.NotFoundError` (also a ``FileNotFoundError``); a transient failure
      (retry may succeed, a mutation's outcome is unknown) is
      :class:`~storage_adapter.errors.BackendUnavailableError`.
    * **Atomic visibility.** A reader sees an object's previous bytes or its new bytes, never a part.
    * **Linearizable mutations.** ``write``, ``write_if_absent``, ``write_if_match``, ``delete`` and
      ``rename`` of one key take effect in one instant between call and return, across threads and (where
      ``capabilities.shared_across_processes``) processes.
    * **Pickling.** An adapter pickles, and the copy addresses the same objects (process and Spark
      workers reopen it from its configuration). Adapters built from the same configuration compare equal.
    """

    # -- identity ------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """The root as a URL (``scheme://location/prefix``), never carrying a credential."""
        ...

    @property
    def backend(self) -> str:
        """The backend's registered name (``memory``, ``local``, ``s3``, ...), used in messages."""
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
        (an emptied prefix is never reported), each sorted."""
        ...

    # -- mutations -----------------------------------------------------------------------------------
    def write(self, key: str, data: bytes | str) -> str:
        """Atomically create or replace the object (``str`` is stored as UTF-8); return the token of the
        bytes written. A concurrent reader sees the old or the new object, never a part."""
        ...

    def write_if_absent(self, key: str, data: bytes | str) -> str | None:
        """Create the object only if no object exists at ``key``. Among any number of concurrent callers
        exactly one wins and gets the token of the bytes it wrote (a non-empty str, the one
        ``read_versioned`` and ``list`` report for them, usable at once in ``write_if_match``); its bytes
        are wholly readable when it returns. The others get None and change nothing."""
        ...

    def write_if_match(self, key: str, data: bytes | str, token: str) -> str | None:
        """Compare-and-swap: replace the object only if its current token is ``token``; return the new
        token. Return None, writing nothing, when the object changed since ``token`` was read or does not
        exist. Linearizable with every other mutation of the key: no update is ever lost."""
        ...

    def delete(self, key: str) -> None:
        """Delete the object. Idempotent: deleting a missing object succeeds."""
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
        ``capabilities.atomic_rename``; elsewhere a copy then a delete (a crash between leaves both)."""
        ...

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under the non-empty ``prefix``; return how many. Not atomic. A prefix
        names whole segments (``a`` never deletes ``ab/x``, nor an object named ``a``). The root (``""``
        or ``"/"``) is refused with StorageError, deleting nothing."""
        ...

    def remove_orphans(self, min_age_s: float = 3600.0) -> int:
        """Reclaim crash leftovers under this adapter's root that no reader can see (e.g. local staging
        files) and that are older than ``min_age_s``; return how many. Never touches a visible object
        or a write in flight, whatever ``min_age_s``. Always 0 where ``capabilities.reclaims_orphans``
        is False."""
        ...
