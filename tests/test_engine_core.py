"""Commit engine core on every backend (memory, local, SeaweedFS via the ``adapter`` fixture)."""

from __future__ import annotations

import pickle
import subprocess
import sys
import threading
import time
from dataclasses import replace

import pyarrow as pa
import pytest
from ulid import ULID

from contract_tests.counting import CountingAdapter
from storage_adapter.engine import (
    CommitConflictError,
    CommitRequest,
    CorruptManifestError,
    Engine,
    EngineSettings,
    HistoryExpiredError,
    ReadOnlyEngineError,
    SchemaMismatchError,
    TableExistsError,
    UnknownTableError,
    codec,
    layout,
)
from storage_adapter.engine import failpoints as fp
from storage_adapter.engine.layout import MANIFEST_KEY, RECOVERY_PREFIX
from storage_adapter.engine.parallel import REQUESTS_IN_FLIGHT
from storage_adapter.engine.sidecar import HOST, Sidecar, SidecarPin, SidecarStore, lease_deadline
from storage_adapter.engine.tables import TableVersion, TableVersionStore
from storage_adapter.errors import ConfigurationError, NotFoundError

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def rows(start: int, count: int) -> pa.Table:
    return pa.table(
        {"id": list(range(start, start + count)), "name": [f"r{i}" for i in range(count)]}, schema=SCHEMA
    )


@pytest.fixture
def engine(adapter):
    eng = Engine.open(adapter, actor="tester")
    eng.create_table("a", SCHEMA)
    eng.create_table("b", SCHEMA)
    yield eng
    fp.disarm()


def ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def test_multi_table_commit_is_one_version_with_its_record(engine):
    commit = engine.commit(
        {"a": rows(0, 3), "b": rows(100, 2)}, CommitRequest(idempotency_key="k-1", actor="alice")
    )
    snap = engine.snapshot()
    assert snap.version == commit.version == 3
    assert ids(engine.read("a", snap)) == [0, 1, 2]
    assert ids(engine.read("b", snap)) == [100, 101]
    record = engine.history()[-1]
    assert record == commit.record == engine.find_commit("k-1")
    assert (record.actor, record.mode, record.idempotency_key) == ("alice", "append", "k-1")
    assert record.tables == {"a": 1, "b": 1}
    assert engine.find_commit("never-used") is None
    assert [r.version for r in engine.history()] == [1, 2, 3]


def test_snapshot_isolation_and_time_travel(engine):
    engine.commit({"a": rows(0, 2)})
    old = engine.snapshot()
    engine.commit({"a": rows(10, 2), "b": rows(20, 1)})
    engine.commit({"a": rows(30, 1)}, CommitRequest(mode="overwrite"))
    assert ids(engine.read("a", old)) == [0, 1]
    assert engine.read("b", old).num_rows == 0
    assert ids(engine.read("a", old.version + 1)) == [0, 1, 10, 11]
    assert ids(engine.read("a")) == [30]
    assert ids(engine.read("b")) == [20]


def test_reader_holds_one_snapshot_while_writers_commit(engine):
    engine.commit({"a": rows(0, 1), "b": rows(0, 1)})
    snap = engine.snapshot()
    stop = threading.Event()

    def writer() -> None:
        i = 1
        while not stop.is_set():
            engine.commit({"a": rows(i, 1), "b": rows(i, 1)})
            i += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for _ in range(5):
            assert ids(engine.read("a", snap)) == [0]
            current = engine.snapshot()
            assert engine.read("a", current).num_rows == engine.read("b", current).num_rows  # atomic pairs
    finally:
        stop.set()
        thread.join()


def test_expected_version_mismatch_is_typed_and_publishes_nothing(engine, adapter):
    engine.commit({"a": rows(0, 1)})
    with pytest.raises(CommitConflictError) as info:
        engine.commit({"a": rows(1, 1)}, CommitRequest(expected_version=1))
    assert (info.value.expected, info.value.actual) == (1, 3)
    assert "expected manifest version 1" in str(info.value) and "is 3" in str(info.value)
    assert len(adapter.list("tables/a/data")) == 1  # checked before the data file was written
    assert engine.snapshot().version == 3
    assert engine.commit({"a": rows(1, 1)}, CommitRequest(expected_version=3)).version == 4


