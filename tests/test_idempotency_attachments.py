"""Outcome attachments: a finalized record's body of any size, kept as its own object beside the record
(``IdempotencyStore.finalize(..., attachment=...)``, ``IdempotencyStore.attachment(record)``), on every
backend (the ``adapter`` fixture): written before the record, removed when the record does not land,
verified when read, removed with the record by purge, orphans cleaned, foreign objects left alone; the
stored descriptor decoded strictly; ``run_idempotent`` finalizing a ``HandlerResult`` that carries one.
Request counts are exact on every backend; the purge's are asserted on memory, as in
tests/test_idempotency_store.py."""

from __future__ import annotations

import hashlib
import json
import random
import uuid
from datetime import timedelta
from typing import Any

import pytest
from test_idempotency_store import BINDING, Clock, make_store, new_key

from contract_tests.counting import CountingAdapter
from storage_adapter.adapter import open_adapter
from storage_adapter.errors import StorageError
from storage_adapter.idempotency import (
    Attachment,
    AttachmentTooLargeError,
    Cancelled,
    CorruptRecordError,
    Finalized,
    HandlerResult,
    IdempotencyRecord,
    IdempotencyStore,
    IdempotentRequest,
    LostOwnership,
    NotFound,
    Owned,
    ReconcileVerdict,
    Reconciliation,
    RecordStatus,
    SummaryTooLargeError,
    payload_fingerprint,
    run_idempotent,
)
from storage_adapter.idempotency.records import ATTACHMENT_SIZE_BOUND, decode_record, encode_record

MIB = 1024 * 1024


