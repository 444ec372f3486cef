"""Spark loads: executors write a table's Parquet fragments in parallel, the driver commits them once.

One task function (:class:`FragmentTask`) serves every Spark write path: the ``storage_adapter`` data
source (``df.write.format(...)``, streaming included) and the functions here, :func:`write_tables` (any
number of DataFrames into their tables, ONE commit) and :func:`bulk_load` (one table). A task receives its
partition as Arrow record batches, makes them fit the table's schema (``conform``: by column name, safe
widening only unless asked otherwise), and writes them through the adapter as immutable fragments
(fresh keys, one fragment per partition value combination and per ``max_rows_per_fragment`` rows, each
encoded and written while its rows arrive: ``tables.FragmentWriter``), returning only their references. The driver publishes every reference it
receives in one ``Engine.commit_fragments``: the load becomes visible all at once or not at all.

Fragments written by a task attempt that failed, was retried or was speculatively duplicated are never
returned to the driver, so no commit references them: they stay invisible and ``Engine.vacuum`` reclaims
them after its grace period. A failed job commits nothing. Rows that do not fit the table's schema do not
fail the task (Spark would retry a deterministic failure, then report a raw ``PythonException``): the
task stops writing and reports the column and a sample value, and the driver raises SchemaMismatchError
with nothing published. Executors reopen the adapter by unpickling it, so the same code runs on
``local[N]`` and on any cluster master (memory stores are per-process: UnsupportedOperationError).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import pickle
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa

from storage_adapter.adapter import ObjectStorageAdapter
from storage_adapter.engine import failpoints, layout
from storage_adapter.engine.commit import Commit
from storage_adapter.engine.engine import Engine
from storage_adapter.engine.errors import SchemaMismatchError, TableExistsError
from storage_adapter.engine.request import CommitMode, CommitRequest
from storage_adapter.engine.schema import (
    Partition,
    PartitionFilter,
    check_partition_by,
    conform,
    fragment_key,
    split_by_partition,
)
from storage_adapter.engine.tables import FragmentRef, FragmentWriter
from storage_adapter.errors import ConfigurationError, StorageError, UnsupportedOperationError
from storage_adapter.protocol import StorageAdapter
from storage_adapter.registry import AdapterConfig

log = logging.getLogger(__name__)

DEFAULT_MAX_ROWS_PER_FRAGMENT = 1_000_000


class SparkInputError(StorageError, TypeError):
    """A Spark load was given something that is not a Spark DataFrame (a pandas DataFrame, an Arrow
    table, ...). Raised before anything is written."""


@dataclass(frozen=True)
class TaskResult:
    """What one task reports to the driver: the fragments it wrote, or why its rows do not fit (then it
    stopped, and what it wrote before is an orphan). Picklable, small."""

    fragments: tuple[FragmentRef, ...] = ()
    mismatch: str | None = None


# A task encodes its rows into row groups of about this much Arrow data as they arrive (smaller than the
# engine's 16 MiB, so that a task's last rows, encoded after its input ends, are a small part of its work),
# and holds at most about TASK_HELD_BYTES (rows pending, encoded bytes not yet written) before it finishes
# its largest open fragment (a task writing many partitions at once).
TASK_ROW_GROUP_BYTES = 4 * 1024 * 1024
TASK_HELD_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class FragmentTask:
    """The per-partition work shipped to executors (pickled with the adapter's config and the table's
    schema and partition columns, read once on the driver: a task makes no metadata request)."""

    adapter: StorageAdapter
    table: str
    schema: pa.Schema
    partition_by: tuple[str, ...] = ()
    by_position: bool = False
    allow_lossy: bool = False
    max_rows_per_fragment: int = DEFAULT_MAX_ROWS_PER_FRAGMENT

    def run(self, batches: Iterable[pa.RecordBatch]) -> TaskResult:
        """Write every row of ``batches`` as fragments: one per partition value combination and per
        ``max_rows_per_fragment`` rows, each encoded, and once large enough written, while its rows
        arrive (``tables.FragmentWriter``: Arrow batches straight to Parquet, no per-row Python). Holds
        at most about TASK_HELD_BYTES: beyond it, the largest open fragment is finished early. Rows that
        do not fit end the task (the fragments it finished stay, orphans; the open ones leave nothing)."""
        building: dict[Partition, FragmentWriter] = {}
        written: list[FragmentRef] = []
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                try:
                    data = conform(
                        self.table,
                        self.schema,
                        batch,
                        by_name=not self.by_position,
                        allow_lossy=self.allow_lossy,
                    )
                except SchemaMismatchError as exc:
                    return TaskResult(tuple(written), str(exc))
                for partition, rows in split_by_partition(data, self.partition_by):
                    writer = building.get(partition)
                    if writer is None:
                        writer = building[partition] = self._writer(partition)
                    writer.add(rows)
                    if writer.rows >= self.max_rows_per_fragment:
                        written.append(self._finish(building.pop(partition)))
                while building and sum(w.held_bytes for w in building.values()) > TASK_HELD_BYTES:
                    largest = max(building, key=lambda p: building[p].held_bytes)
                    written.append(self._finish(building.pop(largest)))
            while building:
                written.append(self._finish(building.pop(next(iter(building)))))
        finally:
            for writer in building.values():  # left open by a mismatch or an error: nothing of them stays
                writer.abort()
        return TaskResult(tuple(written))

    def _writer(self, partition: Partition) -> FragmentWriter:
        key = fragment_key(self.table, partition)
        return FragmentWriter(self.adapter, self.table, self.schema, key, partition, TASK_ROW_GROUP_BYTES)

    def _finish(self, writer: FragmentWriter) -> FragmentRef:
        ref = writer.finish()
        failpoints.failpoint("spark_load.after_fragment")
        return ref

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled with the adapter's config, reopened through :func:`shared_adapter`."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        if isinstance(self.adapter, ObjectStorageAdapter):
            fields["adapter"] = self.adapter.config
        return (_unpickle_task, (fields,))

    def map_in_arrow(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``DataFrame.mapInArrow`` form of :meth:`run`: one row holding the pickled TaskResult."""
        yield pa.RecordBatch.from_pydict({"result": [pickle.dumps(self.run(batches))]})


