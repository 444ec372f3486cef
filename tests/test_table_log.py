"""The table version log (deltas + checkpoints), format 1 compatibility, and compaction.

Byte and request numbers are exact (RecordingAdapter), so they are asserted; timings belong to
bench/table_log.py.
"""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pytest
from engine_crash_worker import assert_converged

from contract_tests.counting import CountingAdapter
from storage_adapter.adapter import open_adapter
from storage_adapter.engine import CommitConflictError, CommitRequest, Engine, EngineSettings, codec, layout
from storage_adapter.engine import failpoints as fp
from storage_adapter.engine.audit import RecoveryOutcome
from storage_adapter.engine.errors import CorruptMetadataError
from storage_adapter.engine.failpoints import SimulatedCrash
from storage_adapter.engine.manifest import TAIL, Manifest
from storage_adapter.engine.tables import VERSION_FORMAT, TableVersion, TableVersionStore

SCHEMA = pa.schema([("id", pa.int64())])


def data(start: int, count: int = 1) -> pa.Table:
    return pa.table({"id": list(range(start, start + count))}, schema=SCHEMA)


def ids(table: pa.Table) -> list[int]:
    return table.column("id").to_pylist()  # in row order: compaction keeps it


class RecordingAdapter(CountingAdapter):
    """Counts requests, and records the body size of every ``write_if_absent`` by key."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.written: dict[str, int] = {}

    def write_if_absent(self, key: str, data: bytes, *args: Any, **kwargs: Any) -> Any:
        self.written[key] = len(data)
        return self.__getattr__("write_if_absent")(key, data, *args, **kwargs)


def memory() -> Any:
    return open_adapter(f"memory://table-log-{uuid.uuid4().hex}")


@pytest.fixture(autouse=True)
def _disarm():
    fp.disarm()
    yield
    fp.disarm()


def every_snapshot(engine: Engine, table: str) -> dict[int, list[int]]:
    """Rows of ``table`` at every retained manifest version where it exists, read by a cold engine."""
    cold = Engine.open(engine.adapter, read_only=True)
    manifest = Manifest.decode(engine.adapter.read_bytes(layout.MANIFEST_KEY))
    return {
        version: ids(cold.read(table, version))
        for version in range(manifest.history_floor, manifest.version + 1)
        if table in cold.snapshot(version).pins
    }


# -- bytes per append ----------------------------------------------------------------------------------
def test_an_append_writes_o_change_bytes_and_reads_stay_bounded():
    recording = RecordingAdapter(memory())
    engine = Engine.open(recording, actor="bytes", settings=EngineSettings(retention=64))  # cheap manifests
    engine.create_table("a", SCHEMA)
    version_bytes: dict[int, int] = {}
    for i in range(1, 1001):
        commit = engine.commit({"a": data(i)})
        version_bytes[i] = recording.written[layout.version_key("a", commit.tables["a"])]
    assert version_bytes[1000] <= 2 * version_bytes[10], version_bytes
    assert version_bytes[1000] - version_bytes[10] <= 8  # the same delta, up to longer numbers
    checkpoints = sorted(k for k in recording.written if k.startswith(layout.checkpoints_prefix("a")))
    assert [layout.version_from_key(k) for k in checkpoints] == list(range(100, 1001, 100))
    assert ids(engine.read("a")) == list(range(1, 1001))
    cold = RecordingAdapter(engine.adapter.inner)  # a fresh process: nothing cached
    reader = Engine.open(cold, read_only=True)
    snap = reader.snapshot()
    cold.reset()
    assert ids(reader.read("a", snap)) == list(range(1, 1001))
    assert cold.counts["read_bytes"] == 1 + 1 + 1000  # the pinned version, its checkpoint, the fragments
    cold.reset()
    assert ids(reader.read("a", snap.version - 50)) == list(range(1, 951))  # 50 deltas above a checkpoint
    # the records of the 50 - TAIL versions older than the manifest's inline tail, the 50 versions walked
    assert cold.counts["read_bytes"] <= (50 - TAIL) + 1 + 50 + 1 + 950


def test_checkpoints_are_optional_and_walks_cross_overwrites_and_rollbacks():
    adapter = memory()
    settings = EngineSettings(checkpoint_interval=3)
    engine = Engine.open(adapter, settings=settings)
    engine.create_table("a", SCHEMA)
    other = Engine.open(adapter, settings=settings)

    def other_commits_then_dies(_: str) -> None:
        other.commit({"a": data(12)})
        raise SimulatedCrash("before_publish")

    expected: list[int] = []
    for i in range(20):
        if i == 7:
            engine.commit({"a": data(100)}, CommitRequest(mode="overwrite"))
            expected = [100]
        elif i == 12:  # a commit crashing after losing the race: rolled back by a full restore version
            with (
                fp.armed("commit.before_publish", other_commits_then_dies, times=1),
                pytest.raises(SimulatedCrash),
            ):
                engine.commit({"a": data(999)})
            assert [r.outcome for r in engine.heal().recovered] == [RecoveryOutcome.ROLLED_BACK]
            expected.append(12)
        else:
            engine.commit({"a": data(i)})
            expected.append(i)
    assert ids(engine.read("a")) == expected
    for key in [info.key for info in adapter.list(layout.checkpoints_prefix("a"))]:
        adapter.delete(key)  # checkpoints only shorten walks
    cold = Engine.open(adapter, read_only=True, settings=settings)
    assert ids(cold.read("a")) == expected
    engine.commit({"a": data(50)})
    assert ids(Engine.open(adapter, read_only=True).read("a")) == [*expected, 50]


def test_a_delta_that_does_not_descend_is_refused():
    store = TableVersionStore(memory())
    good = store.successor("a", None, "op", "create", "s", ())(0)
    store.write_if_absent(good)
    delta = store.successor("a", 0, "op", "append", "s", (("tables/a/data/x.parquet", 1, 1),))(1)
    body = delta.encode().replace(b'"anchor":0', b'"anchor":5')
    with pytest.raises(CorruptMetadataError, match="anchor <= base_version < version"):
        TableVersion.decode(body, "k")
    assert TableVersion.decode(delta.encode(), "k") == delta


# -- format 1 stays readable ---------------------------------------------------------------------------
def legacy_version_bytes(content: TableVersion, fragments: tuple[tuple[str, int, int], ...]) -> bytes:
    """A table version exactly as format 1 wrote it: every version the full fragment list."""
    return codec.encode(
        VERSION_FORMAT,
        1,
        {
            "table": content.table,
            "version": content.version,
            "base_version": content.base_version,
            "operation_id": content.operation_id,
            "kind": content.kind,
            "schema": content.schema,
            "fragments": [{"key": k, "rows": r, "bytes": b} for k, r, b in fragments],
        },
    )


def test_format_1_versions_stay_readable_writable_and_vacuumable(adapter):
    engine = Engine.open(adapter, settings=EngineSettings(retention=4))
    engine.create_table("a", SCHEMA)
    for i in range(3):
        engine.commit({"a": data(i)})
    store = TableVersionStore(adapter)
    for version in range(4):  # rewrite the root as the previous layout had it
        content = store.read("a", version)
        adapter.write(
            layout.version_key("a", version), legacy_version_bytes(content, store.fragments("a", version))
        )
    assert b'"format_version":1' in adapter.read_bytes(layout.version_key("a", 3))
    upgraded = Engine.open(adapter, settings=EngineSettings(retention=4))
    assert ids(upgraded.read("a")) == [0, 1, 2]
    assert ids(upgraded.read("a", upgraded.snapshot().version - 1)) == [0, 1]
    upgraded.commit({"a": data(3)})  # a delta on a format 1 base
    with fp.armed("commit.before_publish", "crash", times=1), pytest.raises(SimulatedCrash):
        upgraded.commit({"a": data(4)}, CommitRequest(mode="overwrite"))
    with fp.armed("commit.after_sidecar", "crash", times=1), pytest.raises(SimulatedCrash):
        upgraded.commit({"a": data(5)})
    healed = Engine.open(adapter, settings=EngineSettings(retention=4))
    assert ids(healed.read("a")) == [4]  # rolled forward
    healed.vacuum(grace_s=0)
    assert ids(Engine.open(adapter, read_only=True).read("a", healed.snapshot().version - 1)) == [0, 1, 2, 3]


# -- compaction ----------------------------------------------------------------------------------------
def small_table(adapter: Any, appends: int = 12, **settings: Any) -> Engine:
    engine = Engine.open(adapter, actor="compactor", settings=EngineSettings(**settings))
    engine.create_table("a", SCHEMA)
    engine.commit({"a": data(1000, 3)})
    engine.commit({"a": data(0, 2)}, CommitRequest(mode="overwrite"))
    for i in range(2, 2 + appends):
        engine.commit({"a": data(10 * i, 2)})
    return engine


def fragment_keys(engine: Engine, version: int | None = None) -> list[str]:
    snap = engine.snapshot(version)
    return [key for key, _, _ in engine._versions.fragments("a", snap.pins["a"])]


def test_compaction_keeps_every_snapshot_and_row_order(adapter):
    engine = small_table(adapter)
    before = every_snapshot(engine, "a")
    rows = ids(engine.read("a"))
    assert engine.compact("a", target_bytes=10**9, min_fragments=20) is None  # policy: too few small ones
    sizes = [b for _, _, b in engine._versions.fragments("a", engine.snapshot().pins["a"])]
    commit = engine.compact("a", target_bytes=sum(sizes[:5]), min_fragments=4)
    assert commit is not None and commit.record.mode == "compact"
    assert len(fragment_keys(engine)) < len(sizes)
    assert ids(engine.read("a")) == rows
    after = every_snapshot(engine, "a")
    assert {v: after[v] for v in before} == before and after[commit.version] == rows
    assert engine.compact("a", target_bytes=10**9, min_fragments=2) is not None
    assert len(fragment_keys(engine)) == 1 and ids(engine.read("a")) == rows


def test_a_concurrent_append_during_compaction_is_kept(adapter):
    engine = small_table(adapter)
    other = Engine.open(adapter, actor="other")
    rows = ids(engine.read("a"))
    fp.arm("commit.before_publish", lambda _: other.commit({"a": data(7777)}), times=1)
    commit = engine.compact("a", target_bytes=10**9, min_fragments=2)
    assert commit is not None and commit.attempts == 2  # rebased over the append
    assert ids(engine.read("a")) == [*rows, 7777]
    assert len(fragment_keys(engine)) == 2


def test_compaction_racing_an_overwrite_conflicts_and_leaves_nothing(adapter):
    engine = small_table(adapter)
    other = Engine.open(adapter, actor="other")
    fp.arm(
        "commit.before_publish",
        lambda _: other.commit({"a": data(5)}, CommitRequest(mode="overwrite")),
        times=1,
    )
    with pytest.raises(CommitConflictError, match="compaction of table 'a'"):
        engine.compact("a", target_bytes=10**9, min_fragments=2)
    assert ids(engine.read("a")) == [5]
    assert engine.history()[-1].mode == "overwrite"
    assert_converged(adapter)


@pytest.mark.parametrize(
    ("point", "outcome", "compacted"),
    [
        ("commit.before_sidecar", None, False),
        ("commit.after_sidecar", RecoveryOutcome.ORPHAN_DISCARDED, False),
        ("commit.after_table_version", RecoveryOutcome.ROLLED_FORWARD, True),
        ("commit.before_publish", RecoveryOutcome.ROLLED_FORWARD, True),
        ("commit.after_publish", RecoveryOutcome.COMPLETED, True),
        ("commit.after_sidecar_delete", None, True),
    ],
)
def test_a_crashed_compaction_is_all_or_nothing(adapter, point, outcome, compacted):
    engine = small_table(adapter, appends=4)
    rows, keys = ids(engine.read("a")), fragment_keys(engine)
    with fp.armed(point, "crash", times=1), pytest.raises(SimulatedCrash):
        engine.compact("a", target_bytes=10**9, min_fragments=2)
    reopened = Engine.open(adapter)
    assert [r.outcome for r in reopened.audit_log()] == ([] if outcome is None else [outcome])
    assert ids(reopened.read("a")) == rows
    assert len(fragment_keys(reopened)) == (1 if compacted else len(keys))
    assert_converged(adapter)
    reopened.commit({"a": data(9)})
    assert ids(reopened.read("a")) == [*rows, 9]


def test_vacuum_reclaims_replaced_fragments_once_no_retained_version_lists_them(adapter):
    engine = small_table(adapter, appends=4, retention=3, checkpoint_interval=2)
    replaced = fragment_keys(engine)
    rows = ids(engine.read("a"))
    engine.compact("a", target_bytes=10**9, min_fragments=2)
    (new,) = fragment_keys(engine)
    engine.vacuum(grace_s=0)
    assert all(adapter.exists(key) for key in replaced)  # the pre-compaction versions are retained
    assert ids(Engine.open(adapter, read_only=True).read("a", engine.snapshot().version - 1)) == rows
    for i in range(3):  # move the history window past every version that lists them
        engine.commit({"a": data(500 + i)})
    report = engine.vacuum(grace_s=0)
    assert set(replaced) <= set(report.deleted)
    assert not any(adapter.exists(key) for key in replaced) and adapter.exists(new)
    latest = engine.snapshot().version
    assert every_snapshot(engine, "a") == {latest - 3 + n: [*rows, *range(500, 500 + n)] for n in range(4)}
    engine.commit({"a": data(600)})  # the log keeps working over vacuumed history
    assert ids(Engine.open(adapter, read_only=True).read("a")) == [*rows, 500, 501, 502, 600]
