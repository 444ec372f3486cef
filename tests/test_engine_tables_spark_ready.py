"""Issue 19, engine side: partitioned tables, partition overwrite (replace_where), the schema rules of
``conform``, the public file list (``Engine.files``), projection and pruning in ``read``. Every test runs on
every embedded backend (memory, local, SeaweedFS)."""

from __future__ import annotations

import datetime as dt
import pickle

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from storage_adapter.engine import (
    CommitConflictError,
    CommitRequest,
    DataFile,
    Engine,
    SchemaMismatchError,
    UnknownTableError,
    conform,
    layout,
)
from storage_adapter.engine import failpoints as fp
from storage_adapter.engine.layout import MANIFEST_KEY
from storage_adapter.errors import InvalidKeyError

EVENTS = pa.schema(
    [("id", pa.int64()), ("day", pa.date32()), ("region", pa.string()), ("score", pa.float64())]
)
D1, D2, D3 = dt.date(2024, 5, 1), dt.date(2024, 5, 2), dt.date(2024, 5, 3)


def events(ids: list[int], days: list[dt.date], regions: list[str | None]) -> pa.Table:
    return pa.table(
        {"id": ids, "day": days, "region": regions, "score": [float(i) for i in ids]}, schema=EVENTS
    )


@pytest.fixture
def engine(adapter):
    eng = Engine.open(adapter, actor="tester")
    eng.create_table("ev", EVENTS, partition_by=["day", "region"])
    eng.create_table("flat", EVENTS)
    yield eng
    fp.disarm()


