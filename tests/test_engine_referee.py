"""Issue 46: promises of the engine an outside reviewer broke with planted bugs that every test let pass.
Each test here failed on a bug of its kind planted by hand (the commit message names it). Timing comes
from failpoints and an injected clock (``clock``), never from sleeps; every test runs on memory and local.

* every entry point that can publish a key answers a key that already landed as a replay (2);
* fragments written elsewhere with another schema are refused before anything is published (3);
* each age rule keeps what is just under its bound and takes what is just over (4);
* a roll-back restores the version the manifest pins, not the expected one nor the one below its head (5);
* a roll-forward never publishes a key another operation holds (6);
* a writer slower than its lease renews it in time, and one that renews too late never publishes (7).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from ulid import ULID

from contract_tests.counting import CountingAdapter
from storage_adapter.engine import (
    Commit,
    CommitFencedError,
    CommitRequest,
    Engine,
    EngineSettings,
    RecoveryOutcome,
    SchemaMismatchError,
    StaleFragmentError,
    codec,
    sidecar,
)
from storage_adapter.engine import commit as commit_module
from storage_adapter.engine import failpoints as fp
from storage_adapter.engine.failpoints import SimulatedCrash
from storage_adapter.engine.key_ledger import entry_key
from storage_adapter.engine.layout import sidecar_key
from storage_adapter.engine.sidecar import LIVE, LiveOperations, Sidecar
from storage_adapter.engine.tables import TableVersionStore, write_fragment

SCHEMA = pa.schema([("id", pa.int64())])
RETENTION = 4
HOUR = 3600.0
MARGIN = 60.0  # seconds either side of a bound: far more than a test's own run time


def rows(*ids: int) -> pa.Table:
    return pa.table({"id": list(ids)}, schema=SCHEMA)


def ids(engine: Engine, table: str) -> list[int]:
    return sorted(engine.read(table).column("id").to_pylist())


@pytest.fixture
def engine(adapter) -> Iterator[Engine]:
    fp.disarm()
    eng = Engine.open(adapter.child("engine"), actor="referee", settings=EngineSettings(retention=RETENTION))
    for table in ("a", "b"):
        eng.create_table(table, SCHEMA)
    yield eng
    fp.disarm()


def other_engine(engine: Engine, **settings: Any) -> Engine:
    """Another engine on the same root (another process, as far as the protocol goes)."""
    return Engine.open(
        engine.adapter, actor="other", settings=EngineSettings(retention=RETENTION, **settings)
    )


class Clock:
    """The engine's wall and monotonic clocks, ``shift`` seconds ahead of the real ones: the clock of
    codec (ages of listed objects, record times) and of sidecar (leases and their renewal)."""

    def __init__(self) -> None:
        self.shift = 0.0
        clock = self

        class Shifted(datetime):
            @classmethod
            def now(cls, tz: Any = None) -> Any:
                return datetime.now(tz) + timedelta(seconds=clock.shift)

        class Monotonic:
            @staticmethod
            def monotonic() -> float:
                return time.monotonic() + clock.shift

        self.datetime = Shifted
        self.time = Monotonic


@pytest.fixture
def clock(monkeypatch) -> Clock:
    found = Clock()
    monkeypatch.setattr(codec, "datetime", found.datetime)
    monkeypatch.setattr(sidecar, "datetime", found.datetime)
    monkeypatch.setattr(sidecar, "time", found.time)
    return found


def pending(engine: Engine) -> list[str]:
    return [info.key for info in engine.adapter.list("__recovery")]


def elsewhere(engine: Engine, operation_id: str, lease_s: float) -> None:
    """Make the sidecar of ``operation_id`` (a writer of this process that crashed) look like that of a
    writer on another host whose lease runs ``lease_s`` more: dead or only stopped, heal cannot tell."""
    key = sidecar_key(operation_id)
    found = Sidecar.decode(engine.adapter.read_bytes(key), key)
    lease = (datetime.now(UTC) + timedelta(seconds=lease_s)).isoformat()
    engine.adapter.write(
        key, dataclasses.replace(found, host="elsewhere.invalid", pid=1, lease_expires_at=lease).encode()
    )
    LIVE.forget(engine.adapter.url, {operation_id})  # this process no longer knows it returned


def crash(engine: Engine, point: str, data: dict[str, pa.Table], request: CommitRequest) -> str:
    """Commit until ``point``, where the writer dies: the operation id its sidecar names."""
    before = set(pending(engine))
    with fp.armed(point, "crash", times=1), pytest.raises(SimulatedCrash):
        engine.commit(data, request)
    (key,) = set(pending(engine)) - before
    return key.rsplit("/", 1)[-1].removesuffix(".json")


# -- 2: a landed key is a replay at every entry point ------------------------------------------------------
def _commit(engine: Engine, entry: str, value: int, key: str) -> Any:
    """One commit of ``value`` with ``key`` through ``entry``."""
    request = CommitRequest(idempotency_key=key)
    if entry == "commit":
        return engine.commit({"a": rows(value)}, request)
    if entry == "overwrite":
        return engine.commit({"a": rows(value)}, CommitRequest(mode="overwrite", idempotency_key=key))
    if entry == "multi_table":
        return engine.commit({"a": rows(value), "b": rows(value)}, request)
    if entry == "commit_fragments":
        return engine.commit_fragments({"a": engine.write_fragments("a", rows(value))}, request)
    if entry == "commit_fragments_multi":
        refs = {t: engine.write_fragments(t, rows(value)) for t in ("a", "b")}
        return engine.commit_fragments(refs, request)
    raise AssertionError(entry)


ENTRIES = ["commit", "overwrite", "multi_table", "commit_fragments", "commit_fragments_multi"]


@pytest.mark.parametrize("aged", [False, True], ids=["in_tail", "past_retention"])
@pytest.mark.parametrize("entry", ENTRIES)
def test_a_landed_key_is_replayed_by_every_entry_point(engine: Engine, entry: str, aged: bool) -> None:
    """The key landed (its record in the manifest's tail, or long gone from the retained history: only
    the key ledger knows it then): every entry point answers the landed commit, writes nothing (no
    second effect, not even a sidecar) and leaves nothing pending."""
    first = _commit(engine, entry, 1, "realm/landed")
    if aged:
        for n in range(3 * RETENTION):
            engine.commit({"b": rows(100 + n)})
    before = (engine.snapshot().version, ids(engine, "a"), ids(engine, "b"))
    again, writes = _retry_counting_writes(engine, entry, 2, "realm/landed")
    assert again.replayed and again.version == first.version and writes == {}, (again, writes)
    assert (engine.snapshot().version, ids(engine, "a"), ids(engine, "b")) == before
    assert pending(engine) == [] and engine.find_commit("realm/landed").version == first.version
    assert engine.precheck(["a"], CommitRequest(idempotency_key="realm/landed")).version == first.version


WRITES = ("write", "write_if_absent", "write_if_match", "delete", "delete_many", "rename")


def _retry_counting_writes(engine: Engine, entry: str, value: int, key: str) -> tuple[Commit, dict[str, int]]:
    """``_commit`` by another engine on the same root whose requests are counted: the commit and the
    writes the commit itself made (fragments written beforehand for commit_fragments are not its own)."""
    counting = CountingAdapter(engine.adapter)
    retry = Engine.open(counting, actor="retry", settings=EngineSettings(retention=RETENTION))
    data = (
        {"a": rows(value)}
        if entry in ("commit", "overwrite", "commit_fragments")
        else {
            "a": rows(value),
            "b": rows(value),
        }
    )
    if entry.startswith("commit_fragments"):
        refs = {table: retry.write_fragments(table, part) for table, part in data.items()}
        counting.reset()
        commit = retry.commit_fragments(refs, CommitRequest(idempotency_key=key))
    else:
        counting.reset()
        mode = "overwrite" if entry == "overwrite" else "append"
        commit = retry.commit(data, CommitRequest(mode=mode, idempotency_key=key))
    return commit, {name: counting.counts[name] for name in WRITES if counting.counts[name]}


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_visible_commit_whose_key_is_not_yet_marked_published_is_replayed_writing_nothing(
    engine: Engine, entry: str
) -> None:
    """A writer stalls between its publish and marking its key published in the ledger (another host's
    writer, its lease still running: no heal touches it). Its commit is visible, so ``find_commit`` and
    ``precheck`` answer it, and a retry through every entry point is its replay that writes nothing: no
    data file, no sidecar, no ledger entry."""
    request = CommitRequest(idempotency_key="realm/visible")
    stalled = crash(engine, "commit.after_publish", {"a": rows(1)}, request)
    elsewhere(engine, stalled, lease_s=HOUR)
    assert (found := engine.find_commit("realm/visible")) is not None and found.operation_id == stalled
    assert (pre := engine.precheck(["a"], request)) is not None and pre.record.operation_id == stalled
    again, writes = _retry_counting_writes(engine, entry, 2, "realm/visible")
    assert again.replayed and again.record.operation_id == stalled, again
    assert writes == {} and ids(engine, "a") == [1] and ids(engine, "b") == []


# Where the same key lands from another engine while a commit is on its way: after the entry point's own
# check (in Engine.commit, before its fragments are written: they may be written while its sidecar is),
# before its sidecar, after its sidecar (before its key claim). commit_fragments writes no fragment of its
# own: its first check is the one before its sidecar.
LANDINGS = [
    (entry, point)
    for entry in ENTRIES
    for point in ("after_entry_check", "commit.before_sidecar", "commit.after_sidecar")
    if not (point == "after_entry_check" and entry.startswith("commit_fragments"))
]


@pytest.mark.parametrize(("entry", "point"), LANDINGS)
def test_a_key_that_lands_while_a_commit_is_on_its_way_is_replayed_not_applied_again(
    engine: Engine, entry: str, point: str, monkeypatch
) -> None:
    other = other_engine(engine)
    landed: list[Any] = []

    def land(*_: object) -> None:
        landed.append(other.commit({"a": rows(9)}, CommitRequest(idempotency_key="realm/race")))

    if point == "after_entry_check":
        checked = engine._prechecked

        def check_then_land(*args: Any) -> Any:
            answer = checked(*args)
            if not landed:
                land()
            return answer

        monkeypatch.setattr(engine, "_prechecked", check_then_land)
        got = _commit(engine, entry, 1, "realm/race")
    else:
        with fp.armed(point, land, times=1):
            got = _commit(engine, entry, 1, "realm/race")
    (won,) = landed
    assert got.replayed and got.version == won.version and got.record.operation_id == won.record.operation_id
    assert ids(engine, "a") == [9] and ids(engine, "b") == []
    assert [r.version for r in engine.history() if r.idempotency_key == "realm/race"] == [won.version]
    assert pending(engine) == [] and engine.find_commit("realm/race").version == won.version


@pytest.mark.parametrize("keyed", [False, True], ids=["keyless", "keyed"])
def test_a_commit_that_loses_the_publish_race_to_its_own_application_version_is_a_replay(
    engine: Engine, keyed: bool
) -> None:
    """The retry loop after a lost publish: the winner set the application watermark this commit sets,
    so the commit is the winner's replay: its table version undone, nothing of it visible."""
    other = other_engine(engine)
    landed: list[Any] = []

    def land(*_: object) -> None:
        landed.append(other.commit({"a": rows(9)}, CommitRequest(app_id="job", app_version=3)))

    request = CommitRequest(app_id="job", app_version=3, idempotency_key="realm/app" if keyed else None)
    with fp.armed("commit.before_publish", land, times=1):
        got = engine.commit({"a": rows(1), "b": rows(1)}, request)
    (won,) = landed
    assert got.replayed and got.version == won.version, got
    assert (ids(engine, "a"), ids(engine, "b")) == ([9], []) and pending(engine) == []
    assert engine.snapshot().version == won.version and engine.app_version("job") == 3
    _assert_heads_hold_pinned_content(engine)


