"""Issue 7's fault matrix (rows 1-8) and crashes between every pair of protocol steps, on every backend.

Crashes are in-process ``SimulatedCrash`` failpoints (a BaseException nothing catches); "reopen" is a new
Engine on the same root, exactly what a restarted process does. Real kill -9 is in test_recovery_kill9.py.
"""

from __future__ import annotations

import json
import os
import time

import pyarrow as pa
import pytest
from engine_crash_worker import assert_converged, batch, check_all_or_nothing

from storage_adapter.engine import (
    CorruptSidecarError,
    Engine,
    EngineSettings,
    RecoveryInvariantError,
    RecoveryOutcome,
)
from storage_adapter.engine import failpoints as fp
from storage_adapter.engine.failpoints import InjectedFault, SimulatedCrash
from storage_adapter.engine.layout import MANIFEST_KEY, RECOVERY_PREFIX, version_key
from storage_adapter.engine.manifest import Manifest

SCHEMA = pa.schema([("id", pa.int64())])
A_ROWS, B_ROWS = 3, 2


def data(count: int, start: int = 0) -> pa.Table:
    return pa.table({"id": list(range(start, start + count))}, schema=SCHEMA)


def pair() -> dict[str, pa.Table]:
    return {"a": data(A_ROWS, 1000), "b": data(B_ROWS, 2000)}


@pytest.fixture
def engine(adapter):
    fp.disarm()
    eng = Engine.open(adapter, actor="matrix")
    eng.create_table("a", SCHEMA)
    eng.create_table("b", SCHEMA)
    eng.commit({"a": data(1), "b": data(1)})  # version 3: a=1, b=1
    yield eng
    fp.disarm()


def sidecars(adapter) -> list[str]:
    return [info.key for info in adapter.list(RECOVERY_PREFIX)]


def manifest(adapter) -> Manifest:
    return Manifest.decode(adapter.read_bytes(MANIFEST_KEY))


def crash_commit(engine, point: str, skip: int = 0, commit=None) -> None:
    with fp.armed(point, "crash", times=1, skip=skip), pytest.raises(SimulatedCrash):
        (commit or (lambda: engine.commit(pair())))()


def visible_counts(engine) -> tuple[int, int]:
    snap = engine.snapshot()
    return engine.read("a", snap).num_rows - 1, engine.read("b", snap).num_rows - 1


# -- row 1 ----------------------------------------------------------------------------------------------
def test_row1_sidecar_write_fails_aborts_with_zero_drift(engine, adapter):
    before = adapter.read_bytes(MANIFEST_KEY)
    with fp.armed("recovery.sidecar_write", "error", times=1), pytest.raises(InjectedFault):
        engine.commit(pair())
    assert adapter.read_bytes(MANIFEST_KEY) == before
    assert not adapter.exists(version_key("a", 2)) and not adapter.exists(version_key("b", 2))
    assert sidecars(adapter) == []
    assert engine.commit(pair()).version == 4  # the same handle works once the fault clears
    assert visible_counts(engine) == (A_ROWS, B_ROWS)


# -- row 2 ----------------------------------------------------------------------------------------------
def test_row2_sidecar_delete_fails_commit_succeeds_next_write_heals(engine, adapter):
    with fp.armed("recovery.sidecar_delete", "error", times=1):
        commit = engine.commit(pair())
    assert commit.sidecar_pending and len(sidecars(adapter)) == 1
    assert visible_counts(engine) == (A_ROWS, B_ROWS)
    engine.commit({"a": data(1, 5)})
    assert [(r.operation_id, r.outcome) for r in engine.audit_log()] == [
        (commit.record.operation_id, RecoveryOutcome.COMPLETED)
    ]
    assert engine.last_heal.recovered[0].operation_id == commit.record.operation_id
    assert_converged(adapter)


