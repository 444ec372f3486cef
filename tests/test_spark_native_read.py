"""The native read (storage_adapter.spark.read): Spark's own Parquet reader over exactly one snapshot's
files, never the data folder's listing; ``version=``; partition columns with their values and types; the
data source's types; column pruning and filter push-down in Spark's plan; typed errors before any Spark
job. On local (``file://``); S3 without ``hadoop-aws`` (the PySpark wheel's case) is refused, naming the
data source."""

from __future__ import annotations

import datetime
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage_adapter import ConfigurationError, UnsupportedOperationError
from storage_adapter.engine import (
    Engine,
    EngineSettings,
    HistoryExpiredError,
    SchemaMismatchError,
    UnknownTableError,
    layout,
)
from storage_adapter.engine.request import CommitRequest
from storage_adapter.spark import SparkInputError, read, typed_errors, write

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("score", pa.float64())])


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    return Engine.open(f"file://{tmp_path}")


def rows_of(table: pa.Table) -> list[tuple[Any, ...]]:
    return sorted(zip(*(table.column(n).to_pylist() for n in table.column_names), strict=True), key=repr)


def spark_rows(frame: Any) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in frame.collect()), key=repr)


def events(ids: range, days: int = 3) -> pa.Table:
    return pa.table(
        {"id": list(ids), "day": [f"d{i % days}" for i in ids], "score": [i / 2 for i in ids]}, schema=SCHEMA
    )


def data_source(spark: Any, engine: Engine, table: str, **options: str) -> Any:
    reader = spark.read.format("storage_adapter").option("table", table).options(**options)
    return reader.load(engine.adapter.url)


def test_exactly_the_snapshots_rows_whatever_else_the_data_folder_holds(engine: Engine, spark: Any) -> None:
    """The data folder holds an overwritten version, a failed job's fragments (written, never committed)
    and an orphan of the table's schema: the read is exactly the snapshot's rows; ``version=`` the older
    snapshot's; reading the folder itself would not be."""
    engine.create_table("events", SCHEMA)
    first = engine.commit({"events": events(range(0, 40))}).version
    engine.commit({"events": events(range(100, 130))}, CommitRequest(mode="overwrite"))
    engine.write_fragments("events", events(range(500, 510)))  # a failed job's fragments: never committed
    orphan = f"{engine.adapter.url.removeprefix('file://')}/{layout.data_prefix('events')}/orphan.parquet"
    pq.write_table(events(range(900, 905)), orphan)
    latest = engine.snapshot()

    frame = read(spark, engine, "events")
    assert frame.columns == SCHEMA.names
    assert spark_rows(frame) == rows_of(engine.read("events", latest)) == rows_of(events(range(100, 130)))
    older = read(spark, engine.adapter.url, "events", version=first)
    assert spark_rows(older) == rows_of(engine.read("events", first)) == rows_of(events(range(0, 40)))
    folder = f"{engine.adapter.url}/{layout.data_prefix('events')}"
    listed = spark.read.schema(frame.schema).parquet(folder).count()
    assert listed == 30 + 40 + 10 + 5  # what the listing would have given


def test_partitioned_table_gives_partition_columns_their_values_and_types(engine: Engine, spark: Any) -> None:
    """Partition columns (string with a space, a '%' and null; int; date) keep the table's types and each
    row its values; the schema is the data source's; a partition written by the native write reads too."""
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("day", pa.date32()),
            ("tag", pa.string()),
            ("n", pa.int32()),
            ("v", pa.float64()),
        ]
    )
    engine.create_table("parts", schema, partition_by=["tag", "n", "day"])
    day = datetime.date(2026, 11, 25)
    data = pa.table(
        {
            "id": [1, 2, 3, 4, 5],
            "day": [day, day, datetime.date(1000, 1, 1), day, None],
            "tag": ["a b", "x%y", None, "a b", "z"],
            "n": [1, 2, 3, None, 1],
            "v": [0.5, 1.5, 2.5, 3.5, 4.5],
        },
        schema=schema,
    )
    engine.commit({"parts": data})
    frame = read(spark, engine, "parts")
    assert frame.schema == data_source(spark, engine, "parts").schema
    assert [f.dataType.simpleString() for f in frame.schema] == ["bigint", "date", "string", "int", "double"]
    assert spark_rows(frame) == rows_of(engine.read("parts")) == rows_of(data)
    assert spark_rows(frame.where("tag = 'a b'").select("id", "n")) == [(1, 1), (4, None)]
    write(frame.where("n = 1").selectExpr("id + 10 AS id", "day", "tag", "n", "v"), engine, "parts")
    assert spark_rows(read(spark, engine, "parts").where("id > 10").select("id", "tag")) == [
        (11, "a b"),
        (15, "z"),
    ]