# -- 3: fragments written elsewhere are checked against the table's schema ---------------------------------
WIDE = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
ELSEWHERE = {
    "extra_column": pa.schema([*WIDE, pa.field("extra", pa.int32())]),
    "missing_column": pa.schema([WIDE.field("id")]),
    "other_type": pa.schema([pa.field("id", pa.int32(), nullable=False), WIDE.field("name")]),
    "nullable_where_not_null": pa.schema([pa.field("id", pa.int64()), WIDE.field("name")]),
}


@pytest.mark.parametrize("variant", sorted(ELSEWHERE))
def test_a_fragment_written_elsewhere_with_another_schema_is_refused_and_nothing_is_published(
    engine: Engine, variant: str
) -> None:
    """A Spark task (or any writer outside the engine) wrote a fragment of table ``w`` with its own
    schema: commit_fragments refuses the commit (SchemaMismatchError) with a good fragment beside it,
    and nothing changes: manifest, rows, key, sidecars."""
    engine.create_table("w", WIDE)
    engine.commit({"w": pa.table({"id": [1], "name": ["x"]}, schema=WIDE)})
    good = engine.write_fragments("w", pa.table({"id": [2], "name": ["y"]}, schema=WIDE))
    schema = ELSEWHERE[variant]
    values = {"id": [3], "name": ["z"], "extra": [7]}
    data = pa.table(
        {f.name: values[f.name] for f in schema},
        schema=schema,
    )
    bad = write_fragment(engine.adapter, "w", data, str(ULID()))
    before = (engine.snapshot().version, engine.read("w").to_pylist())
    with pytest.raises(SchemaMismatchError):
        engine.commit_fragments({"w": [*good, bad]}, CommitRequest(idempotency_key="realm/schema"))
    with pytest.raises(SchemaMismatchError):
        engine.commit_fragments({"w": [bad]}, CommitRequest(mode="overwrite"))
    assert (engine.snapshot().version, engine.read("w").to_pylist()) == before
    assert engine.find_commit("realm/schema") is None and pending(engine) == []
    assert engine.adapter.read_if_exists(entry_key("realm/schema")) is None


