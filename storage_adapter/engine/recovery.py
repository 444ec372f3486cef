"""Recovery: classify a pending sidecar against the manifest and the table heads, decide, act, audit.

Per table of a sidecar (E = ``expected_version``, P = ``post_commit_pin``, M = the manifest's pin now,
H = the table's head now; a table absent from the manifest counts as version -1):

=======================  ==========================================================================
classification           condition
=======================  ==========================================================================
INVARIANT_VIOLATION      M < E (the manifest went backwards) or the pinned version M is missing
MOVED_PAST_PIN           M != E: the manifest moved this table since the writer started
NO_MOVEMENT              M == E and neither version P nor the head is this operation's
ROLLED_FORWARD_EXACT     M == E, version P is this operation's and it is the head (H == P)
UNEXPECTED               M == E and anything else (e.g. a version above P, or our head at another number)
=======================  ==========================================================================

Decision for the whole sidecar, in order: the manifest's history shows the operation published (at or
beyond its pins, by its writer or an earlier recovery) -> COMPLETED, delete without publishing; any
INVARIANT_VIOLATION -> abort loudly, keep the sidecar; every table ROLLED_FORWARD_EXACT -> ROLL_FORWARD
(one manifest publish moving every pin); every table NO_MOVEMENT -> DISCARD_ORPHAN; otherwise ROLL_BACK
(each head this operation wrote gets a new version restoring the pinned content; published files are never
modified or deleted). A ROLL_FORWARD becomes a ROLL_BACK when another operation holds the sidecar's
idempotency key, or when the manifest's watermark of the sidecar's application already reached its
``app_version`` (a re-run landed first): rolling it forward would apply it twice. A roll-forward
publishes with the token of the manifest it just read, never at a version remembered from earlier: when
the manifest moves under it, the sidecar is classified again.

Fencing: a writer judged dead only by its expired lease (another host, or a live pid: stopped, paused,
starved) may still be running. Before a heal rolls such an operation back or discards it, it publishes a
*fence record* (``CommitRecord.is_fence``: the operation's id, no table change) by compare-and-swap over
the very manifest it classified against; only then does it restore heads, release the key and delete the
sidecar. Every publish of the writer is a CAS over a manifest read before the fence (so it fails) or
after it (its retry looks for its operation in the records after its sidecar's version, finds the fence
and raises CommitFencedError). A fenced operation is never rolled forward. A writer known dead (in this
process and returned, or its pid gone) needs no fence: the heal costs what it did.
"""

from __future__ import annotations

import enum
import logging
import os
import threading
from dataclasses import dataclass, replace
from functools import partial

from storage_adapter.engine import codec, layout
from storage_adapter.engine.audit import AuditLog, AuditRecord, RecoveryOutcome
from storage_adapter.engine.errors import RecoveryInvariantError
from storage_adapter.engine.failpoints import failpoint
from storage_adapter.engine.history import FENCE_MODE, CommitRecord, TableChange
from storage_adapter.engine.key_ledger import KeyLedger, StoredEntry
from storage_adapter.engine.manifest import Manifest, ManifestStore
from storage_adapter.engine.sidecar import (
    HOST,
    LIVE,
    Sidecar,
    SidecarStore,
    writer_alive,
    writer_surely_dead,
)
from storage_adapter.engine.tables import TableVersion, TableVersionStore
from storage_adapter.protocol import StorageAdapter

log = logging.getLogger(__name__)
ABSENT = -1  # the "version" of a table the manifest does not have


class TableState(enum.Enum):
    NO_MOVEMENT = "no_movement"
    ROLLED_FORWARD_EXACT = "rolled_forward_exact"
    MOVED_PAST_PIN = "moved_past_pin"
    UNEXPECTED = "unexpected"
    INVARIANT_VIOLATION = "invariant_violation"


class Decision(enum.Enum):
    COMPLETED = "completed"
    ROLL_FORWARD = "roll_forward"
    ROLL_BACK = "roll_back"
    DISCARD_ORPHAN = "discard_orphan"
    ABORT = "abort"


@dataclass(frozen=True)
class TableClassification:
    table: str
    state: TableState
    expected: int
    post_commit_pin: int
    manifest_pin: int
    head: int
    head_is_ours: bool


@dataclass(frozen=True)
class Classification:
    decision: Decision
    tables: tuple[TableClassification, ...]
    landed: CommitRecord | None  # the manifest record of the operation, when it was published
    fenced: bool = False  # a healer fenced the operation: it never publishes (nor is rolled forward)