def test_types_are_the_data_sources(engine: Engine, spark: Any) -> None:
    """Every type the engine stores that Spark reads exactly: the same Spark schema and values as the data
    source's read (naive timestamps as TIMESTAMP_NTZ, large strings as strings)."""
    schema = pa.schema(
        [
            ("naive", pa.timestamp("us")),
            ("utc", pa.timestamp("us", "UTC")),
            ("ms", pa.timestamp("ms", "UTC")),
            ("big", pa.large_string()),
            ("dec", pa.decimal128(10, 2)),
            ("tiny", pa.int8()),
            ("raw", pa.binary()),
            ("items", pa.list_(pa.int64())),
            ("inner", pa.struct([("a", pa.int32()), ("b", pa.string())])),
            ("labels", pa.map_(pa.string(), pa.int64())),
        ]
    )
    moment = datetime.datetime(2026, 11, 25, 12, 30, 1, 250_000)
    value = {
        "naive": moment,
        "utc": moment.replace(tzinfo=datetime.UTC),
        "ms": moment.replace(tzinfo=datetime.UTC),
        "big": "long text",
        "dec": Decimal("12.50"),
        "tiny": -3,
        "raw": b"\x00\x01",
        "items": [1, 2],
        "inner": {"a": 1, "b": "x"},
        "labels": [("k", 7)],
    }
    engine.create_table("typed", schema)
    engine.commit({"typed": pa.Table.from_pylist([value, dict.fromkeys(value)], schema=schema)})
    native, source = read(spark, engine, "typed"), data_source(spark, engine, "typed")
    assert native.schema == source.schema
    assert spark_rows(native) == spark_rows(source)


def test_pruning_and_pushdown_are_sparks(engine: Engine, spark: Any) -> None:
    """One column selected: ``ReadSchema`` lists only it; a filter is in ``PushedFilters``; and a filter
    on a partition column is pushed down like any other (its files' statistics hold one value)."""
    engine.create_table("events", SCHEMA, partition_by=["day"])
    engine.commit({"events": events(range(60))})
    frame = read(spark, engine, "events")
    plan = frame.where("score > 10").select("score")._jdf.queryExecution().executedPlan().toString()
    assert "ReadSchema: struct<score:double>" in plan
    assert "GreaterThan(score,10.0)" in plan.split("PushedFilters:")[1]
    plan = frame.where("day = 'd1'").select("id")._jdf.queryExecution().executedPlan().toString()
    assert "EqualTo(day,d1)" in plan.split("PushedFilters:")[1]
    assert frame.where("day = 'd1'").count() == 20


def test_empty_table_is_an_empty_frame_of_its_schema(engine: Engine, spark: Any) -> None:
    engine.create_table("empty", SCHEMA, partition_by=["day"])
    frame = read(spark, engine, "empty")
    assert frame.columns == SCHEMA.names and frame.count() == 0
    assert frame.schema == data_source(spark, engine, "empty").schema