# -- row 3 ----------------------------------------------------------------------------------------------
def test_row3_listing_failure_is_loud_everywhere(engine, adapter):
    before = adapter.read_bytes(MANIFEST_KEY)
    with fp.armed("recovery.sidecar_list", "error"):
        for write in (
            lambda: engine.commit(pair()),
            lambda: engine.create_table("c", SCHEMA),
            lambda: engine.vacuum(),
            lambda: Engine.open(adapter),
        ):
            with pytest.raises(InjectedFault):
                write()
        assert Engine.open(adapter, read_only=True).read("a").num_rows == 1
    assert adapter.read_bytes(MANIFEST_KEY) == before
    assert not adapter.list("tables/a/data") or len(adapter.list("tables/a/data")) == 1


# -- row 4 ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "body",
    [
        b'{"format": "storage-adapter-engine/recovery-sidecar", "format_version": 1, "operation',  # truncated
        b"\x00garbage",
        json.dumps({"format": "storage-adapter-engine/recovery-sidecar", "format_version": 99}).encode(),
    ],
    ids=["truncated", "garbage", "unknown-version"],
)
def test_row4_corrupt_sidecar_refused_and_kept(engine, adapter, body):
    key = f"{RECOVERY_PREFIX}/01JCORRUPT0000000000000000.json"
    brief = Engine.open(adapter, settings=EngineSettings(lease_s=0.2))
    adapter.write(key, body)
    with pytest.raises(CorruptSidecarError) as info:
        engine.heal()  # a full heal reads it at once
    assert info.value.key == key
    with pytest.raises(CorruptSidecarError):
        Engine.open(adapter)
    time.sleep(0.2)
    with pytest.raises(CorruptSidecarError):
        brief.commit(pair())  # a commit's light heal, once the sidecar is a lease old
    assert adapter.read_bytes(key) == body
    assert Engine.open(adapter, read_only=True).read("a").num_rows == 1
    assert visible_counts(engine) == (0, 0)


# -- row 5 ----------------------------------------------------------------------------------------------
def test_row5_audit_failure_after_roll_forward_keeps_sidecar_then_exactly_one_record(engine, adapter):
    crash_commit(engine, "commit.before_publish")
    with fp.armed("recovery.audit_write", "error", times=1), pytest.raises(InjectedFault):
        Engine.open(adapter)
    assert len(sidecars(adapter)) == 1
    assert manifest(adapter).commits[-1].recovered  # the roll-forward publish happened
    reopened = Engine.open(adapter)
    audit = reopened.audit_log()
    assert [r.outcome for r in audit] == [RecoveryOutcome.ROLLED_FORWARD]
    assert visible_counts(reopened) == (A_ROWS, B_ROWS)
    assert_converged(adapter)


# -- row 6: every step boundary of a two-table commit ---------------------------------------------------
CRASHES = [
    ("commit.before_sidecar", 0, None, False),
    ("commit.after_sidecar", 0, RecoveryOutcome.ORPHAN_DISCARDED, False),
    ("commit.after_table_version", 0, RecoveryOutcome.ROLLED_BACK, False),  # between the two table writes
    (
        "commit.after_table_version",
        1,
        RecoveryOutcome.ROLLED_FORWARD,
        True,
    ),  # both written (= before publish)
    ("commit.before_publish", 0, RecoveryOutcome.ROLLED_FORWARD, True),
    ("commit.after_publish", 0, RecoveryOutcome.COMPLETED, True),
    ("commit.after_sidecar_delete", 0, None, True),
]


@pytest.mark.parametrize(
    ("point", "skip", "outcome", "visible"), CRASHES, ids=[f"{p}@{s}" for p, s, _, _ in CRASHES]
)
def test_row6_crash_between_steps_is_all_or_nothing(engine, adapter, point, skip, outcome, visible):
    crash_commit(engine, point, skip)
    reopened = Engine.open(adapter)
    assert visible_counts(reopened) == ((A_ROWS, B_ROWS) if visible else (0, 0))
    assert [r.outcome for r in reopened.audit_log()] == ([] if outcome is None else [outcome])
    assert_converged(adapter)
    reopened.commit({"a": data(1, 7)})  # and the root keeps working
    assert visible_counts(reopened)[0] == (A_ROWS if visible else 0) + 1


