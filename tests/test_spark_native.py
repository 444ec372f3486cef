"""The native-writer path (storage_adapter.spark.native.write): Spark's own Parquet writer into a staging
folder under the table, exactly the files its job committed published in ONE engine commit, with the data
source's exactly-once rules; types in their exact encodings; refusals before any job; a failed job leaves
only what vacuum reclaims. On local (``file://``: the one root Spark's Hadoop filesystem reaches here);
memory and S3 (no ``hadoop-aws`` in the PySpark wheel) are refused, naming the data source."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage_adapter import ConfigurationError, InvalidKeyError, UnsupportedOperationError, open_adapter
from storage_adapter.builtin_backends import s3a_options
from storage_adapter.engine import CorruptMetadataError, Engine, SchemaMismatchError, layout
from storage_adapter.spark import write
from storage_adapter.spark.native import hadoop_location, published_files

SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("score", pa.float64())])


@pytest.fixture
def engine(tmp_path: Path) -> Engine:
    """An engine on a local root: the one Spark's Hadoop filesystem reaches here."""
    return Engine.open(f"file://{tmp_path}")


def frame_of(spark: Any, rows: int, first: int = 0, days: int = 3, partitions: int = 2) -> Any:
    return spark.range(first, first + rows, numPartitions=partitions).selectExpr(
        "id", f"concat('d', CAST(id % {days} AS STRING)) AS day", "CAST(id AS DOUBLE) / 2 AS score"
    )


def staged(engine: Engine, table: str) -> list[str]:
    return [i.key for i in engine.adapter.list(f"{layout.data_prefix(table)}/{layout.STAGING_FOLDER}")]


def ids(engine: Engine, table: str) -> list[int]:
    return sorted(engine.read(table).column("id").to_pylist())


def test_exactly_the_committed_files_are_published_in_one_commit(engine: Engine, spark: Any) -> None:
    """Unpartitioned: the job's files stay where Spark wrote them, every one named with the job's UUID;
    Spark's other files (``_SUCCESS``, checksums) are left to vacuum, which keeps the published ones."""
    engine.create_table("events", SCHEMA)
    before = engine.snapshot().version
    load = write(frame_of(spark, 1_000), engine, "events")
    assert load.commit is not None and load.commit.version == before + 1 and load.rows == 1_000
    assert ids(engine, "events") == list(range(1_000))
    published = {f.key for f in engine.files("events")}
    parquet = {k for k in staged(engine, "events") if k.rsplit("/", 1)[-1].startswith("part-")}
    assert published == parquet and len(published) == 2
    assert len({k.split("-", 6)[-1].split(".")[0] for k in published}) == 1  # one job UUID in every name
    assert any(k.endswith("/_SUCCESS") for k in staged(engine, "events"))
    reclaimed = set(engine.vacuum(grace_s=0).deleted)
    assert reclaimed and not reclaimed & published and set(staged(engine, "events")) == published


def test_partitions_overwrite_and_replace_where_follow_the_engine(engine: Engine, spark: Any) -> None:
    """Partitioned: each file is moved into its partition folder (read from its footer), so the engine's
    filters prune it; a partition overwrite replaces only its partitions; empty appends publish nothing."""
    engine.create_table("events", SCHEMA, partition_by=["day"])
    write(frame_of(spark, 300), engine, "events")
    assert {dict(f.partition)["day"] for f in engine.files("events")} == {"d0", "d1", "d2"}
    assert all(
        f.key.startswith(f"tables/events/data/day={dict(f.partition)['day']}/")
        for f in engine.files("events")
    )
    assert engine.read("events", where={"day": ["d1"]}).num_rows == 100
    version = engine.snapshot().version
    write(
        frame_of(spark, 12, first=5_000, days=1),
        engine,
        "events",
        mode="overwrite",
        replace_where={"day": ["d0"]},
    )
    assert engine.snapshot().version == version + 1
    assert sorted(engine.read("events", where={"day": ["d0"]}).column("id").to_pylist()) == list(
        range(5_000, 5_012)
    )
    assert engine.read("events").num_rows == 12 + 200
    with pytest.raises(SchemaMismatchError, match="outside the partitions"):
        write(frame_of(spark, 30), engine, "events", mode="overwrite", replace_where={"day": ["d0"]})
    assert engine.read("events").num_rows == 212
    version = engine.snapshot().version
    empty = write(frame_of(spark, 0), engine, "events")
    assert empty.commit is None and engine.snapshot().version == version
    write(frame_of(spark, 0), engine, "events", mode="overwrite")
    assert engine.read("events").num_rows == 0


