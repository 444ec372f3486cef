"""Commit history out of the manifest: the manifest keeps a bounded tail of records, older ones are stored
one per object under ``__history/``, and format 1 manifests (every record inline) upgrade on first publish.

Sizes and request counts are exact (CountingAdapter), so they are asserted; timings are bench/scaling.py's.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pytest

from contract_tests.counting import CountingAdapter
from storage_adapter.adapter import open_adapter
from storage_adapter.engine import CommitRequest, Engine, EngineSettings, HistoryExpiredError, layout
from storage_adapter.engine import failpoints as fp
from storage_adapter.engine.errors import CorruptManifestError
from storage_adapter.engine.manifest import CHANGED_LIMIT, TAIL, Manifest, ManifestStore
from storage_adapter.engine.sidecar import Sidecar, SidecarPin

SCHEMA = pa.schema([("id", pa.int64())])


def rows(start: int, count: int = 1) -> pa.Table:
    return pa.table({"id": list(range(start, start + count))}, schema=SCHEMA)


def memory() -> Any:
    return open_adapter(f"memory://history-{uuid.uuid4().hex}")


class RecordingAdapter(CountingAdapter):
    """Counts requests, and records the body size of every ``write_if_absent`` by key."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.written: dict[str, int] = {}

    def reset(self) -> None:
        super().reset()
        self.written = {}

    def write_if_absent(self, key: str, data: bytes, *args: Any, **kwargs: Any) -> Any:
        self.written[key] = len(data)
        return self.__getattr__("write_if_absent")(key, data, *args, **kwargs)


def manifest_bytes(engine: Engine) -> int:
    return len(engine.adapter.read_bytes(layout.MANIFEST_KEY))


def test_the_manifest_stays_the_same_size_however_long_the_history():
    engine = Engine.open(memory(), settings=EngineSettings(retention=1000))
    engine.create_table("a", SCHEMA)
    sizes = {}
    for i in range(1, 301):
        engine.commit({"a": rows(i)}, CommitRequest(idempotency_key=f"request-{i}"))
        sizes[i] = manifest_bytes(engine)
    assert sizes[300] <= 1.05 * sizes[20], sizes  # the same TAIL records, up to longer numbers and keys
    manifest = ManifestStore(engine.adapter).load().manifest
    assert len(manifest.commits) == TAIL
    assert [r.version for r in engine.history()] == list(range(1, 302))  # create + 300 appends, all kept
    assert engine.find_commit("request-1").version == 2  # the ledger answers, whatever left the tail


def test_each_commit_past_the_tail_stores_exactly_the_record_it_drops():
    counting = CountingAdapter(memory())
    engine = Engine.open(counting)
    engine.create_table("a", SCHEMA)
    for i in range(TAIL + 3):
        engine.commit({"a": rows(i)})
    counting.reset()
    engine.commit({"a": rows(99)})
    # heal LIST, manifest GET, data PUT, sidecar PUT, table-version PUT, history PUT, manifest CAS, sidecar DELETE
    assert dict(counting.counts) == {
        "list": 1,
        "read_versioned": 1,
        "write_if_absent": 3,
        "write": 1,
        "write_if_match": 1,
        "delete": 1,
    }
    stored = ManifestStore(engine.adapter).history.stored_versions()
    manifest = ManifestStore(engine.adapter).load().manifest
    assert stored == list(range(1, manifest.tail_floor + 1))


def test_time_travel_reads_stored_records_and_refuses_below_the_floor():
    engine = Engine.open(memory(), settings=EngineSettings(retention=40))
    engine.create_table("a", SCHEMA)
    for i in range(60):
        engine.commit({"a": rows(i)})
    current = engine.snapshot().version
    assert current == 61
    floor = current - 40
    for version in (floor, floor + 1, current - TAIL - 1, current - TAIL, current):
        assert engine.read("a", version).num_rows == version - 1  # version 1 created it empty
    with pytest.raises(HistoryExpiredError):
        engine.snapshot(floor - 1)
    assert [r.version for r in engine.history()] == list(range(floor + 1, current + 1))


