"""Issue 16's engine-side holes, each reproduced with the public API on every backend (memory, local,
SeaweedFS): a key applied twice once its record left the manifest's retention window (1), a roll-forward
publishing a key another commit already carries (3), a purged idempotency key answering a new request
with an old effect (6), and the recovery siblings (a re-run roll-back, a multi-table roll-forward's audit,
a roll-forward re-audited as completed).
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from storage_adapter.engine import CommitRequest, Engine, EngineSettings, RecoveryOutcome
from storage_adapter.engine import failpoints as fp
from storage_adapter.engine.errors import CorruptMetadataError, KeyInFlightError, KeyWindowExpiredError
from storage_adapter.engine.failpoints import InjectedFault, SimulatedCrash
from storage_adapter.engine.layout import sidecar_key
from storage_adapter.engine.sidecar import Sidecar
from storage_adapter.idempotency import (
    HandlerResult,
    IdempotencyStore,
    IdempotentRequest,
    run_idempotent,
)
from storage_adapter.idempotency.engine_reconciler import EngineReconciler

SCHEMA = pa.schema([("id", pa.int64())])
RETENTION = 4


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": list(ids)}, schema=SCHEMA)


def ids(engine: Engine, table: str) -> list[int]:
    return sorted(engine.read(table).column("id").to_pylist())


@pytest.fixture
def engine(adapter):
    fp.disarm()
    eng = Engine.open(adapter.child("engine"), actor="once", settings=EngineSettings(retention=RETENTION))
    eng.create_table("a", SCHEMA)
    eng.create_table("b", SCHEMA)
    yield eng
    fp.disarm()


def crash_at(engine: Engine, point: str, data: dict[str, pa.Table], key: str) -> None:
    with fp.armed(point, "crash"), pytest.raises(SimulatedCrash):
        engine.commit(data, CommitRequest(idempotency_key=key))


def as_if_elsewhere(engine: Engine, lease_s: float) -> None:
    """Make the only pending sidecar look like a writer on another host whose lease runs ``lease_s`` more:
    what a writer in another process that died (or stalled) leaves behind."""
    (info,) = engine.adapter.list("__recovery")
    sidecar = Sidecar.decode(engine.adapter.read_bytes(info.key), info.key)
    lease = (datetime.now(UTC) + timedelta(seconds=lease_s)).isoformat()
    moved = dataclasses.replace(sidecar, host="elsewhere.invalid", pid=1, lease_expires_at=lease)
    engine.adapter.write(sidecar_key(sidecar.operation_id), moved.encode())


# -- hole 1: the key window is not the manifest's retention ------------------------------------------------
def test_a_key_is_found_and_replayed_after_it_left_the_retained_history(engine: Engine) -> None:
    first = engine.commit({"a": rows(1)}, CommitRequest(idempotency_key="realm/k1"))
    for n in range(3 * RETENTION):
        engine.commit({"b": rows(100 + n)})
    assert all(r.idempotency_key != "realm/k1" for r in engine.history())  # out of the manifest's window
    found = engine.find_commit("realm/k1")
    assert found is not None and found.version == first.version
    again = engine.commit({"a": rows(1)}, CommitRequest(idempotency_key="realm/k1"))
    assert again.replayed and again.version == first.version
    assert ids(engine, "a") == [1]


def test_a_stale_owner_past_retention_is_reconciled_as_applied_not_run_twice(engine: Engine) -> None:
    store = IdempotencyStore(engine.adapter.child("idem"))
    calls: list[int] = []

    def handler(ctx):
        calls.append(1)
        commit = engine.commit({"a": rows(7)}, CommitRequest(idempotency_key=ctx.commit_key))
        for n in range(3 * RETENTION):  # the world moves on before this owner can finalize
            engine.commit({"b": rows(200 + n)})
        raise SimulatedCrash(f"owner dies after commit {commit.version}, before finalize")

    request = IdempotentRequest("t1", str(uuid.uuid4()), "append", "a", {"row": 7})
    with pytest.raises(SimulatedCrash):
        run_idempotent(store, request, handler)
    reconciler = EngineReconciler(engine, lambda c: HandlerResult(201, {"version": c.version}))
    answer = run_idempotent(store, request, handler, reconciler=reconciler)
    assert answer.status == 201 and ids(engine, "a") == [7] and len(calls) == 1, (answer, calls)


# -- hole 3: one de-duplication rule for every publish ---------------------------------------------------
def test_a_roll_forward_never_publishes_a_key_that_already_landed(engine: Engine) -> None:
    crash_at(engine, "commit.before_publish", {"a": rows(1)}, "realm/k3")
    as_if_elsewhere(engine, lease_s=2)  # a writer elsewhere, dead or slow: heal leaves it alone meanwhile
    retry = engine.commit({"b": rows(2)}, CommitRequest(idempotency_key="realm/k3"))
    recovered_everything = Engine.open(
        engine.adapter, actor="healer", settings=EngineSettings(retention=RETENTION, lease_s=30)
    )
    as_if_elsewhere(engine, lease_s=-1) if engine.adapter.list("__recovery") else None
    recovered_everything.heal()
    carrying = [r for r in engine.history() if r.idempotency_key == "realm/k3"]
    assert len(carrying) == 1, carrying
    assert (ids(engine, "a"), ids(engine, "b")) in (([1], []), ([], [2])), "exactly one effect"
    assert engine.find_commit("realm/k3").version == carrying[0].version
    assert retry.record.operation_id == carrying[0].operation_id  # the retry answers with the one effect


# -- hole 6: a purged key is new again in the engine too --------------------------------------------------
def test_a_purged_key_reused_by_a_new_request_writes_its_rows(engine: Engine) -> None:
    store = IdempotencyStore(
        engine.adapter.child("idem"), lifetime=timedelta(seconds=2), lease=timedelta(seconds=1)
    )
    reconciler = EngineReconciler(engine, lambda c: HandlerResult(201, {"version": c.version}))

    def handler_for(value: int):
        def handler(ctx):
            commit = engine.commit({"a": rows(value)}, CommitRequest(idempotency_key=ctx.commit_key))
            return HandlerResult(201, {"version": commit.version, "replayed": commit.replayed})

        return handler

    key = str(uuid.uuid4())
    first = run_idempotent(
        store, IdempotentRequest("t1", key, "append", "a", {"v": 1}), handler_for(1), reconciler=reconciler
    )
    assert first.status == 201
    assert store.purge_expired(datetime.now(UTC) + timedelta(seconds=10)) >= 1
    second = run_idempotent(
        store, IdempotentRequest("t1", key, "append", "a", {"v": 2}), handler_for(2), reconciler=reconciler
    )
    assert second.status == 201 and not second.summary["replayed"], second
    assert ids(engine, "a") == [1, 2]


# -- recovery siblings ----------------------------------------------------------------------------------
def test_a_rolled_back_table_is_not_restored_twice_when_the_roll_back_reruns(engine: Engine) -> None:
    before = engine.commit({"a": rows(1), "b": rows(1)})
    with fp.armed("commit.after_table_version", "crash"), pytest.raises(SimulatedCrash):
        engine.commit({"a": rows(2), "b": rows(2)})  # a's version written, b's not: heal rolls back
    heads = {t: _head(engine, t) for t in ("a", "b")}
    with fp.armed("recovery.after_audit", "crash"), pytest.raises(SimulatedCrash):
        engine.heal()  # the roll-back restored a and audited, then died before deleting its sidecar
    restored = {t: _head(engine, t) for t in ("a", "b")}
    engine.heal()  # re-runs the roll-back: a is already restored
    assert {t: _head(engine, t) for t in ("a", "b")} == restored and restored["a"] == heads["a"] + 1
    assert (ids(engine, "a"), ids(engine, "b")) == ([1], [1]) and engine.snapshot().version == before.version


@pytest.mark.parametrize("publisher", ["writer", "recovery"])
def test_an_audit_after_the_record_left_the_history_names_every_table_and_who_published(
    engine: Engine, publisher: str
) -> None:
    """The commit (of a and b) was published by its writer, or rolled forward by a recovery whose audit
    write then failed; its sidecar outlives the record's retention (its writer looked alive elsewhere
    meanwhile). The audit still names both tables and says who published it."""
    engine.create_table("c", SCHEMA)
    if publisher == "writer":
        crash_at(engine, "commit.after_publish", {"a": rows(5), "b": rows(5)}, "realm/audit")
    else:
        crash_at(engine, "commit.before_publish", {"a": rows(5), "b": rows(5)}, "realm/audit")
        with fp.armed("recovery.audit_write", "error"), pytest.raises(InjectedFault):
            engine.heal()  # rolled forward; the audit write failed, so the sidecar stays
    as_if_elsewhere(engine, lease_s=30)
    for n in range(3 * RETENTION):
        engine.commit({"c": rows(n)})
    as_if_elsewhere(engine, lease_s=-1)
    engine.heal()
    (audit,) = engine.audit_log()
    expected = RecoveryOutcome.COMPLETED if publisher == "writer" else RecoveryOutcome.ROLLED_FORWARD
    assert audit.outcome is expected and set(audit.tables) == {"a", "b"}, audit
    assert (ids(engine, "a"), ids(engine, "b")) == ([5], [5])


def _head(engine: Engine, table: str) -> int:
    return max(
        int(info.key.rsplit("/", 1)[-1].removesuffix(".json"))
        for info in engine.adapter.list(f"tables/{table}/_versions")
    )


# -- the key ledger's own edges --------------------------------------------------------------------------
def test_a_key_held_by_a_live_writer_is_waited_for_then_refused_with_nothing_visible(adapter) -> None:
    engine = Engine.open(adapter.child("live"), settings=EngineSettings(lease_s=0.5))
    engine.create_table("a", SCHEMA)
    crash_at(engine, "commit.before_publish", {"a": rows(1)}, "realm/held")
    as_if_elsewhere(engine, lease_s=60)  # its writer elsewhere looks alive for a minute
    with pytest.raises(KeyInFlightError, match="realm/held"):
        engine.commit({"a": rows(2)}, CommitRequest(idempotency_key="realm/held"))
    assert ids(engine, "a") == [] and engine.find_commit("realm/held") is None
    assert len(engine.adapter.list("__recovery")) == 1  # the waiter's own sidecar went with it


@pytest.mark.parametrize("bad", ["", 7, None.__class__, "k" * 1025])
def test_a_bad_idempotency_key_is_refused_before_any_io(engine: Engine, bad: object) -> None:
    before = {info.key for info in engine.adapter.list()}
    with pytest.raises(ValueError, match="idempotency_key"):
        engine.commit({"a": rows(1)}, CommitRequest(idempotency_key=bad))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="idempotency_key"):
        engine.find_commit(bad)  # type: ignore[arg-type]
    assert {info.key for info in engine.adapter.list()} == before


def test_a_corrupt_ledger_entry_is_refused_and_left_in_place(engine: Engine) -> None:
    engine.commit({"a": rows(1)}, CommitRequest(idempotency_key="realm/corrupt"))
    (entry,) = engine.adapter.list("__keys")
    engine.adapter.write(entry.key, b'{"format": "storage-adapter-engine/key", "format_version": 1}')
    with pytest.raises(CorruptMetadataError, match=entry.key):
        engine.find_commit("realm/corrupt")
    with pytest.raises(CorruptMetadataError, match=entry.key):
        engine.commit({"a": rows(1)}, CommitRequest(idempotency_key="realm/corrupt"))
    assert engine.adapter.read_bytes(entry.key).startswith(b'{"format"') and ids(engine, "a") == [1]


def test_vacuum_expires_published_keys_after_the_window_and_the_reconciler_then_says_ambiguous(
    adapter,
) -> None:
    engine = Engine.open(adapter.child("window"), settings=EngineSettings(key_window_s=0.0))
    engine.create_table("a", SCHEMA)
    engine.commit({"a": rows(1)}, CommitRequest(idempotency_key="realm/old"))
    report = engine.vacuum()
    assert report.keys_expired == 1 and engine.adapter.list("__keys") == []
    store = IdempotencyStore(engine.adapter.child("idem"))
    request = IdempotentRequest("t1", str(uuid.uuid4()), "append", "a", {"row": 1})

    def crash(ctx):
        raise SimulatedCrash("owner dies")

    with pytest.raises(SimulatedCrash):
        run_idempotent(store, request, crash)
    reconciler = EngineReconciler(engine, lambda c: HandlerResult(201, {"version": c.version}))
    answer = run_idempotent(store, request, crash, reconciler=reconciler)
    assert answer.status == 500 and "reconcile" in (answer.problem_type or ""), answer


def test_a_writer_dying_right_after_its_key_claim_leaves_the_key_to_the_next_commit(engine: Engine) -> None:
    """Found by the chaos campaign (seed 11): the claim must not outlive the sidecar that lets heal release it."""
    crash_at(engine, "commit.after_key_claim", {"a": rows(1)}, "realm/claimed")
    retry = engine.commit({"a": rows(2)}, CommitRequest(idempotency_key="realm/claimed"))
    assert not retry.replayed and ids(engine, "a") == [2]
    assert engine.find_commit("realm/claimed").version == retry.version


def test_a_key_issued_before_the_window_is_refused_before_any_io(adapter) -> None:
    engine = Engine.open(adapter.child("issued"), settings=EngineSettings(key_window_s=3600, lease_s=30))
    engine.create_table("a", SCHEMA)
    before = {info.key for info in engine.adapter.list()}
    old = datetime.now(UTC) - timedelta(seconds=3600 - 29)  # past the window less one lease
    with pytest.raises(KeyWindowExpiredError, match="realm/old"):
        engine.commit({"a": rows(1)}, CommitRequest(idempotency_key="realm/old", key_issued_at=old))
    with pytest.raises(KeyWindowExpiredError):
        engine.precheck(["a"], CommitRequest(idempotency_key="realm/old", key_issued_at=old))
    for bad in (datetime.now(), "2026-01-01"):
        with pytest.raises(ValueError, match="key_issued_at"):
            engine.commit({"a": rows(1)}, CommitRequest(idempotency_key="realm/x", key_issued_at=bad))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="key_issued_at"):
        engine.commit({"a": rows(1)}, CommitRequest(key_issued_at=datetime.now(UTC)))
    assert {info.key for info in engine.adapter.list()} == before
    fresh = datetime.now(UTC) - timedelta(seconds=3600 - 31)
    assert not engine.commit(
        {"a": rows(1)}, CommitRequest(idempotency_key="realm/ok", key_issued_at=fresh)
    ).replayed


def test_a_publish_from_a_claim_the_entry_moved_past_reads_the_entry_again() -> None:
    """The holder publishes its key from its claim's token; when the entry changed since (recovery
    published it meanwhile: a heal rolling the operation forward), the CAS fails and publish reads the
    entry again and returns it, in two requests more. It retried the stale token forever (a chaos campaign
    on SeaweedFS hung in it for 80 minutes)."""
    from contract_tests.counting import CountingAdapter
    from storage_adapter import open_adapter
    from storage_adapter.engine.history import CommitRecord
    from storage_adapter.engine.key_ledger import KeyLedger, KeyState

    counting = CountingAdapter(open_adapter(f"memory://ledger-{uuid.uuid4().hex[:8]}/p"))
    ledger = KeyLedger(counting)
    claimed = ledger.claim("key", "op-1")
    record = CommitRecord(1, "2026-11-28T00:00:00+00:00", None, "op-1", "key", "append", True, ())
    assert ledger.publish("key", record).state is KeyState.PUBLISHED  # the heal's publish
    counting.reset()
    outcome: list[object] = []
    publisher = threading.Thread(target=lambda: outcome.append(ledger.publish("key", record, claimed)))
    publisher.daemon = True  # a publish that never returns must not hang the run
    publisher.start()
    publisher.join(10)
    assert outcome and outcome[0].state is KeyState.PUBLISHED, dict(counting.counts)
    assert dict(counting.counts) == {"write_if_match": 1, "read_versioned": 1}


# -- found by tests/test_http_lease_takeover.py: a writer stopped past its sidecar lease ----------------------
# A heal judges a writer on another host (or with a live pid) dead by its expired lease alone; the writer may
# only be stopped. Before it rolls such an operation back (or discards it) the heal publishes a fence record
# over the manifest it decided on: the stopped writer's CAS fails, its retry finds the fence and raises
# CommitFencedError, nothing of it visible (recovery.py, "Fencing").
STOPPED_WRITER = r"""
import pathlib, sys, time
import pyarrow as pa
from storage_adapter import open_adapter
from storage_adapter.engine import CommitFencedError, CommitRequest, Engine, EngineSettings, failpoints
root, key, sync = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
engine = Engine.open(open_adapter(root), actor="stopped", settings=EngineSettings(lease_s=1.0, retention=4))
def stop(name):
    (sync / "claimed").touch()
    while not (sync / "go").exists():
        time.sleep(0.01)
