"""IdempotencyStore on every backend (the ``adapter`` fixture: memory, local, SeaweedFS): first writer wins,
fenced transitions, takeover, corrupt records, purge and tombstones, clock skew, realms."""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from contract_tests.counting import CountingAdapter
from storage_adapter.adapter import open_adapter
from storage_adapter.errors import BackendUnavailableError
from storage_adapter.idempotency import (
    Cancelled,
    CorruptRecordError,
    Duplicate,
    Finalized,
    IdempotencyStore,
    InvalidIdempotencyKeyError,
    LostOwnership,
    Owned,
    RecordStatus,
    StoreUnavailableError,
    SummaryTooLargeError,
    Updated,
)
from storage_adapter.idempotency.expiry_index import Entry, Layout, joined
from storage_adapter.idempotency.lease_keeper import LeaseKeeper
from storage_adapter.idempotency.records import decode_record, encode_record
from storage_adapter.types import ObjectInfo

BINDING = {"operation": "commit", "resource": "table/t", "fingerprint": "sha256:aa"}


class Clock:
    """An injectable clock: starts at a fixed instant and moves only when told."""

    def __init__(self, start: datetime | None = None) -> None:
        self.now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


def new_key() -> str:
    return str(uuid.uuid4())


def make_store(adapter: Any, clock: Clock, **options: Any) -> IdempotencyStore:
    defaults: dict[str, Any] = {"lease": timedelta(seconds=30), "lifetime": timedelta(hours=1)}
    return IdempotencyStore(adapter, clock=clock, **{**defaults, **options})


def finalized(store: IdempotencyStore, key: str) -> Owned:
    """Reserve ``key`` in realm "r" and finalize it (200): the ownership it was reserved with."""
    owned = store.reserve("r", key, **BINDING)
    assert isinstance(owned, Owned) and isinstance(
        store.finalize(owned, http_status=200, summary=None), Finalized
    )
    return owned


