"""The manifest: the single visibility authority, published by compare-and-swap on one key.

``_manifest.json`` holds the manifest version, the pinned version and schema of every table, and the
commit records of the last ``retention`` versions (history and idempotency keys). A commit becomes visible
by exactly one ``write_if_match`` of a whole new manifest whose record describes that commit, so data,
history and idempotency key land in one atomic step; nothing else is ever written to make a commit
visible. Each body names its own version and publishing operation, so two manifests never have equal
bytes (no ABA on S3, whose ETags are content MD5s).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from storage_adapter.engine import codec, layout
from storage_adapter.engine.errors import CorruptManifestError, HistoryExpiredError, UnknownTableError
from storage_adapter.errors import NotFoundError
from storage_adapter.protocol import StorageAdapter
from storage_adapter.stored_json import StoredJSONError, items, timestamp
from storage_adapter.stored_json import field as json_field

MANIFEST_FORMAT = "storage-adapter-engine/manifest"
DEFAULT_RETENTION = 256  # ~60 KB of manifest (about 235 bytes per record); see docs/engine.md


@dataclass(frozen=True)
class TableChange:
    """One table's pin movement in a commit: ``from_version`` None means the commit created the table."""

    table: str
    from_version: int | None
    to_version: int


@dataclass(frozen=True)
class CommitRecord:
    """The history entry of one manifest version, published atomically with it."""

    version: int
    committed_at: str
    actor: str | None
    operation_id: str
    idempotency_key: str | None
    mode: str  # "create", "append" or "overwrite"
    recovered: bool  # True when recovery rolled the commit forward after its writer died
    changes: tuple[TableChange, ...]

    @property
    def tables(self) -> dict[str, int]:
        """Table -> version this commit published."""
        return {change.table: change.to_version for change in self.changes}

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version, "committed_at": self.committed_at, "actor": self.actor,
            "operation_id": self.operation_id, "idempotency_key": self.idempotency_key, "mode": self.mode,
            "recovered": self.recovered,
            "changes": [[c.table, c.from_version, c.to_version] for c in self.changes],
        }  # fmt: skip

    @classmethod
    def from_json(cls, doc: Any, key: str) -> CommitRecord:
        """The record in ``doc`` (a manifest's ``commits`` entry). CorruptManifestError unless every field
        has its type and ``committed_at`` is a timestamp with a time zone."""
        try:
            committed_at = json_field(doc, "committed_at", str)
            timestamp(committed_at)
            changes = [
                TableChange(*items(c, (str, (int, type(None)), int), "change"))
                for c in json_field(doc, "changes", list)
            ]
            return cls(
                version=json_field(doc, "version", int), committed_at=committed_at,
                actor=json_field(doc, "actor", str, optional=True),
                operation_id=json_field(doc, "operation_id", str),
                idempotency_key=json_field(doc, "idempotency_key", str, optional=True),
                mode=json_field(doc, "mode", str), recovered=json_field(doc, "recovered", bool),
                changes=tuple(changes),
            )  # fmt: skip
        except StoredJSONError as exc:
            raise codec.malformed(key, CorruptManifestError, exc) from exc


@dataclass(frozen=True)
class TableEntry:
    version: int
    schema: str  # tables.schema_to_text form