RECOVERY_CRASHES = [
    ("commit.before_publish", "recovery.after_classify", RecoveryOutcome.ROLLED_FORWARD, True),
    ("commit.before_publish", "recovery.after_roll_forward_publish", RecoveryOutcome.ROLLED_FORWARD, True),
    ("commit.before_publish", "recovery.after_audit", RecoveryOutcome.ROLLED_FORWARD, True),
    ("commit.after_table_version", "recovery.after_restore", RecoveryOutcome.ROLLED_BACK, False),
    ("commit.after_table_version", "recovery.after_audit", RecoveryOutcome.ROLLED_BACK, False),
    ("commit.after_publish", "recovery.after_audit", RecoveryOutcome.COMPLETED, True),
]


@pytest.mark.parametrize(
    ("commit_point", "recovery_point", "outcome", "visible"),
    RECOVERY_CRASHES,
    ids=[f"{c}+{r}" for c, r, _, _ in RECOVERY_CRASHES],
)
def test_row6_crashing_recovery_reruns_to_exactly_one_audit(
    engine, adapter, commit_point, recovery_point, outcome, visible
):
    crash_commit(engine, commit_point)
    with fp.armed(recovery_point, "crash", times=1), pytest.raises(SimulatedCrash):
        Engine.open(adapter)
    reopened = Engine.open(adapter)
    assert [r.outcome for r in reopened.audit_log()] == [outcome]
    assert visible_counts(reopened) == ((A_ROWS, B_ROWS) if visible else (0, 0))
    assert_converged(adapter)


def test_row6_crashed_create_table_is_all_or_nothing(engine, adapter):
    create = lambda: engine.create_table("c", SCHEMA)  # noqa: E731
    crash_commit(engine, "commit.after_sidecar", commit=create)
    assert "c" not in Engine.open(adapter).snapshot().tables
    crash_commit(engine, "commit.before_publish", commit=create)
    reopened = Engine.open(adapter)
    assert reopened.snapshot().table_version("c") == 0
    assert [r.outcome for r in reopened.audit_log()] == [
        RecoveryOutcome.ORPHAN_DISCARDED,
        RecoveryOutcome.ROLLED_FORWARD,
    ]
    reopened.commit({"c": data(2)})
    assert reopened.read("c").num_rows == 2


def test_row6_crashed_create_overtaken_by_a_concurrent_create_rolls_back(engine, adapter):
    other = Engine.open(adapter, actor="other")

    def other_creates_then_die(_: str) -> None:
        other.create_table("c", SCHEMA)
        raise SimulatedCrash("before_publish")

    with fp.armed("commit.before_publish", other_creates_then_die, times=1), pytest.raises(SimulatedCrash):
        engine.create_table("c", SCHEMA)
    reopened = Engine.open(adapter)
    assert reopened.snapshot().table_version("c") == 1  # the other's version; ours (0) is invisible
    assert [r.outcome for r in reopened.audit_log()] == [RecoveryOutcome.ROLLED_BACK]
    assert_converged(adapter)


# -- row 7: the manifest moved past the pin, deterministically ------------------------------------------
def test_row7_completed_sidecar_with_manifest_beyond_pin_is_not_republished(engine, adapter):
    other = Engine.open(adapter, actor="other")

    def others_commit_then_die(_: str) -> None:
        other.commit({"a": data(1, 50), "b": data(1, 60)})
        other.commit({"a": data(1, 70)})
        raise SimulatedCrash("after_publish")

    with fp.armed("commit.after_publish", others_commit_then_die, times=1), pytest.raises(SimulatedCrash):
        engine.commit(pair())
    assert manifest(adapter).version == 6  # the sidecar pinned the manifest at 3 -> 4; it is now at 6
    reopened = Engine.open(adapter)
    assert manifest(adapter).version == 6  # recognised as completed: nothing republished
    assert [r.outcome for r in reopened.audit_log()] == [RecoveryOutcome.COMPLETED]
    assert visible_counts(reopened) == (A_ROWS + 2, B_ROWS + 1)
    assert_converged(adapter)