def test_concurrent_reservers_exactly_one_owner(adapter: Any) -> None:
    store = make_store(adapter, Clock())
    key = new_key()
    barrier = threading.Barrier(8)
    claims: list[Any] = []

    def reserve() -> None:
        barrier.wait()
        claims.append(store.reserve("r", key, **BINDING))

    threads = [threading.Thread(target=reserve) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    owners = [c for c in claims if isinstance(c, Owned)]
    assert len(owners) == 1 and len(claims) == 8
    assert all(
        c.record.reservation_id == owners[0].record.reservation_id for c in claims if isinstance(c, Duplicate)
    )


class SlowCreates:
    """Delegates to an adapter, but its ``write_if_absent`` never answers in time: ``held`` answers only
    once ``answer`` is set, as SeaweedFS answers the losers of a race to create one key (it serializes
    them about a second apart, so with tens of concurrent creators the last wait many seconds);
    ``unavailable`` fails as unavailable, ``landed`` too but after writing (the answer lost). Reads are
    not held."""

    def __init__(self, inner: Any, mode: str) -> None:
        self.inner, self.mode = inner, mode
        self.answer = threading.Event()
        self.creates = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def write_if_absent(self, key: str, data: bytes) -> str | None:
        self.creates += 1
        if self.mode == "held":
            self.answer.wait(60)
            return None
        if self.mode == "landed":
            self.inner.write_if_absent(key, data)
        raise BackendUnavailableError(f"no answer to the create of {key}", key=key)


def test_a_create_slower_than_the_deadline_is_settled_by_a_read() -> None:
    """A conditional create that misses the per-request deadline does not make ``reserve`` answer
    "unavailable" when the record exists: a read says another reservation holds the key (Duplicate: the
    duplicate waits or replays). Memory, whose reads take microseconds beside the 0.2 s deadline."""
    adapter = open_adapter(f"memory://slow-create-{uuid.uuid4().hex[:8]}")
    first = make_store(adapter, Clock()).reserve("r", key := new_key(), **BINDING)
    assert isinstance(first, Owned)
    held = SlowCreates(adapter, "held")
    try:
        duplicate = make_store(held, Clock(), call_timeout=timedelta(seconds=0.2)).reserve(
            "r", key, **BINDING
        )
    finally:
        held.answer.set()
    assert isinstance(duplicate, Duplicate) and duplicate.record == first.record and held.creates == 1


def test_a_create_without_an_answer_is_settled_by_a_read(adapter: Any) -> None:
    """A create that fails as unavailable is settled by a read: Duplicate when another reservation holds
    the key, Owned (with the read's token) when the create landed and only its answer was lost, and
    StoreUnavailableError (503) only when the key is still absent."""
    first = make_store(adapter, Clock()).reserve("r", key := new_key(), **BINDING)
    assert isinstance(first, Owned)
    duplicate = make_store(SlowCreates(adapter, "unavailable"), Clock()).reserve("r", key, **BINDING)
    assert isinstance(duplicate, Duplicate) and duplicate.record == first.record

    store = make_store(SlowCreates(adapter, "landed"), Clock())
    mine = store.reserve("r", fresh := new_key(), **BINDING)
    assert isinstance(mine, Owned) and mine.previous is None
    assert isinstance(store.finalize(mine, http_status=200, summary=None), Finalized)  # its token is current

    absent = SlowCreates(adapter, "unavailable")
    with pytest.raises(StoreUnavailableError, match="write_if_absent"):
        make_store(absent, Clock()).reserve("r", other := new_key(), **BINDING)
    assert store.load("r", other) is None and absent.creates == 1
    assert store.load("r", fresh) is not None


def test_fresh_reserve_knows_its_token_and_finalizes_with_one_cas(adapter: Any) -> None:
    """write_if_absent returns the record's token, so the owner's first transition is a single CAS."""
    counting = CountingAdapter(adapter)
    store = make_store(counting, Clock())
    key = new_key()
    owned = store.reserve("r", key, **BINDING)
    assert isinstance(owned, Owned)
    stored = store.load("r", key)
    assert stored is not None and owned.token == stored.token
    counting.reset()
    assert isinstance(store.finalize(owned, http_status=200, summary=None), Finalized)
    assert dict(counting.counts) == {"write_if_match": 1}


def test_lifecycle_and_fencing_of_a_former_owner(adapter: Any) -> None:
    clock = Clock()
    store = make_store(adapter, clock)
    key = new_key()
    first = store.reserve("r", key, **BINDING)
    assert isinstance(first, Owned)
    beat = store.heartbeat(first)
    assert isinstance(beat, Updated) and beat.owned.record.lease_expires_at == clock.now + store.lease

    clock.advance(seconds=30 + 5 + 1)  # lease + skew grace + 1: stale
    stale = store.reserve("r", key, **BINDING)
    assert isinstance(stale, Duplicate) and store.is_lease_stale(stale.record)
    successor = store.takeover(stale)
    assert isinstance(successor, Owned) and successor.previous == stale.record
    assert successor.record.reservation_id != first.record.reservation_id
    assert store.takeover(stale) is None  # the same stale version cannot be taken over twice

    before = store.load("r", key)
    for fenced in (
        store.heartbeat(beat.owned),
        store.finalize(beat.owned, http_status=201, summary={"v": "old"}),
        store.cancel(first),
    ):
        assert (
            isinstance(fenced, LostOwnership)
            and fenced.record.reservation_id == successor.record.reservation_id
        )
    assert store.load("r", key) == before  # nothing written, not even the token changed

    done = store.finalize(successor, http_status=201, summary={"v": 1}, headers=(("ETag", "x"),))
    assert isinstance(done, Finalized) and done.record.status is RecordStatus.FINALIZED
    again = store.finalize(successor, http_status=201, summary={"v": 1})  # a retried finalize
    assert isinstance(again, Finalized) and again.record == done.record
    assert isinstance(store.heartbeat(successor), Finalized)
    loaded = store.load("r", key)
    assert (
        loaded is not None and loaded.record.summary == {"v": 1} and loaded.record.headers == (("ETag", "x"),)
    )


def test_live_lease_cannot_be_taken_over(adapter: Any) -> None:
    clock = Clock()
    store = make_store(adapter, clock)
    key = new_key()
    assert isinstance(store.reserve("r", key, **BINDING), Owned)
    clock.advance(seconds=30 + 4)  # expired, but within the 5 s skew grace
    duplicate = store.reserve("r", key, **BINDING)
    assert isinstance(duplicate, Duplicate) and not store.is_lease_stale(duplicate.record)
    with pytest.raises(ValueError, match="not stale"):
        store.takeover(duplicate)


def test_clock_skew_within_grace(adapter: Any) -> None:
    """The owner's clock runs 3 s behind real time and a duplicate's 3 s ahead (6 s apart; grace 10 s).
    Two seconds after the lease really ended the duplicate's clock says it ended 8 s ago: without the grace
    it would take over a live owner. The owner's heartbeat then succeeds; only a reader more than the
    grace past the lease sees it stale."""
    real = Clock()
    behind, ahead = Clock(real.now - timedelta(seconds=3)), Clock(real.now + timedelta(seconds=3))
    grace = timedelta(seconds=10)
    owner_store = make_store(adapter, behind, skew_grace=grace)
    dup_store = make_store(adapter, ahead, skew_grace=grace)
    key = new_key()
    owned = owner_store.reserve("r", key, **BINDING)
    assert isinstance(owned, Owned)
    for clock in (real, behind, ahead):
        clock.advance(seconds=30 + 2)
    duplicate = dup_store.reserve("r", key, **BINDING)
    assert isinstance(duplicate, Duplicate)
    assert ahead.now > duplicate.record.lease_expires_at + timedelta(seconds=5)  # stale without the grace
    assert not dup_store.is_lease_stale(duplicate.record)
    beat = owner_store.heartbeat(owned)
    assert isinstance(beat, Updated)
    beyond = make_store(
        adapter, Clock(beat.owned.record.lease_expires_at + grace + timedelta(seconds=1)), skew_grace=grace
    )
    assert beyond.is_lease_stale(beat.owned.record)


def test_cancelled_record_is_taken_over_by_the_same_request_only(adapter: Any) -> None:
    store = make_store(adapter, Clock())
    key = new_key()
    owned = store.reserve("r", key, **BINDING)
    assert isinstance(owned, Owned)
    assert isinstance(store.cancel(owned), Cancelled)
    other = store.reserve("r", key, **{**BINDING, "fingerprint": "sha256:bb"})
    assert isinstance(other, Duplicate) and other.record.status is RecordStatus.CANCELLED
    retry = store.reserve("r", key, **BINDING)
    assert isinstance(retry, Owned) and retry.previous is not None
    assert (
        retry.previous.status is RecordStatus.CANCELLED
        and retry.record.revision == retry.previous.revision + 1
    )
    assert isinstance(store.cancel(owned), LostOwnership)


def test_realms_never_share_a_record(adapter: Any) -> None:
    store = make_store(adapter, Clock())
    key = new_key()
    a, b = store.reserve("realm-a", key, **BINDING), store.reserve("realm-b", key, **BINDING)
    assert isinstance(a, Owned) and isinstance(b, Owned)
    assert store.location("realm-a", key) != store.location("realm-b", key)


def test_malformed_keys_are_refused_before_any_request(adapter: Any) -> None:
    counting = CountingAdapter(adapter)
    store = make_store(counting, Clock())
    for bad in (None, "", "not-a-uuid", str(uuid.uuid4()).upper(), str(uuid.uuid4()) + "0", 42):
        with pytest.raises(InvalidIdempotencyKeyError):
            store.reserve("r", bad, **BINDING)  # type: ignore[arg-type]
    assert counting.total == 0


@pytest.mark.parametrize(
    "changes",
    [{"operation": 5}, {"resource": None}, {"fingerprint": b"sha256:aa"}, {"operation": "\udc80"}],
    ids=["int-operation", "null-resource", "bytes-fingerprint", "lone-surrogate"],
)
def test_invalid_reserve_arguments_are_refused_before_any_request(
    adapter: Any, changes: dict[str, Any]
) -> None:
    """Issue 12 finding 7: a value the decoder would refuse is never written (it would poison the key)."""
    counting = CountingAdapter(adapter)
    store = make_store(counting, Clock())
    key = new_key()
    with pytest.raises((TypeError, ValueError)):
        store.reserve("r", key, **{**BINDING, **changes})
    assert counting.total == 0
    assert store.load("r", key) is None


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    "outcome",
    [
        {"http_status": "200"},
        {"http_status": True},
        {"http_status": None},
        {"http_status": 200.0},
        {"summary": float("nan")},
        {"summary": {"rows": 2**64}},
        {"summary": nested(100)},
        {"headers": (("Location", 7),)},
        {"headers": ("ab",)},
        {"error_subtype": 5},
    ],
    ids=[
        "str-status",
        "bool-status",
        "no-status",
        "float-status",
        "nan",
        "int64-overflow",
        "deep",
        "int-header",
        "str-header",
        "int-subtype",
    ],
)
def test_invalid_outcome_is_refused_before_any_request_and_the_key_stays_usable(
    adapter: Any, outcome: dict[str, Any]
) -> None:
    """Issue 12 finding 7: finalize validates its arguments before any request; the record is unchanged."""
    counting = CountingAdapter(adapter)
    store = make_store(counting, Clock())
    key = new_key()
    owned = store.reserve("r", key, **BINDING)
    assert isinstance(owned, Owned)
    before = store.load("r", key)
    counting.reset()
    with pytest.raises((TypeError, ValueError)):
        store.finalize(owned, **{"http_status": 200, "summary": None, **outcome})
    assert counting.total == 0
    assert store.load("r", key) == before
    assert isinstance(store.finalize(owned, http_status=200, summary=None), Finalized)


