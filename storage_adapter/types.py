"""Public value types: frozen dataclasses and enums, so results can be hashed, compared and pickled."""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from itertools import repeat


@dataclass(frozen=True)
class Versioned:
    """An object's bytes together with the version token of exactly those bytes.

    ``token`` is opaque: pass it to ``write_if_match``. It is the ETag on S3, a counter on memory and
    ``inode-mtime-size`` on local (see ``Capabilities.token_semantics``).
    """

    data: bytes
    token: str


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One listed object. ``key`` is relative to the adapter's root."""

    key: str
    size: int
    token: str
    last_modified: datetime


# The slots' own setters: object_infos fills instances with them, bypassing the frozen __setattr__.
_OBJECT_INFO_SLOTS = tuple(
    getattr(ObjectInfo, name).__set__ for name in ("key", "size", "token", "last_modified")
)


def object_infos(
    count: int, keys: Iterable[str], sizes: Iterable[int], tokens: Iterable[str], times: Iterable[datetime]
) -> list[ObjectInfo]:
    """``count`` ObjectInfos from their fields given column by column (each iterable yields ``count``
    values), equal to ``ObjectInfo(key, size, token, last_modified)`` one by one.

    A listing builds thousands: built this way each field is stored by a C-level ``map`` over its
    column, with no Python call per object, which costs a third of the dataclass constructor.
    """
    infos = list(map(object.__new__, repeat(ObjectInfo, count)))
    for store, column in zip(_OBJECT_INFO_SLOTS, (keys, sizes, tokens, times), strict=True):
        deque(map(store, infos, column), maxlen=0)  # consumes the map: no list of Nones
    return infos


class SkipReason(enum.Enum):
    """Why a listing leaves an entry of the store out (:class:`SkippedObject`)."""

    # A zero-byte object whose name ends in "/" (the AWS console's "Create folder", rclone, Hadoop s3a's
    # directory markers): it marks a folder, it is not an object.
    FOLDER_MARKER = "folder marker"
    # A name no key can have (storage_adapter.keys): a control character, an empty, "." or ".." segment,
    # a trailing "/" on an object with bytes, a backslash, a staging-file suffix, too long, not UTF-8.
    INVALID_KEY = "invalid key"
    # Not a regular file (local): a symlink, a FIFO, a socket or a device below the root.
    NOT_A_FILE = "not a regular file"


@dataclass(frozen=True, slots=True)
class SkippedObject:
    """An entry of the store under an adapter's root that no listing shows, because the adapter cannot
    address it: nothing the adapter writes looks like it (another tool left it there). It is never listed,
    read, renamed or deleted through the adapter, and never shows up under another name; listings report
    it here instead (``StorageAdapter.skipped``, ``DirListing.skipped``).

    ``name`` is the entry's name relative to the root exactly as the store holds it, which is not a valid
    key (print it with ``!r``: it may hold control characters or, on local, lone surrogates for bytes
    that are not UTF-8); ``size`` is its size in bytes where the listing gives one; ``detail`` names the
    broken rule."""

    name: str
    size: int | None
    reason: SkipReason
    detail: str


@dataclass(frozen=True)
class DirListing:
    """Direct children of a prefix: objects directly under it and child prefixes (without trailing '/'),
    and the entries directly under it that listings leave out (:class:`SkippedObject`)."""

    objects: tuple[ObjectInfo, ...]
    prefixes: tuple[str, ...]
    skipped: tuple[SkippedObject, ...] = ()


class Support(enum.Enum):
    """How a backend honours a conditional operation."""

    NATIVE = "native"  # the store itself decides atomically (If-None-Match / If-Match, in-memory lock)
    EMULATED = "emulated"  # the adapter builds the primitive (local: directory flock + atomic rename/link)
    UNSUPPORTED = "unsupported"  # calls raise UnsupportedOperationError


@dataclass(frozen=True)
class Capabilities:
    """What a backend guarantees, declared up front (never probed at call sites).

    ``shared_across_processes`` is False for memory stores: each process has its own.
    ``atomic_rename`` is True when ``rename`` is a single atomic step (local only).
    ``equal_content_equal_token`` is True where two writes of identical bytes can carry the same token
    (S3 single-part ETags are content MD5s): callers doing CAS must make each body unique to avoid ABA.
    ``durable`` is True where an acknowledged mutation survives a power loss (local: fsync in the right
    order, unless opened with ``durable=False``; S3: the service's promise; memory: never).
    ``compatibility_modes`` names the workarounds for known server bugs this adapter was opened with
    (e.g. ``unquoted-if-match``); empty when none. A mode is declared, never silent: the adapter honours
    the contract only as far as the mode's description says.
    ``single_delete`` says which request ``delete(key)`` sends (and so what ``delete_prefix``, one delete
    per listed object, and a copy-then-delete ``rename`` need from the server).
    ``batch_delete`` says how ``delete_many`` deletes: with one multi-object request per batch of keys
    (S3 DeleteObjects, 1000 keys each) or with single deletes a few at a time.
    ``reclaims_orphans`` is True where a writer killed mid-write leaves a leftover no reader sees (local:
    its staging file ``<name>#<12 digits>``) that ``remove_orphans`` reclaims; False where
    ``remove_orphans`` has nothing to reclaim and always returns 0 (memory; S3, whose incomplete multipart
    uploads belong to the bucket's lifecycle rules).
    ``streamed_conditional_write`` says how ``write_if_absent`` / ``write_if_match`` honour a streamed
    body (a file object or an iterable of chunks): UNSUPPORTED refuses it with UnsupportedOperationError
    before any I/O. ``streamed_conditional_limit`` bounds it where the backend sends a conditional write
    as one request (S3: multipart uploads carry no If-None-Match / If-Match on many servers): a stream is
    buffered up to that many bytes into one conditional PUT, and a longer one is refused with
    UnsupportedOperationError, writing nothing. None: no limit (local stages any size; memory buffers).
    """

    backend: str
    write_if_absent: Support
    write_if_match: Support
    atomic_rename: bool
    shared_across_processes: bool
    equal_content_equal_token: bool
    token_semantics: str
    durable: bool
    single_delete: str
    batch_delete: str
    reclaims_orphans: bool
    compatibility_modes: tuple[str, ...] = ()
    streamed_conditional_write: Support = Support.UNSUPPORTED
    streamed_conditional_limit: int | None = None
