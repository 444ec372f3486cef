"""The local backend: obstore's LocalStore for reads and listings, LocalMutator for every mutation.

object_store's LocalFileSystem cannot do a conditional update, so all local mutations (not only CAS)
go through :class:`~storage_adapter.local_mutation.LocalMutator`, which serializes them per directory
across threads and processes. Mixing its mutations with LocalStore's own puts would let a plain write
slip between a CAS's compare and its replace.
"""

from __future__ import annotations

from storage_adapter.config import AdapterConfig
from storage_adapter.local_mutation import LocalMutator
from storage_adapter.obstore_backend import ObstoreBackend, local_store


class LocalBackend(ObstoreBackend):
    def __init__(self, config: AdapterConfig) -> None:
        super().__init__(config, local_store)
        self._mutator = LocalMutator(config.location)

    def put(self, key: str, data: bytes) -> str:
        with self.translated(key, "write"):
            return self._mutator.write(self.path(key), data)

    def put_if_absent(self, key: str, data: bytes) -> str | None:
        with self.translated(key, "write_if_absent"):
            return self._mutator.write_if_absent(self.path(key), data)

    def put_if_match(self, key: str, data: bytes, token: str) -> str | None:
        with self.translated(key, "write_if_match"):
            return self._mutator.write_if_match(self.path(key), data, token)

    def delete(self, key: str) -> None:
        with self.translated(key, "delete"):
            self._mutator.delete(self.path(key))

    def rename(self, src: str, dst: str) -> None:
        with self.translated(src, f"rename to {dst!r}"):
            self._mutator.rename(self.path(src), self.path(dst))

    def remove_orphans(self, min_age_s: float) -> int:
        with self.translated("", "remove_orphans"):
            return self._mutator.remove_orphans(min_age_s)