# -- 4: the age rules, at their bounds ---------------------------------------------------------------------
@pytest.mark.parametrize(("age_s", "accepted"), [(HOUR / 2 - MARGIN, True), (HOUR / 2 + MARGIN, False)])
def test_a_commit_takes_a_fragment_just_younger_than_half_the_grace_and_refuses_one_just_older(
    adapter, age_s: float, accepted: bool
) -> None:
    engine = Engine.open(adapter.child("grace"), settings=EngineSettings(grace_s=HOUR))
    engine.create_table("a", SCHEMA)
    (ref,) = engine.write_fragments("a", rows(1))
    aged = dataclasses.replace(ref, written_at=(datetime.now(UTC) - timedelta(seconds=age_s)).isoformat())
    if accepted:
        assert not engine.commit_fragments({"a": [aged]}).replayed
        assert ids(engine, "a") == [1]
    else:
        with pytest.raises(StaleFragmentError):
            engine.commit_fragments({"a": [aged]})
        assert ids(engine, "a") == [] and engine.snapshot().version == 1


@pytest.mark.parametrize(("age_s", "kept"), [(HOUR - MARGIN, True), (HOUR + MARGIN, False)])
def test_vacuum_keeps_an_unreferenced_fragment_just_younger_than_the_grace_and_deletes_one_just_older(
    adapter, clock: Clock, age_s: float, kept: bool
) -> None:
    engine = Engine.open(adapter.child("vacuum"), settings=EngineSettings(grace_s=HOUR))
    engine.create_table("a", SCHEMA)
    engine.commit({"a": rows(1)})
    (orphan,) = engine.write_fragments("a", rows(2))  # never committed
    clock.shift = age_s
    report = engine.vacuum()
    assert (orphan.key in report.deleted) is not kept, report
    assert engine.adapter.exists(orphan.key) is kept and ids(engine, "a") == [1]
    assert report.kept_young == (1 if kept else 0)