@functools.lru_cache(maxsize=8)
def shared_adapter(config: AdapterConfig) -> ObjectStorageAdapter:
    """The adapter of ``config`` in this process, built once: Spark runs many tasks in one Python worker
    (``spark.python.worker.reuse``), and building an S3 adapter's client costs 10-25 ms (its TLS setup),
    which every task paid before it wrote anything. Adapters are thread-safe and hold no per-task state."""
    return ObjectStorageAdapter(config)


@functools.lru_cache(maxsize=8)
def shared_engine(adapter: ObjectStorageAdapter) -> Engine:
    """The read-write engine at ``adapter`` in this process, opened (and swept for crashed writers) once:
    Spark plans and commits a data source's writes in Python workers it reuses, where a fresh engine per
    write would repeat the recovery sweep of its first open, and the reads of table versions it caches.
    Every commit still runs its own light heal first."""
    return Engine.open(adapter)


def _unpickle_task(fields: dict[str, Any]) -> FragmentTask:
    adapter = fields["adapter"]
    if isinstance(adapter, AdapterConfig):
        fields = {**fields, "adapter": shared_adapter(adapter)}
    return FragmentTask(**fields)


@dataclass(frozen=True)
class BulkLoad:
    """The outcome of a load: the commit and the fragments it published (none for a replay, which ran
    no job). ``commit`` is None when an append had no rows: nothing was published."""

    commit: Commit | None
    fragments: tuple[FragmentRef, ...]

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.fragments)

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.fragments)


def collect_fragments(table: str, results: Iterable[TaskResult | None]) -> tuple[FragmentRef, ...]:
    """Every fragment the tasks report, or SchemaMismatchError (naming the table, the column and a
    sample value) if any task found rows that do not fit. ``None``: a task Spark reports as failed."""
    fragments: list[FragmentRef] = []
    for result in results:
        if result is None:
            continue
        if result.mismatch is not None:
            raise SchemaMismatchError(f"nothing was published to {table!r}: {result.mismatch}", key=table)
        fragments.extend(result.fragments)
    return tuple(fragments)


