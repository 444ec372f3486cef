"""The idempotency layer's promises the mutation campaign found unguarded (docs/mutation.md, "The layers
built on the adapter"): a payload's fingerprint does not depend on the order of its objects' keys, and
tells raw bytes from JSON; an owner whose heartbeats fail counts its ownership lost ``margin`` before its
lease runs out, not after (a successor may take the record over once the lease is past); and
``purge_expired(before)`` deletes the records that expire before ``before``, never one that expires at it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from test_idempotency_store import BINDING, Clock, make_store, new_key

from storage_adapter.idempotency import Owned, payload_fingerprint
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
