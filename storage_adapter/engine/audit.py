"""Audit records of recoveries: exactly one per recovered operation.

The key ``__audit/{operation_id}.json`` is a function of the operation id alone and is written with
``write_if_absent``, so a recovery that crashes after its audit write and runs again (in this process or
another) finds the record present and does not write a second one.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from storage_adapter.engine import codec, layout
from storage_adapter.engine.errors import CorruptMetadataError
from storage_adapter.engine.failpoints import failpoint
from storage_adapter.protocol import StorageAdapter
from storage_adapter.stored_json import StoredJSONError, field, items, one_of, timestamp

AUDIT_FORMAT = "storage-adapter-engine/recovery-audit"


class RecoveryOutcome(enum.Enum):
    ROLLED_FORWARD = "rolled_forward"  # recovery published the commit (one manifest publish)
    ROLLED_BACK = "rolled_back"  # recovery restored every advanced head by a new version
    COMPLETED = "completed"  # the commit had landed: only its stale sidecar was consumed
    ORPHAN_DISCARDED = "orphan_discarded"  # nothing moved: only the sidecar was discarded


@dataclass(frozen=True)
class AuditRecord:
    operation_id: str
    outcome: RecoveryOutcome
    tables: dict[str, tuple[int | None, int | None]]  # table -> (from version, to version)
    recovered_at: str
    recovered_by: str  # actor/host/pid of the recovering engine

    def encode(self) -> bytes:
        return codec.encode(
            AUDIT_FORMAT,
            1,
            {
                "operation_id": self.operation_id,
                "outcome": self.outcome.value,
                "tables": {name: list(moves) for name, moves in self.tables.items()},
                "recovered_at": self.recovered_at,
                "recovered_by": self.recovered_by,
            },
        )

    @classmethod
    def decode(cls, raw: bytes, key: str) -> AuditRecord:
        doc = codec.decode(raw, key, AUDIT_FORMAT, (1,), CorruptMetadataError)
        pin = (int, type(None))  # a move's from/to version; None: the table did not exist
        try:
            recovered_at = field(doc, "recovered_at", str)
            timestamp(recovered_at)
            return cls(
                operation_id=field(doc, "operation_id", str),
                outcome=one_of(RecoveryOutcome, field(doc, "outcome", str), "outcome"),
                tables={n: items(m, (pin, pin), "move") for n, m in field(doc, "tables", dict).items()},
                recovered_at=recovered_at,
                recovered_by=field(doc, "recovered_by", str),
            )
        except StoredJSONError as exc:
            raise codec.malformed(key, CorruptMetadataError, exc) from exc


class AuditLog:
    def __init__(self, adapter: StorageAdapter) -> None:
        self._adapter = adapter

    def record_once(self, record: AuditRecord) -> bool:
        """Write the record unless the operation already has one. True if this call wrote it."""
        failpoint("recovery.audit_write")
        key = layout.audit_key(record.operation_id)
        return self._adapter.write_if_absent(key, record.encode()) is not None

    def exists(self, operation_id: str) -> bool:
        """Whether the operation was recovered (it has an audit record): one GET."""
        return self._adapter.read_if_exists(layout.audit_key(operation_id)) is not None

    def records(self) -> list[AuditRecord]:
        """Every audit record, oldest operation first (operation ids are ULIDs: time-ordered). Records are
        known by the shape of their names (``layout.audit_key``): another tool's object in the folder is
        not read."""
        return [
            AuditRecord.decode(self._adapter.read_bytes(info.key), info.key)
            for info in self._adapter.list(layout.AUDIT_PREFIX)
            if layout.is_own_key(info.key, layout.OwnKind.AUDIT)
        ]
