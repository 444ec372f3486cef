"""Operations every adapter builds the same way on top of its own primitives.

ObjectStorageAdapter, the peer adapters and CountingAdapter inherit these, so ``read_text``,
``read_if_exists``, ``iter_list`` and ``delete_prefix`` mean the same thing (and cost the same requests)
everywhere. ``list_pages`` and ``delete_many`` are here in their plainest form (one page; one delete per
key), for the peers; ObjectStorageAdapter streams and batches them through its driver.
``storage_adapter.async_adapter.AsyncDerivedOperations`` builds the same four for the async adapter.
"""

from __future__ import annotations

import builtins
import codecs
import contextlib
import itertools
import math
import operator
import sys
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, cast

from storage_adapter.batch import delete_each
from storage_adapter.errors import InvalidArgumentError, InvalidKeyError, NotFoundError
from storage_adapter.keys import validate_key, validate_prefix
from storage_adapter.types import ObjectInfo, SkippedObject


def validate_start_after(start_after: object, backend: str) -> str | None:
    """A listing's resume point: None, or a valid key (InvalidKeyError otherwise, before any I/O)."""
    return None if start_after is None else validate_key(start_after, backend)


def validate_limit(limit: object, backend: str) -> int | None:
    """A listing's ``limit``: None, or an int >= 0 (not a bool); InvalidArgumentError otherwise."""
    if limit is None or (isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0):
        return limit
    raise InvalidArgumentError(
        f"listing limit on {backend} must be None or an int >= 0, not {limit!r}", backend=backend
    )


def validate_encoding(encoding: object, backend: str) -> str:
    """``read_text``'s ``encoding``: the name of a text codec Python knows; InvalidArgumentError otherwise."""
    try:
        if isinstance(encoding, str) and codecs.lookup(encoding)._is_text_encoding:
            return encoding
    except LookupError:
        pass
    raise InvalidArgumentError(
        f"read_text on {backend}: {encoding!r} is not the name of a text encoding", backend=backend
    )


def validate_min_age(min_age_s: object, backend: str) -> float:
    """``remove_orphans``'s ``min_age_s``: a finite number >= 0 (not a bool); InvalidArgumentError
    otherwise."""
    seconds = math.nan
    if isinstance(min_age_s, (int, float)) and not isinstance(min_age_s, bool):
        with contextlib.suppress(OverflowError):  # an int past any float
            seconds = float(min_age_s)
    if math.isfinite(seconds) and seconds >= 0:
        return seconds
    raise InvalidArgumentError(
        f"remove_orphans on {backend}: min_age_s must be a finite number >= 0, not {min_age_s!r}",
        backend=backend,
    )


def taken(pages: Iterator[builtins.list[ObjectInfo]], limit: int | None) -> Iterator[ObjectInfo]:
    """The objects of ``pages`` one at a time, at most ``limit`` of them: no page is fetched once the
    limit is reached, and ``pages`` is closed when this stops (a local listing holds directory
    descriptors until then)."""
    try:
        if limit != 0:
            # islice takes no stop past sys.maxsize; no listing holds that many objects.
            stop = None if limit is None else min(limit, sys.maxsize)
            yield from itertools.islice(itertools.chain.from_iterable(pages), stop)
    finally:
        close = getattr(pages, "close", None)
        if close is not None:
            close()


class DerivedOperations:
    """Mixin: needs ``read_bytes``, ``list``, ``delete``, ``backend`` and ``url`` from the class (defined
    there or, for wrappers, reached through ``__getattr__``)."""

    if TYPE_CHECKING:  # what the class provides; declared for the type checker only

        @property
        def backend(self) -> str: ...
        @property
        def url(self) -> str: ...
        def read_bytes(self, key: str) -> bytes: ...
        def list(self, prefix: str = "") -> builtins.list[ObjectInfo]: ...
        def delete(self, key: str) -> None: ...

    def read_text(self, key: str, encoding: str = "utf-8") -> str:
        """The object decoded as text. Raises NotFoundError if absent, InvalidArgumentError (before any I/O)
        for an unknown encoding, UnicodeDecodeError if the bytes are not text in it."""
        encoding = validate_encoding(encoding, self.backend)
        return self.read_bytes(key).decode(encoding)

    def read_if_exists(self, key: str) -> bytes | None:
        """The object's bytes, or None if (and only if) it does not exist; every other failure raises."""
        try:
            return self.read_bytes(key)
        except NotFoundError:
            return None

    def list_pages(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> Iterator[builtins.list[ObjectInfo]]:
        """The listing as pages (the protocol's contract). Here: ``list(prefix)`` as a single page, from
        the first key after ``start_after`` (``list`` is in key order)."""
        after = validate_start_after(start_after, self.backend)
        listing = self.list(prefix)  # now, not on the first next(): a bad prefix raises at the call
        if after is not None:
            listing = [info for info in listing if info.key > after]
        return iter([listing] if listing else [])

    def iter_list(
        self, prefix: str = "", *, start_after: str | None = None, limit: int | None = None
    ) -> Iterator[ObjectInfo]:
        """The objects of ``list_pages(prefix, start_after=...)`` one at a time, at most ``limit`` of them
        (every argument is validated at the call, before any I/O)."""
        limit = validate_limit(limit, self.backend)
        return taken(self.list_pages(prefix, start_after=start_after), limit)

    def entry_pages(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> Iterator[builtins.list[ObjectInfo | SkippedObject]]:
        """The listing's pages with what they leave out (the protocol's contract). Here: ``list_pages``,
        for a store that reports every entry it holds as an object (a wrapper over an adapter passes its
        inner adapter's own)."""
        pages = self.list_pages(prefix, start_after=start_after)
        return cast("Iterator[builtins.list[ObjectInfo | SkippedObject]]", iter(pages))

    def skipped(self, prefix: str = "") -> builtins.list[SkippedObject]:
        """The skipped entries of ``entry_pages(prefix)``, by name."""
        entries = itertools.chain.from_iterable(self.entry_pages(prefix))
        return sorted((e for e in entries if isinstance(e, SkippedObject)), key=operator.attrgetter("name"))

    def delete_many(self, keys: Iterable[str]) -> int:
        """Delete every key (the protocol's contract); every key validated before any I/O. Here: one
        ``delete`` per key, in turn."""
        if isinstance(keys, str):
            raise TypeError("delete_many takes an iterable of keys, not one str")
        unique = builtins.list(dict.fromkeys(validate_key(key, self.backend) for key in keys))
        delete_each(self.delete, unique, self.backend, workers=1)
        return len(unique)

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix`` (a non-empty prefix); return how many were deleted.

        Not atomic: one listing, then one ``delete`` per object.
        """
        if not validate_prefix(prefix, self.backend):
            raise root_refused(prefix, self.url, self.backend)
        infos = self.list(prefix)
        for info in infos:
            self.delete(info.key)
        return len(infos)


def root_refused(prefix: str, url: str, backend: str) -> InvalidKeyError:
    """``delete_prefix``'s refusal of the root (``""``, ``"/"``): an invalid prefix for it, before any I/O."""
    return InvalidKeyError(
        f"delete_prefix needs a non-empty prefix on {url} ({backend}): refusing to empty the root",
        key=prefix,
        backend=backend,
    )
