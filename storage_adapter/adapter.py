"""ObjectStorageAdapter: one API over local, S3 and in-memory object storage, with declared guarantees."""

from __future__ import annotations

import builtins
import itertools
import operator
import re
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from storage_adapter.builtin_backends import store_config
from storage_adapter.config import AdapterConfig, parse_url
from storage_adapter.derived import DerivedOperations, validate_min_age, validate_start_after
from storage_adapter.driver import CREATE, OVERWRITE, Driver, PutBody, PutMode
from storage_adapter.errors import (
    ConfigurationError,
    InvalidArgumentError,
    InvalidTokenError,
    NotFoundError,
    StorageError,
    UnsupportedOperationError,
)
from storage_adapter.keys import validate_key, validate_prefix
from storage_adapter.listing import Listed, sort_listed
from storage_adapter.redaction import Redactor
from storage_adapter.streams import Body, BytesLike, ObjectReader, body_of, check_ranges
from storage_adapter.types import Capabilities, DirListing, ObjectInfo, SkippedObject, Support, Versioned

if TYPE_CHECKING:
    from fsspec.spec import AbstractFileSystem

# The protocols fsspec knows the adapter's filesystem by (storage_adapter.fsspec_filesystem registers
# them, and the installed package declares them as fsspec.specs entry points).
FSSPEC_PROTOCOLS = ("sa", "storage-adapter")
_BY_KEY = operator.attrgetter("key")
_BY_NAME = operator.attrgetter("name")
# What a token can be: an ETag's characters (RFC 9110's etagc: visible ASCII, no space), every backend's
# (S3's and local's are quoted hex, memory's a counter). A control character or a non-ASCII one could only
# reach a request header as garbage (obstore panics on it), and bounded so no token is a megabyte header.
_TOKEN = re.compile(r"[\x21-\x7e]{1,1024}")


class AdapterCore:
    """What the sync adapter and its async twin share: the configuration, the driver built from it, the
    identity (URL, equality, pickling) and the checks every call makes before any I/O.

    Every call into the driver runs under the config's :class:`~storage_adapter.redaction.Redactor`, so no
    error leaving the adapter (nor any exception chained to it) quotes a secret option's value, whatever
    the driver or the library below it put in its messages.
    """

    def __init__(self, config: AdapterConfig) -> None:
        self._config = config
        self._spec = config.spec
        self._scrubbed = Redactor(config.secret_values())
        with self._scrubbed:
            self._driver: Driver = self._spec.driver(config)
        self._capabilities = self._spec.capabilities_for(config)

    @property
    def config(self) -> AdapterConfig:
        return self._config

    @property
    def url(self) -> str:
        return self._config.url

    @property
    def backend(self) -> str:
        # The declared name: the registered one, except over a user's store (its declared capabilities').
        return self._capabilities.backend

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._config,))

    def _identity(self) -> tuple[str, tuple[tuple[str, Any], ...]]:
        # The URL, not the config: file:///r with child "p" and file:///r/p address the same objects.
        return (self._config.url, self._config.options)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._identity() == self._identity()

    def __hash__(self) -> int:
        return hash(self._identity())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"

    def _key(self, key: object) -> str:
        return validate_key(key, self.backend)

    def _prefix(self, prefix: object) -> str:
        return validate_prefix(prefix, self.backend)

    def _write_args(self, key: object, data: Body) -> tuple[str, PutBody]:
        key = self._key(key)
        return key, body_of(data, key, self.backend)

    def _written(self, key: str, token: str | None) -> str:
        """The token an unconditional put returned; a driver that returned none broke its contract."""
        if token is None:
            raise StorageError(
                f"write {key!r} on {self.backend}: the driver returned no token for an unconditional put",
                key=key,
                backend=self.backend,
            )
        return token

    def _conditional_args(self, key: object, data: Body, method: str) -> tuple[str, PutBody]:
        key = self._key(key)
        return key, self._conditional_body(key, data, method)

    def _conditional_body(self, key: str, data: Body, method: str) -> PutBody:
        """The body of a conditional write; a stream is refused before any I/O where the backend declares
        streamed conditional writes unsupported."""
        body = body_of(data, key, self.backend)
        if (
            not isinstance(body, bytes)
            and self._capabilities.streamed_conditional_write is Support.UNSUPPORTED
        ):
            raise UnsupportedOperationError(
                f"{method} of {key!r} on {self.backend}: a streamed body cannot be written conditionally "
                "here (capabilities.streamed_conditional_write); pass bytes",
                key=key,
                backend=self.backend,
            )
        return body

    def _match_args(
        self, key: object, data: Body, token: object
    ) -> tuple[str, bytes | Iterator[BytesLike], str]:
        key = self._key(key)
        if not isinstance(token, str) or not _TOKEN.fullmatch(token) or token == "*":
            raise InvalidTokenError(
                f"write_if_match of {key!r} on {self.backend}: the token must be a str from read_versioned, "
                f"write or a listing, not {token!r:.80}",
                key=key,
                backend=self.backend,
            )
        return key, self._conditional_body(key, data, "write_if_match"), token

    def _unique_keys(self, keys: Iterable[str]) -> builtins.list[str]:
        if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
            raise InvalidArgumentError(
                f"delete_many on {self.backend} takes an iterable of keys, not {type(keys).__name__}",
                backend=self.backend,
            )
        return builtins.list(dict.fromkeys(self._key(key) for key in keys))

    @staticmethod
    def _sorted(infos: Iterable[ObjectInfo]) -> builtins.list[ObjectInfo]:
        """A listing in key order (``list``'s, sync and async)."""
        return sorted(infos, key=_BY_KEY)

    @staticmethod
    def _dir_listing(entries: Iterable[Listed], prefixes: Iterable[str]) -> DirListing:
        """A driver's ``list_dir`` by the listing rule: the child prefixes it reports hold an object."""
        objects, skipped = sort_listed(entries)
        return DirListing(
            objects=tuple(sorted(objects, key=_BY_KEY)),
            prefixes=tuple(sorted(prefixes)),
            skipped=tuple(sorted(skipped, key=_BY_NAME)),
        )


