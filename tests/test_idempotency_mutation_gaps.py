"""The idempotency layer's promises the mutation campaign found unguarded (docs/mutation.md, "The layers
built on the adapter"): a payload's fingerprint does not depend on the order of its objects' keys, and
tells raw bytes from JSON; an owner whose heartbeats fail counts its ownership lost ``margin`` before its
lease runs out, not after (a successor may take the record over once the lease is past); and
``purge_expired(before)`` deletes the records that expire before ``before``, never one that expires at it,
and a purger slower than half the tombstone grace leaves its tombstone for a later purge; an outcome of
exactly ``max_summary_bytes`` is stored."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from test_idempotency_store import BINDING, Clock, make_store, new_key

from storage_adapter.idempotency import Owned, RecordStatus, SummaryTooLargeError, payload_fingerprint
from storage_adapter.idempotency.lease_keeper import LeaseKeeper


def test_a_fingerprint_ignores_key_order_and_tells_bytes_from_json() -> None:
    one = {"table": "t", "rows": [1, {"a": 1, "b": 2}]}
    same = {"rows": [1, {"b": 2, "a": 1}], "table": "t"}
    assert payload_fingerprint(one) == payload_fingerprint(same)
    assert payload_fingerprint(b'{"a":1}') != payload_fingerprint({"a": 1})
    assert payload_fingerprint(b"1") != payload_fingerprint(1)


def test_an_owner_counts_its_lease_lost_a_margin_before_it_runs_out(adapter: Any) -> None:
    clock = Clock()
    store = make_store(adapter, clock)  # a 30 s lease
    owned = store.reserve("r", new_key(), **BINDING)
    assert isinstance(owned, Owned)
    keeper = LeaseKeeper(store, owned, interval_s=3600, margin_s=5)  # not started: no heartbeat thread
    clock.advance(seconds=10)
    assert keeper.confirm()  # a heartbeat: the lease now ends 30 s from here
    clock.advance(seconds=24)
    assert not keeper.lost
    clock.advance(seconds=2)  # within the lease, past its margin
    assert keeper.lost


def test_purge_spares_a_record_that_expires_exactly_at_its_bound(adapter: Any) -> None:
    clock = Clock()
    store = make_store(adapter, clock)
    key = new_key()
    owned = store.reserve("r", key, **BINDING)
    assert isinstance(owned, Owned)
    store.finalize(owned, http_status=200, summary="done")
    expires_at = owned.record.expires_at
    clock.advance(hours=2)
    assert store.purge_expired(expires_at) == 0
    assert store.load("r", key) is not None
    assert store.purge_expired(expires_at + timedelta(microseconds=1)) == 1
    assert store.load("r", key) is None


class _SteppingClock(Clock):
    """A clock that moves ``step`` forward at every reading: each request seems to take that long."""

    def __init__(self, start: datetime, step: timedelta) -> None:
        super().__init__(start)
        self.step = step

    def __call__(self) -> datetime:
        self.now += self.step
        return self.now


def test_a_purger_slower_than_half_the_tombstone_grace_leaves_its_tombstone(adapter: Any) -> None:
    clock = Clock()
    grace = timedelta(minutes=10)
    store = make_store(adapter, clock, tombstone_grace=grace)
    key = new_key()
    owned = store.reserve("r", key, **BINDING)
    assert isinstance(owned, Owned)
    store.finalize(owned, http_status=200, summary="done")
    clock.advance(hours=2)
    slow = make_store(adapter, _SteppingClock(clock.now, grace * 0.75), tombstone_grace=grace)
    assert slow.purge_expired(clock.now) == 0
    left = store.load("r", key)
    assert left is not None and left.record.status is RecordStatus.PURGING


def test_an_outcome_of_exactly_max_summary_bytes_is_stored(adapter: Any) -> None:
    summary, headers = {"body": "x" * 100}, (("etag", '"v1"'),)
    size = make_store(adapter, Clock()).outcome_size(summary, headers)
    for limit, stored in ((size, True), (size - 1, False)):
        store = make_store(adapter, Clock(), max_summary_bytes=limit)
        key = new_key()
        owned = store.reserve("r", key, **BINDING)
        assert isinstance(owned, Owned)
        if stored:
            store.finalize(owned, http_status=201, summary=summary, headers=headers)
            done = store.load("r", key)
            assert done is not None and done.record.summary == summary
        else:
            with pytest.raises(SummaryTooLargeError):
                store.finalize(owned, http_status=201, summary=summary, headers=headers)
