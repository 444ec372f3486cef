"""Commit records: the history of manifest versions, and where records older than the manifest's tail live.

The manifest carries only the records of its last ``TAIL`` versions (``manifest.py``), so its size, and so
the cost of every commit and snapshot, does not grow with the history kept. A record leaving the tail is
written first to ``__history/{V:020d}.json`` (``write_if_absent``) by whoever publishes the manifest that
drops it, before that publish: every version between the history floor and the tail has its record
object before any manifest lacks it. A record's bytes are a function of the record alone, and a record is
only ever copied out of a published manifest, so every writer of one key writes the same content and the
first one wins. Records older than the manifest's ``retention`` are garbage (vacuum deletes them).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from storage_adapter.engine import codec, layout
from storage_adapter.engine.errors import CorruptManifestError, HistoryExpiredError
from storage_adapter.engine.parallel import map_bounded
from storage_adapter.errors import NotFoundError
from storage_adapter.protocol import StorageAdapter
from storage_adapter.stored_json import StoredJSONError, items, timestamp
from storage_adapter.stored_json import field as json_field

RECORD_FORMAT = "storage-adapter-engine/commit-record"


def decode_app(value: Any) -> tuple[str, int]:
    """A stored ``[app_id, app_version]`` pair (StoredJSONError for anything else)."""
    app_id, version = items(value, (str, int), "app")
    return app_id, version


FENCE_MODE = "fence"  # the mode of a fence record (CommitRecord.is_fence)


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
    mode: str  # "create", "append", "overwrite", "compact", or FENCE_MODE
    recovered: bool  # True when recovery rolled the commit forward after its writer died
    changes: tuple[TableChange, ...]
    app: tuple[str, int] | None = None  # (app_id, app_version): the application watermark it set

    @property
    def is_fence(self) -> bool:
        """A fence: no commit, but a healer's decision that ``operation_id`` (judged dead by its lease)
        never publishes (see recovery.py). It changes no table."""
        return self.mode == FENCE_MODE

    @property
    def app_id(self) -> str | None:
        return None if self.app is None else self.app[0]

    @property
    def tables(self) -> dict[str, int]:
        """Table -> version this commit published."""
        return {change.table: change.to_version for change in self.changes}

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "committed_at": self.committed_at,
            "actor": self.actor,
            "operation_id": self.operation_id,
            "idempotency_key": self.idempotency_key,
            "mode": self.mode,
            "recovered": self.recovered,
            "changes": [[c.table, c.from_version, c.to_version] for c in self.changes],
            **({} if self.app is None else {"app": [self.app[0], self.app[1]]}),
        }

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
            app = json_field(doc, "app", list, optional=True)
            return cls(
                version=json_field(doc, "version", int),
                committed_at=committed_at,
                actor=json_field(doc, "actor", str, optional=True),
                operation_id=json_field(doc, "operation_id", str),
                idempotency_key=json_field(doc, "idempotency_key", str, optional=True),
                mode=json_field(doc, "mode", str),
                recovered=json_field(doc, "recovered", bool),
                changes=tuple(changes),
                app=None if app is None else decode_app(app),
            )
        except StoredJSONError as exc:
            raise codec.malformed(key, CorruptManifestError, exc) from exc


class HistoryStore:
    """Record objects on one adapter: written once, read by version, deleted below the history floor."""

    def __init__(self, adapter: StorageAdapter) -> None:
        self._adapter = adapter

    @staticmethod
    def stored_object(record: CommitRecord) -> tuple[str, bytes]:
        """The key and body that store ``record`` (written with write_if_absent by the publisher that
        drops it from the tail: a record already stored is left as it is)."""
        return layout.history_key(record.version), codec.encode(RECORD_FORMAT, 1, record.to_json())

    def read(self, versions: Iterable[int]) -> list[CommitRecord]:
        """The records of ``versions`` in that order (concurrent GETs). HistoryExpiredError for a version
        whose record is gone (vacuum removes records below the history floor of a manifest newer than the
        caller's); CorruptManifestError for one that does not decode, or names another version."""
        return map_bounded(self._read_one, list(versions))

    def stored_versions(self) -> list[int]:
        """Versions that have a record object (one streamed listing); another tool's object under the
        prefix (a name not of ``layout.history_key``'s shape) is none."""
        return sorted(
            own.version
            for info in self._adapter.iter_list(layout.HISTORY_PREFIX)
            if (own := layout.own_key(info.key)) is not None
            and own.kind is layout.OwnKind.HISTORY
            and own.version is not None
        )

    def _read_one(self, version: int) -> CommitRecord:
        key = layout.history_key(version)
        try:
            raw = self._adapter.read_bytes(key)
        except NotFoundError as exc:
            raise HistoryExpiredError(
                f"the commit record of manifest version {version} is gone ({key}): it fell below the "
                "retained history after the manifest in hand was read",
                key=key,
            ) from exc
        record = CommitRecord.from_json(
            codec.decode(raw, key, RECORD_FORMAT, (1,), CorruptManifestError), key
        )
        if record.version != version:
            raise CorruptManifestError(f"{key}: holds the record of version {record.version}", key=key)
        return record
