"""Recovery's promises the mutation campaign found unguarded (docs/mutation.md, "The layers built on the
adapter"): the key ledger never marks a key published for an operation that does not hold it (it
raises RecoveryInvariantError and leaves the holder's claim as it was); and an operation a heal fenced
is never rolled forward, even when every version it wrote is its table's head (a heal that fenced it
crashed before rolling it back)."""

from __future__ import annotations

from typing import Any

import pytest
from test_recovery_matrix import SCHEMA, crash_commit, pair, sidecars

from storage_adapter.engine import CommitRecord, Engine, RecoveryInvariantError, RecoveryOutcome, codec
from storage_adapter.engine import failpoints as fp
from storage_adapter.engine.history import FENCE_MODE
from storage_adapter.engine.key_ledger import KeyLedger, KeyState
from storage_adapter.engine.layout import operation_id_from_key
from storage_adapter.engine.manifest import ManifestStore


def test_a_key_is_never_published_over_another_operations_claim(adapter: Any) -> None:
    ledger = KeyLedger(adapter)
    claim = ledger.claim("order-17", "op-a")
    record = CommitRecord(1, codec.now_iso(), None, "op-b", "order-17", "append", False, ())
    with pytest.raises(RecoveryInvariantError, match="op-a"):
        ledger.publish("order-17", record)
    with pytest.raises(RecoveryInvariantError, match="op-a"):
        ledger.publish("order-17", record, claim)
    held = ledger.read("order-17")
    assert held is not None and (held.entry.operation_id, held.entry.state) == ("op-a", KeyState.CLAIMED)


def test_an_operation_a_heal_fenced_is_never_rolled_forward(adapter: Any) -> None:
    fp.disarm()
    engine = Engine.open(adapter, actor="writer")
    for table in ("a", "b"):
        engine.create_table(table, SCHEMA)
    crash_commit(engine, "commit.before_publish", commit=lambda: engine.commit(pair()))  # every head its
    (sidecar,) = sidecars(adapter)
    operation = operation_id_from_key(sidecar)
    # what a heal that fenced the operation and crashed at recovery.after_fence leaves: its fence record
    manifests = ManifestStore(adapter)
    state = manifests.load()
    fence = CommitRecord(
        state.manifest.version + 1, codec.now_iso(), "healer", operation, None, FENCE_MODE, True, ()
    )
    assert manifests.publish(state, state.manifest.advance(fence, {})) is not None
    healed = engine.heal()
    assert [(r.operation_id, r.outcome) for r in healed.recovered] == [
        (operation, RecoveryOutcome.ROLLED_BACK)
    ]
    assert (engine.read("a").num_rows, engine.read("b").num_rows) == (0, 0)
    assert [r for r in engine.history() if r.operation_id == operation and not r.is_fence] == []
