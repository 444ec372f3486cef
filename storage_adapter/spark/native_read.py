"""Spark's own Parquet reader over one snapshot of an engine table (docs/spark.md, "Native read"):
``read(spark, url, table, version=None)``.

The data source (``spark.read.format("storage_adapter")``) decodes every file in a Python worker and hands
Spark Arrow batches; this read gives Spark the files themselves: ``spark.read.schema(<the table's Spark
schema>).parquet(*<the snapshot's files>)``, so column pruning, Parquet filter push-down (row-group
statistics) and vectorized decoding are Spark's. The file list is the engine's (``Engine.files`` of ONE
snapshot, resolved here on the driver), never the data folder's listing, which also holds overwritten,
orphaned and uncommitted fragments. Every fragment holds its partition columns (the engine's writers and
the native write both keep them), so partition columns are ordinary Parquet columns: their values and
types are the file's, and a filter on them is pushed down like any other. Each file is given by its path,
so Spark infers no partitions from the ``col=value`` folders it lies in (those are the engine's quoting,
not Hive's).

Only the DataFrame API is used (no ``sparkContext``, no JVM handle) on ``file://`` roots, so the read itself
asks nothing a Spark Connect client lacks; an ``s3://`` root needs ``hadoop-aws`` on the cluster (checked as
the native write checks it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from storage_adapter.adapter import open_adapter
from storage_adapter.engine import layout
from storage_adapter.engine.engine import Engine
from storage_adapter.engine.errors import SchemaMismatchError, UnknownTableError
from storage_adapter.errors import ConfigurationError
from storage_adapter.spark.datasource import schema_to_spark
from storage_adapter.spark.load import SparkInputError
from storage_adapter.spark.native import hadoop_location

log = logging.getLogger(__name__)

# Options of Spark's Parquet reader for files another writer wrote (pyarrow's, with no Spark version in
# their footers): Spark would otherwise apply ``spark.sql.parquet.(int96|datetime)RebaseModeInRead``,
# EXCEPTION by default, and refuse dates before 1582 the engine wrote in the proleptic Gregorian calendar.
READ_OPTIONS = {"datetimeRebaseMode": "CORRECTED", "int96RebaseMode": "CORRECTED"}
# Characters that make Spark's DataFrameReader glob a path (SparkHadoopUtil.isGlobPath): a root holding one
# would be read as a pattern. Fragment keys never hold one (partition values are %-quoted).
_GLOB = set("{}[]*?\\")


def read(
    spark: Any,
    root: str | Engine,
    table: str,
    version: int | None = None,
    options: Mapping[str, Any] | None = None,
) -> Any:
    """A DataFrame of ``table`` of the engine at ``root`` (a URL, opened with adapter ``options``, or an
    Engine) as of one snapshot (the latest, or manifest ``version`` inside the retained history), read by
    Spark's own Parquet reader from exactly that snapshot's files. Columns in the table's order, with the
    types the data source's read gives (``schema_to_spark``; every column nullable, as Spark's file
    sources make them); partition columns with their values.

    Before Spark does anything: SparkInputError for a ``spark`` that is not a SparkSession;
    UnsupportedOperationError, naming the data source as the way, where Spark's Hadoop filesystem cannot
    reach the root (memory; S3 without ``hadoop-aws``); HistoryExpiredError for a ``version`` outside the
    retained history (ConfigurationError for a ``version`` that is not an int >= 0); UnknownTableError
    naming the table and the root; SchemaMismatchError for a column Spark has no type for (see
    ``schema_to_spark``: no Spark path reads it), and, naming the data source as the way, for a table
    Spark's Parquet reader cannot read exactly (nanosecond timestamps, time of day, column names equal
    but for case unless ``spark.sql.caseSensitive``); ConfigurationError for a root whose path Spark would
    read as a glob pattern. A table with no files is an empty DataFrame
    of its schema."""
    if not (hasattr(spark, "read") and hasattr(spark, "conf")):
        raise SparkInputError(
            f"read of table {table!r} needs a SparkSession, not {type(spark).__name__}", key=table
        )
    if isinstance(root, Engine):
        if options:
            raise ConfigurationError(
                f"options open a URL: the engine for {table!r} is already open", key=table
            )
        adapter = root.adapter
    else:
        adapter = open_adapter(root, **dict(options or {}))
    hadoop = hadoop_location(adapter, spark, reading=True)  # before any request to the root
    if _GLOB & set(hadoop.uri):
        raise ConfigurationError(
            f"root {hadoop.uri} holds a character Spark reads as a glob pattern ({sorted(_GLOB & set(hadoop.uri))}):"
            f" table {table!r} cannot be read by path there; read with the data source",
            key=adapter.url,
        )
    engine = root if isinstance(root, Engine) else Engine.open(adapter, read_only=True)
    snapshot = engine.snapshot(version)  # HistoryExpiredError outside the retained history
    try:
        schema = snapshot.schema(table)
    except UnknownTableError as exc:
        raise UnknownTableError(f"{exc} (root {adapter.url})", key=exc.key) from exc
    struct = schema_to_spark(schema, table)  # SchemaMismatchError for a type Spark has none for
    problems = [problem for field in schema if (problem := _unreadable(field))]
    if spark.conf.get("spark.sql.caseSensitive", "false").lower() != "true":
        folded: dict[str, list[str]] = {}
        for name in schema.names:
            folded.setdefault(name.lower(), []).append(name)
        problems += [
            f"columns {names} are one column to Spark's reader, which ignores case (spark.sql.caseSensitive)"
            for names in folded.values()
            if len(names) > 1
        ]
    if problems:
        raise SchemaMismatchError(
            f"table {table!r} at {adapter.url}: Spark's Parquet reader cannot read it exactly: "
            f"{'; '.join(problems)}. Read with the data source (spark.read.format('storage_adapter')), "
            "which converts every value",
            key=layout.table_prefix(table),
        )
    files = engine.files(table, snapshot)
    log.info(
        "Spark native read of %r at %s, manifest version %d: %d files, %d rows, %d bytes",
        table,
        adapter.url,
        snapshot.version,
        len(files),
        sum(f.rows for f in files),
        sum(f.bytes for f in files),
    )
    reader = spark.read.options(**hadoop.settings, **READ_OPTIONS).schema(struct)
    if not files:  # Spark's Parquet reader over no files: the same plan and schema, no rows
        return reader.parquet()
    return reader.parquet(*(f"{hadoop.uri}/{data_file.key}" for data_file in files))


def _unreadable(field: pa.Field) -> str | None:
    """Why Spark's Parquet reader cannot read column ``field`` (of a type Spark has) exactly as the table
    has it, where the data source can (None: it can)."""
    bad = _unreadable_type(field.type)
    return None if bad is None else f"{field.name!r} is {field.type}: Spark cannot read {bad} from Parquet"


def _unreadable_type(kind: pa.DataType) -> str | None:
    if pa.types.is_timestamp(kind) and kind.unit == "ns":
        return "nanosecond timestamps"
    if pa.types.is_time(kind):
        return "a time of day"
    if pa.types.is_dictionary(kind):
        return _unreadable_type(kind.value_type)
    children = [kind.field(i).type for i in range(kind.num_fields)] if kind.num_fields else []
    for child in children:
        found = _unreadable_type(child)
        if found is not None:
            return found
    return None