def test_overwrite_racing_an_append_conflicts_and_leaves_nothing(engine, adapter):
    engine.commit({"a": rows(0, 1)})
    other = Engine.open(adapter, actor="other")
    fp.arm("commit.before_publish", lambda _: other.commit({"a": rows(50, 1)}), times=1)
    with pytest.raises(CommitConflictError) as info:
        engine.commit({"a": rows(99, 1)}, CommitRequest(mode="overwrite"))
    assert info.value.table == "a"
    assert (info.value.expected, info.value.actual) == (1, 3)  # version 2 is the loser's own, unpublished
    assert ids(engine.read("a")) == [0, 50]
    assert adapter.list(RECOVERY_PREFIX) == []  # the loser rolled its own attempt back
    assert [r.outcome.value for r in engine.audit_log()] == ["rolled_back"]


def test_expected_version_raced_at_publish_conflicts(engine, adapter):
    other = Engine.open(adapter)
    fp.arm("commit.before_publish", lambda _: other.commit({"b": rows(50, 1)}), times=1)
    with pytest.raises(CommitConflictError) as info:
        engine.commit({"a": rows(0, 1)}, CommitRequest(expected_version=2))
    assert (info.value.expected, info.value.actual) == (2, 3)
    assert engine.read("a").num_rows == 0


def test_appends_losing_the_race_rebase_and_retry(engine, adapter):
    other = Engine.open(adapter)
    fp.arm("commit.before_publish", lambda _: other.commit({"a": rows(50, 1), "b": rows(60, 1)}), times=1)
    commit = engine.commit({"a": rows(0, 2), "b": rows(10, 1)})
    assert commit.attempts == 2
    assert ids(engine.read("a")) == [0, 1, 50]
    assert ids(engine.read("b")) == [10, 60]
    fp.arm("commit.before_publish", lambda _: other.commit({"b": rows(70, 1)}), times=1)
    assert engine.commit({"a": rows(5, 1)}).attempts == 2  # other table moved: no rebuild needed
    assert ids(engine.read("b")) == [10, 60, 70]
    assert adapter.list(RECOVERY_PREFIX) == []


def test_integrity_errors_publish_nothing(engine, adapter):
    before = adapter.read_bytes(MANIFEST_KEY)
    bad = pa.table({"id": [1], "name": [2]})
    with pytest.raises(SchemaMismatchError):
        engine.commit({"a": bad})
    with pytest.raises(UnknownTableError):
        engine.commit({"a": rows(0, 1), "nope": rows(0, 1)})
    with pytest.raises(SchemaMismatchError):
        engine.write_fragment("a", bad)
    with pytest.raises(TableExistsError):
        engine.create_table("a", SCHEMA)
    assert adapter.read_bytes(MANIFEST_KEY) == before
    assert adapter.list("tables/a/data") == []  # checks ran before any data file was written


def test_corrupt_manifest_is_refused_and_kept(engine, adapter):
    adapter.write(MANIFEST_KEY, b'{"format": "storage-adapter-engine/manifest", "trunc')
    for action in (
        lambda: engine.commit({"a": rows(0, 1)}),
        engine.snapshot,
        lambda: Engine.open(adapter),
        lambda: Engine.open(adapter, read_only=True),
    ):
        with pytest.raises(CorruptManifestError) as info:
            action()
        assert info.value.key == MANIFEST_KEY
    assert adapter.read_bytes(MANIFEST_KEY).endswith(b"trunc")
    assert adapter.list(RECOVERY_PREFIX) == []


def test_idempotency_key_replays_instead_of_reapplying(engine):
    first = engine.commit({"a": rows(0, 2)}, CommitRequest(idempotency_key="once"))
    again = engine.commit({"a": rows(0, 2)}, CommitRequest(idempotency_key="once"))
    assert again.replayed and again.version == first.version and again.record == first.record
    assert engine.read("a").num_rows == 2