def test_oversized_summary_is_a_typed_error_and_nothing_is_written(adapter: Any) -> None:
    counting = CountingAdapter(adapter)
    store = make_store(counting, Clock(), max_summary_bytes=1024)
    key = new_key()
    owned = store.reserve("r", key, **BINDING)
    assert isinstance(owned, Owned)
    before = store.load("r", key)
    counting.reset()
    with pytest.raises(SummaryTooLargeError, match="over the limit of 1024"):
        store.finalize(owned, http_status=200, summary={"rows": "x" * 2000})
    assert counting.total == 0
    assert store.load("r", key) == before


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"[]",
        json.dumps({"schema": 99}).encode(),
        json.dumps({"schema": 1, "realm": "r"}).encode(),
    ],
    ids=["not-json", "not-object", "unknown-schema", "missing-fields"],
)
def test_corrupt_record_is_refused_loudly_and_kept(adapter: Any, body: bytes) -> None:
    store = make_store(adapter, Clock())
    key = new_key()
    location = store.location("r", key)
    adapter.write(location, body)
    with pytest.raises(CorruptRecordError, match="left in place") as caught:
        store.reserve("r", key, **BINDING)
    assert location in str(caught.value)
    with pytest.raises(CorruptRecordError):
        store.load("r", key)
    assert adapter.read_bytes(location) == body