failpoints.arm("commit.after_key_claim", stop, times=1)
rows = pa.table({"id": [1]}, schema=pa.schema([("id", pa.int64())]))
try:
    print(engine.commit({"a": rows}, CommitRequest(idempotency_key=key)).version)
except CommitFencedError as exc:
    print("fenced:", exc)
    sys.exit(3)
"""


def test_a_writer_stopped_past_its_lease_after_its_key_claim_never_lets_the_key_apply_twice(tmp_path) -> None:
    """A writer in another process claims the key, then stops (SIGSTOP, a VM pause, a starved process)
    for longer than its sidecar lease; this process heals meanwhile, judging it dead by its lease, and
    commits the key itself (the heal released it). When the writer goes on, it must not publish: the key
    applies once, and a later commit with it is a replay, also once the records left the retention.
    (Before the fence, the writer published too: ``a`` held both rows.)"""
    import subprocess
    import sys
    import time

    from storage_adapter import open_adapter

    root = f"file://{tmp_path / 'engine'}"
    (tmp_path / "engine").mkdir()
    engine = Engine.open(
        open_adapter(root), actor="healer", settings=EngineSettings(lease_s=1.0, retention=4)
    )
    engine.create_table("a", SCHEMA)
    engine.create_table("b", SCHEMA)
    key = "realm/stopped"
    writer = subprocess.Popen(
        [sys.executable, "-c", STOPPED_WRITER, root, key, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while not (tmp_path / "claimed").exists():
        assert writer.poll() is None and time.monotonic() < deadline, "the writer never claimed the key"
        time.sleep(0.01)
    time.sleep(1.5)  # the writer's 1 s sidecar lease runs out (a wall-clock lease: nothing to inject)
    healed = engine.heal()
    assert [r.outcome for r in healed.recovered] == [RecoveryOutcome.ORPHAN_DISCARDED]
    taken = engine.commit({"a": rows(2)}, CommitRequest(idempotency_key=key))
    assert not taken.replayed
    (tmp_path / "go").touch()
    out, _ = writer.communicate(timeout=60)
    assert writer.returncode == 3 and out.startswith("fenced:"), out
    for n in range(RETENTION + 1):
        engine.commit({"b": rows(n)})  # unrelated commits: the records leave the retention
    again = engine.commit({"a": rows(3)}, CommitRequest(idempotency_key=key))
    assert again.replayed and again.version == taken.version and ids(engine, "a") == [2]
    assert engine.heal().listed == 0


# Every point a writer can stop at with its sidecar written and nothing published, and what the heal of it
# does: discard it (nothing of it written), roll it back (one of its two table versions written, or the
# manifest moved its table meanwhile: "moved"), or roll it forward (both written, nothing moved).
STOP_CASES = [
    ("commit.after_sidecar", True, False, RecoveryOutcome.ORPHAN_DISCARDED),
    ("commit.after_sidecar", False, False, RecoveryOutcome.ORPHAN_DISCARDED),
    ("commit.after_key_claim", True, False, RecoveryOutcome.ORPHAN_DISCARDED),  # no key, no claim
    ("commit.after_table_version", True, False, RecoveryOutcome.ROLLED_BACK),
    ("commit.after_table_version", False, False, RecoveryOutcome.ROLLED_BACK),
    ("commit.before_publish", True, True, RecoveryOutcome.ROLLED_BACK),
    ("commit.before_publish", False, True, RecoveryOutcome.ROLLED_BACK),
    ("commit.before_publish", True, False, RecoveryOutcome.ROLLED_FORWARD),
    ("commit.before_publish", False, False, RecoveryOutcome.ROLLED_FORWARD),
]


def _stopped_writer(
    adapter, point: str, key: str | None, monkeypatch
) -> tuple[threading.Thread, threading.Event, list[object]]:
    """A writer of a and c (a thread of this process made to look like one on another host: its own live
    registry, another host name) that stops at ``point`` (the first time it fires) until the returned
    event is set; its outcome (a Commit or the exception) lands in the returned list."""
    from storage_adapter.engine import commit as commit_module
    from storage_adapter.engine.sidecar import LiveOperations

    writer = Engine.open(adapter.child("engine"), actor="stopped", settings=EngineSettings(lease_s=1.0))
    stopped, go = threading.Event(), threading.Event()

    def stop(name: str) -> None:
        stopped.set()
        assert go.wait(60)

    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(writer.commit({"a": rows(1), "c": rows(1)}, CommitRequest(idempotency_key=key)))
        except BaseException as exc:  # SimulatedCrash too
            outcome.append(exc)

    fp.arm(point, stop, times=1)
    with monkeypatch.context() as patched:
        patched.setattr(commit_module, "HOST", "elsewhere.invalid")
        patched.setattr(commit_module, "LIVE", LiveOperations())
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        assert stopped.wait(60), "the writer never reached its stop point"
    return thread, go, outcome


@pytest.mark.parametrize(
    ("point", "keyed", "moved", "healed_as"),
    [
        pytest.param(*case, id=f"{case[0]}-{'keyed' if case[1] else 'keyless'}{'-moved' if case[2] else ''}")
        for case in STOP_CASES
    ],
)
def test_a_writer_presumed_dead_by_its_lease_never_publishes_after_the_heal(
    adapter, point: str, keyed: bool, moved: bool, healed_as: RecoveryOutcome, monkeypatch
) -> None:
    """Stopped at each point past its lease, healed by another engine, the writer goes on and publishes
    nothing more: rolled back or discarded (behind a fence), it raises CommitFencedError, or returns the
    replay of the commit that took its key over when it had not claimed the key yet; rolled forward, it
    returns its commit as the heal published it. Its key applies once, its rows at most once."""
    import time

    from storage_adapter.engine import CommitFencedError

    fp.disarm()
    healer = Engine.open(adapter.child("engine"), actor="healer", settings=EngineSettings(lease_s=1.0))
    for table in ("a", "b", "c"):
        healer.create_table(table, SCHEMA)
    key = "realm/stopped" if keyed else None
    thread, go, outcome = _stopped_writer(adapter, point, key, monkeypatch)
    try:
        if moved:
            healer.commit({"a": rows(5)})  # the manifest moves the writer's table: no roll-forward
        time.sleep(1.3)  # past the writer's lease
        healed = healer.heal()
        assert [r.outcome for r in healed.recovered] == [healed_as]
        operation = healed.recovered[0].operation_id
        last = healer.history()[-1]
        if healed_as is not RecoveryOutcome.ROLLED_FORWARD:  # the fence came first, and changes nothing
            assert last.is_fence and last.operation_id == operation and not last.changes
        taken = healer.commit({"a": rows(2)}, CommitRequest(idempotency_key=key))
        assert taken.replayed is (keyed and healed_as is RecoveryOutcome.ROLLED_FORWARD)
    finally:
        go.set()
        thread.join(60)
        fp.disarm()
    assert not thread.is_alive() and len(outcome) == 1
    (result,) = outcome
    published = [r for r in healer.history() if r.operation_id == operation and not r.is_fence]
    if healed_as is RecoveryOutcome.ROLLED_FORWARD:
        assert not isinstance(result, Exception) and not result.replayed, result
        assert [result.version] == [r.version for r in published] and ids(healer, "c") == [1]
    else:
        if keyed and point == "commit.after_sidecar":  # it claims the key after the heal: a replay
            assert not isinstance(result, Exception) and result.replayed and result.version == taken.version
        else:
            assert isinstance(result, CommitFencedError), result
        assert not published and ids(healer, "c") == []
        assert ids(healer, "a") == sorted([2, *([5] if moved else [])])
    if keyed:
        assert healer.commit({"a": rows(3)}, CommitRequest(idempotency_key=key)).replayed
    assert healer.heal().listed == 0  # nothing left pending: the writer cleaned up after itself


def test_a_fenced_writer_that_claims_its_key_again_and_dies_leaves_the_key_to_the_next_commit(
    adapter, monkeypatch
) -> None:
    """Stopped after its sidecar past its lease and healed (fenced, discarded), the writer resumes,
    claims its key (nobody took it meanwhile) and dies at once: the key is held by an operation without a
    sidecar. The next commit with the key finds that operation recovered (audited) and unpublished, so
    fenced, releases its claim and commits (it raised RecoveryInvariantError)."""
    import time

    fp.disarm()
    healer = Engine.open(adapter.child("engine"), actor="healer", settings=EngineSettings(lease_s=1.0))
    for table in ("a", "b", "c"):
        healer.create_table(table, SCHEMA)
    thread, go, outcome = _stopped_writer(adapter, "commit.after_sidecar", "realm/dies", monkeypatch)
    try:
        time.sleep(1.3)  # past the writer's lease
        assert [r.outcome for r in healer.heal().recovered] == [RecoveryOutcome.ORPHAN_DISCARDED]
        fp.arm("commit.after_key_claim", "crash", times=1)
    finally:
        go.set()
        thread.join(60)
        fp.disarm()
    assert len(outcome) == 1 and isinstance(outcome[0], SimulatedCrash)
    assert healer.find_commit("realm/dies") is None  # claimed, by the dead writer
    taken = healer.commit({"a": rows(2)}, CommitRequest(idempotency_key="realm/dies"))
    assert not taken.replayed and ids(healer, "a") == [2] and ids(healer, "c") == []
    assert healer.commit({"a": rows(3)}, CommitRequest(idempotency_key="realm/dies")).replayed