def test_fragments_api_commits_many_files_atomically(engine):
    refs = [engine.write_fragment("a", rows(i * 10, 2)) for i in range(3)]
    assert all(r.rows == 2 and r.bytes > 0 and r.key.startswith("tables/a/data/") for r in refs)
    assert pickle.loads(pickle.dumps(refs[0])) == refs[0]  # refs travel from executors to the driver
    assert engine.read("a").num_rows == 0
    commit = engine.commit_fragments({"a": refs, "b": [engine.write_fragment("b", rows(0, 1))]})
    assert engine.read("a").num_rows == 6 and engine.read("b").num_rows == 1
    assert commit.tables == {"a": 1, "b": 1}
    with pytest.raises(SchemaMismatchError):
        engine.commit_fragments({"b": refs[:1]})  # a fragment of another table


def test_read_only_engine(engine, adapter):
    engine.commit({"a": rows(0, 1)})
    reader = Engine.open(adapter, read_only=True)
    assert reader.read("a").num_rows == 1
    with pytest.raises(ReadOnlyEngineError):
        reader.commit({"a": rows(1, 1)})
    ref = reader.write_fragment("a", rows(1, 1))  # executors write fragments read-only; the driver commits
    engine.commit_fragments({"a": [ref]})
    assert reader.read("a").num_rows == 2
    with pytest.raises(NotFoundError):
        Engine.open(adapter.child("empty"), read_only=True)


def test_bounded_history_window(adapter):
    engine = Engine.open(adapter, settings=EngineSettings(retention=3))
    engine.create_table("a", SCHEMA)
    for i in range(5):
        engine.commit({"a": rows(i, 1)}, CommitRequest(idempotency_key=f"k{i}"))
    assert [r.version for r in engine.history()] == [4, 5, 6]
    # the manifest's history is bounded; the key ledger is not bound to it
    assert engine.find_commit("k0").version == 2 and engine.find_commit("k4").version == 6
    assert engine.find_commit("never") is None
    assert ids(engine.read("a", 3)) == [0, 1]
    with pytest.raises(HistoryExpiredError):
        engine.read("a", 2)


@pytest.mark.parametrize("version", ["1", 1.5, True, -1, b"1"])
def test_a_version_that_is_not_a_manifest_version_is_refused_before_any_request(engine, version):
    """snapshot, read and files: a ConfigurationError naming the version (not a TypeError from deep in
    the history lookup, nor True read as version 1), before any request."""
    counted = CountingAdapter(engine.adapter)
    counting = Engine.open(counted, read_only=True)
    before = sum(counted.counts.values())
    for ask in (counting.snapshot, lambda v: counting.read("a", v), lambda v: counting.files("a", v)):
        with pytest.raises(ConfigurationError, match="version") as info:
            ask(version)
        assert repr(version) in str(info.value)
    assert sum(counted.counts.values()) == before


def test_threads_appending_lose_no_update(engine, adapter):
    engines = [engine, Engine.open(adapter, actor="second")]
    versions: list[int] = []
    lock = threading.Lock()

    def work(worker: int) -> None:
        for i in range(4):
            version = engines[worker % 2].commit({"a": rows(worker * 100 + i, 1)}).version
            with lock:
                versions.append(version)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert engine.read("a").num_rows == 24
    assert sorted(versions) == list(range(3, 27))  # gap-free, duplicate-free manifest versions
    assert adapter.list(RECOVERY_PREFIX) == []