@pytest.mark.parametrize(("age_s", "kept"), [(HOUR - MARGIN, True), (HOUR + MARGIN, False)])
def test_vacuum_keeps_a_local_crash_leftover_just_younger_than_the_grace_and_removes_one_just_older(
    tmp_path, age_s: float, kept: bool
) -> None:
    """Local only (the backend whose writes stage files): a writer killed mid-write left its staging file
    beside a fragment; vacuum reclaims it once it is older than the grace, as it does fragments (its
    age is the file's, set here: the adapter's clock is the file system's)."""
    import os

    from storage_adapter import open_adapter

    engine = Engine.open(open_adapter(f"file://{tmp_path}"), settings=EngineSettings(grace_s=HOUR))
    engine.create_table("a", SCHEMA)
    engine.commit({"a": rows(1)})
    (fragment,) = engine.files("a")
    leftover = tmp_path / f"{fragment.key}#000000000001"
    leftover.write_bytes(b"half a fragment")
    then = time.time() - age_s
    os.utime(leftover, (then, then))
    report = engine.vacuum()
    assert report.staging_removed == (0 if kept else 1) and leftover.exists() is kept, report
    assert ids(engine, "a") == [1]


@pytest.mark.parametrize(("age_s", "kept"), [(HOUR - MARGIN, True), (HOUR + MARGIN, False)])
def test_vacuum_keeps_a_key_just_younger_than_the_key_window_and_expires_one_just_older(
    adapter, clock: Clock, age_s: float, kept: bool
) -> None:
    engine = Engine.open(adapter.child("window"), settings=EngineSettings(key_window_s=HOUR, lease_s=30))
    engine.create_table("a", SCHEMA)
    first = engine.commit({"a": rows(1)}, CommitRequest(idempotency_key="realm/window"))
    clock.shift = age_s
    report = engine.vacuum()
    assert report.keys_expired == (0 if kept else 1), report
    assert engine.adapter.exists(entry_key("realm/window")) is kept
    assert engine.find_commit("realm/window").version == first.version  # the manifest's tail still has it