def test_row7_unpublished_sidecar_overtaken_by_other_writers_rolls_back_without_stale_publish(
    engine, adapter
):
    other = Engine.open(adapter, actor="other")

    def others_commit_then_die(_: str) -> None:
        other.commit({"a": data(1, 50)})
        other.commit({"a": data(1, 70), "b": data(1, 60)})
        raise SimulatedCrash("before_publish")

    with fp.armed("commit.before_publish", others_commit_then_die, times=1), pytest.raises(SimulatedCrash):
        engine.commit(pair())
    reopened = Engine.open(adapter)
    assert manifest(adapter).version == 5
    assert [r.outcome for r in reopened.audit_log()] == [RecoveryOutcome.ROLLED_BACK]
    assert visible_counts(reopened) == (2, 1)
    assert_converged(adapter)


# -- row 8 ----------------------------------------------------------------------------------------------
def test_row8_sidecar_vanishing_between_list_and_read_is_benign(engine, adapter):
    with fp.armed("recovery.sidecar_delete", "error", times=1):
        engine.commit(pair())
    [key] = sidecars(adapter)
    with fp.armed("recovery.sidecar_read", lambda _: adapter.delete(key), times=1):
        engine.commit({"a": data(1, 9)})
    assert engine.last_heal.vanished == 1 and engine.last_heal.recovered == ()
    assert visible_counts(engine) == (A_ROWS + 1, B_ROWS)


# -- liveness and invariants ----------------------------------------------------------------------------
def test_heal_leaves_a_live_writer_alone_until_its_lease_lapses(engine, adapter):
    crash_commit(engine, "commit.before_publish")
    [key] = sidecars(adapter)
    doc = json.loads(adapter.read_bytes(key))
    doc["pid"] = os.getppid()  # a live process on this host
    doc["lease_expires_at"] = "2999-01-01T00:00:00+00:00"
    adapter.write(key, json.dumps(doc))
    engine.commit({"a": data(1, 9)})
    assert engine.last_heal.deferred == (doc["operation_id"],) and sidecars(adapter) == [key]
    doc["lease_expires_at"] = "2000-01-01T00:00:00+00:00"
    adapter.write(key, json.dumps(doc))
    engine.commit({"a": data(1, 10)})
    # the manifest moved "a" past the pin meanwhile: rolled back, never published at a stale version
    assert [r.outcome for r in engine.audit_log()] == [RecoveryOutcome.ROLLED_BACK]
    assert visible_counts(engine) == (2, 0)
    assert_converged(adapter)


def test_in_process_heal_never_touches_a_live_writers_sidecar(engine, adapter):
    other = Engine.open(adapter)
    seen = []

    def heal_while_live(_: str) -> None:
        seen.append(other.heal())

    with fp.armed("commit.before_publish", heal_while_live, times=1):
        engine.commit(pair())
    assert len(seen[0].deferred) == 1 and seen[0].recovered == ()
    assert visible_counts(engine) == (A_ROWS, B_ROWS)
    assert engine.audit_log() == []


def test_invariant_violation_aborts_loudly_and_keeps_the_sidecar(engine, adapter):
    crash_commit(engine, "commit.after_sidecar")
    [key] = sidecars(adapter)
    doc = json.loads(adapter.read_bytes(key))
    doc["tables"]["a"]["expected_version"] = 9  # ahead of the manifest's pin: impossible
    adapter.write(key, json.dumps(doc))
    with pytest.raises(RecoveryInvariantError):
        Engine.open(adapter)
    assert sidecars(adapter) == [key]