def test_request_counts(adapter):
    counting = CountingAdapter(adapter)
    engine = Engine.open(counting)
    assert dict(counting.counts) == {"read_versioned": 1, "write_if_absent": 1, "list": 1}  # init + sweep
    counting.reset()
    Engine.open(counting)
    assert dict(counting.counts) == {"read_versioned": 1, "list": 1}  # steady-state read-write open
    counting.reset()
    engine.heal()
    assert dict(counting.counts) == {"list": 1}  # the steady-state heal cost of every write
    engine.create_table("a", SCHEMA)
    engine.commit({"a": rows(0, 1)})
    counting.reset()
    engine.commit({"a": rows(1, 1)})
    # heal LIST, manifest GET, data PUT, sidecar PUT, table-version PUT, manifest CAS, sidecar DELETE
    assert dict(counting.counts) == {
        "list": 1,
        "read_versioned": 1,
        "write_if_absent": 2,
        "write": 1,
        "write_if_match": 1,
        "delete": 1,
    }
    cold = CountingAdapter(adapter)
    reader = Engine.open(cold, read_only=True)
    cold.reset()
    snap = reader.snapshot()
    assert dict(cold.counts) == {"read_versioned": 1}
    assert reader.read("a", snap).num_rows == 2
    # the pinned delta, then its chain down to the full create version (fetched concurrently) + 2 fragments
    assert dict(cold.counts) == {"read_versioned": 1, "read_bytes": 3 + 2}
    cold.reset()
    assert reader.read("a", snap).num_rows == 2
    assert dict(cold.counts) == {"read_bytes": 2}  # resolved versions are cached: fragments only
    cold_writer = CountingAdapter(adapter)
    writer = Engine.open(cold_writer)
    cold_writer.reset()
    writer.commit({"a": rows(2, 1)})
    assert cold_writer.total == 8 and cold_writer.counts["read_bytes"] == 1  # + base version, once


class _SlowReads(CountingAdapter):
    """Fragment GETs take 20 ms; records the most GETs ever in flight at once."""

    def __init__(self, inner) -> None:
        super().__init__(inner)
        self.in_flight = self.most_in_flight = 0
        self._gauge = threading.Lock()

    def read_bytes(self, key: str) -> bytes:
        with self._gauge:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            time.sleep(0.02 if "/data/" in key else 0)
            return self.inner.read_bytes(key)
        finally:
            with self._gauge:
                self.in_flight -= 1


def test_read_fetches_fragments_concurrently_in_fragment_order(engine, adapter):
    refs = [engine.write_fragment("a", rows(i, 1)) for i in range(40)]
    engine.commit_fragments({"a": refs[:20]})
    engine.commit_fragments({"a": refs[20:]})
    slow = _SlowReads(adapter)
    reader = Engine.open(slow, read_only=True)
    assert reader.read("a").column("id").to_pylist() == list(range(40))  # fragment order, not arrival order
    assert 1 < slow.most_in_flight <= REQUESTS_IN_FLIGHT
    missing = engine.write_fragment("a", rows(99, 1))
    engine.commit_fragments({"a": [missing]})
    adapter.delete(missing.key)
    with pytest.raises(NotFoundError):
        reader.read("a")


def _foreign_sidecar(adapter, host: str, pid: int, lease_s: float) -> str:
    """A pending sidecar of another process's writer (pinning table "a" at its current version)."""
    operation_id = str(ULID())
    now = codec.now_iso()
    pins = {"a": SidecarPin("tables/a", 0, 1)}
    SidecarStore(adapter).write(
        Sidecar(
            operation_id, "commit", None, now, lease_deadline(lease_s), host, pid, 1, "append", None, pins
        )
    )
    return operation_id


def test_heal_reads_a_live_foreign_sidecar_once_and_rechecks_it_when_its_writer_may_be_dead(adapter):
    engine = Engine.open(adapter)
    engine.create_table("a", SCHEMA)
    counting = CountingAdapter(adapter)
    healer = Engine.open(counting)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = [_foreign_sidecar(adapter, "elsewhere", 1, 3600) for _ in range(4)]
        short_lease = _foreign_sidecar(adapter, "elsewhere", 1, 3.0)
        same_host = _foreign_sidecar(adapter, HOST, sleeper.pid, 3600)
        counting.reset()
        assert len(healer.heal().deferred) == 6
        assert dict(counting.counts) == {"list": 1, "read_bytes": 6}  # each new sidecar read once
        counting.reset()
        assert len(healer.heal().deferred) == 6
        assert dict(counting.counts) == {"list": 1}  # steady state: nothing re-read
        renewed = Sidecar.decode(adapter.read_bytes(layout.sidecar_key(live[0])), layout.sidecar_key(live[0]))
        SidecarStore(adapter).write(replace(renewed, lease_expires_at=lease_deadline(7200)))  # a new token
        counting.reset()
        healer.heal()
        assert dict(counting.counts) == {"list": 1, "read_bytes": 1}
        sleeper.kill()
        sleeper.wait()
        report = healer.heal()  # the cached copy names a pid that is gone: re-read, then recovered
        assert [r.operation_id for r in report.recovered] == [same_host]
        time.sleep(3.1)
        report = healer.heal()  # the cached copy's lease has lapsed: re-read, then recovered
        assert [r.operation_id for r in report.recovered] == [short_lease]
        counting.reset()
        assert sorted(healer.heal().deferred) == sorted(live)
        assert dict(counting.counts) == {"list": 1}
    finally:
        sleeper.kill()
        sleeper.wait()