@pytest.mark.parametrize(("age_s", "recovered"), [(HOUR - MARGIN, False), (HOUR + MARGIN, True)])
def test_a_light_heal_leaves_a_sidecar_just_younger_than_the_lease_and_recovers_one_just_older(
    adapter, clock: Clock, age_s: float, recovered: bool
) -> None:
    """A writer elsewhere died before its publish (its lease, in its sidecar, already over): the light heal
    at the start of every commit reads its sidecar only once the store wrote it a lease ago."""
    engine = Engine.open(adapter.child("light"), settings=EngineSettings(lease_s=HOUR))
    engine.create_table("a", SCHEMA)
    operation = crash(engine, "commit.before_publish", {"a": rows(1)}, CommitRequest())
    elsewhere(engine, operation, lease_s=-HOUR)
    clock.shift = age_s
    report = engine.heal(full=False)
    assert [r.operation_id for r in report.recovered] == ([operation] if recovered else [])
    assert (operation in report.deferred) is not recovered
    assert ids(engine, "a") == ([1] if recovered else [])  # rolled forward: it had written everything


@pytest.mark.parametrize(("age_s", "recovered"), [(HOUR - MARGIN, False), (HOUR + MARGIN, True)])
def test_a_heal_leaves_a_writer_elsewhere_just_inside_its_lease_and_recovers_one_just_past_it(
    engine: Engine, clock: Clock, age_s: float, recovered: bool
) -> None:
    """A writer elsewhere stopped before its publish, its lease an hour: a full heal judges it alive just
    before its lease ends (its commit left to it) and dead just after (rolled forward for it)."""
    operation = crash(engine, "commit.before_publish", {"a": rows(1)}, CommitRequest())
    elsewhere(engine, operation, lease_s=HOUR)
    clock.shift = age_s
    report = engine.heal()
    assert [r.operation_id for r in report.recovered] == ([operation] if recovered else [])
    assert (operation in report.deferred) is not recovered and ids(engine, "a") == ([1] if recovered else [])


# -- 5: a roll-back restores the manifest's pin -------------------------------------------------------------
def _assert_heads_hold_pinned_content(engine: Engine) -> None:
    versions = TableVersionStore(engine.adapter)
    snap = engine.snapshot()
    for table, pinned in snap.pins.items():
        head = versions.head(table, pinned)
        assert versions.fragments(table, head) == versions.fragments(table, pinned), (table, pinned, head)