def log_load(tables: Mapping[str, Sequence[FragmentRef]], commit: Commit | None, how: str) -> None:
    refs = [ref for table_refs in tables.values() for ref in table_refs]
    published = (
        "nothing (no rows)"
        if commit is None
        else f"version {commit.version}" + (" (replayed: already applied)" if commit.replayed else "")
    )
    log.info(
        "%s into %s: %d rows, %d fragments, %d bytes; published %s",
        how,
        ", ".join(tables),
        sum(r.rows for r in refs),
        len(refs),
        sum(r.bytes for r in refs),
        published,
    )


def check_spark_frame(frame: Any, table: str) -> None:
    """SparkInputError unless ``frame`` is a Spark DataFrame (classic or Spark Connect)."""
    from pyspark.sql import DataFrame

    if not isinstance(frame, DataFrame):
        raise SparkInputError(
            f"loading {table!r} needs a Spark DataFrame, got {type(frame).__module__}.{type(frame).__name__}; "
            "convert it first (spark.createDataFrame(...)) or use Engine.commit for Arrow data",
            key=table,
        )


def write_tables(
    engine: Engine,
    frames: Mapping[str, Any],
    *,
    mode: str = "append",
    replace_where: Mapping[str, PartitionFilter] | None = None,
    expected_version: int | None = None,
    idempotency_key: str | None = None,
    app_id: str | None = None,
    app_version: int | None = None,
    actor: str | None = None,
    by_position: bool = False,
    allow_lossy: bool = False,
    max_rows_per_fragment: int = DEFAULT_MAX_ROWS_PER_FRAGMENT,
    key_issued_at: datetime | None = None,
) -> BulkLoad:
    """Load each Spark DataFrame of ``frames`` (table -> DataFrame) into its table: one Spark job per
    table, then ONE commit over all of them (``mode``, ``replace_where``, as ``Engine.commit_fragments``).

    Before any job runs: SparkInputError for a non-Spark frame, UnknownTableError, SchemaMismatchError for
    columns that cannot fit (missing, extra, lossy types) and CommitConflictError for a stale
    ``expected_version``; an ``idempotency_key`` that already landed, or an ``app_version`` at or below
    ``app_id``'s watermark, returns that replay (``commit.replayed``, no fragments) and runs nothing.
    Rows whose values do not cast raise SchemaMismatchError after the jobs, with nothing published. An
    append with no rows at all publishes nothing (``commit`` None); an overwrite with no rows empties the
    tables (or their ``replace_where`` partitions). Logs rows, fragments, bytes and the published version.
    """
    if not engine.adapter.capabilities.shared_across_processes:
        raise UnsupportedOperationError(
            f"a Spark load needs storage that Spark executors can reach; {engine.adapter.url} is per-process",
            key=", ".join(frames),
            backend=engine.adapter.capabilities.backend,
        )
    for table, frame in frames.items():
        check_spark_frame(frame, table)
    request = CommitRequest(
        mode=mode,
        expected_version=expected_version,
        idempotency_key=idempotency_key,
        actor=actor,
        key_issued_at=key_issued_at,
        replace_where=replace_where,
        app_id=app_id,
        app_version=app_version,
    )  # ValueError for any option that is wrong whatever the tables
    replayed = engine.precheck(list(frames), request)
    if replayed is not None:
        log_load({t: () for t in frames}, replayed, "Spark load")
        return BulkLoad(replayed, ())
    tasks = {
        table: task_for(
            engine,
            table,
            frame.schema,
            by_position=by_position,
            allow_lossy=allow_lossy,
            max_rows_per_fragment=max_rows_per_fragment,
        )
        for table, frame in frames.items()
    }
    written: dict[str, tuple[FragmentRef, ...]] = {}
    for table, frame in frames.items():
        rows = frame.mapInArrow(tasks[table].map_in_arrow, "result binary").collect()
        written[table] = collect_fragments(table, (pickle.loads(row.result) for row in rows))
    commit: Commit | None = None
    if request.mode is not CommitMode.APPEND or any(written.values()):
        commit = engine.commit_fragments(written, request)
    log_load(written, commit, "Spark load")
    return BulkLoad(commit, tuple(ref for refs in written.values() for ref in refs))