def test_vacuum_deletes_records_below_the_floor_and_keeps_the_rest():
    engine = Engine.open(memory(), settings=EngineSettings(retention=20))
    engine.create_table("a", SCHEMA)
    for i in range(50):
        engine.commit({"a": rows(i)})
    store = ManifestStore(engine.adapter)
    manifest = store.load().manifest
    assert store.history.stored_versions()[0] <= manifest.history_floor  # stored before they expired
    report = engine.vacuum(grace_s=0)
    assert report.history_expired > 0
    assert store.history.stored_versions() == list(range(manifest.history_floor + 1, manifest.tail_floor + 1))
    assert engine.read("a", manifest.history_floor).num_rows == manifest.history_floor - 1


def test_a_vanished_record_is_history_expired_and_a_wrong_one_is_corrupt():
    engine = Engine.open(memory(), settings=EngineSettings(retention=100))
    engine.create_table("a", SCHEMA)
    for i in range(40):
        engine.commit({"a": rows(i)})
    adapter = engine.adapter
    adapter.delete(layout.history_key(5))
    with pytest.raises(HistoryExpiredError, match="00000000000000000005"):
        engine.snapshot(4)
    adapter.write(layout.history_key(6), adapter.read_bytes(layout.history_key(7)))
    with pytest.raises(CorruptManifestError, match="version 7"):
        engine.snapshot(5)  # undoes the records of 6 and later
    assert adapter.read_bytes(layout.history_key(6)) == adapter.read_bytes(layout.history_key(7))  # left


def test_recovery_finds_a_publish_older_than_the_tail_in_the_stored_history():
    """A writer whose lease lapsed was rolled forward by a healer, and more than TAIL commits followed
    before it looked: it learns from the stored records that its commit is visible, exactly."""
    engine = Engine.open(memory(), settings=EngineSettings(retention=200))
    engine.create_table("a", SCHEMA)
    engine.create_table("b", SCHEMA)
    published = engine.commit({"a": rows(0)})
    for i in range(TAIL + 5):
        engine.commit({"b": rows(i)})
    manifest = ManifestStore(engine.adapter).load().manifest
    assert published.version <= manifest.tail_floor
    record = published.record
    sidecar = Sidecar(
        record.operation_id,
        "commit",
        None,
        record.committed_at,
        record.committed_at,
        "h",
        1,
        published.version - 1,
        "append",
        None,
        {"a": SidecarPin(layout.table_prefix("a"), 1, 2, None)},
    )
    assert engine._recovery.landed(sidecar, manifest) == record
    other = replace(sidecar, operation_id="01JUNPUBLISHED000000000000")
    assert engine._recovery.landed(other, manifest) is None


def test_a_format_1_manifest_reads_and_upgrades_without_losing_history_or_keys():
    adapter = memory()
    engine = Engine.open(adapter, settings=EngineSettings(retention=32))
    engine.create_table("a", SCHEMA)
    for i in range(40):
        engine.commit({"a": rows(i)}, CommitRequest(idempotency_key=f"old-{i}"))  # version i + 2
    store = ManifestStore(adapter)
    state = store.load()
    records = (*store.records_after(state.manifest, state.manifest.history_floor),)
    legacy = Manifest(
        state.manifest.version,
        state.manifest.operation_id,
        state.manifest.tables,
        records,
        state.manifest.retention,
        format_version=1,
    )
    # what the previous layout left: every record inline, no stored history, no ledger entries
    adapter.write(layout.MANIFEST_KEY, legacy.encode())
    adapter.delete_many([i.key for i in adapter.iter_list(layout.HISTORY_PREFIX)])
    adapter.delete_many([i.key for i in adapter.iter_list(layout.KEYS_PREFIX)])
    reader = Engine.open(adapter, read_only=True)
    assert [r.version for r in reader.history()] == [r.version for r in records]
    assert len(records) == 32 and reader.read("a", 10).num_rows == 9
    engine = Engine.open(adapter)
    engine.commit({"a": rows(1000)})  # the upgrade
    upgraded = store.load().manifest
    assert upgraded.format_version == 2 and len(upgraded.commits) == TAIL
    assert [r.version for r in engine.history()] == [r.version for r in records[1:]] + [upgraded.version]
    for i in range(8, 40):  # every key the old manifest answered (versions 10-41) is in the ledger now
        replay = engine.commit({"a": rows(2000)}, CommitRequest(idempotency_key=f"old-{i}"))
        assert replay.replayed and replay.version == i + 2
    assert engine.read("a").num_rows == 41


