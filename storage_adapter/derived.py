"""Operations every adapter builds the same way on top of its own primitives.

ObjectStorageAdapter, the peer adapters and CountingAdapter inherit these, so ``read_text``,
``read_if_exists`` and ``delete_prefix`` mean the same thing (and cost the same requests) everywhere.
"""

from __future__ import annotations

from typing import Any

from storage_adapter.errors import NotFoundError, StorageError
from storage_adapter.keys import validate_prefix


class DerivedOperations:
    """Mixin: needs ``read_bytes``, ``list``, ``delete``, ``backend`` and ``url`` from the class."""

    backend: str
    url: str
    read_bytes: Any
    list: Any
    delete: Any

    def read_text(self, key: str, encoding: str = "utf-8") -> str:
        """The object decoded as text. Raises NotFoundError if absent."""
        return self.read_bytes(key).decode(encoding)  # type: ignore[no-any-return]

    def read_if_exists(self, key: str) -> bytes | None:
        """The object's bytes, or None if (and only if) it does not exist; every other failure raises."""
        try:
            return self.read_bytes(key)  # type: ignore[no-any-return]
        except NotFoundError:
            return None

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix`` (a non-empty prefix); return how many were deleted.

        Not atomic: one listing, then one ``delete`` per object.
        """
        if not validate_prefix(prefix, self.backend):
            raise StorageError(
                f"delete_prefix needs a non-empty prefix on {self.url} (refusing to empty the root)",
                key=prefix,
                backend=self.backend,
            )
        infos = self.list(prefix)
        for info in infos:
            self.delete(info.key)
        return len(infos)