def ids_of(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def rows_of_files(engine: Engine, files: tuple[DataFile, ...]) -> int:
    return sum(
        pq.ParquetFile(pa.BufferReader(engine.adapter.read_bytes(f.key))).metadata.num_rows for f in files
    )


# -- partitioned tables ----------------------------------------------------------------------------------
def test_partition_columns_are_stored_and_fragments_laid_out_per_partition(engine, adapter):
    assert engine.partition_by("ev") == ("day", "region") and engine.partition_by("flat") == ()
    assert Engine.open(adapter, read_only=True).partition_by("ev") == ("day", "region")  # durable
    assert engine.snapshot().partition_by("ev") == ("day", "region")
    assert engine.snapshot().schema("ev") == EVENTS  # the stored metadata is not the user's schema
    data = events([1, 2, 3, 4], [D1, D2, D1, D1], ["eu", "eu", "us", "eu"])
    refs = engine.write_fragments("ev", data)
    assert [r.partition for r in refs] == [
        (("day", "2024-05-01"), ("region", "eu")),
        (("day", "2024-05-02"), ("region", "eu")),
        (("day", "2024-05-01"), ("region", "us")),
    ]
    assert [r.rows for r in refs] == [2, 1, 1]
    assert refs[0].key.startswith("tables/ev/data/day=2024-05-01/region=eu/")
    assert pickle.loads(pickle.dumps(refs[0])) == refs[0]
    engine.commit_fragments({"ev": refs})
    assert ids_of(engine.read("ev")) == [1, 2, 3, 4]
    assert [r.rows for r in engine.write_fragments("flat", data)] == [4]  # unpartitioned: one fragment
    executor = Engine.open(adapter, read_only=True)  # executors write fragments; the driver commits
    engine.commit_fragments({"ev": executor.write_fragments("ev", events([5], [D3], [None]))})
    assert ids_of(engine.read("ev")) == [1, 2, 3, 4, 5]
    assert engine.write_fragments("ev", EVENTS.empty_table()) == []  # no rows: no fragment


def test_commit_writes_one_fragment_per_partition_and_reads_prune(engine):
    engine.commit({"ev": events([1, 2, 3], [D1, D2, D1], ["eu", "eu", None])})
    files = engine.files("ev")
    assert {f.partition for f in files} == {
        (("day", "2024-05-01"), ("region", "eu")),
        (("day", "2024-05-02"), ("region", "eu")),
        (("day", "2024-05-01"), ("region", None)),
    }
    assert ids_of(engine.read("ev", where={"day": [D1]})) == [1, 3]
    assert ids_of(engine.read("ev", where={"day": ["2024-05-01"], "region": ["eu"]})) == [1]
    assert ids_of(engine.read("ev", where={"region": [None]})) == [3]
    assert engine.read("ev", where={"day": [D3]}).num_rows == 0
    assert [f.key for f in engine.files("ev", where={"region": ["eu"]})] == [
        f.key for f in files if dict(f.partition)["region"] == "eu"
    ]
    projected = engine.read("ev", columns=["score", "id"], where={"region": ["eu"]})
    assert projected.column_names == ["score", "id"] and ids_of(projected) == [1, 2]
    assert engine.read("ev", columns=["id"], where={"day": [D3]}).schema == pa.schema([("id", pa.int64())])


def test_partition_values_are_key_safe(engine):
    odd = ["a/b", "..", "x=y%z", "", "é", "#12"]
    engine.commit({"ev": events(list(range(len(odd))), [D1] * len(odd), odd)})
    by_region = {dict(f.partition)["region"]: f for f in engine.files("ev")}
    assert set(by_region) == set(odd)
    for value in odd:
        assert engine.read("ev", where={"region": [value]}).column("region").to_pylist() == [value]
    with pytest.raises(InvalidKeyError):  # a value too long for one key segment: refused before any write
        engine.write_fragments("ev", events([9], [D1], ["v" * 300]))


def test_bad_partition_declarations_are_refused_before_io(engine, adapter):
    before = adapter.read_bytes(MANIFEST_KEY)
    for partition_by, match in (
        (["nope"], "not a column"),
        (["score"], "string, integer, boolean or date"),
        (["day", "day"], "twice"),
        ("day", "sequence"),
    ):
        with pytest.raises(SchemaMismatchError, match=match):
            engine.create_table("bad", EVENTS, partition_by=partition_by)
    with pytest.raises(SchemaMismatchError, match="every column"):
        engine.create_table("bad", pa.schema([EVENTS.field("day")]), partition_by=["day"])
    assert isinstance(SchemaMismatchError("x"), ValueError)
    assert adapter.read_bytes(MANIFEST_KEY) == before


def test_fragment_refs_must_match_their_table_layout(engine):
    flat = engine.write_fragments("flat", events([1], [D1], ["eu"]))
    with pytest.raises(SchemaMismatchError):
        engine.commit_fragments({"ev": flat})
    ref = engine.write_fragments("ev", events([1], [D1], ["eu"]))[0]
    forged = type(ref)(**{**ref.__dict__, "partition": (("day", "2024-05-02"), ("region", "eu"))})
    with pytest.raises(SchemaMismatchError, match="lies in"):
        engine.commit_fragments({"ev": [forged]})
    with pytest.raises(SchemaMismatchError, match="write_fragments"):
        engine.write_fragment("ev", events([1], [D1], ["eu"]))
    assert engine.read("ev").num_rows == 0


def test_compaction_keeps_partitions_apart(engine):
    for i in range(6):  # compaction keeps row order: it merges runs of consecutive fragments
        engine.commit({"ev": events([i], [D1 if i < 3 else D2], ["eu"])})
    commit = engine.compact("ev", min_fragments=2)
    assert commit is not None
    files = engine.files("ev")
    assert len(files) == 2 and len({f.partition for f in files}) == 2
    for f in files:
        day = dict(f.partition)["day"]
        assert set(
            pq.read_table(pa.BufferReader(engine.adapter.read_bytes(f.key))).column("day").to_pylist()
        ) == {dt.date.fromisoformat(day)}
    assert ids_of(engine.read("ev")) == list(range(6))


# -- replace_where -----------------------------------------------------------------------------------------
def test_replace_where_replaces_exactly_the_matching_partitions(engine):
    engine.commit({"ev": events([1, 2, 3, 4], [D1, D2, D3, D1], ["eu", "eu", "eu", "us"])})
    commit = engine.commit(
        {"ev": events([10, 11], [D1, D1], ["eu", "eu"])},
        CommitRequest(mode="overwrite", replace_where={"ev": {"day": [D1], "region": ["eu"]}}),
    )
    assert commit.record.mode == "overwrite"
    assert ids_of(engine.read("ev")) == [2, 3, 4, 10, 11]
    refs = engine.write_fragments("ev", events([20], [D2], ["eu"]))
    engine.commit_fragments(
        {"ev": refs}, CommitRequest(mode="overwrite", replace_where={"ev": {"day": [D2, D3]}})
    )
    assert ids_of(engine.read("ev")) == [4, 10, 11, 20]
    assert ids_of(engine.read("ev", commit.version)) == [2, 3, 4, 10, 11]  # time travel still exact
    # a replace_where with no new data empties the matching partitions
    engine.commit(
        {"ev": events([], [], [])}, CommitRequest(mode="overwrite", replace_where={"ev": {"region": ["us"]}})
    )
    assert ids_of(engine.read("ev")) == [10, 11, 20]


def test_replace_where_errors_publish_nothing(engine, adapter):
    engine.commit({"ev": events([1], [D1], ["eu"])})
    before = adapter.read_bytes(MANIFEST_KEY)
    listed = {i.key for i in adapter.list(layout.data_prefix("ev"))}
    outside = events([5], [D2], ["eu"])
    cases = [
        (dict(mode="overwrite", replace_where={"ev": {"day": [D1]}}), SchemaMismatchError, "outside"),
        (
            dict(mode="overwrite", replace_where={"ev": {"score": [1.0]}}),
            SchemaMismatchError,
            "not a partition",
        ),
        (
            dict(mode="overwrite", replace_where={"ev": {"day": ["not a date"]}}),
            SchemaMismatchError,
            "does not fit",
        ),
        (dict(mode="overwrite", replace_where={"ev": {"day": D1}}), SchemaMismatchError, "sequence"),
        (dict(mode="append", replace_where={"ev": {"day": [D2]}}), ValueError, "overwrite"),
        (dict(mode="overwrite", replace_where={"flat": {"day": [D2]}}), ValueError, "does not write"),
    ]
    for kwargs, error, match in cases:
        with pytest.raises(error, match=match):
            engine.commit({"ev": outside}, CommitRequest(**kwargs))  # type: ignore[arg-type]
    with pytest.raises(SchemaMismatchError, match="not a partition"):
        engine.commit(
            {"flat": outside}, CommitRequest(mode="overwrite", replace_where={"flat": {"day": [D2]}})
        )
    assert adapter.read_bytes(MANIFEST_KEY) == before
    assert {i.key for i in adapter.list(layout.data_prefix("ev"))} == listed  # refused before any data write
    refs = engine.write_fragments("ev", outside)
    with pytest.raises(SchemaMismatchError, match="outside"):
        engine.commit_fragments(
            {"ev": refs}, CommitRequest(mode="overwrite", replace_where={"ev": {"day": [D1]}})
        )
    assert adapter.read_bytes(MANIFEST_KEY) == before


def test_replace_where_rebases_over_a_concurrent_commit_outside_its_partitions(engine):
    """A partition overwrite that loses the publish race to commits touching only other partitions (an
    append, a partition overwrite of another day) rebases over them, as Delta's replaceWhere does: both
    land, the winner's rows kept, ours in place of the partitions we replace."""
    engine.commit({"ev": events([1, 2, 4], [D1, D2, D3], ["eu", "eu", "eu"])})
    other = Engine.open(engine.adapter, actor="other")

    def winners(_: str) -> None:
        other.commit({"ev": events([3], [D2], ["eu"])})
        other.commit(
            {"ev": events([5], [D3], ["eu"])},
            CommitRequest(mode="overwrite", replace_where={"ev": {"day": [D3]}}),
        )

    fp.arm("commit.before_publish", winners, times=1)
    commit = engine.commit(
        {"ev": events([9], [D1], ["eu"])},
        CommitRequest(mode="overwrite", replace_where={"ev": {"day": [D1]}}),
    )
    assert commit.attempts == 2 and commit.record.mode == "overwrite"
    assert ids_of(engine.read("ev")) == [2, 3, 5, 9]
    assert ids_of(engine.read("ev", commit.version - 1)) == [1, 2, 3, 5]  # the winners' snapshot, intact


@pytest.mark.parametrize(
    "winner", ["append inside", "overwrite of the same partition", "whole-table overwrite"]
)
def test_replace_where_conflicts_with_a_concurrent_change_inside_its_partitions(engine, winner):
    """A concurrent commit that added or removed anything in the partitions we replace is a conflict:
    our overwrite would silently drop what it wrote. Nothing of ours becomes visible."""
    engine.commit({"ev": events([1, 2], [D1, D2], ["eu", "eu"])})
    other = Engine.open(engine.adapter, actor="other")
    race = {
        "append inside": lambda: other.commit({"ev": events([3], [D1], ["us"])}),
        "overwrite of the same partition": lambda: other.commit(
            {"ev": events([4], [D1], ["eu"])},
            CommitRequest(mode="overwrite", replace_where={"ev": {"day": [D1]}}),
        ),
        "whole-table overwrite": lambda: other.commit(
            {"ev": events([5], [D2], ["eu"])}, CommitRequest(mode="overwrite")
        ),
    }[winner]
    fp.arm("commit.before_publish", lambda _: race(), times=1)
    before = None
    with pytest.raises(CommitConflictError, match="partitions it replaces"):
        before = engine.snapshot().version
        engine.commit(
            {"ev": events([9], [D1], ["eu"])},
            CommitRequest(mode="overwrite", replace_where={"ev": {"day": [D1]}}),
        )
    assert 9 not in ids_of(engine.read("ev")) and engine.snapshot().version == (before or 0) + 1


# -- conform -------------------------------------------------------------------------------------------------
def test_conform_matches_by_name_and_widens_safely():
    data = pa.table(
        {
            "score": pa.array([1.5], pa.float32()),
            "region": ["eu"],
            "id": pa.array([7], pa.int32()),
            "day": pa.array([D1], pa.date32()),
        }
    )
    out = conform("t", EVENTS, data)
    assert out.schema == EVENTS and out.column("id").to_pylist() == [7]
    by_position = pa.table({"a": [1], "b": [D1], "c": ["x"], "d": [2.0]})
    assert conform("t", EVENTS, by_position, by_name=False).schema == EVENTS
    with pytest.raises(SchemaMismatchError, match=r"missing columns \['score'\]"):
        conform("t", EVENTS, data.drop_columns(["score"]))
    with pytest.raises(SchemaMismatchError, match=r"extra columns \['extra'\]"):
        conform("t", EVENTS, data.append_column("extra", pa.array([1])))
    empty = conform("t", EVENTS, EVENTS.empty_table().select(["region", "id", "day", "score"]))
    assert empty.num_rows == 0 and empty.schema == EVENTS
    widening = [
        (pa.array([1], pa.int8()), pa.int64()),
        (pa.array([1], pa.int32()), pa.int64()),
        (pa.array([1], pa.uint32()), pa.int64()),
        (pa.array([1], pa.uint8()), pa.uint16()),
        (pa.array([1.5], pa.float32()), pa.float64()),
        (pa.array([1], pa.int32()), pa.float64()),
        (pa.array([1], pa.uint16()), pa.float32()),
        (pa.array(["a"], pa.string()), pa.large_string()),
        (pa.array(["a"], pa.large_string()), pa.string()),
        (pa.array(["a"]).dictionary_encode(), pa.string()),
        (pa.array([1], pa.timestamp("ms", "UTC")), pa.timestamp("us", "UTC")),
        (pa.array([D1], pa.date32()), pa.date64()),
        (pa.array([None], pa.null()), pa.int32()),
        (pa.array([1], pa.decimal128(8, 2)), pa.decimal128(12, 4)),
        (pa.array([[1]], pa.list_(pa.int32())), pa.list_(pa.int64())),
        (pa.array([{"a": 1}], pa.struct([("a", pa.int32())])), pa.struct([("a", pa.int64())])),
    ]
    for values, target in widening:
        out = conform("t", pa.schema([("v", target)]), pa.table({"v": values}))
        assert out.schema.field("v").type == target and out.num_rows == 1, (values.type, target)


@pytest.mark.parametrize(
    ("values", "target"),
    [
        (pa.array(["1.5"]), pa.float64()),  # no silent parse of text
        (pa.array([1]), pa.string()),  # no int -> string
        (pa.array([1], pa.int64()), pa.float64()),  # int64 does not fit float64 exactly
        (pa.array([1.5]), pa.int64()),
        (pa.array([1], pa.int64()), pa.int32()),
        (pa.array([1.5], pa.float64()), pa.float32()),
        (pa.array([1], pa.timestamp("ns")), pa.timestamp("us")),
        (pa.array([1], pa.timestamp("s", "UTC")), pa.timestamp("s")),
    ],
)
def test_conform_refuses_lossy_types(values, target):
    with pytest.raises(SchemaMismatchError, match="not a safe widening"):
        conform("t", pa.schema([("v", target)]), pa.table({"v": values}))


def test_conform_cast_failures_name_column_and_sample():
    schema = pa.schema([("id", pa.int64()), ("x", pa.float64())])
    data = pa.table({"id": list(range(1000)), "x": [str(i) for i in range(500)] + ["oops"] + ["1"] * 499})
    assert conform("t", schema, data.slice(0, 500), allow_lossy=True).column("x")[3].as_py() == 3.0
    with pytest.raises(SchemaMismatchError, match=r"column 'x'.*'oops'"):
        conform("t", schema, data, allow_lossy=True)
    narrow = pa.schema([("id", pa.int8())])
    with pytest.raises(SchemaMismatchError, match=r"column 'id'.*300"):
        conform("t", narrow, pa.table({"id": [1, 2, 300]}), allow_lossy=True)
    strict = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    with pytest.raises(SchemaMismatchError, match=r"'id' is not nullable but has 1 null"):
        conform("t", strict, pa.table({"id": [1, None]}))
    with pytest.raises(SchemaMismatchError, match=r"pyarrow\.Table, not builtins\.dict"):
        conform("t", strict, {"id": [1]})  # type: ignore[arg-type]
    batch = pa.record_batch({"id": pa.array([1], pa.int32())})
    assert conform("t", strict, batch).to_pylist() == [{"id": 1}]


def test_engine_writes_go_through_conform(engine, adapter):
    before = adapter.read_bytes(MANIFEST_KEY)
    reordered = events([1], [D1], ["eu"]).select(["score", "region", "day", "id"])
    engine.commit({"flat": reordered})
    assert engine.read("flat").schema == EVENTS
    bad = pa.table({"id": [2], "day": [D1], "region": ["eu"], "score": ["1.5"]})
    with pytest.raises(SchemaMismatchError, match="score"):
        engine.commit({"flat": bad})
    with pytest.raises(SchemaMismatchError, match="score"):
        engine.write_fragments("ev", bad)
    with pytest.raises(UnknownTableError):
        engine.write_fragments("nope", bad)
    assert engine.read("flat").num_rows == 1 and adapter.read_bytes(MANIFEST_KEY) != before


# -- files() ---------------------------------------------------------------------------------------------------
def test_files_list_exactly_one_snapshot(engine, adapter):
    engine.commit({"ev": events([1, 2], [D1, D2], ["eu", "eu"])})
    engine.commit({"ev": events([3], [D1], ["us"])})
    after_append = engine.snapshot()
    engine.commit({"ev": events([4, 5], [D1, D3], ["eu", "eu"])}, CommitRequest(mode="overwrite"))
    engine.commit(
        {"ev": events([6], [D3], ["eu"])},
        CommitRequest(mode="overwrite", replace_where={"ev": {"day": [D3]}}),
    )
    engine.write_fragments("ev", events([100, 101], [D1, D2], ["eu", "eu"]))  # orphans of a failed job
    fp.arm("commit.before_publish", "error", times=1)  # a failed commit: its fragment stays, unpublished
    with pytest.raises(fp.InjectedFault):
        engine.commit({"ev": events([200], [D1], ["eu"])})
    for snap in (after_append, None):
        files = engine.files("ev", snap)
        assert rows_of_files(engine, files) == engine.read("ev", snap).num_rows == sum(f.rows for f in files)
        assert all(f.url == f"{adapter.url.rstrip('/')}/{f.key}" and f.bytes > 0 for f in files)
    assert ids_of(engine.read("ev")) == [4, 6]
    on_disk = [i for i in adapter.list(layout.data_prefix("ev")) if i.key.endswith(".parquet")]
    assert len(on_disk) > len(engine.files("ev"))  # the data folder is NOT the table
    if adapter.url.startswith("file://"):  # pyarrow.dataset over the file list reads exactly the table
        paths = [f.url.removeprefix("file://") for f in engine.files("ev")]
        assert ids_of(ds.dataset(paths, format="parquet").to_table()) == [4, 6]


def test_vacuum_reclaims_overwritten_and_orphaned_partition_fragments(engine, adapter):
    engine.commit({"ev": events([1, 2], [D1, D2], ["eu", "eu"])})
    engine.write_fragments("ev", events([100], [D1], ["us"]))  # orphan of a failed job
    engine.commit(
        {"ev": events([3], [D1], ["eu"])},
        CommitRequest(mode="overwrite", replace_where={"ev": {"day": [D1]}}),
    )
    report = engine.vacuum(grace_s=0)
    kept = {f.key for f in engine.files("ev")}
    on_disk = {i.key for i in adapter.list(layout.data_prefix("ev"))}
    assert kept <= on_disk
    assert not any("region=us" in key for key in on_disk)  # the orphan in its partition folder is gone
    assert any("region=us" in key for key in report.deleted)
    assert ids_of(engine.read("ev")) == [2, 3]


def test_precheck_validates_replace_where_before_a_job_runs(engine):
    assert (
        engine.precheck(["ev"], CommitRequest(mode="overwrite", replace_where={"ev": {"day": [D1]}})) is None
    )
    with pytest.raises(SchemaMismatchError, match="not a partition"):
        engine.precheck(["ev"], CommitRequest(mode="overwrite", replace_where={"ev": {"id": [1]}}))
    with pytest.raises(ValueError, match="overwrite"):
        engine.precheck(["ev"], CommitRequest(mode="append", replace_where={"ev": {"day": [D1]}}))


@pytest.mark.parametrize(
    ("point", "visible"),
    [
        ("commit.after_sidecar", False),
        ("commit.after_table_version", True),
        ("commit.before_publish", True),
        ("commit.after_publish", True),
    ],
)
def test_crashed_partition_overwrite_is_all_or_nothing(engine, adapter, point, visible):
    engine.commit({"ev": events([1, 2], [D1, D2], ["eu", "eu"])})
    with fp.armed(point, "crash", times=1), pytest.raises(fp.SimulatedCrash):
        engine.commit(
            {"ev": events([9], [D1], ["eu"])},
            CommitRequest(mode="overwrite", replace_where={"ev": {"day": [D1]}}),
        )
    reopened = Engine.open(adapter)  # heals: its one table version written = rolled forward
    assert ids_of(reopened.read("ev")) == ([2, 9] if visible else [1, 2])
    assert rows_of_files(reopened, reopened.files("ev")) == reopened.read("ev").num_rows