def payload(size: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(size)


def reserved(store: IdempotencyStore, key: str | None = None) -> Owned:
    owned = store.reserve("r", key or new_key(), **BINDING)
    assert isinstance(owned, Owned)
    return owned


def attached(store: IdempotencyStore, data: bytes, key: str | None = None) -> IdempotencyRecord:
    """Reserve a key in realm "r" and finalize it (201) with ``data`` attached: the finalized record."""
    done = store.finalize(reserved(store, key), http_status=201, summary={"attached": True}, attachment=data)
    assert isinstance(done, Finalized)
    return done.record


def attachment_keys(adapter: Any, store: IdempotencyStore) -> list[str]:
    return [info.key for info in adapter.list(store.layout.attachments)]


# -- finalize and read ------------------------------------------------------------------------------------
def test_a_one_mib_attachment_round_trips_byte_for_byte(adapter: Any) -> None:
    """One PUT more than a finalize without one, written under the record's slot and its reservation id;
    read back with one ranged GET, verified."""
    counting = CountingAdapter(adapter)
    store = make_store(counting, Clock())
    key = new_key()
    owned = reserved(store, key)
    data = payload(MIB)
    counting.reset()
    done = store.finalize(owned, http_status=201, summary={"metadata": "attached"}, attachment=data)
    assert isinstance(done, Finalized)
    assert dict(counting.counts) == {"write": 1, "write_if_match": 1}
    digest = hashlib.sha256(data).hexdigest()
    assert done.record.attachment == Attachment(owned.record.reservation_id, MIB, digest)
    stored = store.load("r", key)
    assert stored is not None and stored.record == done.record
    name = store.attachment_location(stored.record)
    slot = store.layout.slot(store.location("r", key))
    assert name == f"idempotency/attachments/{slot}/{owned.record.reservation_id}-{digest}"
    assert attachment_keys(adapter, store) == [name]
    counting.reset()
    assert store.attachment(stored.record) == data
    assert dict(counting.counts) == {"read_range": 1}
    plain = store.reserve("r", new_key(), **BINDING)
    assert isinstance(plain, Owned)
    without = store.finalize(plain, http_status=200, summary=None)
    assert isinstance(without, Finalized) and without.record.attachment is None
    counting.reset()
    assert store.attachment(without.record) is None and store.attachment_location(without.record) is None
    assert counting.total == 0


def test_an_empty_attachment_and_one_larger_than_the_summary_limit_are_kept(adapter: Any) -> None:
    """The attachment does not count against ``max_summary_bytes``; zero bytes is an attachment too."""
    store = make_store(adapter, Clock(), max_summary_bytes=1024)
    for data in (b"", payload(4096, seed=1)):
        record = attached(store, data)
        assert record.attachment is not None and record.attachment.size == len(data)
        assert store.attachment(record) == data


class Wrapped:
    """Delegates to an adapter; ``before_cas(key)`` runs right before each write_if_match."""

    def __init__(self, inner: Any, before_cas: Any) -> None:
        self.inner, self.before_cas = inner, before_cas

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def write_if_match(self, key: str, data: bytes, token: str) -> str | None:
        self.before_cas(key)
        return self.inner.write_if_match(key, data, token)


def test_the_attachment_is_whole_before_the_record_names_it(adapter: Any) -> None:
    clock = Clock()
    store = make_store(adapter, clock)
    key = new_key()
    owned = reserved(store, key)
    data = payload(MIB, seed=2)
    seen: list[bytes] = []

    def check(location: str) -> None:
        assert location == store.location("r", key)
        [name] = attachment_keys(adapter, store)
        seen.append(adapter.read_bytes(name))

    wrapped = make_store(Wrapped(adapter, check), clock)
    done = wrapped.finalize(owned, http_status=201, summary=None, attachment=data)
    assert isinstance(done, Finalized) and seen == [data]


def test_an_attachment_whose_record_cas_is_lost_is_removed(adapter: Any) -> None:
    """The record is taken over between the attachment's PUT and the finalize CAS: the CAS misses, the
    re-read shows another reservation (LostOwnership), and the attachment written is deleted."""
    clock = Clock()
    store = make_store(adapter, clock)
    key = new_key()
    owned = reserved(store, key)
    clock.advance(seconds=30 + 5 + 1)  # the lease is stale
    successors: list[Any] = []

    def take_over(location: str) -> None:
        if not successors:
            assert attachment_keys(adapter, store) != []  # the attachment is written first
            duplicate = store.reserve("r", key, **BINDING)
            successors.append(store.takeover(duplicate))  # type: ignore[arg-type]

    counting = CountingAdapter(Wrapped(adapter, take_over))  # type: ignore[arg-type]
    fenced = make_store(counting, clock).finalize(owned, http_status=201, summary=None, attachment=b"x" * 100)
    assert isinstance(fenced, LostOwnership) and isinstance(successors[0], Owned)
    assert dict(counting.counts) == {"write": 1, "write_if_match": 1, "read_versioned": 1, "delete": 1}
    assert attachment_keys(adapter, store) == []
    stored = store.load("r", key)
    assert stored is not None and stored.record == successors[0].record  # not finalized, no attachment
    assert stored.record.status is RecordStatus.IN_PROGRESS and stored.record.attachment is None


def test_a_fenced_cancelled_or_purged_finalize_leaves_no_attachment(adapter: Any) -> None:
    clock = Clock()
    store = make_store(adapter, clock)
    # Taken over before the finalize: the CAS misses, LostOwnership.
    key = new_key()
    first = reserved(store, key)
    clock.advance(seconds=36)
    successor = store.takeover(store.reserve("r", key, **BINDING))  # type: ignore[arg-type]
    assert isinstance(successor, Owned)
    assert isinstance(store.finalize(first, http_status=201, summary=None, attachment=b"a"), LostOwnership)
    # Cancelled by its owner first: Cancelled.
    cancelled = reserved(store)
    assert isinstance(store.cancel(cancelled), Cancelled)
    assert isinstance(store.finalize(cancelled, http_status=201, summary=None, attachment=b"b"), Cancelled)
    # The record is gone (purged): NotFound.
    gone = reserved(store)
    adapter.delete(store.location("r", gone.record.key))
    assert isinstance(store.finalize(gone, http_status=201, summary=None, attachment=b"c"), NotFound)
    assert attachment_keys(adapter, store) == []
    # The successor finalizes with its own attachment: only it is kept.
    done = store.finalize(successor, http_status=201, summary=None, attachment=b"d")
    assert isinstance(done, Finalized) and store.attachment(done.record) == b"d"
    assert attachment_keys(adapter, store) == [store.attachment_location(done.record)]


def test_a_retried_finalize_keeps_the_attachment_the_record_names(adapter: Any) -> None:
    """A finalize repeated after it landed (its answer lost) writes the same object again and answers
    Finalized; one repeated with other bytes gets the stored outcome and its own object is removed."""
    store = make_store(adapter, Clock())
    owned = reserved(store)
    done = store.finalize(owned, http_status=201, summary=None, attachment=b"first")
    again = store.finalize(owned, http_status=201, summary=None, attachment=b"first")
    other = store.finalize(owned, http_status=201, summary=None, attachment=b"other")
    assert isinstance(done, Finalized) and again == done and other == done
    assert store.attachment(done.record) == b"first"
    assert attachment_keys(adapter, store) == [store.attachment_location(done.record)]


def test_a_failing_record_cas_leaves_the_attachment_to_the_purge(adapter: Any) -> None:
    """The record's CAS raises after the attachment's PUT: the CAS may have landed, or may still land (a
    request past its deadline keeps running), so the attachment is kept; the record is not finalized, and
    the object goes with the record when the purge removes it."""
    clock = Clock()
    store = make_store(adapter, clock)
    key = new_key()
    owned = reserved(store, key)

    def fail(location: str) -> None:
        raise StorageError("injected: the record's CAS failed", key=location)

    with pytest.raises(StorageError, match="injected"):
        make_store(Wrapped(adapter, fail), clock).finalize(
            owned, http_status=201, summary=None, attachment=b"left"
        )
    stored = store.load("r", key)
    assert stored is not None and stored.record.status is RecordStatus.IN_PROGRESS
    [left] = attachment_keys(adapter, store)
    assert isinstance(store.cancel(owned), Cancelled)  # the owner gives the key up
    assert store.purge_expired(clock.now) == 0  # a live record: its slot's attachments stay
    assert attachment_keys(adapter, store) == [left]
    clock.advance(hours=2)
    assert store.purge_expired(clock.now) == 1
    assert attachment_keys(adapter, store) == [] and store.load("r", key) is None


class RangeLog:
    """Delegates to an adapter and notes every read_range's arguments."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.ranges = inner, []  # type: list[tuple[str, int, int]]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def read_range(self, key: str, start: int, end: int) -> bytes:
        self.ranges.append((key, start, end))
        return self.inner.read_range(key, start, end)


@pytest.mark.parametrize("damage", ["missing", "truncated", "longer", "flipped"])
def test_a_damaged_attachment_is_corrupt_and_everything_stays_in_place(adapter: Any, damage: str) -> None:
    """Missing, shorter, longer or other bytes of the same size: CorruptRecordError naming the object; the
    record and the object are left as they are; never more than the recorded size + 1 is read."""
    log = RangeLog(adapter)
    store = make_store(log, Clock())
    data = payload(64 * 1024, seed=3)
    record = attached(store, data)
    name = store.attachment_location(record)
    assert name is not None
    location = store.location("r", record.key)
    kept = adapter.read_bytes(location)
    damaged = {
        "missing": None,
        "truncated": data[:-1],
        "longer": data + payload(MIB, seed=4),
        "flipped": bytes([data[0] ^ 1]) + data[1:],
    }[damage]
    if damaged is None:
        adapter.delete(name)
    else:
        adapter.write(name, damaged)
    with pytest.raises(CorruptRecordError, match="left in place") as caught:
        store.attachment(record)
    assert name in str(caught.value) and caught.value.key == name
    assert log.ranges == [(name, 0, len(data) + 1)]
    assert adapter.read_bytes(location) == kept
    assert adapter.read_if_exists(name) == damaged


def test_an_attachment_over_this_stores_ceiling_is_refused_unread(adapter: Any) -> None:
    """A record naming an attachment larger than the reading store's ``max_attachment_bytes`` (written by
    a store with a higher one) is refused before any request: the ceiling bounds every read."""
    record = attached(make_store(adapter, Clock()), b"y" * 2048)
    counting = CountingAdapter(adapter)
    small = make_store(counting, Clock(), max_attachment_bytes=1024)
    with pytest.raises(CorruptRecordError, match="max_attachment_bytes"):
        small.attachment(record)
    assert counting.total == 0


def test_an_attachment_over_the_ceiling_is_a_typed_error_before_any_request(adapter: Any) -> None:
    counting = CountingAdapter(adapter)
    store = make_store(counting, Clock(), max_attachment_bytes=1024)
    key = new_key()
    owned = reserved(store, key)
    before = store.load("r", key)
    counting.reset()
    with pytest.raises(AttachmentTooLargeError, match="over the limit of 1024") as caught:
        store.finalize(owned, http_status=201, summary=None, attachment=b"z" * 1025)
    assert isinstance(caught.value, SummaryTooLargeError)
    for wrong in ("text", bytearray(b"ab"), memoryview(b"ab"), 5):
        with pytest.raises(TypeError, match="attachment"):
            store.finalize(owned, http_status=201, summary=None, attachment=wrong)  # type: ignore[arg-type]
    assert counting.total == 0
    assert store.load("r", key) == before and attachment_keys(adapter, store) == []
    done = store.finalize(owned, http_status=201, summary=None, attachment=b"z" * 1024)  # at the ceiling
    assert isinstance(done, Finalized)


def test_the_ceiling_is_bounded() -> None:
    memory = open_adapter(f"memory://att-{uuid.uuid4().hex[:8]}")
    assert IdempotencyStore(memory).max_attachment_bytes == 64 * MIB
    for bad in (-1, ATTACHMENT_SIZE_BOUND + 1):
        with pytest.raises(ValueError, match="max_attachment_bytes"):
            IdempotencyStore(memory, max_attachment_bytes=bad)


# -- the stored descriptor ----------------------------------------------------------------------------------
def stored_fields(adapter: Any) -> tuple[IdempotencyStore, dict[str, Any]]:
    store = make_store(adapter, Clock())
    record = attached(store, b"body")
    return store, json.loads(encode_record(record))


def test_records_without_an_attachment_keep_schema_1_and_with_one_say_schema_2() -> None:
    """A record without an attachment is stored exactly as before (schema 1, no field); one with an
    attachment is schema 2, which code from before attachments refuses as corrupt instead of replaying
    the record without its body."""
    memory = open_adapter(f"memory://att-{uuid.uuid4().hex[:8]}")
    store, fields = stored_fields(memory)
    assert fields["schema"] == 2
    assert set(fields["attachment"]) == {"reservation_id", "sha256", "size"}
    plain = store.finalize(reserved(store), http_status=200, summary=None)
    assert isinstance(plain, Finalized)
    data = encode_record(plain.record)
    assert b'"schema":1' in data and b"attachment" not in data
    for record in (plain.record, decode_record(encode_record(attached(store, b"x")), "x")):
        assert decode_record(encode_record(record), "x") == record


def tampered(fields: dict[str, Any], change: str) -> dict[str, Any]:
    fields = json.loads(json.dumps(fields))
    described = fields["attachment"]
    edits: dict[str, Any] = {
        "size-str": lambda: described.update(size="4"),
        "size-bool": lambda: described.update(size=True),
        "size-float": lambda: described.update(size=4.0),
        "size-negative": lambda: described.update(size=-1),
        "size-over-bound": lambda: described.update(size=ATTACHMENT_SIZE_BOUND + 1),
        "sha-upper": lambda: described.update(sha256=described["sha256"].upper()),
        "sha-short": lambda: described.update(sha256=described["sha256"][:-1]),
        "sha-int": lambda: described.update(sha256=5),
        "id-not-hex": lambda: described.update(reservation_id="../" + described["reservation_id"][3:]),
        "id-long": lambda: described.update(reservation_id=described["reservation_id"] + "0"),
        "id-other-reservation": lambda: described.update(reservation_id="0" * 32),
        "extra-field": lambda: described.update(name="x"),
        "missing-field": lambda: described.pop("sha256"),
        "not-an-object": lambda: fields.update(attachment=[1, 2]),
        "null": lambda: fields.update(attachment=None),
        "schema-1": lambda: fields.update(schema=1),
        "schema-2-without": lambda: fields.pop("attachment"),
        "in-progress": lambda: fields.update(status="in_progress", http_status=None, finalized_at=None),
        "cancelled": lambda: fields.update(status="cancelled"),
    }
    edits[change]()
    return fields


TAMPERINGS = [
    "size-str",
    "size-bool",
    "size-float",
    "size-negative",
    "size-over-bound",
    "sha-upper",
    "sha-short",
    "sha-int",
    "id-not-hex",
    "id-long",
    "id-other-reservation",
    "extra-field",
    "missing-field",
    "not-an-object",
    "null",
    "schema-1",
    "schema-2-without",
    "in-progress",
    "cancelled",
]


@pytest.mark.parametrize("change", TAMPERINGS)
def test_an_odd_attachment_descriptor_is_a_corrupt_record_left_in_place(change: str) -> None:
    memory = open_adapter(f"memory://att-{uuid.uuid4().hex[:8]}")
    store, fields = stored_fields(memory)
    body = json.dumps(tampered(fields, change)).encode()
    location = store.location("r", fields["key"])
    memory.write(location, body)
    with pytest.raises(CorruptRecordError, match="left in place") as caught:
        store.load("r", fields["key"])
    assert location in str(caught.value)
    assert memory.read_bytes(location) == body


def test_a_tombstone_keeps_the_attachment_for_its_purger_and_successors_never_inherit_one() -> None:
    """Only finalize sets an attachment. A purge's tombstone (another reservation id) keeps the descriptor;
    heartbeat, cancel and takeover produce records without one, and a record in progress or cancelled
    carrying one cannot even be encoded."""
    memory = open_adapter(f"memory://att-{uuid.uuid4().hex[:8]}")
    store = make_store(memory, Clock())
    record = attached(store, b"body")
    tombstone = record.next(status=RecordStatus.PURGING, reservation_id=uuid.uuid4().hex)
    assert decode_record(encode_record(tombstone), "x") == tombstone
    for status in (RecordStatus.IN_PROGRESS, RecordStatus.CANCELLED):
        with pytest.raises(ValueError, match="attachment"):
            encode_record(record.next(status=status))
    owned = reserved(store)
    assert owned.record.attachment is None
    assert isinstance(store.cancel(owned), Cancelled)
    retry = store.reserve("r", owned.record.key, **BINDING)  # takes the cancelled record over
    assert isinstance(retry, Owned) and retry.previous is not None and retry.record.attachment is None


# -- purge ---------------------------------------------------------------------------------------------------
def test_purge_removes_attachments_with_their_records_and_leaves_live_ones(adapter: Any) -> None:
    clock = Clock()
    short = make_store(adapter, clock, lifetime=timedelta(minutes=10))
    long = make_store(adapter, clock, lifetime=timedelta(hours=2))
    due = [attached(short, payload(1000, seed=i)) for i in range(3)]
    live = attached(long, payload(1000, seed=9))
    assert long.purge_expired(clock.now) == 0  # nothing due: every attachment stays
    assert len(attachment_keys(adapter, long)) == 4
    clock.advance(minutes=20)
    assert long.purge_expired(clock.now) == 3
    assert attachment_keys(adapter, long) == [long.attachment_location(live)]
    assert long.attachment(live) == payload(1000, seed=9)
    assert all(long.load("r", record.key) is None for record in due)


def test_purge_removes_orphans_and_keeps_the_unnamed_attachments_of_live_records(adapter: Any) -> None:
    """An attachment whose slot holds no record (its attempt died after the PUT and its record was purged
    since, or a purger died between the record's delete and the attachments') is deleted; one in the slot
    of a live record that does not name it (a finalize whose CAS failed) waits for that record."""
    clock = Clock()
    store = make_store(adapter, clock)
    live = attached(store, b"named")
    slot = store.layout.slot(store.location("r", live.key))
    assert slot is not None
    unnamed = store.layout.attachment(slot, uuid.uuid4().hex, hashlib.sha256(b"unnamed").hexdigest())
    orphan_slot = store.layout.slot(store.location("r", new_key()))
    assert orphan_slot is not None
    orphans = [
        store.layout.attachment(orphan_slot, uuid.uuid4().hex, hashlib.sha256(b"o%d" % i).hexdigest())
        for i in range(2)
    ]
    for name in (unnamed, *orphans):
        adapter.write(name, b"planted")
    assert store.purge_expired(clock.now) == 0
    assert attachment_keys(adapter, store) == sorted([store.attachment_location(live), unnamed])
    clock.advance(hours=2)
    assert store.purge_expired(clock.now) == 1
    assert attachment_keys(adapter, store) == []


class HiddenRecord:
    """Delegates to an adapter whose record listings leave out one record: the listing passed its slot
    before the record was created (the race of a new record with the purge, made deterministic)."""

    def __init__(self, inner: Any, hidden: str) -> None:
        self.inner, self.hidden = inner, hidden

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def list_pages(self, prefix: str = "", **options: Any) -> Any:
        for page in self.inner.list_pages(prefix, **options):
            kept = [info for info in page if info.key != self.hidden]
            if kept:
                yield kept


def test_an_attachment_listed_without_its_record_is_deleted_only_once_the_record_is_seen_gone(
    adapter: Any,
) -> None:
    clock = Clock()
    store = make_store(adapter, clock)
    record = attached(store, b"racing")
    location = store.location("r", record.key)
    counting = CountingAdapter(HiddenRecord(adapter, location))  # type: ignore[arg-type]
    purger = make_store(counting, clock)
    assert purger.purge_expired(clock.now) == 0
    assert counting.counts["exists"] == 1  # the record of the slot was looked for, and found
    assert store.attachment(record) == b"racing"


def test_purge_never_touches_foreign_objects_under_attachments(adapter: Any) -> None:
    clock = Clock()
    store = make_store(adapter, clock)
    record = attached(store, b"mine")
    slot = store.layout.slot(store.location("r", record.key))
    rid, digest = uuid.uuid4().hex, hashlib.sha256(b"x").hexdigest()
    prefix = store.layout.attachments
    foreign = sorted(
        [
            f"{prefix}/readme.txt",
            f"{prefix}/{slot}/notes.txt",
            f"{prefix}/{slot}/{rid}",  # no digest
            f"{prefix}/{slot}/{rid.upper()}-{digest}",
            f"{prefix}/{slot}/{rid}-{digest}.bak",
            f"{prefix}/{slot}/{rid}-{digest}/x",
            f"{prefix}/{'0' * 40}/{rid}-{digest}",  # no key segment
            f"{prefix}/{'0' * 40}/{'1' * 40}/{rid}-{digest[:-1]}",
        ]
    )
    for name in foreign:
        adapter.write(name, b"another tool's")
    clock.advance(hours=2)
    assert store.purge_expired(clock.now) == 1
    assert attachment_keys(adapter, store) == foreign
    assert all(adapter.read_bytes(name) == b"another tool's" for name in foreign)


def test_purge_request_counts_with_attachments() -> None:
    """Memory: one listing page more per 1,000 attachments; records purged with theirs cost nothing more
    (their keys join the batched delete of index entries); an orphan costs one existence check."""
    counting = CountingAdapter(open_adapter(f"memory://att-{uuid.uuid4().hex[:8]}"))
    clock = Clock()
    store = make_store(counting, clock)
    with_attachments = [attached(store, b"a%d" % i) for i in range(3)]
    for _ in range(2):
        assert isinstance(store.finalize(reserved(store), http_status=200, summary=None), Finalized)
    counting.reset()
    assert store.purge_expired(clock.now) == 0  # the first purge reads and indexes all five
    assert counting.counts == {"list_pages": 2, "read_versioned": 5, "write": 5}
    counting.reset()
    assert store.purge_expired(clock.now) == 0  # records, index, attachments: one page each
    assert counting.counts == {"list_pages": 3}
    orphan_slot = store.layout.slot(store.location("r", new_key()))
    assert orphan_slot is not None
    counting.inner.write(store.layout.attachment(orphan_slot, uuid.uuid4().hex, "0" * 64), b"orphan")
    clock.advance(hours=2)
    counting.reset()
    assert store.purge_expired(clock.now) == 5
    assert counting.counts == {
        "list_pages": 3,
        "exists": 1,  # the orphan's slot
        "read_versioned": 5,
        "write_if_match": 5,
        "delete": 5,
        "delete_many": 1,  # 5 index entries, 3 attachments and the orphan
    }
    assert attachment_keys(counting.inner, store) == []
    assert all(store.load("r", record.key) is None for record in with_attachments)


# -- run_idempotent -------------------------------------------------------------------------------------
def request(key: str) -> IdempotentRequest:
    return IdempotentRequest(realm="r", key=key, operation="commit", resource="t", payload={"a": 1})


def test_run_idempotent_finalizes_a_result_with_its_attachment(adapter: Any) -> None:
    store = IdempotencyStore(adapter)
    key = new_key()
    metadata = payload(300 * 1024, seed=5)
    runs: list[int] = []

    def handler(ctx: Any) -> HandlerResult:
        runs.append(1)
        return HandlerResult(201, {"metadata-location": "s3://x"}, (("Location", "/t"),), attachment=metadata)

    def replayer(record: IdempotencyRecord) -> HandlerResult:
        assert record.http_status is not None
        return HandlerResult(record.http_status, store.attachment(record), record.headers)

    first = run_idempotent(store, request(key), handler, replayer=replayer)
    assert (first.status, first.summary, first.replayed) == (201, {"metadata-location": "s3://x"}, False)
    stored = store.load("r", key)
    assert stored is not None and stored.record.status is RecordStatus.FINALIZED
    assert store.attachment(stored.record) == metadata
    again = run_idempotent(store, request(key), handler, replayer=replayer)
    assert again.replayed and (again.status, again.summary, again.headers) == (201, metadata, first.headers)
    assert runs == [1]
    name = store.attachment_location(stored.record)
    assert name is not None
    adapter.write(name, b"damaged")  # a replayer meeting a corrupt attachment: 500, never a raw error
    broken = run_idempotent(store, request(key), handler, replayer=replayer)
    assert (broken.status, broken.problem_type) == (500, "idempotency_record_corrupt") and runs == [1]
    assert name in str(broken.summary)


def test_run_idempotent_with_an_unkeepable_attachment(adapter: Any) -> None:
    """Not bytes: the handler returned a result the store cannot keep (ValueError, record cancelled as
    unsettled). Over the ceiling: the handler's answer, nothing stored, record cancelled as unsettled
    (like a summary too large)."""
    store = IdempotencyStore(adapter, max_attachment_bytes=10)
    key = new_key()
    with pytest.raises(ValueError, match="cannot keep"):
        run_idempotent(store, request(key), lambda ctx: HandlerResult(201, attachment="text"))  # type: ignore[arg-type]
    other = new_key()
    response = run_idempotent(store, request(other), lambda ctx: HandlerResult(201, attachment=b"x" * 11))
    assert (response.status, response.replayed) == (201, False)
    for each in (key, other):
        stored = store.load("r", each)
        assert stored is not None and stored.record.status is RecordStatus.CANCELLED
        assert stored.record.error_subtype == "idempotency_outcome_unsettled"
    assert attachment_keys(adapter, store) == []


def test_a_reconciled_outcome_whose_attachment_could_not_be_stored_is_503(adapter: Any) -> None:
    """A dead owner's effect reconciled APPLIED, with an attachment the store cannot keep: there is no
    record a replayer could read it from, so the answer is 503 (nothing stored; the record is released as
    unsettled) and the next retry reconciles again."""
    clock = Clock()
    store = IdempotencyStore(adapter, clock=clock, max_attachment_bytes=4)
    key = new_key()
    binding = {"operation": "commit", "resource": "t", "fingerprint": payload_fingerprint({"a": 1})}
    assert isinstance(store.reserve("r", key, **binding), Owned)  # its owner dies
    clock.advance(minutes=5)

    class Applied:
        def reconcile(self, record: IdempotencyRecord) -> Reconciliation:
            return Reconciliation(ReconcileVerdict.APPLIED, HandlerResult(201, attachment=b"too large"))

    response = run_idempotent(store, request(key), lambda ctx: HandlerResult(500), reconciler=Applied())
    assert (response.status, response.problem_type) == (503, "idempotency_store_unavailable")
    stored = store.load("r", key)
    assert stored is not None and stored.record.status is RecordStatus.CANCELLED
    assert attachment_keys(adapter, store) == []
