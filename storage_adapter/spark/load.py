"""Spark bulk load: executors write a table's Parquet fragments in parallel, the driver commits them once.

Each Spark task receives its partition as Arrow record batches (``DataFrame.mapInArrow``), casts them to
the table's schema and writes immutable fragments through the adapter (``write_if_absent`` on fresh
ULID keys), returning only their references. The driver then publishes every returned reference in one
``Engine.commit_fragments``: the load becomes visible all at once or not at all.

Fragments written by a task attempt that failed, was retried or was speculatively duplicated are never
returned to the driver, so no commit references them: they stay invisible and ``Engine.vacuum`` reclaims
them after its grace period. A failed job commits nothing. Executors reopen the adapter by unpickling it,
so the same code runs on ``local[N]`` and on any cluster master (memory stores are per-process and cannot
be loaded this way: UnsupportedOperationError).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa
from ulid import ULID

from storage_adapter.engine import failpoints
from storage_adapter.engine.commit import Commit
from storage_adapter.engine.engine import Engine
from storage_adapter.engine.errors import SchemaMismatchError
from storage_adapter.engine.tables import FragmentRef, write_fragment
from storage_adapter.errors import UnsupportedOperationError
from storage_adapter.protocol import StorageAdapter

# What each task returns to the driver: one row per fragment it wrote (FragmentRef's fields).
_REF_FIELDS = [f.name for f in dataclasses.fields(FragmentRef) if f.name != "partition"]  # unpartitioned only
_REF_SCHEMA = ", ".join(f"{name} {'long' if name in ('rows', 'bytes') else 'string'}" for name in _REF_FIELDS)


@dataclass(frozen=True)
class BulkLoad:
    """The outcome of :func:`bulk_load`: the commit and the fragments it published."""

    commit: Commit
    fragments: tuple[FragmentRef, ...]

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.fragments)

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.fragments)


@dataclass(frozen=True)
class _FragmentWriter:
    """The per-partition function shipped to executors (pickled with the adapter's config)."""

    adapter: StorageAdapter
    table: str
    schema: pa.Schema
    max_rows_per_fragment: int

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # No engine per task: the driver read the schema once and shipped it; the commit checks the rest.
        pending: list[pa.Table] = []
        pending_rows = 0
        for batch in batches:
            pending.append(self._conform(batch))
            pending_rows += batch.num_rows
            if pending_rows >= self.max_rows_per_fragment:
                yield self._flush(pending)
                pending, pending_rows = [], 0
        if pending_rows:
            yield self._flush(pending)

    def _conform(self, batch: pa.RecordBatch) -> pa.Table:
        try:
            return pa.Table.from_batches([batch]).cast(self.schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
            raise SchemaMismatchError(
                f"bulk load into {self.table!r}: rows do not fit the table schema {self.schema}: {exc}",
                key=self.table,
            ) from exc

    def _flush(self, parts: list[pa.Table]) -> pa.RecordBatch:
        ref = write_fragment(self.adapter, self.table, pa.concat_tables(parts), str(ULID()))
        failpoints.failpoint("spark_load.after_fragment")
        return pa.RecordBatch.from_pylist([{name: getattr(ref, name) for name in _REF_FIELDS}])


def bulk_load(
    engine: Engine,
    table: str,
    frame: Any,
    *,
    mode: str = "append",
    expected_version: int | None = None,
    idempotency_key: str | None = None,
    actor: str | None = None,
    max_rows_per_fragment: int = 1_000_000,
    key_issued_at: datetime | None = None,
) -> BulkLoad:
    """Load the Spark DataFrame ``frame`` into ``table`` as one commit (``append`` or ``overwrite``).

    Column names must equal the table's, in order; each column must cast to the table's type. An
    ``idempotency_key`` that already landed returns that commit (``replayed``, no fragments) without
    running the job (``key_issued_at``: as for ``Engine.commit_fragments``). Raises, with nothing visible: UnknownTableError, CommitConflictError for a stale
    ``expected_version`` and SchemaMismatchError for a column-name mismatch (all before any task runs),
    the commit errors of ``Engine.commit_fragments`` (CommitConflictError, ...),
    and Spark's job failure if a task exhausts its retries.
    """
    if not engine.adapter.capabilities.shared_across_processes:
        raise UnsupportedOperationError(
            f"bulk load needs storage that Spark executors can reach; {engine.adapter.url} is per-process",
            key=table,
            backend=engine.adapter.capabilities.backend,
        )
    # Before any task runs: a landed key replays, a stale expected_version or unknown table fails.
    replayed = engine.precheck([table], mode, expected_version, idempotency_key, key_issued_at)
    if replayed is not None:
        return BulkLoad(replayed, ())
    schema = engine.snapshot().schema(table)
    if list(frame.columns) != schema.names:
        raise SchemaMismatchError(
            f"bulk load into {table!r}: columns {list(frame.columns)} do not match the table's {schema.names}",
            key=table,
        )
    writer = _FragmentWriter(engine.adapter, table, schema, max_rows_per_fragment)
    rows = frame.mapInArrow(writer, _REF_SCHEMA).collect()
    fragments = tuple(FragmentRef(**row.asDict()) for row in rows)
    commit = engine.commit_fragments(
        {table: fragments},
        mode=mode,
        expected_version=expected_version,
        idempotency_key=idempotency_key,
        actor=actor,
        key_issued_at=key_issued_at,
    )
    return BulkLoad(commit, fragments)