@dataclass(frozen=True)
class HealReport:
    """What one heal pass did. ``deferred``: sidecars whose writer is alive (left alone)."""

    listed: int
    recovered: tuple[AuditRecord, ...]
    deferred: tuple[str, ...]
    vanished: int


class Recovery:
    """Recovery for one engine root. ``root`` identifies the root in the in-process live registry."""

    def __init__(
        self,
        adapter: StorageAdapter,
        root: str,
        recovered_by: str,
        max_attempts: int,
        versions: TableVersionStore,
        lease_s: float,
    ) -> None:
        self._root = root
        self._recovered_by = recovered_by
        self._max_attempts = max_attempts
        self._lease_s = lease_s
        self._manifests = ManifestStore(adapter)
        self._versions = versions
        self._sidecars = SidecarStore(adapter)
        self._audit = AuditLog(adapter)
        self._ledger = KeyLedger(adapter)
        # Sidecars judged alive by the last heals: key -> (listed token, decoded sidecar). Saves the GET of
        # every live foreign writer's sidecar on every heal (requests per commit grew with the writers).
        self._alive: dict[str, tuple[str, Sidecar]] = {}
        self._alive_lock = threading.Lock()

    # -- heal -----------------------------------------------------------------------------------------
    def heal(self, *, full: bool = True) -> HealReport:
        """Recover every pending sidecar whose writer is dead: one LIST, plus one GET per sidecar read.

        Full (the default: ``Engine.heal``, open, vacuum, a commit waiting on a dead key holder): a sidecar
        is read when it is new to this engine, when it changed since it was read (its token in the listing
        differs: the writer renewed its lease or moved a pin), or when the copy read before now says its
        writer is dead (lease expired, same-host pid gone). So a killed same-host writer is recovered at
        once, and a heal with every pending sidecar read before, alive and unchanged, costs one LIST.

        Light (``full=False``, the heal at the start of every commit): as full, except that a sidecar the
        store last wrote less than ``lease_s`` ago is not read, unless its writer ran in this process and
        has returned (its commit failed, or its sidecar delete did). A writer sets its lease to end one lease
        after each write of its sidecar, so such a sidecar names a lease that has not expired (for writers
        with this engine's ``lease_s``): the sidecars of the w writers in flight cost nothing, and a
        commit's heal GETs only sidecars whose writers stopped renewing. The price is promptness only: a
        same-host writer killed (pid gone), a writer with a shorter lease than this engine's, or a
        recovery that crashed after rewriting a sidecar, is recovered by a light heal once the sidecar is
        ``lease_s`` old (by a full heal at once).

        In both modes a sidecar is only ever recovered from a fresh read (the writer's liveness judged on
        it, never on the listing). The listing's time only decides whether to read, and is compared with
        this host's clock: a clock behind the store's makes sidecars look younger (recovery delayed by the
        skew), one ahead makes them look older (more reads); neither recovers a live writer's commit.

        Raises the listing's error (never skips recovery silently), CorruptSidecarError for a sidecar that
        cannot be decoded (kept for inspection), RecoveryInvariantError for an impossible state.
        """
        # taken before the listing, so that one it does not show is gone for good and can be forgotten (an
        # operation returning meanwhile is read by the next heal)
        returned = LIVE.returned(self._root)
        listed = self._sidecars.list_pending()
        LIVE.forget(self._root, returned - {layout.operation_id_from_key(key) for key in listed})
        with self._alive_lock:  # forget sidecars that are gone: the memo never outgrows one listing
            self._alive = {k: v for k, v in self._alive.items() if k in listed}
        young = None if full else codec.age_cutoff(self._lease_s)
        recovered: list[AuditRecord] = []
        deferred: list[str] = []
        vanished = 0
        for key, info in listed.items():
            operation_id = layout.operation_id_from_key(key)
            if not LIVE.claim(self._root, operation_id):
                deferred.append(operation_id)  # its writer (or another healer) is running in this process
                continue
            try:
                in_lease = young is not None and not codec.written_before(info, young)
                if (in_lease and operation_id not in returned) or self._still_alive(key, info.token):
                    deferred.append(operation_id)
                    continue
                sidecar = self._sidecars.read(key)
                if sidecar is None:
                    vanished += 1
                elif writer_alive(sidecar, self._root):
                    with self._alive_lock:
                        self._alive[key] = (info.token, sidecar)
                    deferred.append(operation_id)
                else:
                    recovered.append(self.resolve(sidecar))
            finally:
                LIVE.release(self._root, operation_id)
        return HealReport(len(listed), tuple(recovered), tuple(deferred), vanished)

    def _still_alive(self, key: str, token: str) -> bool:
        """Whether the copy of ``key`` this engine read earlier is still the stored one (same listed token)
        and still names a live writer. The token is the listing's, and the copy was read after that
        listing, so the copy is never older than the token it is filed under."""
        with self._alive_lock:
            seen = self._alive.get(key)
        return seen is not None and seen[0] == token and writer_alive(seen[1], self._root)

    # -- one sidecar ----------------------------------------------------------------------------------
    def resolve(self, sidecar: Sidecar, abandon: bool = False) -> AuditRecord:
        """Bring the sidecar's operation to all-or-nothing, audit it once, delete the sidecar.

        The caller guarantees no live writer works on it (heal's liveness check, or the writer itself
        abandoning its own operation: ``abandon`` then turns a roll-forward into a roll-back, since the
        writer is about to report failure). Idempotent: safe to re-run after a crash at any step.
        """
        for _ in range(self._max_attempts):
            state = self._manifests.load()
            found = self.classify(sidecar, state.manifest)
            if abandon and found.decision is Decision.ROLL_FORWARD:
                found = replace(found, decision=Decision.ROLL_BACK)
            failpoint("recovery.after_classify")
            if found.decision is Decision.ABORT:
                bad = [t for t in found.tables if t.state is TableState.INVARIANT_VIOLATION]
                raise RecoveryInvariantError(
                    f"{sidecar.key}: invariant violation, refusing to recover: {bad}; sidecar kept",
                    key=sidecar.key,
                )
            if found.decision is Decision.ROLL_FORWARD and state.manifest.applied(sidecar.app) is not None:
                found = replace(found, decision=Decision.ROLL_BACK)  # another commit set its watermark
            if found.decision is Decision.ROLL_FORWARD and not self._holds_key(sidecar):
                found = replace(found, decision=Decision.ROLL_BACK)  # another commit carries the key
            if (
                found.decision in (Decision.DISCARD_ORPHAN, Decision.ROLL_BACK)
                and not abandon
                and not found.fenced
                and not writer_surely_dead(sidecar, self._root)
            ):
                # the writer may be running still: fence it, over the manifest this decision was made on
                if (
                    self._manifests.publish(
                        state, state.manifest.advance(self._fence_record(sidecar, state.manifest), {})
                    )
                    is None
                ):
                    continue  # the manifest moved (perhaps the writer published): classify again
                failpoint("recovery.after_fence")
            if found.decision is Decision.ROLL_FORWARD:
                sidecar = replace(sidecar, manifest_version=state.manifest.version, rolling_forward=True)
                self._sidecars.write(sidecar)  # who publishes, and over which version: for a later heal
                record = self._roll_forward_record(sidecar, state.manifest)
                schemas = {t: p.schema for t, p in sidecar.tables.items() if p.schema is not None}
                if self._manifests.publish(state, state.manifest.advance(record, schemas)) is None:
                    continue  # the manifest moved: classify again against the new one
                failpoint("recovery.after_roll_forward_publish")
                return self._finish(sidecar, RecoveryOutcome.ROLLED_FORWARD, _moves(record), record)
            if found.decision is Decision.COMPLETED:
                assert found.landed is not None
                outcome = (
                    RecoveryOutcome.ROLLED_FORWARD if found.landed.recovered else RecoveryOutcome.COMPLETED
                )
                return self._finish(sidecar, outcome, _moves(found.landed), found.landed)
            if found.decision is Decision.DISCARD_ORPHAN:
                moves = {t.table: _pair(t.manifest_pin, t.manifest_pin) for t in found.tables}
                return self._finish(sidecar, RecoveryOutcome.ORPHAN_DISCARDED, moves)
            return self._finish(sidecar, RecoveryOutcome.ROLLED_BACK, self._roll_back(sidecar, found))
        raise RecoveryInvariantError(
            f"{sidecar.key}: the manifest kept moving during {self._max_attempts} recovery attempts; "
            "sidecar kept for the next heal",
            key=sidecar.key,
        )

    def classify(self, sidecar: Sidecar, manifest: Manifest) -> Classification:
        """Classify every table of the sidecar and decide (see the module docstring). Read-only."""
        landed = self.landed(sidecar, manifest)
        fenced = landed is not None and landed.is_fence
        if fenced:
            landed = None
        tables = tuple(self._classify_table(sidecar, name, manifest) for name in sorted(sidecar.tables))
        states = {t.state for t in tables}
        if landed is not None:
            decision = Decision.COMPLETED
        elif TableState.INVARIANT_VIOLATION in states:
            decision = Decision.ABORT
        elif states == {TableState.ROLLED_FORWARD_EXACT} and not fenced:
            decision = Decision.ROLL_FORWARD
        elif states == {TableState.NO_MOVEMENT}:
            decision = Decision.DISCARD_ORPHAN
        else:
            decision = Decision.ROLL_BACK
        return Classification(decision, tables, landed, fenced)

    def _classify_table(self, sidecar: Sidecar, table: str, manifest: Manifest) -> TableClassification:
        pin = sidecar.tables[table]
        expected = ABSENT if pin.expected_version is None else pin.expected_version
        entry = manifest.tables.get(table)
        pinned = ABSENT if entry is None else entry.version
        head = self._versions.head(table, pinned)
        head_content = self._versions.read(table, head) if head > pinned else None
        head_is_ours = head_content is not None and head_content.operation_id == sidecar.operation_id

        def result(state: TableState) -> TableClassification:
            return TableClassification(
                table, state, expected, pin.post_commit_pin, pinned, head, head_is_ours
            )

        if pinned < expected or (pinned > ABSENT and self._versions.read_if_exists(table, pinned) is None):
            return result(TableState.INVARIANT_VIOLATION)
        if pinned != expected:
            return result(TableState.MOVED_PAST_PIN)
        at_pin = (
            self._versions.read_if_exists(table, pin.post_commit_pin) if pin.post_commit_pin <= head else None
        )
        pin_is_ours = at_pin is not None and at_pin.operation_id == sidecar.operation_id
        if not pin_is_ours and not head_is_ours:
            return result(TableState.NO_MOVEMENT)
        if pin_is_ours and head == pin.post_commit_pin:
            return result(TableState.ROLLED_FORWARD_EXACT)
        return result(TableState.UNEXPECTED)

    def landed(self, sidecar: Sidecar, manifest: Manifest) -> CommitRecord | None:
        """The commit record of the sidecar's operation if it was published, or its fence record if a
        healer fenced it (``is_fence``: see the module docstring), else None, exactly.

        Its publish, if any, came after the manifest version the sidecar names (writers and roll-forwards
        rewrite it before each publish), so the records after that version answer: the manifest's inline
        tail, then the stored history (one GET per version, concurrent). Past the retained history (a
        sidecar older than ``retention`` versions), each table's published chain is walked instead, and
        the record is rebuilt from the sidecar: every table the operation published, the version it
        published (one above the manifest the sidecar names), who published it (``rolling_forward``),
        and the time of this recovery.
        """
        if sidecar.manifest_version >= manifest.tail_floor:
            return manifest.record_for_operation(sidecar.operation_id)
        if sidecar.manifest_version >= manifest.history_floor:
            records = self._manifests.records_after(manifest, sidecar.manifest_version)
            return next((r for r in records if r.operation_id == sidecar.operation_id), None)
        changes = [
            TableChange(name, pin.expected_version, version)
            for name, pin in sorted(sidecar.tables.items())
            if (version := self._published_version(sidecar, name, manifest)) is not None
        ]
        if not changes:
            return None
        return CommitRecord(
            sidecar.manifest_version + 1,
            codec.now_iso(),
            sidecar.actor,
            sidecar.operation_id,
            sidecar.idempotency_key,
            sidecar.mode,
            sidecar.rolling_forward,
            tuple(changes),
            sidecar.app,
        )

    def _published_version(self, sidecar: Sidecar, table: str, manifest: Manifest) -> int | None:
        """The version of ``table`` the operation published, found on the table's published chain."""
        entry = manifest.tables.get(table)
        pin = sidecar.tables[table]
        version: int | None = None if entry is None else entry.version
        floor = ABSENT if pin.expected_version is None else pin.expected_version
        while version is not None and version > floor:
            content = self._versions.read(table, version)
            if content.operation_id == sidecar.operation_id:
                return version
            version = content.base_version
        return None

    def was_recovered(self, operation_id: str) -> bool:
        """Whether a recovery resolved the operation (its audit record exists): one GET."""
        return self._audit.exists(operation_id)

    def _holds_key(self, sidecar: Sidecar) -> bool:
        """Whether the operation may publish its idempotency key: it holds the key's ledger entry (claimed
        now if nobody does, as for a sidecar written before the ledger existed). A key held by another
        operation means a retry of the request owns it: rolling this one forward would apply it twice."""
        return (
            sidecar.idempotency_key is None or self._own_entry(sidecar, sidecar.idempotency_key) is not None
        )

    def _own_entry(self, sidecar: Sidecar, key: str) -> StoredEntry | None:
        """The key's ledger entry with its token when the operation holds it (claimed now if nobody
        does), else None."""
        holder = self._ledger.read(key) or self._ledger.claim(key, sidecar.operation_id)
        return holder if holder.entry.operation_id == sidecar.operation_id else None

    # -- actions --------------------------------------------------------------------------------------
    def _fence_record(self, sidecar: Sidecar, manifest: Manifest) -> CommitRecord:
        return CommitRecord(
            manifest.version + 1,
            codec.now_iso(),
            self._recovered_by,
            sidecar.operation_id,
            None,
            FENCE_MODE,
            True,
            (),
        )

    def _roll_forward_record(self, sidecar: Sidecar, manifest: Manifest) -> CommitRecord:
        changes = tuple(
            TableChange(name, pin.expected_version, pin.post_commit_pin)
            for name, pin in sorted(sidecar.tables.items())
        )
        return CommitRecord(
            manifest.version + 1,
            codec.now_iso(),
            sidecar.actor,
            sidecar.operation_id,
            sidecar.idempotency_key,
            sidecar.mode,
            True,
            changes,
            sidecar.app,
        )

    def _roll_back(self, sidecar: Sidecar, found: Classification) -> dict[str, tuple[int | None, int | None]]:
        """Give every head this operation wrote a successor restoring the manifest's pinned content."""
        moves: dict[str, tuple[int | None, int | None]] = {}
        for table in found.tables:
            if not table.head_is_ours:
                moves[table.table] = _pair(table.manifest_pin, table.manifest_pin)
                continue
            ours = self._versions.read(table.table, table.head)
            if ours.kind == "restore":  # restored by an earlier run of this roll-back that did not finish
                moves[table.table] = (table.head, table.head)
                continue
            restored = self._versions.write_next(
                partial(self._restore_content, table, ours, sidecar),
                table.table,
                table.head + 1,
            )
            failpoint("recovery.after_restore")
            moves[table.table] = (table.head, restored.version)
        return moves

    def _restore_content(
        self, table: TableClassification, ours: TableVersion, sidecar: Sidecar, number: int
    ) -> TableVersion:
        if table.manifest_pin == ABSENT:  # a creation that never published: restore to "no content"
            return TableVersion(table.table, number, None, sidecar.operation_id, "restore", ours.schema, ())
        pinned = self._versions.read(table.table, table.manifest_pin)
        return TableVersion(
            table.table,
            number,
            table.manifest_pin,
            sidecar.operation_id,
            "restore",
            pinned.schema,
            self._versions.fragments(table.table, table.manifest_pin),
        )

    def _finish(
        self,
        sidecar: Sidecar,
        outcome: RecoveryOutcome,
        moves: dict[str, tuple[int | None, int | None]],
        published: CommitRecord | None = None,
    ) -> AuditRecord:
        """Settle the key's ledger entry (published with ``published``, or released when the commit will
        never be visible), audit once, then delete the sidecar: in this order, so a crash anywhere leaves the
        sidecar for the next heal to redo it all."""
        if sidecar.idempotency_key is not None:
            if published is not None:
                # claimed first if nobody holds it (a sidecar from before the ledger); the entry's token
                # saves publish its own read
                owned = self._own_entry(sidecar, sidecar.idempotency_key)
                self._ledger.publish(sidecar.idempotency_key, published, owned)
            else:
                self._ledger.release(sidecar.idempotency_key, sidecar.operation_id)
        record = AuditRecord(sidecar.operation_id, outcome, moves, codec.now_iso(), self._recovered_by)
        if not self._audit.record_once(record):
            log.info(
                "recovery of %s was already audited (an earlier attempt crashed after its audit)",
                sidecar.operation_id,
            )
        failpoint("recovery.after_audit")
        self._sidecars.delete(sidecar.operation_id)
        return record


def _pair(before: int, after: int) -> tuple[int | None, int | None]:
    return (None if before == ABSENT else before, None if after == ABSENT else after)


def _moves(record: CommitRecord) -> dict[str, tuple[int | None, int | None]]:
    return {c.table: (c.from_version, c.to_version) for c in record.changes}


def recovered_by(actor: str | None) -> str:
    return f"{actor or 'engine'}@{HOST}:{os.getpid()}"
