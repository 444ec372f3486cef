"""Operations every adapter builds the same way on top of its own primitives.

ObjectStorageAdapter, the peer adapters and CountingAdapter inherit these, so ``read_text``,
``read_if_exists``, ``iter_list`` and ``delete_prefix`` mean the same thing (and cost the same requests)
everywhere. ``list_pages`` and ``delete_many`` are here in their plainest form (one page; one delete per
key), for the peers; ObjectStorageAdapter streams and batches them through its driver.
``storage_adapter.async_adapter.AsyncDerivedOperations`` builds the same four for the async adapter.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from storage_adapter.batch import delete_each
from storage_adapter.errors import NotFoundError, StorageError
from storage_adapter.keys import validate_key, validate_prefix
from storage_adapter.types import ObjectInfo


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
        """The object decoded as text. Raises NotFoundError if absent."""
        return self.read_bytes(key).decode(encoding)

    def read_if_exists(self, key: str) -> bytes | None:
        """The object's bytes, or None if (and only if) it does not exist; every other failure raises."""
        try:
            return self.read_bytes(key)
        except NotFoundError:
            return None

    def list_pages(self, prefix: str = "") -> Iterator[builtins.list[ObjectInfo]]:
        """The listing as pages (the protocol's contract). Here: ``list(prefix)`` as a single page."""
        listing = self.list(prefix)  # now, not on the first next(): a bad prefix raises at the call
        return iter([listing] if listing else [])

    def iter_list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """The objects of ``list_pages(prefix)`` one at a time (the prefix is validated at the call)."""
        pages = self.list_pages(prefix)
        return (info for page in pages for info in page)

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


def root_refused(prefix: str, url: str, backend: str) -> StorageError:
    return StorageError(
        f"delete_prefix needs a non-empty prefix on {url} (refusing to empty the root)",
        key=prefix,
        backend=backend,
    )