def test_a_roll_back_restores_the_pinned_version_not_the_expected_one_nor_the_one_below_its_head(
    engine: Engine,
) -> None:
    """The writer starts on a@1 (its sidecar's expected version). Before it writes, another commit publishes
    a@2 and a third writer leaves an unpublished a@3 (still alive elsewhere); the writer writes a@4 on its
    base a@1 and dies before its publish. Its roll-back must give a@4 a successor holding what the
    manifest pins (a@2): not a@1 (expected), a@3 (the version below its head) or a@4 (its own)."""
    engine.commit({"a": rows(1)})
    other = other_engine(engine)
    third: list[str] = []

    def move(*_: object) -> None:
        other.commit({"a": rows(2)})
        third.append(crash(other, "commit.before_publish", {"a": rows(3)}, CommitRequest()))
        elsewhere(other, third[0], lease_s=HOUR)
        fp.arm("commit.before_publish", "crash", times=1)  # for the writer itself

    with fp.armed("commit.after_sidecar", move, times=1), pytest.raises(SimulatedCrash):
        engine.commit({"a": rows(4)})
    (operation,) = {key.rsplit("/", 1)[-1].removesuffix(".json") for key in pending(engine)} - set(third)
    versions = TableVersionStore(engine.adapter)
    head = versions.head("a", 0)
    assert (
        versions.read("a", head).operation_id == operation
        and versions.read("a", head - 1).operation_id == third[0]
    )
    healed = engine.heal()
    assert [(r.operation_id, r.outcome) for r in healed.recovered] == [
        (operation, RecoveryOutcome.ROLLED_BACK)
    ]
    pinned = engine.snapshot().pins["a"]
    restored = versions.head("a", head)
    assert restored == head + 1 and versions.read("a", restored).kind == "restore"
    assert versions.fragments("a", restored) == versions.fragments("a", pinned) and ids(engine, "a") == [1, 2]


def test_a_writer_dying_the_instant_its_put_of_a_version_taken_after_a_lost_race_lands_is_rolled_forward(
    engine: Engine, monkeypatch
) -> None:
    """The writer's sidecar pins a@2; a writer alive elsewhere (unpublished, its lease running) takes a@2
    first, so the writer moves on to a@3 and dies the instant its PUT of a@3 lands, before any other step.
    Phase A's promise: the sidecar names a@3 before that PUT. So the heal finds every version the sidecar
    names written and the manifest unmoved, and rolls the commit forward (exactly once); a sidecar still
    naming a@2 would be rolled back instead, its head being one no sidecar names."""
    engine.commit({"a": rows(1)})
    other = other_engine(engine)
    raced: list[str] = []

    def take_the_writers_number(*_: object) -> None:
        raced.append(crash(other, "commit.before_publish", {"a": rows(2)}, CommitRequest()))
        elsewhere(other, raced[0], lease_s=HOUR)

    put = TableVersionStore.write_if_absent

    def dies_after_its_put(self: TableVersionStore, content: Any) -> bool:
        written = put(self, content)
        if written and raced and content.operation_id != raced[0]:
            raise SimulatedCrash(
                f"the writer dies the instant its PUT of {content.table}@{content.version} lands"
            )
        return written

    monkeypatch.setattr(TableVersionStore, "write_if_absent", dies_after_its_put)
    with fp.armed("commit.after_sidecar", take_the_writers_number, times=1), pytest.raises(SimulatedCrash):
        engine.commit({"a": rows(3)})
    monkeypatch.setattr(TableVersionStore, "write_if_absent", put)
    (writer,) = {key.rsplit("/", 1)[-1].removesuffix(".json") for key in pending(engine)} - set(raced)
    found = Sidecar.decode(engine.adapter.read_bytes(sidecar_key(writer)), sidecar_key(writer))
    assert found.tables["a"].post_commit_pin == 3 == TableVersionStore(engine.adapter).head("a", 0)
    healed = engine.heal()
    assert [(r.operation_id, r.outcome) for r in healed.recovered] == [
        (writer, RecoveryOutcome.ROLLED_FORWARD)
    ]
    assert ids(engine, "a") == [1, 3] and engine.snapshot().pins["a"] == 3