@dataclass(frozen=True)
class Manifest:
    """One published manifest. Immutable: a new version is a new object (see :meth:`advance`)."""

    version: int
    operation_id: str
    tables: dict[str, TableEntry] = field(default_factory=dict)
    commits: tuple[CommitRecord, ...] = ()
    retention: int = DEFAULT_RETENTION

    @property
    def history_floor(self) -> int:
        """The oldest manifest version whose pins can still be reconstructed from the retained records."""
        return self.commits[0].version - 1 if self.commits else self.version

    def entry(self, table: str) -> TableEntry:
        found = self.tables.get(table)
        if found is None:
            raise UnknownTableError(
                f"unknown table {table!r} at manifest version {self.version}; tables: {sorted(self.tables)}",
                key=layout.table_prefix(table),
            )
        return found

    def record_for_operation(self, operation_id: str) -> CommitRecord | None:
        return next((r for r in reversed(self.commits) if r.operation_id == operation_id), None)

    def record_for_key(self, idempotency_key: str) -> CommitRecord | None:
        return next((r for r in reversed(self.commits) if r.idempotency_key == idempotency_key), None)

    def pins_at(self, version: int) -> dict[str, int]:
        """Table pins as of manifest ``version``, rebuilt from the retained records (newest first)."""
        if not self.history_floor <= version <= self.version:
            raise HistoryExpiredError(
                f"manifest version {version} is outside the retained history "
                f"[{self.history_floor}, {self.version}]",
                key=layout.MANIFEST_KEY,
            )
        pins = {name: entry.version for name, entry in self.tables.items()}
        for record in reversed(self.commits):
            if record.version <= version:
                break
            for change in record.changes:
                if change.from_version is None:
                    pins.pop(change.table, None)
                else:
                    pins[change.table] = change.from_version
        return pins

    def advance(self, record: CommitRecord, schemas: dict[str, str]) -> Manifest:
        """The next manifest: pins moved by ``record``, the record appended, history trimmed to retention.
        ``schemas`` gives the schema of tables the record creates."""
        tables = dict(self.tables)
        for change in record.changes:
            schema = schemas.get(change.table) or tables[change.table].schema
            tables[change.table] = TableEntry(change.to_version, schema)
        commits = (*self.commits, record)[-self.retention :]
        return replace(self, version=record.version, operation_id=record.operation_id, tables=tables,
                       commits=commits)  # fmt: skip

    def encode(self) -> bytes:
        return codec.encode(MANIFEST_FORMAT, 1, {
            "version": self.version, "operation_id": self.operation_id, "retention": self.retention,
            "tables": {n: {"version": e.version, "schema": e.schema} for n, e in self.tables.items()},
            "commits": [r.to_json() for r in self.commits],
        })  # fmt: skip

    @classmethod
    def decode(cls, raw: bytes, key: str = layout.MANIFEST_KEY) -> Manifest:
        doc = codec.decode(raw, key, MANIFEST_FORMAT, (1,), CorruptManifestError)
        try:
            tables = {
                name: TableEntry(json_field(entry, "version", int), json_field(entry, "schema", str))
                for name, entry in json_field(doc, "tables", dict).items()
            }
            commits = tuple(CommitRecord.from_json(r, key) for r in json_field(doc, "commits", list))
            manifest = cls(
                version=json_field(doc, "version", int),
                operation_id=json_field(doc, "operation_id", str),
                tables=tables,
                commits=commits,
                retention=json_field(doc, "retention", int),
            )
        except StoredJSONError as exc:
            raise codec.malformed(key, CorruptManifestError, exc) from exc
        if commits and commits[-1].version != manifest.version:
            raise CorruptManifestError(f"{key}: last commit record is not the manifest version", key=key)
        return manifest


@dataclass(frozen=True)
class ManifestState:
    """A manifest together with the storage token of exactly the bytes it was decoded from."""

    manifest: Manifest
    token: str


class ManifestStore:
    """Loads and publishes the manifest on one adapter."""

    def __init__(self, adapter: StorageAdapter) -> None:
        self._adapter = adapter

    def load(self) -> ManifestState:
        """The current manifest (one GET). NotFoundError if the engine root was never initialized;
        CorruptManifestError if it cannot be decoded (the object is left untouched)."""
        try:
            versioned = self._adapter.read_versioned(layout.MANIFEST_KEY)
        except NotFoundError as exc:
            raise NotFoundError(
                f"no engine manifest at {layout.MANIFEST_KEY} under {self._adapter.url}: open it read-write "
                "once to initialize",
                key=layout.MANIFEST_KEY,
                backend=exc.backend,
            ) from exc
        return ManifestState(Manifest.decode(versioned.data), versioned.token)

    def initialize(self, operation_id: str, retention: int) -> bool:
        """Create manifest version 0 if there is none (write_if_absent: one winner). True if created."""
        manifest = Manifest(0, operation_id, retention=retention)
        return self._adapter.write_if_absent(layout.MANIFEST_KEY, manifest.encode()) is not None

    def publish(self, current: ManifestState, new: Manifest) -> ManifestState | None:
        """Compare-and-swap ``new`` over ``current``: the new state, or None if the manifest moved."""
        token = self._adapter.write_if_match(layout.MANIFEST_KEY, new.encode(), current.token)
        return None if token is None else ManifestState(new, token)