def test_partition_values_that_differ_only_in_where_their_nulls_are_stay_apart(
    engine: Engine, spark: Any
) -> None:
    """The staging files are partitioned by a hash of the partition values: one that skipped nulls gave
    (None, 'x') and ('x', None) one file, refused as holding two partitions. Each combination of values
    and nulls has a file of its own, in one task as in several."""
    schema = pa.schema([("id", pa.int64()), ("a", pa.string()), ("b", pa.string()), ("n", pa.int32())])
    engine.create_table("pairs", schema, partition_by=["a", "b", "n"])
    rows = [(1, None, "x", 1), (2, "x", None, 1), (3, None, None, 1), (4, "x", "x", None), (5, "x", "x", 1)]
    rows += [(6, None, "x", None), (7, "x", None, None), (8, None, None, None)]
    frame = spark.createDataFrame(rows, "id long, a string, b string, n int").coalesce(1)
    write(frame, engine, "pairs")
    assert sorted(engine.read("pairs").to_pylist(), key=lambda r: r["id"]) == [
        dict(zip(("id", "a", "b", "n"), row, strict=True)) for row in rows
    ]
    text = [tuple(None if v is None else str(v) for v in row[1:]) for row in rows]  # partition values: text
    published = [tuple(v for _, v in f.partition) for f in engine.files("pairs")]
    assert sorted(published, key=str) == sorted(text, key=str)  # one file per combination


def test_a_rerun_is_a_replay_and_runs_no_job(engine: Engine, spark: Any) -> None:
    engine.create_table("events", SCHEMA)
    frame = frame_of(spark, 40)
    first = write(frame, engine, "events", app_id="nightly", app_version=3)
    keyed = write(frame, engine, "events", idempotency_key="load-2026-11-28")
    folders = staged(engine, "events")
    again = write(frame, engine, "events", app_id="nightly", app_version=3)
    older = write(frame, engine, "events", app_id="nightly", app_version=2)
    rekeyed = write(frame, engine, "events", idempotency_key="load-2026-11-28")
    assert first.commit is not None and keyed.commit is not None
    assert again.commit is not None and again.commit.replayed and again.commit.version == first.commit.version
    assert older.commit is not None and older.commit.replayed and again.fragments == () == rekeyed.fragments
    assert rekeyed.commit is not None and rekeyed.commit.version == keyed.commit.version
    assert staged(engine, "events") == folders, "a replay runs no job"
    assert engine.read("events").num_rows == 80 and engine.app_version("nightly") == 3


def test_every_type_lands_in_the_encoding_the_table_needs(engine: Engine, spark: Any) -> None:
    """Timestamps as int64 microseconds (not Spark's default INT96), decimals of every width, dates,
    small integers and nested types: the table created from the DataFrame reads back as Spark wrote it."""
    frame = spark.sql(
        """SELECT id, CAST(id AS TIMESTAMP) AS ts, CAST(CAST(id AS TIMESTAMP) AS TIMESTAMP_NTZ) AS ntz,
           CAST(id AS DECIMAL(9, 2)) AS d9, CAST(id AS DECIMAL(18, 4)) AS d18, CAST(id AS DECIMAL(30, 5)) AS d30,
           DATE'2026-11-28' + CAST(id AS INT) AS dt, CAST(id AS TINYINT) AS b, CAST(id AS SMALLINT) AS s,
           CAST(id AS FLOAT) AS f, id % 2 = 0 AS flag, CAST(CAST(id AS STRING) AS BINARY) AS bin,
           array(id, id + 1) AS arr, named_struct('a', id, 'b', CAST(id AS STRING)) AS st, map('k', id) AS m
           FROM range(50)"""
    )
    load = write(frame, engine, "typed", create_table=True)
    table = engine.read("typed").sort_by("id")
    assert table.schema.equals(engine.snapshot().schema("typed"))
    assert table.to_pylist() == frame.toArrow().sort_by("id").cast(table.schema).to_pylist()
    footer = pq.read_metadata(engine.adapter.open_reader(load.fragments[0].key))
    physical = {
        footer.schema.column(i).path: footer.schema.column(i).physical_type for i in range(footer.num_columns)
    }
    assert (physical["ts"], physical["ntz"]) == ("INT64", "INT64")
    assert (physical["d9"], physical["d18"], physical["d30"]) == ("INT32", "INT64", "FIXED_LEN_BYTE_ARRAY")