def test_owner_whose_record_turns_corrupt_loses_it_and_the_heartbeat_does_not_crash(adapter: Any) -> None:
    """Issue 12 finding 6: a record rewritten under its owner with a non-finite number once decoded and then
    crashed the heartbeat thread when re-encoded. Now the keeper reports the reservation lost; the corrupt
    bytes stay in place."""
    store = make_store(adapter, Clock())
    key = new_key()
    owned = store.reserve("r", key, **BINDING)
    assert isinstance(owned, Owned)
    location = store.location("r", key)
    body = adapter.read_bytes(location).replace(b'"summary":null', b'"summary":NaN')
    adapter.write(location, body)
    with LeaseKeeper(store, owned, interval_s=0.01) as keeper:
        deadline = time.monotonic() + 5
        while not keeper.lost and time.monotonic() < deadline:
            time.sleep(0.01)
    assert keeper.lost
    assert adapter.read_bytes(location) == body


def test_misplaced_record_is_refused(adapter: Any) -> None:
    """A well-formed record stored under another realm's location is corrupt, never replayed."""
    store = make_store(adapter, Clock())
    key = new_key()
    owned = store.reserve("realm-a", key, **BINDING)
    assert isinstance(owned, Owned)
    body = adapter.read_bytes(store.location("realm-a", key))
    adapter.write(store.location("realm-b", key), body)
    with pytest.raises(CorruptRecordError, match="expected 'realm-b'"):
        store.reserve("realm-b", key, **BINDING)
    assert adapter.read_bytes(store.location("realm-b", key)) == body