def test_refusals_are_typed_and_before_any_spark_job(tmp_path: Path, spark: Any) -> None:
    """Unknown table (naming it and the root), an expired version, a table Spark cannot read exactly, a
    non-session, memory and S3 without hadoop-aws: typed errors raised in this process, before Spark runs
    anything (nothing here would be a job: the errors come first)."""
    engine = Engine.open(f"file://{tmp_path}", settings=EngineSettings(retention=2))
    engine.create_table("events", SCHEMA)
    for start in range(0, 50, 10):
        engine.commit({"events": events(range(start, start + 10))})
    with pytest.raises(UnknownTableError, match="'nope'") as info:
        read(spark, engine, "nope")
    assert engine.adapter.url in str(info.value)
    with pytest.raises(HistoryExpiredError):
        read(spark, engine, "events", version=1)
    engine.create_table("nanos", pa.schema([("at", pa.timestamp("ns"))]))
    with pytest.raises(SchemaMismatchError, match="nanosecond") as mismatch:
        read(spark, engine, "nanos")
    assert "spark.read.format('storage_adapter')" in str(mismatch.value)
    with pytest.raises(SparkInputError):
        read(object(), engine, "events")
    with pytest.raises(ConfigurationError, match="already open"):
        read(spark, engine, "events", options={"region": "x"})
    memory = Engine.open(f"memory://native-read-{uuid.uuid4().hex}")
    memory.create_table("events", SCHEMA)
    with pytest.raises(UnsupportedOperationError, match=r"spark\.read\.format\('storage_adapter'\)"):
        read(spark, memory, "events")
    s3 = {"endpoint": "http://127.0.0.1:9", "allow_http": True, "anonymous": True}  # nothing listens there
    with pytest.raises(UnsupportedOperationError, match="no hadoop-aws") as unreachable:
        read(spark, "s3://lake/warehouse", "events", options=s3)  # refused before any request
    assert "Parquet reader" in str(unreachable.value)
    assert "spark.read.format('storage_adapter')" in str(unreachable.value)


@pytest.mark.parametrize(
    "kind",
    [pa.uint32(), pa.float16(), pa.date64(), pa.decimal256(40, 2), pa.list_(pa.decimal256(39, 0))],
    ids=str,
)
def test_a_column_spark_has_no_type_for_is_refused_by_both_reads_naming_it(
    engine: Engine, spark: Any, kind: pa.DataType
) -> None:
    """No Spark path can read it: a typed SchemaMismatchError naming the table and the column, that does
    not send the reader to the data source, raised here by the native read and relayed by the data
    source's (a decimal over 38 digits used to pass PySpark and fail in the JVM, untyped)."""
    schema = pa.schema([("id", pa.int64()), ("odd", kind)])
    engine.create_table("odd", schema)
    with pytest.raises(SchemaMismatchError, match="'odd'") as info:
        read(spark, engine, "odd")
    assert str(kind) in str(info.value) and "storage_adapter')" not in str(info.value)
    with pytest.raises(SchemaMismatchError, match="Spark has no type for 'odd'"), typed_errors():
        data_source(spark, engine, "odd").collect()


def test_columns_equal_but_for_case_are_refused_unless_spark_is_case_sensitive(
    engine: Engine, spark: Any
) -> None:
    """Spark's reader takes ``id`` and ``ID`` for one column (``spark.sql.caseSensitive`` is off by
    default): refused naming both, the data source as the way (it reads them); read when it is on."""
    schema = pa.schema([("id", pa.int64()), ("ID", pa.int64())])
    engine.create_table("cased", schema)
    engine.commit({"cased": pa.table({"id": [1, 2], "ID": [10, 20]}, schema=schema)})
    with pytest.raises(SchemaMismatchError, match=r"\['id', 'ID'\]") as info:
        read(spark, engine, "cased")
    assert "spark.read.format('storage_adapter')" in str(info.value)
    assert spark_rows(data_source(spark, engine, "cased")) == [(1, 10), (2, 20)]
    spark.conf.set("spark.sql.caseSensitive", "true")
    try:
        assert spark_rows(read(spark, engine, "cased")) == [(1, 10), (2, 20)]
    finally:
        spark.conf.unset("spark.sql.caseSensitive")


def test_a_root_spark_would_read_as_a_glob_pattern_is_refused(tmp_path: Path, spark: Any) -> None:
    engine = Engine.open(f"file://{tmp_path}/lake[1]")
    engine.create_table("events", SCHEMA)
    with pytest.raises(ConfigurationError, match="glob"):
        read(spark, engine, "events")