def test_columns_are_cast_and_ordered_as_the_table_and_the_session_settings_come_back(
    engine: Engine, spark: Any
) -> None:
    """A frame in another column order with a narrower type is projected onto the table (cast, reordered),
    one already in the table's shape is written as it is; the Parquet settings the write needs are the
    session's only for the write: a value the session set is restored, an unset one unset again."""
    engine.create_table("events", SCHEMA)
    narrower = frame_of(spark, 30).selectExpr("score", "day", "CAST(id AS INT) AS id")
    spark.conf.set("spark.sql.parquet.outputTimestampType", "INT96")
    spark.conf.unset("spark.sql.parquet.datetimeRebaseModeInWrite")
    try:
        write(narrower, engine, "events")
        write(frame_of(spark, 30, first=30), engine, "events")
        assert spark.conf.get("spark.sql.parquet.outputTimestampType") == "INT96"
        assert "spark.sql.parquet.datetimeRebaseModeInWrite" not in spark.conf.getAll
    finally:
        spark.conf.unset("spark.sql.parquet.outputTimestampType")
    assert engine.read("events").schema.equals(SCHEMA) and ids(engine, "events") == list(range(60))


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (pa.schema([("id", pa.int64()), ("at", pa.timestamp("ns", "UTC"))]), "Spark writes timestamp"),
        (pa.schema([("id", pa.int64()), ("at", pa.large_string())]), "Spark writes string"),
        (pa.schema([("id", pa.uint32()), ("at", pa.string())]), "Spark has no type for"),
        (pa.schema([pa.field("id", pa.int64(), nullable=False), ("at", pa.string())]), "not nullable"),
    ],
)
def test_a_table_spark_cannot_write_exactly_is_refused_before_any_job(
    engine: Engine, spark: Any, schema: pa.Schema, message: str
) -> None:
    engine.create_table("exact", schema)
    frame = spark.range(10).selectExpr("CAST(id AS BIGINT) AS id", "CAST(id AS STRING) AS at")
    if not schema.field("id").nullable:
        frame = spark.createDataFrame([(1, "a"), (None, "b")], "id BIGINT, at STRING")
    with pytest.raises(SchemaMismatchError, match=message) as info:
        write(frame, engine, "exact")
    assert "data source" in str(info.value)
    assert staged(engine, "exact") == [] and engine.read("exact").num_rows == 0


def test_a_refused_write_creates_no_table(engine: Engine, spark: Any) -> None:
    """create_table=True creates the table only once everything else is known to be right (issue 43: a
    wrong option was refused after the table existed)."""
    for wrong in ({"mode": "bogus"}, {"app_version": 1}, {"mode": "append", "replace_where": {"day": "d0"}}):
        with pytest.raises(ValueError):
            write(frame_of(spark, 10), engine, "never", create_table=True, **wrong)
    memory = Engine.open("memory://native-refused-create")
    with pytest.raises(UnsupportedOperationError):
        write(frame_of(spark, 10), memory, "never", create_table=True)
    assert engine.snapshot().tables == [] and memory.snapshot().tables == []
    assert engine.adapter.list("tables") == []


@pytest.mark.parametrize("length", [250, 5_000])
def test_a_partition_value_no_key_can_hold_is_refused_creating_nothing_and_moving_nothing(
    engine: Engine, spark: Any, length: int
) -> None:
    """Known only once the job has run: a partition value longer than a key segment (250 characters), or
    so long that Spark's writer keeps no statistics of it (5,000). The write is refused naming the
    column; no file left the staging folder (vacuum reclaims it), and create_table created nothing: the
    table is created only once its files are known to be publishable."""
    frame = spark.createDataFrame([(1, "x" * length), (2, "short")], "id long, tag string").coalesce(1)
    with pytest.raises((InvalidKeyError, CorruptMetadataError), match="tag") as info:
        write(frame, engine, "tagged", create_table=True, partition_by=["tag"])
    if length > 4_096:
        assert "statistics" in str(info.value) and "4 KiB" in str(info.value)
    assert engine.snapshot().tables == []
    left = [i.key for i in engine.adapter.list("tables/tagged/data")]
    assert left and all(f"/{layout.STAGING_FOLDER}/" in key for key in left), left
    engine.vacuum(grace_s=0)
    assert engine.adapter.list("tables") == []