def test_record_round_trips_canonically(adapter: Any) -> None:
    store = make_store(adapter, Clock())
    owned = store.reserve("r", new_key(), **BINDING)
    assert isinstance(owned, Owned)
    data = encode_record(owned.record)
    assert decode_record(data, "x") == owned.record and encode_record(decode_record(data, "x")) == data


def test_purge_expired_keeps_live_leases_and_corrupt_records(adapter: Any) -> None:
    clock = Clock()
    store = make_store(adapter, clock, lifetime=timedelta(minutes=10))
    keys = {name: new_key() for name in ("finalized", "cancelled", "live", "stale", "corrupt")}
    owned = {name: store.reserve("r", key, **BINDING) for name, key in keys.items() if name != "corrupt"}
    adapter.write(store.location("r", keys["corrupt"]), b"garbage")
    assert isinstance(store.finalize(owned["finalized"], http_status=200, summary=None), Finalized)
    assert isinstance(store.cancel(owned["cancelled"]), Cancelled)
    clock.advance(minutes=20)  # everything so far is past its lifetime
    assert isinstance(store.heartbeat(owned["live"]), Updated)  # expired, but its lease is live
    fresh = new_key()
    assert isinstance(store.reserve("r", fresh, **BINDING), Owned)  # not expired
    with pytest.raises(CorruptRecordError, match="1 corrupt record") as caught:
        store.purge_expired(clock.now + timedelta(minutes=1))
    assert caught.value.purged == 3  # type: ignore[attr-defined]  # finalized, cancelled, stale
    for name in ("finalized", "cancelled", "stale"):
        assert store.load("r", keys[name]) is None
    assert store.load("r", keys["live"]) is not None and store.load("r", fresh) is not None
    assert adapter.read_bytes(store.location("r", keys["corrupt"])) == b"garbage"
    # Even with ``before`` far in the future, a live lease survives.
    adapter.delete(store.location("r", keys["corrupt"]))
    assert store.purge_expired(clock.now + timedelta(days=365)) == 0
    assert store.load("r", keys["live"]) is not None and store.load("r", fresh) is not None


class HeartbeatBeforeCas:
    """Delegates to an adapter; right before the first write_if_match it lets the owner heartbeat, so a
    purger that judged the record stale loses its CAS (the race, made deterministic)."""

    def __init__(self, inner: Any, beat: Any) -> None:
        self.inner, self.beat, self.fired = inner, beat, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def write_if_match(self, key: str, data: bytes, token: str) -> str | None:
        if not self.fired:
            self.fired = True
            self.beat()
        return self.inner.write_if_match(key, data, token)


def test_purge_loses_to_an_owner_heartbeating_meanwhile(adapter: Any) -> None:
    clock = Clock()
    owner_store = make_store(adapter, clock, lifetime=timedelta(minutes=10))
    key = new_key()
    owned = owner_store.reserve("r", key, **BINDING)
    assert isinstance(owned, Owned)
    clock.advance(minutes=20)  # expired and stale: a purge candidate
    beats: list[Any] = []
    purger = make_store(
        HeartbeatBeforeCas(adapter, lambda: beats.append(owner_store.heartbeat(owned))), clock
    )
    assert purger.purge_expired(clock.now) == 0
    assert isinstance(beats[0], Updated)
    stored = owner_store.load("r", key)
    assert stored is not None and stored.record.status is RecordStatus.IN_PROGRESS


