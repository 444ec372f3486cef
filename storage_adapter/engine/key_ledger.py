"""The key ledger: one object per idempotency key, the single de-duplication rule of every publish.

``__keys/{sha256(key)}.json`` names the one operation that holds the key and, once that operation's commit
is visible, its commit record. The manifest keeps only its last few commit records; the ledger
keeps every key for ``EngineSettings.key_window_s`` (vacuum reclaims older entries), so whether a key
landed is answered exactly, in one GET, whatever happened since (docs/engine.md, "Idempotency keys").

The rule, for the writer and for recovery alike:

1. A writer with a key claims it (``write_if_absent``) after its recovery sidecar is written and before any
   table head advances. Exactly one operation holds a key; a second one waits until the holder's fate is
   decided (its writer finishes, or heal resolves its sidecar) and then replays the published commit or
   claims the released key.
2. The holder publishes its commit (manifest CAS), then marks the entry ``published`` with the commit
   record (CAS from the claim's token), then deletes its sidecar. Recovery does the same for an operation
   it rolls forward or finds published.
3. Recovery that rolls an operation back (or discards it) releases the entry it holds before deleting the
   sidecar.

So an entry without a published record always has its holder's sidecar beside it: a commit carrying the
key can only ever become visible through the operation the ledger names, whoever publishes it (the writer,
a roll-forward, a bulk load's driver).
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass
from typing import Any

from storage_adapter.engine import codec, layout
from storage_adapter.engine.errors import CorruptMetadataError, RecoveryInvariantError
from storage_adapter.engine.history import CommitRecord
from storage_adapter.errors import ConfigurationError, NotFoundError
from storage_adapter.protocol import StorageAdapter
from storage_adapter.stored_json import StoredJSONError, one_of, timestamp
from storage_adapter.stored_json import field as json_field

KEY_FORMAT = "storage-adapter-engine/key"
MAX_KEY_CHARS = 1024  # an idempotency key is metadata, not data: bounded like every stored-JSON field


class KeyState(enum.Enum):
    CLAIMED = "claimed"  # the holder's sidecar exists; its commit is not (yet) known to be visible
    PUBLISHED = "published"  # the holder's commit is visible: ``record`` is its commit record


@dataclass(frozen=True)
class KeyEntry:
    """The ledger entry of one idempotency key."""

    key: str
    operation_id: str
    claimed_at: str
    state: KeyState
    record: CommitRecord | None  # set exactly when PUBLISHED

    def encode(self) -> bytes:
        return codec.encode(
            KEY_FORMAT,
            1,
            {
                "key": self.key,
                "operation_id": self.operation_id,
                "claimed_at": self.claimed_at,
                "state": self.state.value,
                "record": None if self.record is None else self.record.to_json(),
            },
        )

    @classmethod
    def decode(cls, raw: bytes, location: str) -> KeyEntry:
        doc = codec.decode(raw, location, KEY_FORMAT, (1,), CorruptMetadataError)
        try:
            claimed_at = json_field(doc, "claimed_at", str)
            timestamp(claimed_at)
            state = one_of(KeyState, json_field(doc, "state", str), "state")
            record_doc: Any = json_field(doc, "record", dict, optional=True)
            entry = cls(
                key=json_field(doc, "key", str),
                operation_id=json_field(doc, "operation_id", str),
                claimed_at=claimed_at,
                state=state,
                record=None if record_doc is None else CommitRecord.from_json(record_doc, location),
            )
        except StoredJSONError as exc:
            raise codec.malformed(location, CorruptMetadataError, exc) from exc
        if (entry.state is KeyState.PUBLISHED) != (entry.record is not None) or location != entry_key(
            entry.key
        ):
            raise CorruptMetadataError(
                f"{location}: a published entry carries its record, a claim none, and the key hashes to its "
                "location; left in place for inspection",
                key=location,
            )
        return entry


@dataclass(frozen=True)
class StoredEntry:
    entry: KeyEntry
    token: str


def check_key(key: object) -> str:
    """An idempotency key the ledger can hold: a non-empty str of at most MAX_KEY_CHARS characters.
    ConfigurationError (a ValueError, naming it) otherwise, before any I/O."""
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_CHARS:
        raise ConfigurationError(
            f"idempotency_key must be a non-empty str of at most {MAX_KEY_CHARS} characters, not {key!r:.80}"
        )
    return key


def entry_key(key: str) -> str:
    return f"{layout.KEYS_PREFIX}/{hashlib.sha256(key.encode('utf-8')).hexdigest()}.json"


class KeyLedger:
    """Ledger I/O on one adapter. Every call is one or two requests; nothing is cached."""

    def __init__(self, adapter: StorageAdapter) -> None:
        self._adapter = adapter

    def read(self, key: str) -> StoredEntry | None:
        """The entry of ``key`` with its token, or None: one GET."""
        try:
            versioned = self._adapter.read_versioned(entry_key(key))
        except NotFoundError:
            return None
        return StoredEntry(KeyEntry.decode(versioned.data, entry_key(key)), versioned.token)

    def claim(self, key: str, operation_id: str) -> StoredEntry:
        """Claim ``key`` for ``operation_id`` (one write_if_absent): the entry that holds it with its token,
        ours when the claim won (its token lets :meth:`publish` skip its read), else the holder's (read
        after the lost create; if that entry vanished meanwhile, claim again)."""
        entry = KeyEntry(key, operation_id, codec.now_iso(), KeyState.CLAIMED, None)
        while True:
            token = self._adapter.write_if_absent(entry_key(key), entry.encode())
            if token is not None:
                return StoredEntry(entry, token)
            holder = self.read(key)
            if holder is not None:
                return holder

    def publish(self, key: str, record: CommitRecord, claimed: StoredEntry | None = None) -> KeyEntry:
        """Mark the entry of ``key`` published with ``record`` (its holder's visible commit): one CAS from
        ``claimed`` (the holder's own claim, as :meth:`claim` returned it), else a GET and a CAS, repeated
        if the entry changes in between. Idempotent. RecoveryInvariantError when another operation holds
        the key or there is no entry: the protocol never publishes a key it does not hold."""
        stored = claimed
        while True:
            stored = stored or self.read(key)
            if stored is None or stored.entry.operation_id != record.operation_id:
                raise RecoveryInvariantError(
                    f"{entry_key(key)}: commit {record.operation_id} was published with key {key!r}, but the "
                    f"ledger names {'nobody' if stored is None else stored.entry.operation_id}",
                    key=entry_key(key),
                )
            if stored.entry.state is KeyState.PUBLISHED:
                return stored.entry
            published = KeyEntry(
                key, record.operation_id, stored.entry.claimed_at, KeyState.PUBLISHED, record
            )
            if self._adapter.write_if_match(entry_key(key), published.encode(), stored.token) is not None:
                return published
            stored = None  # the entry moved past our token (recovery published it, say): read it again

    def enter_published(self, key: str, record: CommitRecord) -> None:
        """Create the entry of ``key`` already published with ``record``, unless the key has an entry (one
        write_if_absent). Only for a commit that is visible and whose key the ledger does not name yet: a
        record of a manifest written before the ledger existed."""
        entry = KeyEntry(key, record.operation_id, record.committed_at, KeyState.PUBLISHED, record)
        self._adapter.write_if_absent(entry_key(key), entry.encode())

    def release(self, key: str, operation_id: str) -> None:
        """Delete the entry of ``key`` if ``operation_id`` holds it unpublished (its commit will never be
        visible). Called only by whoever resolves that operation, before its sidecar goes: while the
        sidecar exists nobody else can take the entry, so the delete cannot remove another's claim."""
        stored = self.read(key)
        if stored is None or stored.entry.operation_id != operation_id:
            return
        if stored.entry.state is KeyState.PUBLISHED:
            raise RecoveryInvariantError(
                f"{entry_key(key)}: operation {operation_id} is being rolled back, but the ledger says its "
                f"commit is visible at version {stored.entry.record.version if stored.entry.record else '?'}",
                key=entry_key(key),
            )
        self._adapter.delete(entry_key(key))