def test_create_table_makes_the_table_once_the_job_has_run(engine: Engine, spark: Any) -> None:
    """The table appears with the write's own commit right after it (created, then published: two
    versions), partitioned as asked; a second create_table write into it appends, and one that asks for
    other partition columns is refused before any job (as the data source's partitionBy is)."""
    load = write(frame_of(spark, 30), engine, "made", create_table=True, partition_by=["day"])
    assert load.commit is not None and load.commit.version == 2
    assert engine.partition_by("made") == ("day",) and ids(engine, "made") == list(range(30))
    write(frame_of(spark, 30, first=30), engine, "made", create_table=True, partition_by=["day"])
    assert ids(engine, "made") == list(range(60))
    with pytest.raises(ConfigurationError, match="partition"):
        write(frame_of(spark, 10), engine, "made", create_table=True, partition_by=["id"])
    assert ids(engine, "made") == list(range(60))


def test_roots_spark_cannot_reach_name_the_data_source(spark: Any) -> None:
    """memory (per-process) and S3 without hadoop-aws (the PySpark wheel has none): refused before any
    job, naming the data source as the way."""
    engine = Engine.open("memory://native-unreached")
    engine.create_table("events", SCHEMA)
    with pytest.raises(UnsupportedOperationError, match=r"df\.write\.format\('storage_adapter'\)"):
        write(frame_of(spark, 10), engine, "events")
    assert engine.adapter.list("tables/events/data") == []
    s3 = open_adapter("s3://lake/warehouse", endpoint="http://127.0.0.1:9", allow_http=True, anonymous=True)
    with pytest.raises(UnsupportedOperationError, match="no hadoop-aws") as info:
        hadoop_location(s3, spark)  # what write asks first: no request is made
    assert "df.write.format('storage_adapter')" in str(info.value)


def test_a_failed_job_publishes_nothing_and_vacuum_reclaims_its_staging_folder(
    engine: Engine, spark: Any
) -> None:
    engine.create_table("events", SCHEMA, partition_by=["day"])
    write(frame_of(spark, 30), engine, "events")
    version, files = engine.snapshot().version, {f.key for f in engine.files("events")}
    failing = frame_of(spark, 4_000).selectExpr(
        "id", "day", "CASE WHEN id = 3999 THEN raise_error('the job fails') ELSE score END AS score"
    )
    with pytest.raises(Exception, match="the job fails"):
        write(failing, engine, "events")
    assert engine.snapshot().version == version and ids(engine, "events") == list(range(30))
    engine.vacuum(grace_s=0)
    assert staged(engine, "events") == [] and {f.key for f in engine.files("events")} == files
    assert {i.key for i in engine.adapter.list("tables/events/data")} == files


def test_staged_files_no_single_job_wrote_are_refused(engine: Engine) -> None:
    """Only a Spark job's files, all named with its UUID, are published from a staging folder."""
    engine.create_table("events", SCHEMA)
    staging = layout.staging_prefix("events", uuid.uuid4().hex)
    body = pa.BufferOutputStream()
    pq.write_table(SCHEMA.empty_table(), body)
    for job in (uuid.uuid4(), uuid.uuid4()):
        engine.adapter.write(f"{staging}/part-00000-{job}-c000.snappy.parquet", body.getvalue().to_pybytes())
    with pytest.raises(CorruptMetadataError, match="no single Spark job"):
        published_files(engine.adapter, "events", SCHEMA, (), staging)


def test_s3_options_map_to_s3a_settings_of_the_bucket() -> None:
    options = {
        "endpoint": "http://127.0.0.1:8333",
        "region": "eu-west-1",
        "access_key_id": "AKID",
        "secret_access_key": "secret-value",
        "virtual_hosted_style": False,
    }
    assert s3a_options("lake", options) == {
        "fs.s3a.bucket.lake.path.style.access": "true",
        "fs.s3a.bucket.lake.endpoint": "http://127.0.0.1:8333",
        "fs.s3a.bucket.lake.connection.ssl.enabled": "false",
        "fs.s3a.bucket.lake.endpoint.region": "eu-west-1",
        "fs.s3a.bucket.lake.access.key": "AKID",
        "fs.s3a.bucket.lake.secret.key": "secret-value",
    }
    assert s3a_options("lake", {"anonymous": True, "virtual_hosted_style": True}) == {
        "fs.s3a.bucket.lake.path.style.access": "false",
        "fs.s3a.bucket.lake.aws.credentials.provider": "org.apache.hadoop.fs.s3a.AnonymousAWSCredentialsProvider",
    }
    with pytest.raises(UnsupportedOperationError, match="profile"):
        s3a_options("lake", {"profile": "dev"})
