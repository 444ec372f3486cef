"""Tables: immutable Parquet fragments and immutable, numbered table versions.

A table version ``tables/{t}/_versions/{V}.json`` lists every fragment of the table at V and names the
version it was built on (``base_version``) and the operation that wrote it. Versions are written with
``write_if_absent`` at the first free number above the head, so each table's versions are gap-free and
a number, once written, never changes. Which version readers see is decided by the manifest alone.
"""

from __future__ import annotations

import base64
import hashlib
import io
import threading
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from storage_adapter.engine import codec, layout
from storage_adapter.engine.errors import CorruptMetadataError, SchemaMismatchError
from storage_adapter.protocol import StorageAdapter
from storage_adapter.stored_json import StoredJSONError, field

VERSION_FORMAT = "storage-adapter-engine/table-version"


def schema_to_text(schema: pa.Schema) -> str:
    return base64.b64encode(schema.remove_metadata().serialize().to_pybytes()).decode("ascii")


def schema_from_text(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def schema_fingerprint(schema: pa.Schema) -> str:
    """Equal for schemas equal up to metadata (pandas metadata and the like do not matter)."""
    return hashlib.sha256(schema.remove_metadata().serialize().to_pybytes()).hexdigest()[:32]


def check_schema(table: str, expected: pa.Schema, actual: pa.Schema) -> None:
    """Raise SchemaMismatchError naming both schemas unless they are equal up to metadata."""
    if schema_fingerprint(expected) != schema_fingerprint(actual):
        raise SchemaMismatchError(
            f"schema mismatch for table {table!r}: expected {expected.remove_metadata()} "
            f"but got {actual.remove_metadata()}",
            key=layout.table_prefix(table),
        )


@dataclass(frozen=True)
class FragmentRef:
    """One immutable Parquet file of a table, written but not necessarily committed. Picklable."""

    table: str
    key: str
    rows: int
    bytes: int
    schema_fingerprint: str
    written_at: str  # ISO-8601 UTC, the writer's clock: commits refuse fragments older than the grace rule


def write_fragment(adapter: StorageAdapter, table: str, data: pa.Table, fragment_id: str) -> FragmentRef:
    """Write ``data`` as one Parquet file with write_if_absent (the id is a fresh ULID: never taken)."""
    sink = io.BytesIO()
    pq.write_table(data, sink)
    body = sink.getvalue()
    key = layout.data_key(table, fragment_id)
    if adapter.write_if_absent(key, body) is None:
        raise CorruptMetadataError(f"fragment {key} already exists: fragment ids must be fresh", key=key)
    return FragmentRef(table, key, data.num_rows, len(body), schema_fingerprint(data.schema), codec.now_iso())


def read_fragment(adapter: StorageAdapter, key: str) -> pa.Table:
    # ParquetFile, not pq.read_table: the dataset machinery of read_table costs ~4x the CPU on small files
    return pq.ParquetFile(io.BytesIO(adapter.read_bytes(key))).read()


@dataclass(frozen=True)
class TableVersion:
    """The content of one table version file."""

    table: str
    version: int
    base_version: int | None  # the version this one was built on (None for a table's first version)
    operation_id: str
    kind: str  # "create", "append", "overwrite" or "restore"
    schema: str  # schema_to_text form
    fragments: tuple[tuple[str, int, int], ...]  # (key, rows, bytes)

    def encode(self) -> bytes:
        return codec.encode(VERSION_FORMAT, 1, {
            "table": self.table, "version": self.version, "base_version": self.base_version,
            "operation_id": self.operation_id, "kind": self.kind, "schema": self.schema,
            "fragments": [{"key": k, "rows": r, "bytes": b} for k, r, b in self.fragments],
        })  # fmt: skip

    @classmethod
    def decode(cls, raw: bytes, key: str) -> TableVersion:
        doc = codec.decode(raw, key, VERSION_FORMAT, (1,), CorruptMetadataError)
        try:
            return cls(
                table=field(doc, "table", str),
                version=field(doc, "version", int),
                base_version=field(doc, "base_version", int, optional=True),
                operation_id=field(doc, "operation_id", str),
                kind=field(doc, "kind", str),
                schema=field(doc, "schema", str),
                fragments=tuple(
                    (field(f, "key", str), field(f, "rows", int), field(f, "bytes", int))
                    for f in field(doc, "fragments", list)
                ),
            )
        except StoredJSONError as exc:
            raise codec.malformed(key, CorruptMetadataError, exc) from exc


class TableVersionStore:
    """Reads and writes table version files. Versions are immutable, so reads are cached for good."""

    def __init__(self, adapter: StorageAdapter, cache_size: int = 4096) -> None:
        self._adapter = adapter
        self._cache: dict[tuple[str, int], TableVersion] = {}
        self._cache_size = cache_size
        self._cache_lock = threading.Lock()

    def read(self, table: str, version: int) -> TableVersion:
        """The version's content. Raises NotFoundError if it was never written (or vacuumed)."""
        cached = self._cache.get((table, version))
        if cached is not None:
            return cached
        key = layout.version_key(table, version)
        return self._remember(TableVersion.decode(self._adapter.read_bytes(key), key))

    def read_if_exists(self, table: str, version: int) -> TableVersion | None:
        cached = self._cache.get((table, version))
        if cached is not None:
            return cached
        key = layout.version_key(table, version)
        raw = self._adapter.read_if_exists(key)
        return None if raw is None else self._remember(TableVersion.decode(raw, key))

    def write_if_absent(self, content: TableVersion) -> bool:
        """Write the version file; False if that number is taken (another writer's head)."""
        key = layout.version_key(content.table, content.version)
        if self._adapter.write_if_absent(key, content.encode()) is None:
            return False
        self._remember(content)
        return True

    def head(self, table: str, at_least: int) -> int:
        """The highest written version, probing upward from ``at_least`` (a version known to exist).
        Versions are gap-free above any pinned version, so the first missing number ends the probe."""
        version = at_least
        while self._adapter.exists(layout.version_key(table, version + 1)):
            version += 1
        return version

    def write_next(self, make: Callable[[int], TableVersion], table: str, first_candidate: int,
                   on_taken: Callable[[int], object] | None = None) -> TableVersion:  # fmt: skip
        """Write ``make(number)`` at the first free number from ``first_candidate`` up; return it.

        ``on_taken(number)`` is called before trying each number after a lost race (the commit uses it to
        record the new pin in its sidecar before the head can advance to it).
        """
        number = first_candidate
        while True:
            content = make(number)
            if self.write_if_absent(content):
                return content
            number = self.head(table, number) + 1
            if on_taken is not None:
                on_taken(number)

    def _remember(self, content: TableVersion) -> TableVersion:
        # Locked: a commit's Phase B and a read's fetches remember versions from several threads, and two
        # evictions of the same oldest entry would raise KeyError.
        with self._cache_lock:
            if len(self._cache) >= self._cache_size:
                self._cache.pop(next(iter(self._cache)))
            self._cache[(content.table, content.version)] = content
        return content
