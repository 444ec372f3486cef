"""Recovery's promises the mutation campaign found unguarded (docs/mutation.md, "The layers built on the
adapter"): the key ledger never marks a key published for an operation that does not hold it; it
raises RecoveryInvariantError and leaves the holder's claim as it was."""

from __future__ import annotations

from typing import Any

import pytest

from storage_adapter.engine import codec
from storage_adapter.engine.errors import RecoveryInvariantError
from storage_adapter.engine.history import CommitRecord
from storage_adapter.engine.key_ledger import KeyLedger, KeyState


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