def test_a_writer_whose_version_lies_under_a_foreign_head_is_rolled_back_not_forward(engine: Engine) -> None:
    """The writer wrote a@2 (its sidecar's pin) on a@1 and stalled before its publish; a writer alive
    elsewhere, also on a@1, then took a@3. The writer's lease runs out: its version is not the table's
    head, so the heal does not roll it forward (recovery.py's UNEXPECTED: only a pin that is the head is
    ROLLED_FORWARD_EXACT); it rolls it back, and the other writer's version stays its own to publish."""
    engine.commit({"a": rows(1)})
    writer = crash(engine, "commit.before_publish", {"a": rows(2)}, CommitRequest())
    elsewhere(engine, writer, lease_s=HOUR)
    other = other_engine(engine)
    third = crash(other, "commit.before_publish", {"a": rows(3)}, CommitRequest())
    elsewhere(other, third, lease_s=HOUR)
    assert TableVersionStore(engine.adapter).head("a", 0) == 3
    elsewhere(engine, writer, lease_s=-HOUR)
    healed = engine.heal()
    assert [(r.operation_id, r.outcome) for r in healed.recovered] == [(writer, RecoveryOutcome.ROLLED_BACK)]
    assert ids(engine, "a") == [1] and sorted(pending(engine)) == [sidecar_key(third)]


# -- 6: a roll-forward never publishes a key another operation holds ---------------------------------------
@pytest.mark.parametrize("holder", ["published", "in_flight", "app_applied"])
def test_a_roll_forward_never_publishes_a_key_another_operation_holds(engine: Engine, holder: str) -> None:
    """X wrote everything but its publish (a roll-forward, were it alone) and holds no claim of its key (a
    sidecar written before the key ledger existed). Meanwhile another operation Y took the key: it
    published it, or holds it in flight elsewhere; or, for a keyless X, Y set the application version X
    sets. The heal of X rolls it back (behind a fence): the key, or the application version, applies once."""
    key = None if holder == "app_applied" else "realm/held"
    app = {"app_id": "job", "app_version": 1} if holder == "app_applied" else {}
    x = crash(engine, "commit.before_publish", {"a": rows(1)}, CommitRequest(idempotency_key=key, **app))
    elsewhere(engine, x, lease_s=HOUR)  # X looks alive elsewhere while Y works
    if key is not None:
        engine.adapter.delete(entry_key(key))  # X's sidecar predates the ledger: it claimed nothing
    if holder == "in_flight":
        y = crash(engine, "commit.after_key_claim", {"b": rows(2)}, CommitRequest(idempotency_key=key))
        elsewhere(engine, y, lease_s=HOUR)
    else:
        assert not engine.commit({"b": rows(2)}, CommitRequest(idempotency_key=key, **app)).replayed
    elsewhere(engine, x, lease_s=-HOUR)  # X's lease is over
    healed = engine.heal()
    assert [(r.operation_id, r.outcome) for r in healed.recovered] == [(x, RecoveryOutcome.ROLLED_BACK)]
    assert ids(engine, "a") == [] and ids(engine, "b") == ([] if holder == "in_flight" else [2])
    assert not [r for r in engine.history() if r.operation_id == x and not r.is_fence]
    _assert_heads_hold_pinned_content(engine)


# -- 7: lease renewal against its bound ----------------------------------------------------------------------
LEASE = 60.0


@pytest.fixture
def foreign_writer(engine: Engine, monkeypatch) -> Engine:
    """An engine whose writers look like writers on another host to this process's heals (their sidecars
    name another host, and this process's live registry does not know them): only their lease tells a
    healer they are alive."""
    monkeypatch.setattr(commit_module, "HOST", "elsewhere.invalid")
    monkeypatch.setattr(commit_module, "LIVE", LiveOperations())
    return other_engine(engine, lease_s=LEASE)


def test_a_writer_slower_than_half_its_lease_renews_it_and_no_healer_takes_its_commit_over(
    engine: Engine, foreign_writer: Engine, clock: Clock
) -> None:
    """The writer takes 0.6 of its lease to reach its publish, which renews the lease (due at half of it);
    a healer looks at 1.2 leases, just before the writer's compare-and-swap: the renewed lease runs, so the
    healer leaves the commit to its writer, which publishes it itself, once."""
    healer = other_engine(engine, lease_s=LEASE)
    heals: list[Any] = []

    def slow(*_: object) -> None:
        clock.shift += 0.6 * LEASE

    def heal_now(*_: object) -> None:
        clock.shift += 0.6 * LEASE
        heals.append(healer.heal())

    with fp.armed("commit.before_publish", slow, times=1), fp.armed("publish.before_cas", heal_now, times=1):
        got = foreign_writer.commit({"a": rows(1)}, CommitRequest(idempotency_key="realm/slow"))
    (healed,) = heals
    assert healed.recovered == () and healed.deferred == (got.record.operation_id,), healed
    assert not got.replayed and not got.record.recovered and ids(engine, "a") == [1]
    assert [r.operation_id for r in engine.history() if r.idempotency_key == "realm/slow"] == [
        got.record.operation_id
    ]
    assert not any(r.is_fence for r in engine.history()) and pending(engine) == []