def test_tombstones_block_reservation_and_are_adopted_when_their_purger_died(adapter: Any) -> None:
    clock = Clock()
    store = make_store(adapter, clock, lifetime=timedelta(minutes=10), tombstone_grace=timedelta(minutes=10))
    key = new_key()
    owned = store.reserve("r", key, **BINDING)
    assert isinstance(owned, Owned)
    assert isinstance(store.finalize(owned, http_status=200, summary=None), Finalized)
    location = store.location("r", key)
    current = adapter.read_versioned(location)
    tombstone = decode_record(current.data, location).next(
        status=RecordStatus.PURGING, heartbeat_at=clock.now
    )
    assert adapter.write_if_match(location, encode_record(tombstone), current.token)  # a purger died here
    duplicate = store.reserve("r", key, **BINDING)
    assert isinstance(duplicate, Duplicate) and duplicate.record.status is RecordStatus.PURGING
    assert store.purge_expired(clock.now + timedelta(days=1)) == 0  # young tombstone: its purger's alone
    clock.advance(minutes=11)
    assert store.purge_expired(clock.now) == 1  # adopted by CAS, then deleted
    assert isinstance(store.reserve("r", key, **BINDING), Owned)


def test_lifetime_is_advertised_as_iso8601(adapter: Any) -> None:
    assert make_store(adapter, Clock(), lifetime=timedelta(hours=24)).lifetime_iso8601 == "P1D"
    assert make_store(adapter, Clock(), lifetime=timedelta(hours=1, minutes=30)).lifetime_iso8601 == "PT1H30M"


# -- the purge's expiry index -------------------------------------------------------------------------
# Request counts on memory (exact on every backend; memory keeps thousands of records fast).


def reserve_many(store: IdempotencyStore, n: int, *, finalize: bool = True) -> list[str]:
    keys = [new_key() for _ in range(n)]
    for key in keys:
        owned = store.reserve("r", key, **BINDING)
        assert isinstance(owned, Owned)
        if finalize:
            assert isinstance(store.finalize(owned, http_status=200, summary=None), Finalized)
    return keys