STEADY_COMMIT = {
    "list": 1,
    "read_versioned": 1,
    "write_if_absent": 2,
    "write": 1,
    "write_if_match": 1,
    "delete": 1,
}


def test_a_commits_heal_reads_no_sidecar_written_within_the_lease(adapter):
    """Issue 17: the heal before a commit costs one LIST however many writers elsewhere have a commit in
    flight (their sidecars were written within the lease, so their leases run). A killed same-host writer
    is recovered by an explicit heal at once, and by a commit's heal once its sidecar is a lease old."""
    engine = Engine.open(adapter)
    engine.create_table("a", SCHEMA)
    engine.create_table("b", SCHEMA)
    counting = CountingAdapter(adapter)
    writer = Engine.open(counting)
    writer.commit({"b": rows(0, 1)})  # caches b's base version
    aged = Engine.open(adapter, settings=EngineSettings(lease_s=2.0))
    sleepers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
    try:
        in_flight = []
        for n in (1, 7):
            in_flight += [_foreign_sidecar(adapter, "elsewhere", 1, 3600) for _ in range(n)]
            counting.reset()
            writer.commit({"b": rows(n, 1)})
            assert dict(counting.counts) == STEADY_COMMIT  # not one GET of the sidecars in flight
            assert sorted(writer.last_heal.deferred) == sorted(in_flight)
        # same-host writers killed mid-commit: their pid is gone, their lease runs
        first = _foreign_sidecar(adapter, HOST, sleepers[0].pid, 3600)
        sleepers[0].kill()
        sleepers[0].wait()
        writer.commit({"b": rows(10, 1)})
        aged.commit({"b": rows(11, 1)})
        assert writer.last_heal.recovered == aged.last_heal.recovered == ()  # written within the lease
        time.sleep(2.0)
        second = _foreign_sidecar(adapter, HOST, sleepers[1].pid, 3600)
        sleepers[1].kill()
        sleepers[1].wait()
        aged.commit({"b": rows(12, 1)})
        assert [r.operation_id for r in aged.last_heal.recovered] == [first]  # a lease old: read, dead
        assert sorted(aged.last_heal.deferred) == sorted([*in_flight, second])  # alive, or unread
        writer.commit({"b": rows(13, 1)})
        assert writer.last_heal.recovered == ()
        assert [r.operation_id for r in writer.heal().recovered] == [second]  # a full heal: at once
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()


def test_no_lost_update_check_catches_a_planted_unconditional_publish(engine, adapter, monkeypatch):
    def planted_publish(self, current, new, stored=frozenset()):  # ignores the token: last writer wins
        adapter.write(MANIFEST_KEY, new.encode())
        return type(current)(new, "planted")

    monkeypatch.setattr("storage_adapter.engine.manifest.ManifestStore.publish", planted_publish)
    other = Engine.open(adapter)
    fp.arm("commit.before_publish", lambda _: other.commit({"a": rows(50, 1)}), times=1)
    engine.commit({"a": rows(0, 1)})
    assert engine.read("a").num_rows == 1  # the other commit's row is lost: what the real CAS prevents


def test_version_cache_is_safe_to_fill_from_many_threads():
    """Phase B and reads remember table versions from pool threads; evictions must not race."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: the race shows within 16 x 3,000
    store = TableVersionStore(None, cache_size=4)  # type: ignore[arg-type]  # _remember does no I/O
    errors: list[BaseException] = []

    def remember(thread: int) -> None:
        try:
            for version in range(3000):
                store._remember(TableVersion(f"t{thread}", version, None, "op", "append", "s", ()))
        except Exception as exc:
            errors.append(exc)

    try:
        threads = [threading.Thread(target=remember, args=(i,)) for i in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