def test_a_writer_that_renews_its_lease_after_a_healer_took_over_never_publishes(
    engine: Engine, foreign_writer: Engine, clock: Clock
) -> None:
    """The writer stalls before its publish; another commit moves its table, then 1.2 leases later a healer
    judges it dead and rolls it back (behind a fence) and releases its key. The writer goes on: its
    renewal comes too late (it rewrites its sidecar), its publish must fail: CommitFencedError, nothing of
    it visible, no sidecar left, the key free for its retry."""
    healer = other_engine(engine, lease_s=LEASE)
    heals: list[Any] = []

    def stalled(*_: object) -> None:
        healer.commit({"a": rows(5)})
        clock.shift += 1.2 * LEASE
        heals.append(healer.heal())

    with fp.armed("commit.before_publish", stalled, times=1), pytest.raises(CommitFencedError):
        foreign_writer.commit({"a": rows(1)}, CommitRequest(idempotency_key="realm/late"))
    (healed,) = heals
    assert [r.outcome for r in healed.recovered] == [RecoveryOutcome.ROLLED_BACK]
    assert ids(engine, "a") == [5] and pending(engine) == [] and engine.find_commit("realm/late") is None
    operation = healed.recovered[0].operation_id
    assert not [r for r in engine.history() if r.operation_id == operation and not r.is_fence]
    retry = engine.commit({"a": rows(1)}, CommitRequest(idempotency_key="realm/late"))
    assert not retry.replayed and ids(engine, "a") == [1, 5]
    _assert_heads_hold_pinned_content(engine)


def test_a_roll_back_after_a_rebase_restores_the_pinned_version_not_the_rebased_base(engine: Engine) -> None:
    """The writer built on a@1, lost its publish to a commit of a, and re-based on that commit's version
    (its sidecar's expected version now); while it re-based, a third commit of a published again, so the
    writer's new version lands above it, built on the re-based one, and the writer dies before its second
    publish. The roll-back must restore what the manifest pins (the third commit's), not the re-based
    base nor the first one."""
    engine.commit({"a": rows(1)})
    other = other_engine(engine)
    publishes = 0
    inside = False

    def other_commit(value: int) -> None:
        nonlocal inside
        inside = True
        try:
            other.commit({"a": rows(value)})
        finally:
            inside = False

    def before_publish(_: str) -> None:
        nonlocal publishes
        if inside:
            return  # the other engine's own publish
        publishes += 1
        if publishes == 1:
            other_commit(2)  # the writer's publish loses to it
            fp.arm("recovery.sidecar_write", lambda _: other_commit(3), times=1)  # at the re-base's rewrite
        else:
            raise SimulatedCrash("the writer dies before its second publish")

    with fp.armed("commit.before_publish", before_publish), pytest.raises(SimulatedCrash):
        engine.commit({"a": rows(4)})
    (key,) = pending(engine)
    operation = key.rsplit("/", 1)[-1].removesuffix(".json")
    written = Sidecar.decode(engine.adapter.read_bytes(key), key).tables["a"]
    versions = TableVersionStore(engine.adapter)
    pinned = engine.snapshot().pins["a"]
    head = versions.head("a", pinned)
    assert written.expected_version == pinned - 1 and written.post_commit_pin == head == pinned + 1
    assert versions.read("a", head).operation_id == operation
    healed = engine.heal()
    assert [(r.operation_id, r.outcome) for r in healed.recovered] == [
        (operation, RecoveryOutcome.ROLLED_BACK)
    ]
    restored = versions.head("a", head)
    assert restored == head + 1 and versions.read("a", restored).kind == "restore"
    assert versions.fragments("a", restored) == versions.fragments("a", pinned) and ids(engine, "a") == [
        1,
        2,
        3,
    ]