def test_second_purge_over_live_records_lists_and_reads_nothing() -> None:
    """N live records: the first purge reads each and indexes it; the next one only lists (2 x N/1000)."""
    counting = CountingAdapter(open_adapter(f"memory://purge-{uuid.uuid4().hex[:8]}"))
    clock = Clock()
    store = make_store(counting, clock)
    n = 2500  # three listing pages
    reserve_many(store, n // 2)
    reserve_many(store, n - n // 2, finalize=False)  # in progress, leases live
    counting.reset()
    assert store.purge_expired(clock.now) == 0
    assert counting.counts == {"list_pages": 3, "read_versioned": n, "write": n}
    clock.advance(minutes=59)  # nothing expired yet (lifetime 1 h), leases stale: still not purgeable
    counting.reset()
    assert store.purge_expired(clock.now) == 0
    assert counting.counts == {"list_pages": 6}  # records and index, 3 pages each: no GET, no write


def test_purge_reads_only_the_expired_records() -> None:
    """E expired among N indexed records: E reads, then a CAS and a DELETE each, one batched index delete."""
    counting = CountingAdapter(open_adapter(f"memory://purge-{uuid.uuid4().hex[:8]}"))
    clock = Clock()
    long_lived = make_store(counting, clock, lifetime=timedelta(hours=2))
    short_lived = make_store(counting, clock, lifetime=timedelta(minutes=10))
    live = reserve_many(long_lived, 2000)
    expired = reserve_many(short_lived, 30)
    assert long_lived.purge_expired(clock.now) == 0  # indexes all 2,030
    clock.advance(minutes=20)
    counting.reset()
    assert long_lived.purge_expired(clock.now) == 30
    assert counting.counts == {
        "list_pages": 6,
        "read_versioned": 30,
        "write_if_match": 30,
        "delete": 30,
        "delete_many": 1,
    }
    assert all(long_lived.load("r", key) is None for key in expired)
    counting.reset()
    assert long_lived.purge_expired(clock.now) == 0
    assert counting.counts == {"list_pages": 4}  # 2,000 records and their 2,000 entries
    assert all(long_lived.load("r", key) is not None for key in live[:5])


def index_keys(adapter: Any, store: IdempotencyStore) -> list[str]:
    return [info.key for info in adapter.list(store.layout.index)]


def entry_of(store: IdempotencyStore, key: str, expires_at: datetime) -> str:
    slot = store.layout.slot(store.location("r", key))
    assert slot is not None
    entry = store.layout.entry(slot, expires_at)
    assert entry is not None
    return entry


def test_a_stale_entry_never_makes_purge_skip_or_delete_wrongly(adapter: Any) -> None:
    """Entries claiming an earlier expiry than the record's, or naming a record that is gone, cost a read
    (or a batched delete) and nothing else: the record is judged from its own bytes."""
    clock = Clock()
    store = make_store(adapter, clock)  # lifetime 1 h
    key, gone = new_key(), new_key()
    owned = finalized(store, key)
    expires_at = owned.record.expires_at
    early = entry_of(
        store, key, expires_at - timedelta(minutes=30)
    )  # as if an older record's, left by a crash
    orphan = entry_of(store, gone, expires_at + timedelta(days=1))  # its record was purged meanwhile
    for planted in (early, orphan):
        adapter.write(planted, b"")
    clock.advance(minutes=45)  # past the early entry's claim, before the real expiry
    assert store.purge_expired(clock.now) == 0
    assert store.load("r", key) is not None
    assert index_keys(adapter, store) == [entry_of(store, key, expires_at)]  # stale ones gone, true one kept
    clock.advance(minutes=20)  # now due: the true entry lets it be read, then it is purged with its entry
    assert store.purge_expired(clock.now) == 1
    assert store.load("r", key) is None and index_keys(adapter, store) == []
    again = store.reserve("r", key, **BINDING)  # a new record in the same slot expires later
    assert isinstance(again, Owned) and again.record.expires_at > expires_at
    adapter.write(entry_of(store, key, expires_at), b"")  # the old record's entry, as a crash would leave it
    assert store.purge_expired(clock.now + timedelta(minutes=30)) == 0  # read (the entry is stale): kept
    assert store.load("r", key) is not None
    assert index_keys(adapter, store) == [entry_of(store, key, again.record.expires_at)]


def test_an_entry_claiming_a_later_expiry_delays_the_purge_until_it_passes(adapter: Any) -> None:
    """No API path writes such an entry (expires_at is fixed at creation, a later record in a slot expires
    later). Planted by hand, it makes purge skip the record until ``before`` passes the claim: the record
    is purged late, never wrongly; then it is read and judged as always."""
    clock = Clock()
    store = make_store(adapter, clock)
    key = new_key()
    owned = finalized(store, key)
    adapter.write(entry_of(store, key, owned.record.expires_at + timedelta(days=1)), b"")
    clock.advance(hours=2)
    assert store.purge_expired(clock.now) == 0  # skipped on the entry's word
    assert store.load("r", key) is not None
    assert store.purge_expired(clock.now + timedelta(days=1)) == 1
    assert store.load("r", key) is None and index_keys(adapter, store) == []


def test_unparseable_index_keys_never_skip_a_read_and_never_raise(adapter: Any) -> None:
    """An entry's name with a date that does not exist stands for no knowledge (the read is made) and is
    garbage; names not of an entry's shape are another tool's objects: not entries, never deleted."""
    clock = Clock()
    store = make_store(adapter, clock)
    key = new_key()
    owned = finalized(store, key)
    slot = store.layout.slot(store.location("r", key))
    far = entry_of(store, key, owned.record.expires_at + timedelta(days=365))  # would skip it on its own
    planted = [
        far,
        f"{store.layout.index}/{slot}/not-a-time",
        f"{store.layout.index}/{slot}/20261399T000000.000000Z",  # month 13
        f"{store.layout.index}/{'0' * 40}/{'0' * 40}",  # no expiry segment
        f"{store.layout.index}/not/a/slot",
    ]
    for entry in planted:
        adapter.write(entry, b"")
    clock.advance(hours=2)
    assert store.purge_expired(clock.now) == 1  # the month-13 entry beside `far` forced the read
    assert store.load("r", key) is None and index_keys(adapter, store) == sorted(planted[1:2] + planted[3:])


def test_a_tombstone_is_never_indexed_and_is_adopted_past_its_indexed_expiry(adapter: Any) -> None:
    clock = Clock()
    store = make_store(adapter, clock, lifetime=timedelta(minutes=10), tombstone_grace=timedelta(minutes=10))
    key = new_key()
    owned = finalized(store, key)
    assert store.purge_expired(clock.now) == 0
    assert index_keys(adapter, store) == [entry_of(store, key, owned.record.expires_at)]
    location = store.location("r", key)
    clock.advance(minutes=11)
    current = adapter.read_versioned(location)
    tombstone = decode_record(current.data, location).next(
        status=RecordStatus.PURGING, heartbeat_at=clock.now
    )
    assert adapter.write_if_match(location, encode_record(tombstone), current.token)  # a purger died here
    assert store.purge_expired(clock.now) == 0  # young tombstone: read (entry due), left, entry dropped
    assert index_keys(adapter, store) == []
    clock.advance(minutes=11)
    assert store.purge_expired(clock.now) == 1  # adopted by CAS, then deleted
    assert isinstance(store.reserve("r", key, **BINDING), Owned)


def info(key: str) -> ObjectInfo:
    return ObjectInfo(key, 0, "t", datetime(2026, 1, 1, tzinfo=UTC))


def test_listings_out_of_slot_order_are_not_paired() -> None:
    """Should a server list out of slot order, pairing stops: the records after it are read, not skipped,
    and no entry after it is called garbage."""
    layout = Layout("p")
    a, b, c = (f"{x * 40}/{x * 40}" for x in "abc")
    claim = "20300101T000000.000000Z"
    records = [info(f"p/records/{s}.json") for s in (b, a, c)]
    entries = [info(f"p/expiry/{s}/{claim}") for s in (a, b, c)]
    garbage: list[str] = []
    when = datetime(2030, 1, 1, tzinfo=UTC)
    listed = list(joined(layout, records, entries, garbage))  # records step back at a
    assert [(item.slot, item.expiry()) for item in listed] == [(b, when), (None, None), (None, None)]
    assert garbage == [f"p/expiry/{a}/{claim}"]  # before b, so called garbage: deleting it costs a read
    garbage.clear()
    in_order = [records[1], records[0], records[2]]
    listed = list(
        joined(layout, in_order, [entries[1], entries[0], entries[2]], garbage)
    )  # entries step back
    assert [(item.slot, item.expiry()) for item in listed] == [(a, None), (b, when), (None, None)]
    assert garbage == []


def test_index_keys_round_trip_every_expiry_they_can_hold() -> None:
    layout, slot = Layout("p"), f"{'a' * 40}/{'b' * 40}"
    east = timezone(timedelta(hours=5, minutes=30))
    for moment in (
        datetime(2026, 1, 1, tzinfo=UTC),
        datetime(1, 1, 1, 12, tzinfo=east),
        datetime(2026, 3, 1, 2, 3, 4, 5, tzinfo=east),
    ):
        entry = layout.entry(slot, moment)
        assert entry is not None and layout.parse_entry(entry) == Entry(entry, slot, moment)
    # An expiry with no UTC stamp gets no entry: that record is read by every purge, as before the index.
    assert layout.entry(slot, datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-2)))) is None