def task_for(
    engine: Engine, table: str, spark_schema: Any, creating: NewTable | None = None, **settings: Any
) -> FragmentTask:
    """The task writing ``table`` (or the table ``creating`` describes, made when the write publishes:
    :func:`create_for_write`) from rows of ``spark_schema``, after checking on the driver that such rows
    can fit the table (SchemaMismatchError for missing or extra columns and lossy types)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = engine.snapshot().schema(table) if creating is None else creating.schema
    partition_by = engine.partition_by(table) if creating is None else creating.partition_by
    incoming = to_arrow_schema(spark_schema, timezone="UTC")
    conform(
        table,
        schema,
        incoming.empty_table(),
        by_name=not settings.get("by_position", False),
        allow_lossy=settings.get("allow_lossy", False),
    )
    return FragmentTask(engine.adapter, table, schema, partition_by, **settings)


@dataclass(frozen=True)
class NewTable:
    """A table a write creates (``create_table``): made only when the write publishes, once its files
    are written and known to be publishable, so that a write refused or failed at any step leaves no
    table. Checked on the driver as ``Engine.create_table`` checks (name, partition columns)."""

    table: str
    schema: pa.Schema
    partition_by: tuple[str, ...]

    @classmethod
    def checked(cls, table: str, schema: pa.Schema, partition_by: Sequence[str]) -> NewTable:
        layout.check_table_name(table)
        return cls(table, schema, check_partition_by(table, schema, partition_by))


def table_to_create(
    engine: Engine, table: str, schema: pa.Schema, partition_by: Sequence[str], *, create: bool, option: str
) -> NewTable | None:
    """The table a write creates when it publishes (``create``, and ``table`` absent), checked now; None
    for an existing table, after checking that ``partition_by``, when given, names its partition columns
    (ConfigurationError naming the write's ``option``; partitions are fixed at creation)."""
    if create and table not in engine.snapshot().tables:
        return NewTable.checked(table, schema, partition_by)
    if partition_by and engine.partition_by(table) != tuple(partition_by):
        raise ConfigurationError(
            f"{option}={list(partition_by)} does not match table {table!r}, partitioned by "
            f"{list(engine.partition_by(table))} (partitions are fixed at creation)",
            key=layout.table_prefix(table),
        )
    return None


def create_for_write(engine: Engine, new: NewTable) -> None:
    """Create the table a write's files were written for, right before their commit. If another writer
    created it meanwhile it must be that very table: SchemaMismatchError (nothing published; the files
    are orphans vacuum reclaims) otherwise."""
    try:
        engine.create_table(new.table, new.schema, partition_by=new.partition_by)
    except TableExistsError:
        theirs, their_columns = engine.snapshot().schema(new.table), engine.partition_by(new.table)
        if not (theirs.equals(new.schema, check_metadata=False) and their_columns == new.partition_by):
            raise SchemaMismatchError(
                f"table {new.table!r} was created by another writer during this write, with schema "
                f"{theirs} partitioned by {list(their_columns)}, not the {new.schema} partitioned by "
                f"{list(new.partition_by)} its files were written for: nothing published; vacuum "
                "reclaims them",
                key=layout.table_prefix(new.table),
            ) from None


def bulk_load(
    engine: Engine,
    table: str,
    frame: Any,
    *,
    mode: str = "append",
    expected_version: int | None = None,
    idempotency_key: str | None = None,
    actor: str | None = None,
    max_rows_per_fragment: int = DEFAULT_MAX_ROWS_PER_FRAGMENT,
    key_issued_at: datetime | None = None,
) -> BulkLoad:
    """Load the Spark DataFrame ``frame`` into ``table`` as one commit: :func:`write_tables` for one
    table (columns matched by name)."""
    return write_tables(
        engine,
        {table: frame},
        mode=mode,
        expected_version=expected_version,
        idempotency_key=idempotency_key,
        actor=actor,
        max_rows_per_fragment=max_rows_per_fragment,
        key_issued_at=key_issued_at,
    )
