"""Spark's own Parquet writer into an engine table (docs/spark.md, "The native path"): ``write(df, url,
table, ...)``.

The data source (``format("storage_adapter")``) hands every row to a Python worker as Arrow; this path
leaves the rows in the JVM. Spark's Parquet writer writes them into a fresh staging folder under the
table, ``tables/{table}/data/_staging/{job}``, where Spark's Hadoop filesystem reaches the storage root
(``file://``; ``s3a://`` where the cluster ships ``hadoop-aws``, mapped from the adapter's S3 options).
When ``save()`` returns, Spark's commit protocol (file output committer algorithm 1, output commit
coordination) has put exactly the files of the tasks it committed into that folder, every one named with
the job's UUID; Spark's own filter (names starting with ``_`` or ``.``: its ``_temporary`` folder,
``_SUCCESS``, checksum files) leaves exactly them. Their footers give rows and schema, which must be the
table's (timestamp and decimal encodings included: the write asks Spark for int64 microsecond timestamps
and the standard Parquet layout). The driver then publishes them in ONE engine commit, with the exactly-
once rules of the data source: idempotency key, application watermark (a replay runs no job), partition
overwrite. A partitioned table's files are moved into their partition folders first: Spark writes them
below one hidden column (a hash of the partition values), so every file keeps the real partition columns,
as the engine's readers need, and each file's partition is read from its footer's statistics.

A job that fails, or a driver killed before the commit, leaves its staging folder unreferenced:
``Engine.vacuum`` reclaims it after its grace period, like any orphaned fragment.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from storage_adapter.adapter import ObjectStorageAdapter
from storage_adapter.engine import layout
from storage_adapter.engine.commit import Commit
from storage_adapter.engine.engine import Engine
from storage_adapter.engine.errors import CorruptMetadataError, SchemaMismatchError
from storage_adapter.engine.parallel import map_bounded
from storage_adapter.engine.request import CommitMode, CommitRequest
from storage_adapter.engine.schema import (
    Partition,
    PartitionFilter,
    conform,
    partition_prefix,
    partition_texts,
)
from storage_adapter.engine.tables import FragmentRef, schema_fingerprint
from storage_adapter.errors import ConfigurationError, UnsupportedOperationError
from storage_adapter.keys import validate_key
from storage_adapter.protocol import StorageAdapter
from storage_adapter.registry import HadoopRoot, backend_named
from storage_adapter.spark.datasource import schema_from_spark, schema_to_spark
from storage_adapter.spark.load import (
    BulkLoad,
    check_spark_frame,
    create_for_write,
    log_load,
    table_to_create,
)
from storage_adapter.spark.session import is_connect
from storage_adapter.types import ObjectInfo

log = logging.getLogger(__name__)

# What Spark's Parquet writer must be asked for, for the engine's readers to see the table's types: int64
# microsecond timestamps (not INT96), the standard list and decimal layouts, proleptic Gregorian dates.
# These are session settings (ParquetFileFormat.prepareWrite reads them from the session, not from the
# write's options): set for the write, then restored.
PARQUET_SESSION_SETTINGS = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.parquet.writeLegacyFormat": "false",
    "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
}
# Options of the write itself (they reach its Hadoop configuration): the file output committer's
# algorithm 1 moves a task's files into the output only at job commit, so the folder holds exactly the
# committed tasks' files when ``save()`` returns.
COMMITTER_OPTIONS = {"mapreduce.fileoutputcommitter.algorithm.version": "1"}
# Spark's name for a task's file (the engine knows it as its own in partition folders: layout.own_key)
_SPARK_FILE = layout.SPARK_FILE
# The one column a partitioned table's staging files are partitioned by: a hash of the partition values,
# so Spark's folder names are short whatever the values (a file's partition is read from its footer).
_HIDDEN_PARTITION = "sa_partition"


def write(
    frame: Any,
    root: str | Engine,
    table: str,
    *,
    mode: str = "append",
    replace_where: PartitionFilter | None = None,
    idempotency_key: str | None = None,
    app_id: str | None = None,
    app_version: int | None = None,
    key_issued_at: datetime | None = None,
    by_position: bool = False,
    create_table: bool = False,
    partition_by: Sequence[str] = (),
    options: Mapping[str, Any] | None = None,
) -> BulkLoad:
    """Write the Spark DataFrame ``frame`` into ``table`` of the engine at ``root`` (a URL, opened with
    adapter ``options``, or an Engine) with Spark's own Parquet writer, then publish exactly the files its
    job committed in ONE commit (``mode``, ``replace_where``, as ``Engine.commit_fragments``).

    Before any job runs: SparkInputError for a non-Spark frame; UnsupportedOperationError, naming the data
    source as the way, where Spark's Hadoop filesystem cannot reach the root (memory; S3 without the
    ``hadoop-aws`` jars); UnknownTableError (unless ``create_table``: the table is created from the
    frame's schema, every column nullable as Spark writes them, ``partition_by`` its partition columns);
    SchemaMismatchError for columns that cannot fit (missing, extra, lossy, by name unless
    ``by_position``) or a table Spark's writer cannot write exactly (a non-nullable column, a type Spark
    has no exact Parquet form for); an ``idempotency_key`` that landed, or an ``app_version`` at or below
    ``app_id``'s watermark, returns that replay (``commit.replayed``, no fragments) and runs nothing.
    After the job, SchemaMismatchError with nothing published if a committed file is not what the table
    needs. An append of no rows publishes nothing (``commit`` None); an overwrite of no rows empties the
    table (or its ``replace_where`` partitions). Logs rows, files, bytes and the published version."""
    check_spark_frame(frame, table)
    if isinstance(root, Engine):
        if options:
            raise ConfigurationError(
                f"options open a URL: the engine for {table!r} is already open", key=table
            )
        engine = root
    else:
        engine = Engine.open(root, options=options)
    spark = frame.sparkSession
    request = CommitRequest(
        mode=mode,
        idempotency_key=idempotency_key,
        key_issued_at=key_issued_at,
        replace_where=None if replace_where is None else {table: replace_where},
        app_id=app_id,
        app_version=app_version,
    )  # ValueError for any option that is wrong whatever the table: before anything is created
    hadoop = hadoop_location(engine.adapter, spark)
    if is_connect(spark):  # the server writes, this client publishes: they must see the same files
        check_shared_root(spark, engine.adapter, hadoop, table)
    # Created only once the job's files are known to be publishable (a partition value no key can hold is
    # known only then): a refusal at any step leaves no table.
    created = nullable(schema_from_spark(frame.schema))
    creating = table_to_create(
        engine, table, created, partition_by, create=create_table, option="partition_by"
    )
    if creating is not None:
        schema, columns = creating.schema, creating.partition_by
    else:
        replayed = engine.precheck([table], request)
        if replayed is not None:
            log_load({table: ()}, replayed, "Spark native write")
            return BulkLoad(replayed, ())
        schema, columns = engine.snapshot().schema(table), engine.partition_by(table)
    projected = fitted(frame, table, schema, columns, by_position)
    staging = layout.staging_prefix(table, uuid.uuid4().hex)  # the job-name shape layout.own_key knows
    writer = projected.write.options(**hadoop.settings, **COMMITTER_OPTIONS).mode(
        "error"
    )  # "errorifexists" is classic-only
    with session_settings(spark, PARQUET_SESSION_SETTINGS):
        writer.partitionBy(*([_HIDDEN_PARTITION] if columns else [])).parquet(f"{hadoop.uri}/{staging}")
    durable_files = hadoop.local_directory if engine.adapter.capabilities.durable else None
    refs = published_files(engine.adapter, table, schema, columns, staging, durable_files)
    if creating is not None:
        create_for_write(engine, creating)
    commit: Commit | None = None
    if refs or request.mode is not CommitMode.APPEND:
        commit = engine.commit_fragments({table: refs}, request)
    log_load({table: refs}, commit, "Spark native write")
    return BulkLoad(commit, refs)


def fitted(frame: Any, table: str, schema: pa.Schema, partition_by: Sequence[str], by_position: bool) -> Any:
    """``frame`` as the table's columns, in its order, each cast to the table's Spark type (safe
    widening only: the engine's rules, checked on the driver), plus, for a partitioned table, the hidden
    column its staging files are partitioned by. SchemaMismatchError before any job for columns that
    cannot fit, and for a table Spark's Parquet writer cannot write exactly: a type with no exact Spark
    form (nanosecond timestamps, unsigned or large types, ...), a non-nullable field nested in a column, a
    non-nullable column the DataFrame's may fill with nulls."""
    from pyspark.sql import functions

    problems = [problem for column in schema if (problem := _unwritable(column))]
    sources = [f.name for f in schema] if not by_position else list(frame.columns)
    problems += [
        f"{target.name!r} is not nullable, the DataFrame's {source!r} is"
        for source, target in zip(sources, schema, strict=False)
        if not target.nullable and source in frame.columns and frame.schema[source].nullable
    ]
    if problems:
        raise SchemaMismatchError(
            f"table {table!r}: Spark's Parquet writer cannot write it as it is: {'; '.join(problems)}. Write "
            "with the data source (df.write.format('storage_adapter')), which converts and checks every "
            "value",
            key=layout.table_prefix(table),
        )
    incoming = nullable(schema_from_spark(frame.schema))  # as Spark writes it: nullable all through
    conform(table, schema, incoming.empty_table(), by_name=not by_position)
    given = {f.name: f.dataType for f in frame.schema.fields}
    targets = schema_to_spark(schema).fields
    if list(frame.columns) == [t.name for t in targets] and all(given[t.name] == t.dataType for t in targets):
        # Already the table's columns: no projection for Spark to plan (its every column is py4j calls).
        projected = frame
    else:
        projected = frame.select(
            *(
                _column(functions.col(_quoted(source)), given[source], target)
                for source, target in zip(sources, targets, strict=True)
            )
        )
    if not partition_by:
        return projected
    # Spark's hash skips a null (the running hash goes on unchanged), so (null, 'x') and ('x', null) would
    # share a folder: each value is hashed after whether it is null, never null itself.
    columns = [functions.col(_quoted(c)) for c in partition_by]
    values = functions.xxhash64(*(part for column in columns for part in (column.isNull(), column)))
    return projected.withColumn(_HIDDEN_PARTITION, values)


def _column(column: Any, given: Any, target: Any) -> Any:
    """``column`` (of Spark type ``given``) as the table's field ``target``: cast only where the types
    differ, renamed only where the names do."""
    if given != target.dataType:
        column = column.cast(target.dataType)
    return column.alias(target.name)


def _unwritable(column: pa.Field) -> str | None:
    """Why Spark's Parquet writer cannot write ``column`` as the table has it (None: it can)."""
    if not nullable(pa.schema([column.with_nullable(True)])).equals(pa.schema([column.with_nullable(True)])):
        return f"{column.name!r} has a non-nullable field inside ({column.type})"
    try:
        written = schema_from_spark(schema_to_spark(pa.schema([column]))).field(0).type
    except (TypeError, ValueError) as exc:  # PySpark's "unsupported type": no Spark type holds it
        return f"{column.name!r} is {column.type}, which Spark has no type for ({exc})"
    return None if written == column.type else f"{column.name!r} is {column.type}, Spark writes {written}"


def fits(written: pa.Schema, schema: pa.Schema) -> bool:
    """Whether a file Spark wrote with schema ``written`` holds rows of the table's ``schema``: the same
    names and types, a column non-nullable only where the file's is too (Spark keeps a DataFrame's
    nullability: a file may say non-nullable where the table allows nulls, and then holds none)."""
    return nullable(written).equals(nullable(schema), check_metadata=False) and all(
        table.nullable or not file.nullable for file, table in zip(written, schema, strict=True)
    )


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@contextlib.contextmanager
def session_settings(spark: Any, settings: Mapping[str, str]) -> Iterator[None]:
    """``settings`` on the session for the duration of the block, then the previous values (or the
    defaults) again. Session-wide: another thread's Parquet write in the same session meanwhile gets them
    too (all they change is the encoding of timestamps and decimals, to the standard one). Only settings
    whose value differs are changed. Each is read by name: ``conf.get(name, None)`` is the session's own
    value or None, where ``conf.getAll`` copies every setting out of the JVM (measured: 27 ms, against
    0.2 ms for a read)."""
    current = {name: spark.conf.get(name, None) for name in settings}
    changed = {name: value for name, value in current.items() if value != settings[name]}
    for name in changed:
        spark.conf.set(name, settings[name])
    try:
        yield
    finally:
        for name, value in changed.items():
            if value is None:
                spark.conf.unset(name)
            else:
                spark.conf.set(name, value)


def published_files(
    adapter: StorageAdapter,
    table: str,
    schema: pa.Schema,
    partition_by: Sequence[str],
    staging: str,
    local_directory: str | None = None,
) -> tuple[FragmentRef, ...]:
    """The fragments of the files Spark's job committed into ``staging``: every file there but those
    Spark's own filter skips (a name starting with ``_`` or ``.`` anywhere below the folder: its
    ``_temporary`` folder, ``_SUCCESS``, checksum files), each named with the job's one UUID and holding
    exactly the table's schema (SchemaMismatchError otherwise, with nothing published); files of no rows
    are left out. A partitioned table's files are moved into their partition folders (read from their
    footers' statistics) before they are returned. Given the ``local_directory`` the adapter's objects are
    files in (a durable local root), every file is made durable first (Spark's writer does not fsync)."""
    listed = [info for info in adapter.iter_list(staging) if _committed(info.key.removeprefix(staging + "/"))]
    jobs = {match.group(1) if (match := _SPARK_FILE.match(_name(i.key))) else None for i in listed}
    if None in jobs or len(jobs) > 1:
        strays = sorted(i.key for i in listed if not _SPARK_FILE.match(_name(i.key)))
        raise CorruptMetadataError(
            f"{staging} holds files no single Spark job wrote (jobs {sorted(map(str, jobs))}, e.g. "
            f"{(strays or [listed[0].key])[0]}): nothing published; vacuum reclaims the folder",
            key=staging,
        )
    footers = map_bounded(lambda info: _footer(adapter, info.key), listed)
    placed: list[tuple[ObjectInfo, int, Partition]] = []
    for info, footer in zip(listed, footers, strict=True):
        written = footer.schema.to_arrow_schema()
        if not fits(written, schema):
            raise SchemaMismatchError(
                f"{info.key}, written by Spark for table {table!r}, has schema {written}, not the "
                f"table's {schema}: nothing published; vacuum reclaims the folder",
                key=info.key,
            )
        if footer.num_rows:
            placed.append((info, footer.num_rows, _partition(info.key, footer, schema, partition_by)))
    if local_directory is not None:
        _fsync(local_directory, [info.key for info, _, _ in placed])
    fingerprint = schema_fingerprint(schema)
    # Every file's place, each key checked, before any file moves: a partition value no key can hold
    # refuses the write with the job's files all still in the staging folder (vacuum reclaims it).
    keys = [
        validate_key(
            layout.data_key(table, _name(info.key).removesuffix(".parquet"), partition_prefix(partition))
        )
        if partition_by  # its partition's folder: what the engine's readers and filters find it by
        else info.key
        for info, _, partition in placed
    ]

    def reference(entry: tuple[tuple[ObjectInfo, int, Partition], str]) -> FragmentRef:
        (info, rows, partition), key = entry
        if key != info.key:
            adapter.rename(info.key, key)
        written_at = info.last_modified.astimezone(UTC).isoformat(timespec="microseconds")
        return FragmentRef(table, key, rows, info.size, fingerprint, written_at, partition)

    return tuple(map_bounded(reference, list(zip(placed, keys, strict=True))))


def _committed(relative: str) -> bool:
    """Spark's filter on a path below its output folder (``FileIndex``: hidden and metadata names)."""
    return not any(part.startswith(("_", ".")) for part in relative.split("/"))


def _name(key: str) -> str:
    return key.rsplit("/", 1)[-1]


def _footer(adapter: StorageAdapter, key: str) -> pq.FileMetaData:
    """The file's footer (its tail only: one ranged read or two), read through the adapter."""
    with adapter.open_reader(key) as reader:
        return pq.read_metadata(reader)


def _partition(
    key: str, metadata: pq.FileMetaData, schema: pa.Schema, partition_by: Sequence[str]
) -> Partition:
    """The one partition of every row of the file, from its footer's statistics (each partition column
    has one value, or only nulls, in every row group); CorruptMetadataError otherwise."""
    partition: list[tuple[str, str | None]] = []
    for column in partition_by:
        index = schema.get_field_index(column)
        values: set[Any] = set()
        for group in range(metadata.num_row_groups):
            chunk = metadata.row_group(group).column(index)
            stats = chunk.statistics
            if stats is None or (stats.null_count != chunk.num_values and not stats.has_min_max):
                raise CorruptMetadataError(
                    f"{key} has no statistics for partition column {column!r}: its partition is unknown "
                    "(Spark's writer keeps no minimum and maximum over 4 KiB together: a value that long "
                    "is no partition value a key can hold); nothing published; vacuum reclaims the folder",
                    key=key,
                )
            if stats.null_count:
                values.add(None)
            if stats.has_min_max:
                values.update({stats.min, stats.max})
        if len(values) != 1:
            raise CorruptMetadataError(
                f"{key} holds several values of partition column {column!r} ({sorted(map(repr, values))[:3]}): "
                "nothing published; vacuum reclaims the folder",
                key=key,
            )
        (value,) = values
        text = None if value is None else partition_texts(pa.array([value], schema.field(column).type))[0]
        partition.append((column, text))
    return tuple(partition)


def _fsync(root: str, keys: Sequence[str]) -> None:
    """Make the files at ``keys`` (written by Spark, which does not fsync) and their folders durable, as
    every write of a durable local adapter is: each file, then every folder from theirs up to ``root``."""

    def sync(path: str) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    map_bounded(sync, [f"{root}/{key}" for key in keys])
    folders = {"/".join(key.split("/")[:depth]) for key in keys for depth in range(1, key.count("/") + 1)}
    map_bounded(sync, [root, *(f"{root}/{folder}" for folder in sorted(folders))])


def hadoop_location(adapter: StorageAdapter, spark: Any, *, reading: bool = False) -> HadoopRoot:
    """The root of ``adapter`` as Spark's Hadoop filesystems name it, with the settings that reach it (its
    backend's ``hadoop_root``: ``file://`` as it is; ``s3://bucket/prefix`` as ``s3a://bucket/prefix``
    with the adapter's S3 options as per-bucket ``fs.s3a.bucket.<bucket>.*`` settings), when the cluster
    can load the filesystem it needs (asked of the driver's JVM, or on Connect of the server).
    UnsupportedOperationError naming the data source as the way otherwise (an adapter the registry did not
    open, a backend no Hadoop filesystem reaches), for Spark's Parquet reader when ``reading`` (the native
    read), its writer otherwise."""
    if not isinstance(adapter, ObjectStorageAdapter):
        raise _unreachable(
            adapter, "it was not opened through the registry, which names Hadoop roots", reading
        )
    config = adapter.config
    backend = backend_named(config.backend)
    if backend.hadoop_root is None:
        raise _unreachable(
            adapter, f"Spark's Hadoop filesystems do not reach {backend.name} storage", reading
        )
    root = backend.hadoop_root(config, adapter.url)
    if root.filesystem_class is not None and not _has_class(spark, root.filesystem_class):
        raise _unreachable(
            adapter,
            f"this Spark cannot load {root.filesystem_class} (not on its classpath, as its "
            f"{'Connect server' if is_connect(spark) else 'driver'} answers: the PySpark "
            "wheel ships no hadoop-aws); a cluster needs hadoop-aws matching its Hadoop and the AWS SDK bundle",
            reading,
        )
    return root


def _unreachable(adapter: StorageAdapter, reason: str, reading: bool = False) -> UnsupportedOperationError:
    way = (
        "Read with the data source (spark.read.format('storage_adapter'))"
        if reading
        else "Write with the data source (df.write.format('storage_adapter'))"
    )
    return UnsupportedOperationError(
        f"Spark's Parquet {'reader' if reading else 'writer'} cannot reach {adapter.url}: {reason}. {way}, "
        "which reaches any root through the adapter",
        key=adapter.url,
        backend=adapter.backend,
    )


def _has_class(spark: Any, name: str) -> bool:
    """Whether the cluster can load class ``name``. A classic session asks its driver's JVM; a Spark
    Connect client has none, and asks the server: one SQL query calling Spark's own
    ``Utils.classIsLoadable`` by reflection there (``try_reflect``: None, i.e. False, where it cannot)."""
    if is_connect(spark):
        query = "SELECT try_reflect('org.apache.spark.util.Utils', 'classIsLoadable', :name) AS loadable"
        rows = spark.sql(query, args={"name": name}).collect()
        return bool(rows) and rows[0][0] == "true"
    jvm = getattr(spark.sparkContext, "_jvm", None)
    if jvm is None:
        return False
    try:
        jvm.java.lang.Class.forName(name)
    except Exception:  # py4j's ClassNotFoundException: the answer asked for, not a failure
        return False
    return True


def check_shared_root(spark: Any, adapter: StorageAdapter, hadoop: HadoopRoot, table: str) -> None:
    """On Spark Connect, the server's Spark writes the files and this client lists, checks, fsyncs and
    publishes them through its adapter: correct only where both reach the same storage. A probe file
    written here with a fresh token must read back through the server (one small job); otherwise
    UnsupportedOperationError, before anything is written (the probe is deleted either way). Needed for a
    ``file://`` root (the server's disk is the client's only when they share it); an S3 bucket is one
    bucket wherever it is read from, checked the same way."""
    token = uuid.uuid4().hex
    key = f"{layout.staging_prefix(table, token)}/probe.txt"
    adapter.write(key, token.encode())
    try:
        try:
            seen = [row[0] for row in spark.read.text(f"{hadoop.uri}/{key}").collect()]
        except Exception as exc:  # the server's Spark cannot read it (a path it does not have)
            seen = [f"unreadable: {type(exc).__name__}"]
    finally:
        with contextlib.suppress(Exception):
            adapter.delete(key)
    if seen != [token]:
        raise UnsupportedOperationError(
            f"Spark Connect: the server's Spark does not see {adapter.url} as this client does (a probe "
            "written here did not read back there: no shared filesystem). The native path publishes, "
            "from this client, the files the server writes: run it in a classic session next to the "
            "data, or write with the data source (df.write.format('storage_adapter')), whose every step "
            "runs in the server's Python workers",
            key=adapter.url,
            backend=adapter.backend,
        )


def nullable(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every field nullable, nested ones included (Spark's ``asNullable``: what tables
    created from a DataFrame get, as Spark's own tables do)."""
    return pa.schema([_nullable_field(f) for f in schema])


def _nullable_field(field: pa.Field) -> pa.Field:
    kind = field.type
    if pa.types.is_struct(kind):
        kind = pa.struct([_nullable_field(kind.field(i)) for i in range(kind.num_fields)])
    elif pa.types.is_list(kind):
        kind = pa.list_(_nullable_field(kind.value_field))
    elif pa.types.is_large_list(kind):
        kind = pa.large_list(_nullable_field(kind.value_field))
    elif pa.types.is_map(kind):
        kind = pa.map_(kind.key_field, _nullable_field(kind.item_field))
    return field.with_type(kind).with_nullable(True)
