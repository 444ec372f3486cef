"""Writing below an adapter's root the way another tool would, for the stores obstore serves: the
:class:`~storage_adapter.driver.ForeignWriter` of the memory, S3 and Azure backends and of a user's own
store. S3 and Azure write through the raw client (:mod:`storage_adapter.obstore_driver.raw_listing`),
which sends a name byte for byte (obstore would parse it into a path, refusing or renaming the names
other tools leave: ``a\\tb``, ``dir/``); any other store through obstore itself, which holds every name
its path type can express (the only names such a store can ever hold)."""

from __future__ import annotations

from typing import Any

import obstore

from storage_adapter.config import AdapterConfig
from storage_adapter.driver import ForeignWriter
from storage_adapter.errors import UnsupportedOperationError
from storage_adapter.keys import join_key
from storage_adapter.obstore_driver.raw_listing import RawClient, raw_client


class _ObstoreWriter:
    """Puts and deletes through obstore: names its path type cannot express are refused."""

    def __init__(self, store: Any, prefix: str, backend: str) -> None:
        self._store, self._prefix, self._backend = store, prefix, backend

    def put(self, name: str, data: bytes) -> None:
        if name.startswith("/") or name.endswith("/"):  # its path type would drop the "/" silently
            raise UnsupportedOperationError(
                f"{self._backend} cannot hold {name!r}", key=name, backend=self._backend
            )
        try:
            obstore.put(self._store, join_key(self._prefix, name), data)
        except ValueError as exc:  # obstore's path parser: this store cannot hold the name
            raise UnsupportedOperationError(
                f"{self._backend} cannot hold {name!r}", key=name, backend=self._backend
            ) from exc

    def remove(self, name: str) -> None:
        try:
            obstore.delete(self._store, join_key(self._prefix, name))
        except (ValueError, TypeError, FileNotFoundError):  # a name it cannot hold, or gone already
            return

    def held(self) -> dict[str, int]:
        cut = len(self._prefix) + 1 if self._prefix else 0
        return {
            str(meta["path"])[cut:]: int(meta["size"])
            for batch in obstore.list(self._store, self._prefix or None)
            for meta in batch
        }


class _RawWriter:
    """Puts and deletes by exact name through the raw client."""

    def __init__(self, client: RawClient, base: str) -> None:
        self._client, self._base = client, base

    def put(self, name: str, data: bytes) -> None:
        self._client.put(f"{self._base}/{name}" if self._base else name, data)

    def remove(self, name: str) -> None:
        self._client.delete(f"{self._base}/{name}" if self._base else name)

    def held(self) -> dict[str, int]:
        cut = len(self._base) + 1 if self._base else 0
        pages = self._client.pages(f"{self._base}/" if self._base else "")
        return {entry.path[cut:]: entry.size for page in pages for entry in page.entries}


def store_writer(store: Any, config: AdapterConfig, backend: str) -> ForeignWriter:
    """The foreign writer below the root of ``config`` in ``store`` (the adapter's own store, or the
    user's it wraps)."""
    client = raw_client(store, backend=backend)
    if client is None:
        return _ObstoreWriter(store, config.prefix, backend)
    base = "/".join(part for part in (str(store.prefix or "").strip("/"), config.prefix) if part)
    return _RawWriter(client, base)