# -- the checkers catch planted bugs --------------------------------------------------------------------
def test_checks_catch_planted_bugs(engine, adapter, monkeypatch):
    # a recovery that "rolls back" without restoring leaves a head that is not the pinned content
    monkeypatch.setattr(
        "storage_adapter.engine.recovery.Recovery._roll_back", lambda self, sidecar, found: {}
    )
    crash_commit(engine, "commit.after_table_version")
    Engine.open(adapter)
    with pytest.raises(AssertionError):
        assert_converged(adapter)
    # a half-visible commit, and a lost acknowledged one, are flagged by the kill -9 campaign's check
    tables = {"a_tags": 3, "b_tags": 2}
    for table in tables:
        engine.create_table(table, batch("x", 1).schema)
    engine.commit({"a_tags": batch("p-0", 3)})  # planted: only one table of the pair
    with pytest.raises(AssertionError, match="not all-or-nothing"):
        check_all_or_nothing(engine, "p", [], tables)
    with pytest.raises(AssertionError, match="acknowledged commits lost"):
        check_all_or_nothing(engine, "q", ["q-0"], tables)
    engine.commit({"b_tags": batch("p-0", 2)})
    assert check_all_or_nothing(engine, "p", [], tables) == 1  # and a correct state passes


# -- concurrent Phase B (a multi-table commit writes its table versions in parallel) ----------------------
WIDE = [f"w{i}" for i in range(6)]


def wide_engine(adapter) -> Engine:
    eng = Engine.open(adapter, actor="wide")
    for name in WIDE:
        eng.create_table(name, SCHEMA)
    return eng


def test_concurrent_phase_b_names_every_taken_pin_in_the_sidecar_before_publishing(adapter):
    engine = wide_engine(adapter)
    other = Engine.open(adapter, actor="other")
    stored = []

    def check_sidecar(_: str) -> None:
        [key] = [k for k in sidecars(adapter) if json.loads(adapter.read_bytes(k))["actor"] == "wide"]
        stored.append(json.loads(adapter.read_bytes(key)))

    def other_takes_every_next_number(_: str) -> None:
        with fp.armed("commit.before_publish", "crash", times=1), pytest.raises(SimulatedCrash):
            other.commit({name: data(1, 500) for name in WIDE})
        fp.arm("commit.before_publish", check_sidecar, times=1)

    with fp.armed("commit.after_sidecar", other_takes_every_next_number, times=1):
        commit = engine.commit({name: data(1, 100) for name in WIDE})
    # every pin moved past the other's unpublished version 1, each rewrite made from its own thread
    assert commit.tables == dict.fromkeys(WIDE, 2)
    [sidecar] = stored
    assert {n: t["post_commit_pin"] for n, t in sidecar["tables"].items()} == commit.tables
    reopened = Engine.open(adapter)  # the other's sidecar: overtaken by ours, rolled back
    assert [r.outcome for r in reopened.audit_log()] == [RecoveryOutcome.ROLLED_BACK]
    assert all(reopened.read(name).num_rows == 1 for name in WIDE)
    assert_converged(adapter)


class _CrashOnThirdVersion:
    """Delegates to an adapter; the third table-version write dies (other writes in flight may land)."""

    def __init__(self, inner) -> None:
        self._inner, self._versions_written = inner, 0

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def write_if_absent(self, key: str, data: bytes):
        if "/_versions/" in key:
            self._versions_written += 1
            if self._versions_written == 3:
                raise SimulatedCrash("third table version")
        return self._inner.write_if_absent(key, data)


def test_crash_during_concurrent_phase_b_is_all_or_nothing(adapter):
    wide_engine(adapter)
    crashing = Engine.open(_CrashOnThirdVersion(adapter))
    with pytest.raises(SimulatedCrash):
        crashing.commit_fragments({n: [crashing.write_fragment(n, data(1))] for n in WIDE})
    reopened = Engine.open(adapter)
    assert [r.outcome for r in reopened.audit_log()] == [RecoveryOutcome.ROLLED_BACK]
    assert all(reopened.read(name).num_rows == 0 for name in WIDE)
    assert_converged(adapter)