def test_a_manifest_whose_inline_records_break_the_format_is_refused():
    engine = Engine.open(memory(), settings=EngineSettings(retention=64))
    engine.create_table("a", SCHEMA)
    for i in range(TAIL + 2):
        engine.commit({"a": rows(i)})
    manifest = ManifestStore(engine.adapter).load().manifest
    too_many = Manifest(
        manifest.version,
        manifest.operation_id,
        manifest.tables,
        (*ManifestStore(engine.adapter).history.read([manifest.tail_floor]), *manifest.commits),
        manifest.retention,
    )
    with pytest.raises(CorruptManifestError, match="exceed the tail"):
        Manifest.decode(too_many.encode())
    gap = Manifest(
        manifest.version,
        manifest.operation_id,
        manifest.tables,
        manifest.commits[1:-2] + manifest.commits[-1:],
        manifest.retention,
    )
    with pytest.raises(CorruptManifestError, match="not consecutive"):
        Manifest.decode(gap.encode())


# -- table maps: the manifest carries only the tables changed since its map ------------------------------


def make_tables(engine: Engine, count: int) -> None:
    for n in range(count):
        engine.create_table(f"t{n}", SCHEMA)


def test_a_commit_writes_the_same_manifest_bytes_with_40_tables_as_with_400():
    sizes = {}
    for count in (40, 400):
        engine = Engine.open(memory())
        make_tables(engine, count)
        for i in range(CHANGED_LIMIT + 1):  # every created table leaves the inline entries at least once
            engine.commit({f"t{i}": rows(i)})
        sizes[count] = manifest_bytes(engine)
    assert sizes[400] <= 1.1 * sizes[40], sizes
    manifest = ManifestStore(engine.adapter).load().manifest
    assert len(manifest.tables) == 400 and len(manifest.inline) <= CHANGED_LIMIT


def test_the_table_map_is_written_once_per_changed_limit_distinct_tables():
    counting = RecordingAdapter(memory())
    engine = Engine.open(counting)
    make_tables(engine, 100)
    counting.reset()
    for i in range(200):
        engine.commit({f"t{i % 100}": rows(i)})
    maps = [k for k in counting.written if k.startswith(layout.TABLE_MAPS_PREFIX)]
    assert len(maps) == 200 // (CHANGED_LIMIT + 1)  # one map per CHANGED_LIMIT + 1 distinct tables touched
    counting.reset()
    for i in range(200):
        engine.commit({"t0": rows(i)})  # one table again and again: never a map
    assert not [k for k in counting.written if k.startswith(layout.TABLE_MAPS_PREFIX)]
    assert [engine.read(f"t{n}").num_rows for n in range(100)] == [202] + [2] * 99


def test_reads_resolve_the_map_and_time_travel_crosses_maps():
    engine = Engine.open(memory(), settings=EngineSettings(retention=400))
    make_tables(engine, 50)
    before = engine.snapshot().version
    for i in range(150):
        engine.commit({f"t{i % 50}": rows(i)})
    cold = CountingAdapter(open_adapter(engine.adapter.url))
    reader = Engine.open(cold, read_only=True)
    assert all(reader.read(f"t{n}").num_rows == 3 for n in range(50))
    assert all(reader.read(f"t{n}", before).num_rows == 0 for n in range(50))
    assert reader.read("t7", before + 60).num_rows == 2  # commits 7 and 57 of the 150


