"""The ``storage_adapter`` PySpark data source: ``df.write.format("storage_adapter")`` and
``spark.read.format("storage_adapter")`` over the engine, batch and streaming (docs/spark.md).

Where each part runs: ``DataSource.schema``/``reader``/``writer`` and the writers' ``commit``/``abort``
run in Python workers on the driver, ``write`` and ``read`` in Python workers on executors; every object
crossing between them is pickled (the adapter travels as its config; reprs never show a secret).

* **Batch write** (:class:`_BatchWriter`): ``writer()`` checks everything before any task runs (options,
  unknown table, columns that cannot fit, replays); each task writes fragments (load.FragmentTask) and
  returns their references; ``commit(messages)`` publishes all of them in ONE engine commit; ``abort``
  publishes nothing (the fragments of the job are orphans for vacuum). Only messages Spark hands to
  ``commit`` count, so failed, retried and speculative attempts never become visible.
* **Batch read** (:class:`_Reader`): one snapshot (latest, or ``version``) resolved on the driver; one
  Spark partition per size group of its files (``Engine.files``); partition-column filters (``=``,
  ``IN``) prune files; workers read the Parquet files through the adapter (no ``s3a`` jars).
* **Streaming write** (:class:`_StreamWriter`): each micro-batch is one commit carrying the application
  watermark (app id: option ``appId``, else the query id found in the checkpoint; app version: the batch
  id), so a micro-batch replayed after a crash lands exactly once.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import math
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    EqualTo,
    Filter,
    In,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from storage_adapter.engine import layout
from storage_adapter.engine.commit import Commit
from storage_adapter.engine.engine import Engine
from storage_adapter.engine.errors import CommitConflictError, SchemaMismatchError
from storage_adapter.engine.request import CommitRequest
from storage_adapter.engine.tables import DataFile
from storage_adapter.errors import ConfigurationError, StorageError
from storage_adapter.spark.load import (
    FragmentTask,
    NewTable,
    TaskResult,
    collect_fragments,
    create_for_write,
    log_load,
    shared_engine,
    table_to_create,
    task_for,
)
from storage_adapter.spark.options import SourceOptions

log = logging.getLogger(__name__)

SHORT_NAME = "storage_adapter"
# Read partitions, sized as Spark sizes file splits (FilePartition.maxSplitBytes): about
# min(maxPartitionBytes, max(openCostInBytes, total / cores)) bytes each, every file counted with an opening
# cost, so many small fragments do not become many tasks, yet a table of few files still spreads over the
# cores. The planner (a Python worker) cannot see the cluster's cores: the planning machine's count stands
# in (on local[N], the cores the job runs on); partitions are never coarser than maxPartitionBytes.
_MAX_PARTITION_BYTES = 128 * 1024 * 1024
_OPEN_COST_BYTES = 4 * 1024 * 1024
# Rows per batch a read hands Spark: a task's row groups (about 4 MiB of Arrow data) whole, the engine's
# (16 MiB) in a few pieces; every batch costs a round of Python and JVM calls on both sides.
_READ_BATCH_ROWS = 256 * 1024


def schema_from_spark(struct: StructType) -> pa.Schema:
    """The Arrow schema of a Spark ``StructType`` (Spark's own conversion; timestamps in UTC), for
    ``Engine.create_table``."""
    return to_arrow_schema(struct, timezone="UTC")


# Spark's widest decimal (DecimalType.MAX_PRECISION): PySpark makes a DecimalType(40, 2) that the JVM
# refuses only when a plan first uses it.
_SPARK_MAX_DECIMAL_PRECISION = 38


def schema_to_spark(schema: pa.Schema, table: str | None = None) -> StructType:
    """The Spark ``StructType`` of an Arrow schema (naive timestamps as TIMESTAMP_NTZ). SchemaMismatchError
    (a ValueError; naming ``table`` when given) listing every column Spark has no type for: unsigned
    integers, half floats, ``date64``, string and binary views, decimals over 38 digits (also nested)."""
    problems, fields = [], []
    for column in schema:
        try:
            fields += from_arrow_schema(pa.schema([column]), prefer_timestamp_ntz=True).fields
        except TypeError:  # PySpark's UNSUPPORTED_DATA_TYPE_FOR_ARROW_CONVERSION
            problems.append(f"{column.name!r} is {column.type}")
            continue
        if _too_wide_decimal(column.type):
            problems.append(f"{column.name!r} is {column.type} (Spark's decimals hold at most 38 digits)")
    if problems:
        where = "" if table is None else f"table {table!r}: "
        raise SchemaMismatchError(
            f"{where}Spark has no type for {'; '.join(problems)}",
            key=None if table is None else layout.table_prefix(table),
        )
    return StructType(fields)


def _too_wide_decimal(kind: pa.DataType) -> bool:
    if pa.types.is_decimal(kind):
        return bool(kind.precision > _SPARK_MAX_DECIMAL_PRECISION)
    return any(_too_wide_decimal(kind.field(i).type) for i in range(kind.num_fields))


class StorageAdapterDataSource(DataSource):
    """``format("storage_adapter")``: options in docs/spark.md. Picklable; its repr shows no option value."""

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def __repr__(self) -> str:
        return f"StorageAdapterDataSource(options: {sorted(self.options)})"

    def _options(self) -> SourceOptions:
        return SourceOptions.parse(self.options)

    def schema(self) -> StructType:
        options = self._options()
        engine = Engine.open(options.open(), read_only=True)
        return schema_to_spark(engine.snapshot(options.version).schema(options.table), options.table)

    def reader(self, schema: StructType) -> DataSourceReader:
        return _Reader(self._options(), schema)

    def writer(self, schema: StructType, overwrite: bool) -> _BatchWriter:
        return _BatchWriter(_plan(self._options(), schema, "overwrite" if overwrite else "append"))

    def streamWriter(self, schema: StructType, overwrite: bool) -> _StreamWriter:
        options = self._options()
        return _StreamWriter(_plan(options, schema, "overwrite" if overwrite else "append", streaming=True))


@dataclass(frozen=True)
class _WritePlan:
    """Everything decided on the driver before a job's tasks run. ``replayed``: the commit a batch write
    replays (its tasks then write nothing and its commit publishes nothing)."""

    options: SourceOptions
    mode: str
    task: FragmentTask
    app_id: str | None
    replayed: Commit | None = None
    creating: NewTable | None = None

    def commit(
        self, messages: Sequence[WriterCommitMessage | None], app_version: int | None
    ) -> Commit | None:
        """Publish every fragment the messages name in one commit; see docs/spark.md for the empty case."""
        options = self.options
        results = [m.result if isinstance(m, _Written) else None for m in messages]
        fragments = collect_fragments(options.table, results)
        if self.replayed is not None:
            log_load({options.table: ()}, self.replayed, "storage_adapter write")
            return self.replayed
        engine = shared_engine(options.open())
        if self.creating is not None:  # made now, with its files written: a failed job leaves no table
            create_for_write(engine, self.creating)
        commit: Commit | None = None
        if fragments or self.mode != "append":
            commit = engine.commit_fragments({options.table: fragments}, self.request(app_version))
        log_load({options.table: fragments}, commit, "storage_adapter write")
        return commit

    def request(self, app_version: int | None) -> CommitRequest:
        """The commit request of this write (a streaming batch's ``app_version`` is its batch id)."""
        options = self.options
        return CommitRequest(
            mode=self.mode,
            idempotency_key=options.idempotency_key,
            replace_where=None if options.replace_where is None else {options.table: options.replace_where},
            app_id=self.app_id,
            app_version=app_version,
        )


def _plan(
    options: SourceOptions, spark_schema: StructType, mode: str, *, streaming: bool = False
) -> _WritePlan:
    """The checks made on the driver before any task: options, the table (or, with createTable, the one
    the write creates when it publishes),
    the incoming columns against its schema, and (batch only) whether the write is a replay."""
    if streaming and (options.idempotency_key is not None or options.app_version is not None):
        raise ConfigurationError(
            f"a streaming write to table {options.table!r} is keyed by its query and batch ids: options "
            "idempotencyKey and appVersion do not apply (every batch would replay the first)",
            key=options.table,
        )
    if not streaming and (options.app_id is None) != (options.app_version is None):
        raise ConfigurationError(
            f"options appId and appVersion go together (table {options.table!r})", key=options.table
        )
    if options.replace_where is not None and mode != "overwrite":
        raise ConfigurationError(
            f"option replaceWhere needs mode('overwrite') (table {options.table!r})", key=options.table
        )
    engine = shared_engine(options.open())
    creating = table_to_create(
        engine,
        options.table,
        schema_from_spark(spark_schema),
        options.partition_by,
        create=options.create_table,
        option="option partitionBy",
    )
    replayed = None
    app_id = options.app_id
    if streaming:  # the batch id is the app version: replays are decided at commit
        app_id = app_id or _query_identity(options)
    else:
        request = CommitRequest(
            mode=mode, idempotency_key=options.idempotency_key, app_id=app_id, app_version=options.app_version
        )
        if creating is None:  # a table this write creates has no commit of it to replay
            replayed = engine.precheck([options.table], request)
    task = task_for(
        engine,
        options.table,
        spark_schema,
        creating,
        by_position=options.by_position,
        allow_lossy=options.allow_lossy,
        max_rows_per_fragment=options.max_rows_per_fragment,
    )
    return _WritePlan(options, mode, task, app_id, replayed, creating)


def _query_identity(options: SourceOptions) -> str:
    """The streaming query's identity: the id Spark writes to ``<checkpointLocation>/metadata`` when the
    query starts (before any micro-batch) and keeps for the life of the checkpoint, so restarts from it
    keep the id. Read from an absolute local path; otherwise the ``appId`` option is required
    (ConfigurationError: a guessed identity that changed between batches would apply one twice)."""
    location = options.checkpoint_location
    path = None if location is None else re.sub(r"^file:(//)?", "", location)
    query_id = None
    if path is not None and os.path.isabs(path):
        try:
            with open(os.path.join(path, "metadata"), encoding="utf-8") as f:
                query_id = json.loads(f.readline())["id"]
        except (OSError, ValueError, KeyError, TypeError):
            query_id = None
    if isinstance(query_id, str) and query_id:
        return f"spark-query-{query_id}"
    raise ConfigurationError(
        f"a streaming write to table {options.table!r} needs option('appId', ...) (a stable id of the query): "
        f"its checkpoint location {location!r} is not an absolute local path holding Spark's query metadata",
        key=options.table,
    )


@dataclass(frozen=True)
class _Written(WriterCommitMessage):
    """A task's commit message: its fragments, or why its rows do not fit."""

    result: TaskResult


class _BatchWriter(DataSourceArrowWriter):
    def __init__(self, plan: _WritePlan) -> None:
        self._plan = plan

    def __repr__(self) -> str:
        return f"_BatchWriter({self._plan.options!r}, mode={self._plan.mode!r})"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        if self._plan.replayed is not None:
            return _Written(TaskResult())  # a replay writes nothing (its input is not even read)
        return _Written(self._plan.task.run(iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self._plan.commit(messages, self._plan.options.app_version)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        written = sum(len(m.result.fragments) for m in messages if isinstance(m, _Written))
        log.warning(
            "storage_adapter write into %r aborted: nothing published; %d fragments written by its "
            "tasks are left for vacuum",
            self._plan.options.table,
            written,
        )


class _StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, plan: _WritePlan) -> None:
        self._plan = plan

    def __repr__(self) -> str:
        options = self._plan.options
        return f"_StreamWriter({options!r}, query {options.query_name!r}, app id {self._plan.app_id!r})"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return _Written(self._plan.task.run(iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        self._plan.commit(messages, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning(
            "storage_adapter micro-batch %d of query %r into %r aborted: nothing published",
            batchId,
            self._plan.options.query_name,
            self._plan.options.table,
        )


class _Reader(DataSourceReader):
    """One snapshot's files, resolved when the reader is made (on the driver)."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self._table = options.table
        self._adapter = options.open()
        engine = Engine.open(self._adapter, read_only=True)
        self._version = engine.snapshot(options.version).version
        self._partition_by = engine.partition_by(self._table)
        self._arrow_schema = to_arrow_schema(schema, timezone="UTC")
        self._where: dict[str, list[Any]] = {}

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Keep ``=`` and ``IN`` on partition columns (they prune whole files, exactly); Spark evaluates
        every other filter."""
        for f in filters:
            column = f.attribute[0] if isinstance(f, EqualTo | In) and len(f.attribute) == 1 else None
            values = [f.value] if isinstance(f, EqualTo) else list(f.value) if isinstance(f, In) else []
            if column not in self._partition_by or any(v is None for v in values):
                yield f
                continue
            kept = self._where.get(column)
            self._where[column] = values if kept is None else [v for v in kept if v in values]

    def partitions(self) -> list[InputPartition]:
        engine = Engine.open(self._adapter, read_only=True)
        files = engine.files(self._table, self._version, where=self._where or None)
        costs = [data_file.bytes + _OPEN_COST_BYTES for data_file in files]
        total = sum(costs)
        split = min(_MAX_PARTITION_BYTES, max(_OPEN_COST_BYTES, total / (os.cpu_count() or 1)))
        count = min(len(files), math.ceil(total / split)) if files else 0
        # Contiguous groups (row order kept) of near-equal cost: a file goes to the group its midpoint
        # falls in, so equal files spread evenly over the cores (a greedy fill would leave a straggler).
        groups: list[list[DataFile]] = [[] for _ in range(count)]
        done = 0
        for data_file, cost in zip(files, costs, strict=True):
            groups[min(count - 1, int((done + cost / 2) * count / total))].append(data_file)
            done += cost
        # No files: one empty partition (Spark would substitute InputPartition(None) for an empty list).
        return [InputPartition(tuple(group)) for group in groups if group] or [InputPartition(())]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        schema = self._arrow_schema
        for data_file in partition.value:
            # read_buffer: the object's bytes without a copy into ``bytes`` (Parquet reads from it in place)
            parquet = pq.ParquetFile(pa.BufferReader(pa.py_buffer(self._adapter.read_buffer(data_file.key))))
            # A row group at a time, decoded in this thread: Spark runs a task per core, so Arrow's decoding
            # threads only add their hand-offs (measured: a third more CPU per file than one thread).
            for batch in parquet.iter_batches(_READ_BATCH_ROWS, columns=schema.names, use_threads=False):
                if batch.schema.equals(schema):
                    yield batch
                else:  # Spark's types for the table's (e.g. nullability, timestamp units): cast per column
                    yield pa.RecordBatch.from_arrays(
                        [batch.column(n).cast(f.type) for n, f in zip(schema.names, schema, strict=True)],
                        schema=schema,
                    )


def register(spark: Any) -> None:
    """Register the data source with ``spark`` under ``format("storage_adapter")`` and enable Python
    filter push-down (its reader prunes partitions). Idempotent."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(StorageAdapterDataSource)


# A "module.Class: message" line of a Python traceback Spark relays from a worker, and Spark's suffix.
_RELAYED = re.compile(r"^(storage_adapter(?:\.\w+)+)\.(\w+): ", re.M)
# What Spark appends to a relayed message: its SQLSTATE, and on Spark Connect the server's JVM stack trace
# (an 8 to 11 KB message, the useful line 500 to 700 characters in).
_SPARK_TAIL = re.compile(r"\s*SQLSTATE: \w+|\n\s*JVM stacktrace:")


def relayed_error(exc: BaseException) -> StorageError | None:
    """The storage_adapter error a Spark exception relays from a Python worker (driver-side ``writer``,
    ``commit``, or a task): the last one its traceback names, rebuilt with its type and message (its
    ``key`` and other fields are not relayed: None; Spark's SQLSTATE and, on Spark Connect, the server's
    JVM stack trace cut off); None if it relays none."""
    text = str(exc)
    matches = list(_RELAYED.finditer(text))
    if not matches:
        return None
    module, name = matches[-1].groups()
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    if not (isinstance(cls, type) and issubclass(cls, StorageError)):
        return None
    error = cls.__new__(cls)
    message = text[matches[-1].end() :]
    if (tail := _SPARK_TAIL.search(message)) is not None:
        message = message[: tail.start()]
    Exception.__init__(error, message.strip())
    error.key, error.backend = None, None
    if isinstance(error, CommitConflictError):
        error.expected = error.actual = error.table = None
    return error


@contextlib.contextmanager
def typed_errors() -> Iterator[None]:
    """Re-raise a Spark exception that relays a storage_adapter error as that error (chained to it):
    ``with typed_errors(): df.write.format("storage_adapter")...save(url)``."""
    try:
        yield
    except StorageError:
        raise
    except Exception as exc:
        error = relayed_error(exc)
        if error is None:
            raise
        raise error from exc


__all__ = [
    "SHORT_NAME",
    "StorageAdapterDataSource",
    "register",
    "relayed_error",
    "schema_from_spark",
    "schema_to_spark",
    "typed_errors",
]