class ObjectStorageAdapter(AdapterCore, DerivedOperations):
    """The :class:`~storage_adapter.protocol.StorageAdapter` over any registered backend: validates keys,
    then hands each call to the backend's driver (:mod:`storage_adapter.registry`). Every guarantee is
    the protocol's, stated there and checked by the contract suite (``contract_tests``).

    Adapters pickle (reopened from their config on the other side) and compare equal when built from the
    same configuration. Use :func:`open_adapter` to build one; its async twin is
    :class:`~storage_adapter.async_adapter.AsyncObjectStorageAdapter`.
    """

    def child(self, prefix: str) -> ObjectStorageAdapter:
        """An adapter rooted at ``prefix`` below this one (same store, same options)."""
        return ObjectStorageAdapter(self._config.child(prefix))

    def to_fsspec(self, block_size: int | None = None, cache_type: str | None = None) -> AbstractFileSystem:
        """This adapter as an fsspec filesystem (paths are its keys; needs fsspec, the ``peers`` extra),
        for pyarrow, pandas, DuckDB and the like: see :mod:`storage_adapter.fsspec_filesystem`."""
        # The face sits above the adapter (it opens adapters from URLs), so the adapter finds it the way
        # any fsspec user does: by its registered protocol (the package's fsspec.specs entry point).
        import fsspec

        face = fsspec.get_filesystem_class(FSSPEC_PROTOCOLS[0])
        return face(self, block_size=block_size, cache_type=cache_type)

    # -- reads ----------------------------------------------------------------------------------------
    def read_bytes(self, key: str) -> bytes:
        """The object's bytes. Raises NotFoundError if absent."""
        key = self._key(key)
        with self._scrubbed:
            return self._driver.get(key)

    def read_versioned(self, key: str) -> Versioned:
        """The object's bytes with the token of exactly those bytes. Raises NotFoundError if absent."""
        key = self._key(key)
        with self._scrubbed:
            data, token = self._driver.get_versioned(key)
        return Versioned(data=data, token=token)

    def read_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` (``end`` clipped to the object); InvalidRangeError before any I/O for a
        bad range, and naming the size for a start past the end. One ranged GET on S3."""
        return self.read_ranges(key, [(start, end)])[0]

    def read_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> builtins.list[bytes]:
        """Each range's bytes, all from one version of the object (ObjectChangedError otherwise)."""
        key = self._key(key)
        checked = check_ranges(ranges, key, self.backend)
        with self._scrubbed:
            return self._driver.get_ranges(key, checked)

    def open_reader(self, key: str) -> ObjectReader:
        """A seekable reader over the object's current version, read lazily by range."""
        key = self._key(key)
        with self._scrubbed:
            return ObjectReader(self._driver.open_source(key))

    def read_buffer(self, key: str) -> memoryview:
        """The object's bytes as a read-only memoryview, without a copy into ``bytes``."""
        key = self._key(key)
        with self._scrubbed:
            return self._driver.get_buffer(key)

    def exists(self, key: str) -> bool:
        key = self._key(key)
        try:
            with self._scrubbed:
                self._driver.head_token(key)
        except NotFoundError:
            return False
        return True

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        """Every object under ``prefix`` (recursive), sorted by key. ``a/b`` never lists ``a/bc``."""
        return self._sorted(itertools.chain.from_iterable(self.list_pages(prefix)))

    def list_pages(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> Iterator[builtins.list[ObjectInfo]]:
        """``list(prefix)`` in pages of at most 1000 objects, each fetched when the previous one is taken
        (one request per page on S3), resuming after the key ``start_after`` if given. The arguments are
        validated now, before any I/O."""
        prefix = self._prefix(prefix)
        after = validate_start_after(start_after, self.backend)
        return self._pages(self._driver.list_pages(prefix, after))

    def _pages(self, pages: Generator[Sequence[Listed], None, None]) -> Iterator[builtins.list[ObjectInfo]]:
        """The objects of the driver's ``pages`` by the listing rule (storage_adapter.listing), page by
        page; a page left empty by it is not yielded."""
        for objects, _ in self._sorted_pages(pages):
            if objects:
                yield objects

    def _sorted_pages(
        self, pages: Generator[Sequence[Listed], None, None]
    ) -> Iterator[tuple[builtins.list[ObjectInfo], builtins.list[SkippedObject]]]:
        # The driver's I/O happens inside each next(), so each one runs under the redactor.
        try:
            while True:
                with self._scrubbed:
                    page = next(pages, None)
                if page is None:
                    return
                yield sort_listed(page)
        finally:
            with self._scrubbed:
                pages.close()  # releases what the driver holds open (local: directory descriptors)

    def entry_pages(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> Iterator[builtins.list[ObjectInfo | SkippedObject]]:
        """``list_pages`` with each page's skipped entries after its objects (one pass); the arguments are
        validated now, before any I/O."""
        prefix = self._prefix(prefix)
        after = validate_start_after(start_after, self.backend)
        return self._entry_pages(self._driver.list_pages(prefix, after))

    def _entry_pages(
        self, pages: Generator[Sequence[Listed], None, None]
    ) -> Iterator[builtins.list[ObjectInfo | SkippedObject]]:
        for objects, skipped in self._sorted_pages(pages):
            if objects or skipped:
                yield [*objects, *skipped]

    def list_dir(self, prefix: str = "") -> DirListing:
        """Objects directly under ``prefix`` and its child prefixes (those holding at least one object),
        each sorted; ``skipped``: the entries directly under ``prefix`` listings leave out. On S3 and
        Azure the delimited list and, beside it, the first page of the recursive listing, which confirms
        the prefixes (a folder marker or a directory SeaweedFS keeps after its last object makes none),
        plus a listing per prefix beyond that page, run concurrently (docs/listing.md)."""
        prefix = self._prefix(prefix)
        with self._scrubbed:
            entries, prefixes = self._driver.list_dir(prefix)
        return self._dir_listing(entries, prefixes)

    # -- mutations ------------------------------------------------------------------------------------

    def write(self, key: str, data: Body) -> str:
        """Atomically replace (or create) the object; return its new token. ``data``: bytes, str, a binary
        file object or an iterable of chunks (streamed: visible only complete, nothing if it fails)."""
        key, body = self._write_args(key, data)
        with self._scrubbed:
            return self._written(key, self._driver.put(key, body, OVERWRITE))

    def write_if_absent(self, key: str, data: Body) -> str | None:
        """Create the object only if absent. Exactly one of any number of concurrent callers wins and gets
        the new object's token (as ``write`` returns it); the winner's bytes are fully readable when it
        returns; losers get None and change nothing. Streams: see ``capabilities.streamed_conditional_write``."""
        key, body = self._conditional_args(key, data, "write_if_absent")
        with self._scrubbed:
            return self._driver.put(key, body, CREATE)

    def write_if_match(self, key: str, data: Body, token: str) -> str | None:
        """Compare-and-swap: replace the object only if its current token is ``token``.

        Returns the new token, or None when the object changed since ``token`` or is absent (nothing is
        written then). Linearizable with every other mutation of the key on every backend.
        """
        key, body, token = self._match_args(key, data, token)
        with self._scrubbed:
            return self._driver.put(key, body, PutMode.match(token))

    def delete(self, key: str) -> None:
        """Delete the object. Idempotent: deleting an absent key is not an error."""
        key = self._key(key)
        with self._scrubbed:
            self._driver.delete(key)

    def delete_many(self, keys: Iterable[str]) -> int:
        """Delete every key (missing ones are fine); return how many distinct keys. All keys are validated
        before any I/O. One multi-object delete per 1000 keys where the backend has it, single deletes 8
        at a time elsewhere (``capabilities.batch_delete``); BatchDeleteError names every key not
        confirmed deleted."""
        unique = self._unique_keys(keys)
        with self._scrubbed:
            self._driver.delete_many(unique)
        return len(unique)

    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst``, replacing ``dst``. Raises NotFoundError if ``src`` is absent.

        Atomic on local (one ``rename(2)``); on S3 and memory it is a copy followed by a delete (see
        ``capabilities.atomic_rename``): a crash in between leaves both. Onto itself (``src == dst``) it
        only checks that the object exists: bytes and token stay as they are.
        """
        src, dst = self._key(src), self._key(dst)
        with self._scrubbed:
            if src == dst:
                # Settled here, once for every driver: a copy-then-delete would delete the object
                # (memory), S3 servers refuse to copy an object onto itself, and a local rewrite would
                # change its token.
                self._driver.head_token(src)
                return
            self._driver.rename(src, dst)

    def remove_orphans(self, min_age_s: float = 3600.0) -> int:
        """Remove crash leftovers older than ``min_age_s``: staged local files that were never published.

        They are never listed or read, so this only reclaims space. Returns the count; always 0 where
        ``capabilities.reclaims_orphans`` is False.
        """
        min_age_s = validate_min_age(min_age_s, self.backend)
        with self._scrubbed:
            return self._driver.remove_orphans(min_age_s)


def opened_config(
    url: str | None, store: object, capabilities: object, options: Mapping[str, Any]
) -> AdapterConfig:
    """The configuration :func:`open_adapter` (and its async twin) opens: from ``url`` and ``options``, or
    over a user's obstore ``store`` with its declared ``capabilities`` (exactly one of url and store)."""
    if store is None:
        if capabilities is not None:
            raise ConfigurationError(
                f"capabilities are declared only for a wrapped store (open_adapter(store=...)); the backend "
                f"of {url!r} declares its own",
                key=str(url),
            )
        return parse_url(url, options)  # type: ignore[arg-type]  # parse_url refuses a non-str itself
    if url is not None:
        raise ConfigurationError("open_adapter takes a URL or a store=, not both", key=str(url))
    return store_config(store, capabilities, options)


def open_adapter(
    url: str | None = None, *, store: Any = None, capabilities: Any = None, **options: Any
) -> ObjectStorageAdapter:
    """Open an adapter for ``url``: ``file:///abs/root`` (or ``/abs/root``), ``s3://bucket/prefix`` or
    ``memory://name``. Raises ConfigurationError for an unknown scheme or option.

    Or wrap an existing obstore store (``MemoryStore``, ``LocalStore``, ``S3Store``, ...):
    ``open_adapter(store=store, capabilities=Capabilities(...))``. The capabilities are required (a
    ConfigurationError without them) and are the caller's declaration of what the store guarantees: run
    the contract suite to check it. Keys, errors and redaction (the store's credentials included) are the
    adapter's as for any URL; the store's semantics are obstore's, except a ``LocalStore``'s: its
    directory is served by the ``file://`` backend's own driver (object_store's local store has no
    compare-and-swap and follows symlinks), so it keeps the local backend's confinement, CAS and fsync.
    """
    return ObjectStorageAdapter(opened_config(url, store, capabilities, options))
