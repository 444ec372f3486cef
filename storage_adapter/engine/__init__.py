"""The commit engine: atomic multi-table commits of Arrow tables, published by manifest compare-and-swap,
with recovery sidecars for crash safety. See docs/engine.md and docs/recovery.md."""

from storage_adapter.engine.audit import AuditRecord, RecoveryOutcome
from storage_adapter.engine.commit import Commit
from storage_adapter.engine.engine import Engine, EngineSettings
from storage_adapter.engine.errors import (
    CommitConflictError,
    CommitFencedError,
    CommitRetriesExhaustedError,
    CorruptManifestError,
    CorruptMetadataError,
    CorruptSidecarError,
    EngineError,
    HistoryExpiredError,
    KeyInFlightError,
    KeyWindowExpiredError,
    ReadOnlyEngineError,
    RecoveryInvariantError,
    SchemaMismatchError,
    StaleFragmentError,
    TableExistsError,
    UnknownTableError,
)
from storage_adapter.engine.history import CommitRecord, TableChange
from storage_adapter.engine.recovery import HealReport
from storage_adapter.engine.request import CommitMode, CommitRequest
from storage_adapter.engine.schema import PartitionFilter, conform
from storage_adapter.engine.snapshot import Snapshot
from storage_adapter.engine.tables import DataFile, FragmentRef
from storage_adapter.engine.vacuum import VacuumReport

__all__ = [
    "AuditRecord",
    "Commit",
    "CommitConflictError",
    "CommitFencedError",
    "CommitMode",
    "CommitRecord",
    "CommitRequest",
    "CommitRetriesExhaustedError",
    "CorruptManifestError",
    "CorruptMetadataError",
    "CorruptSidecarError",
    "DataFile",
    "Engine",
    "EngineError",
    "EngineSettings",
    "FragmentRef",
    "HealReport",
    "HistoryExpiredError",
    "KeyInFlightError",
    "KeyWindowExpiredError",
    "PartitionFilter",
    "ReadOnlyEngineError",
    "RecoveryInvariantError",
    "RecoveryOutcome",
    "SchemaMismatchError",
    "Snapshot",
    "StaleFragmentError",
    "TableChange",
    "TableExistsError",
    "UnknownTableError",
    "VacuumReport",
    "conform",
]