def test_a_missing_or_foreign_table_map_is_refused_and_left_in_place():
    engine = Engine.open(memory())
    make_tables(engine, CHANGED_LIMIT + 1)
    adapter = engine.adapter
    manifest = ManifestStore(adapter).load().manifest
    assert manifest.table_map is not None
    other = replace(manifest.table_map, operation_id="01JOTHEROPERATION000000000")
    raw = adapter.read_bytes(manifest.table_map.key)
    adapter.write(other.key, raw)  # the right map under another manifest's name
    forged = replace(manifest, table_map=other, version=manifest.version)
    fresh = open_adapter(adapter.url)
    fresh.write(layout.MANIFEST_KEY, forged.encode())
    with pytest.raises(CorruptManifestError, match="another manifest"):
        ManifestStore(fresh).load()
    fresh.delete(other.key)
    with pytest.raises(CorruptManifestError, match="missing"):
        ManifestStore(fresh).load()


def test_vacuum_removes_table_maps_no_manifest_builds_on():
    engine = Engine.open(memory())
    make_tables(engine, 3 * (CHANGED_LIMIT + 1))
    maps = [i.key for i in engine.adapter.iter_list(layout.TABLE_MAPS_PREFIX)]
    assert len(maps) == 3
    report = engine.vacuum(grace_s=0)
    assert report.table_maps_removed == 2
    current = ManifestStore(engine.adapter).load().manifest.table_map
    assert current is not None
    assert [i.key for i in engine.adapter.iter_list(layout.TABLE_MAPS_PREFIX)] == [current.key]


def test_writers_on_different_tables_keep_every_commit_across_map_rewrites():
    engine = Engine.open(memory())
    make_tables(engine, 80)

    def writer(w: int) -> None:
        mine = Engine.open(engine.adapter)
        for i in range(40):
            mine.commit({f"t{w * 20 + i % 20}": rows(i)})

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [engine.read(f"t{n}").num_rows for n in range(80)] == [2] * 80
    assert len(list(engine.adapter.iter_list(layout.TABLE_MAPS_PREFIX))) >= 2


def test_a_crash_between_the_stored_objects_and_the_cas_is_rolled_forward_once():
    """The publish stored the dropped record and a new table map, then died before its CAS: heal rolls the
    commit forward (at the same version and operation: the same map key), once, and nothing is lost."""
    adapter = memory()
    engine = Engine.open(adapter)
    make_tables(engine, CHANGED_LIMIT + 1)  # the last creation wrote a map: nothing inline
    for i in range(CHANGED_LIMIT):  # CHANGED_LIMIT tables inline
        engine.commit({f"t{i}": rows(i)})
    with fp.armed("publish.before_cas", "crash", times=1), pytest.raises(fp.SimulatedCrash):
        engine.commit(
            {n: rows(100) for n in ("t0", f"t{CHANGED_LIMIT}")}, CommitRequest(idempotency_key="crashed")
        )
    before = ManifestStore(adapter).load().manifest
    maps = [i.key for i in adapter.iter_list(layout.TABLE_MAPS_PREFIX)]
    healed = Engine.open(adapter)
    after = ManifestStore(adapter).load().manifest
    assert after.version == before.version + 1 and after.commits[-1].recovered
    assert after.table_map is not None and after.table_map.key in maps  # the map the crashed writer stored
    assert healed.read("t0").num_rows == 2 and healed.read(f"t{CHANGED_LIMIT}").num_rows == 1
    assert healed.find_commit("crashed").version == after.version
    assert [r.version for r in healed.history()] == list(range(1, after.version + 1))
