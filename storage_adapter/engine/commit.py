"""The commit protocol of one writer, in the order it runs (:meth:`CommitOperation.run`, top-down):

0. replay: the application watermark is at or above the commit's ``app_version`` → return the commit
   that set it, write nothing (a landed idempotency key is the caller's to answer before it writes
   anything: the engine's entry points look it up in the key ledger, which this protocol only claims);
1. Phase A, :meth:`~CommitOperation._write_sidecar`: the recovery sidecar names every pin the commit
   will move, before any table head advances (a failure here leaves nothing behind); then, with an
   idempotency key, :meth:`~CommitOperation._claim_key` claims it in the key ledger (key_ledger.py): the
   one de-duplication rule of every publish. A key another operation holds is waited for until that one
   is published (replay) or released (claim again);
2. Phase B, :meth:`~CommitOperation._write_table_versions`: one new table version per table, at the first
   free number at or above the sidecar's pin;
3. Phase C, :meth:`~CommitOperation._publish`: one manifest compare-and-swap moves every pin together
   with the commit record; the commit is now visible and durable;
4. Phase D, :meth:`~CommitOperation._finish`: mark the key's ledger entry published, then delete the
   sidecar (a failure only leaves work for the next heal, which does both);
5. on a lost publish, :meth:`~CommitOperation._after_lost_publish`: landed by a healer → done; fenced by a
   healer (it judged us dead by our lease and rolled us back, recovery.py) → undo and raise
   CommitFencedError, never publish; same key
   landed, or the winner moved the application's watermark to our version or beyond → replay; conflict → undo and raise; else re-base the moved tables and go to 2 after a
   jittered backoff (bounded by ``CommitPolicy.max_attempts``).

Atomicity: readers see only what the manifest pins, and the manifest changes by one compare-and-swap that
moves every pin of the commit together with its commit record. Table versions written before a lost or
crashed publish are invisible; the sidecar lets recovery finish or undo them (see recovery.py).
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import as_completed
from dataclasses import dataclass, replace

from ulid import ULID

from storage_adapter.engine import codec, layout
from storage_adapter.engine.errors import (
    CommitConflictError,
    CommitFencedError,
    CommitRetriesExhaustedError,
    KeyInFlightError,
    RecoveryInvariantError,
    TableExistsError,
)
from storage_adapter.engine.failpoints import failpoint, is_armed
from storage_adapter.engine.history import CommitRecord, TableChange
from storage_adapter.engine.key_ledger import KeyLedger, KeyState, StoredEntry, entry_key
from storage_adapter.engine.manifest import Manifest, ManifestState, ManifestStore
from storage_adapter.engine.parallel import Started, executor, in_pool_thread, settle
from storage_adapter.engine.recovery import Recovery
from storage_adapter.engine.sidecar import (
    HOST,
    LIVE,
    LeaseKeeper,
    Sidecar,
    SidecarPin,
    SidecarStore,
    writer_alive,
)
from storage_adapter.engine.tables import Replacement, TableVersion, TableVersionStore
from storage_adapter.errors import ConfigurationError
from storage_adapter.keys import is_plain_text
from storage_adapter.protocol import StorageAdapter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableWrite:
    """What a commit does to one table: add ``fragments`` (append), replace with them (overwrite),
    create the table with ``schema`` (create), or put each ``replaced`` group's new fragment in place of
    the group (compact).

    ``keeps`` makes an overwrite a partition overwrite: it tells the fragments of the base it keeps
    (those outside the replaced partitions, listed first in ``fragments``) from the rest (inside them:
    our own new fragments). Such an overwrite rebases over a concurrent commit that changed only kept
    fragments, and conflicts with one that added or removed any fragment inside."""

    table: str
    schema: str
    fragments: tuple[tuple[str, int, int], ...]
    replaced: tuple[Replacement, ...] = ()
    keeps: Callable[[str], bool] | None = None


@dataclass(frozen=True)
class Commit:
    """The result of a commit. ``replayed``: an earlier commit with the same idempotency key had already
    landed, or the application watermark was already at or above the commit's ``app_version``, and that
    commit is returned instead (nothing new was written; see :func:`app_replay` for its record). ``sidecar_pending``: the Phase D delete
    failed; the commit is durable and the next write's heal consumes the stale sidecar."""

    version: int
    record: CommitRecord
    attempts: int
    replayed: bool = False
    sidecar_pending: bool = False

    @property
    def tables(self) -> dict[str, int]:
        return self.record.tables


@dataclass(frozen=True)
class CommitPolicy:
    """How a writer retries a lost publish: at most ``max_attempts`` publishes, each retry after a
    full-jitter exponential backoff (:meth:`backoff`)."""

    max_attempts: int = 32
    lease_s: float = 30.0
    backoff_s: float = 0.005
    backoff_cap_s: float = 0.2

    def backoff(self, lost: int, attempt_s: float | None = None) -> float:
        """Seconds to wait after the ``lost``-th lost publish: uniform in [0, min(cap, slot * 2**(lost-1))],
        where the slot is ``attempt_s``, how long the attempt that lost took (its re-base, version PUTs
        and CAS), when given, else ``base * 2``. A slot measured on the store itself (in the spirit of
        Lance's SlotBackoff) spreads the losers of a round over about one more attempt's time: long
        enough that their next CASes seldom collide again, where a fixed base is too short on a store with
        slow writes (durable local, S3) and needlessly long on a fast one."""
        slot = self.backoff_s * 2 if attempt_s is None else attempt_s
        return random.uniform(0, min(self.backoff_cap_s, slot * 2 ** (lost - 1)))


class _Replay(Exception):  # control flow inside this module only
    def __init__(self, record: CommitRecord) -> None:
        self.record = record


class CommitOperation:
    """One commit by one writer. Not reusable; not shared between threads."""

    def __init__(
        self,
        adapter: StorageAdapter,
        root: str,
        policy: CommitPolicy,
        versions: TableVersionStore,
        recovery: Recovery,
    ) -> None:
        self._root = root
        self._policy = policy
        self._manifests = ManifestStore(adapter)
        self._versions = versions
        self._sidecars = SidecarStore(adapter)
        self._recovery = recovery
        self._keeper = LeaseKeeper(self._sidecars, policy.lease_s)
        self._ledger = KeyLedger(adapter)
        self._key: str | None = None
        self._app: tuple[str, int] | None = None
        self._claim: StoredEntry | None = None  # our key's ledger entry as claimed (its token)
        self._data_written: Started | None = None
        self._sidecar_lock = threading.Lock()  # Phase B rewrites the sidecar from several threads
        self.operation_id = str(ULID())

    def run(
        self,
        state: ManifestState,
        writes: dict[str, TableWrite],
        mode: str,
        *,
        expected_version: int | None,
        idempotency_key: str | None,
        actor: str | None,
        app: tuple[str, int] | None = None,
        data_written: Started | None = None,
    ) -> Commit:
        """Commit ``writes`` on top of ``state``. The caller validated tables and schemas against it, and
        the key and ``app`` (a CommitRequest), and answered an ``idempotency_key`` that already landed on
        it (the key ledger is the engine's). ``app``: the (app_id, app_version) watermark the commit
        sets; a replay when already reached. ``data_written``: the PUTs of the fragments ``writes`` adds,
        when they are still in flight: they overlap Phase A's sidecar PUT and are waited for before any
        table version is written (a failure: the sidecar is discarded and the error raised, nothing
        advanced)."""
        self._data_written = data_written
        self._key = idempotency_key
        self._app = app
        if (replay := app_replay(self._manifests, state.manifest, app)) is not None:
            return replay
        check_expected_version(state, expected_version)
        LIVE.register(self._root, self.operation_id)
        try:
            return self._run(state, writes, mode, expected_version, idempotency_key, actor)
        finally:
            LIVE.unregister(self._root, self.operation_id)

    def _run(
        self,
        state: ManifestState,
        writes: dict[str, TableWrite],
        mode: str,
        expected_version: int | None,
        idempotency_key: str | None,
        actor: str | None,
    ) -> Commit:
        bases = {name: _pin(state, name) for name in writes}
        self._write_sidecar(state, writes, mode, bases, idempotency_key, actor)  # Phase A
        if self._data_written is not None:
            try:
                self._data_written.results()  # every fragment durable before a table version names it
            except BaseException:
                self._discard_own_sidecar()
                raise
        if idempotency_key is not None and (replayed := self._claim_key(idempotency_key)) is not None:
            return replayed
        written: dict[str, TableVersion] = {}
        for attempt in range(1, self._policy.max_attempts + 1):
            attempt_start = time.monotonic()
            # The records this publish drops from the manifest's tail are stored while Phase B runs (they
            # are published records, stored create-only: writing one early, or twice, changes nothing).
            schemas = {n: w.schema for n, w in writes.items()} if mode == "create" else {}
            retiring, stored = self._manifests.start_retiring(
                state, state.manifest.advance(self._provisional(state, writes, mode, bases), schemas)
            )
            try:
                self._write_table_versions(writes, mode, bases, written)  # Phase B
            finally:
                retiring.settle()
            retiring.results()
            record = CommitRecord(
                state.manifest.version + 1,
                codec.now_iso(),
                actor,
                self.operation_id,
                idempotency_key,
                mode,
                False,
                tuple(TableChange(n, bases[n], written[n].version) for n in sorted(writes)),
                self._app,
            )
            if self._publish(state, record, writes, mode, stored):  # Phase C
                return self._finish(record, attempt)  # Phase D
            if attempt < self._policy.max_attempts:
                # Back off *before* re-reading the manifest: the next CAS then carries the freshest token
                # we can have. Sleeping between the read and the CAS would make it stale by construction.
                time.sleep(self._policy.backoff(attempt, time.monotonic() - attempt_start))
            state = self._manifests.load()
            done = self._after_lost_publish(
                state, writes, mode, bases, written, expected_version, idempotency_key, attempt
            )
            if done is not None:
                return done
        self._abandon()
        raise CommitRetriesExhaustedError(
            f"commit {self.operation_id} lost the manifest race {self._policy.max_attempts} times; nothing "
            f"of it is visible (manifest now at version {state.manifest.version})",
            expected=None,
            actual=state.manifest.version,
            key=layout.MANIFEST_KEY,
        )

    def _write_sidecar(
        self,
        state: ManifestState,
        writes: dict[str, TableWrite],
        mode: str,
        bases: dict[str, int | None],
        idempotency_key: str | None,
        actor: str | None,
    ) -> None:
        """Phase A: the sidecar names every pin before any head advances."""
        failpoint("commit.before_sidecar")
        pins = {
            name: SidecarPin(
                layout.table_prefix(name),
                bases[name],
                _next(bases[name]),
                writes[name].schema if mode == "create" else None,
            )
            for name in writes
        }
        now = codec.now_iso()
        kind = "create_table" if mode == "create" else "commit"
        self._sidecar = self._keeper.write(
            Sidecar(
                self.operation_id,
                kind,
                actor,
                now,
                now,
                HOST,
                os.getpid(),
                state.manifest.version,
                mode,
                idempotency_key,
                pins,
                app=self._app,
            )
        )  # a failure here raises with nothing advanced
        failpoint("commit.after_sidecar")

    def _claim_key(self, key: str) -> Commit | None:
        """Phase A, second step: hold ``key`` in the ledger (None), or the replay of the commit that
        carries it. While another operation holds it unpublished, wait for its fate: its writer finishing,
        or (once it is dead) heal resolving it. KeyInFlightError when it is still undecided after twice the
        lease. Our sidecar goes with every exit before we hold the key (nothing else of ours exists yet)."""
        give_up_at = time.monotonic() + 2 * self._policy.lease_s
        delay = self._policy.backoff_s
        try:
            while True:
                holder = self._ledger.claim(key, self.operation_id)
                if holder.entry.operation_id == self.operation_id:
                    self._claim = holder
                    failpoint("commit.after_key_claim")
                    return None
                if holder.entry.state is KeyState.PUBLISHED:
                    assert holder.entry.record is not None
                    self._sidecars.delete(self.operation_id)
                    return Commit(holder.entry.record.version, holder.entry.record, 0, replayed=True)
                pending = self._sidecars.read(layout.sidecar_key(holder.entry.operation_id))
                if pending is None:
                    if self._ledger.read(key) != holder:  # resolved in between: look again
                        continue
                    if self._recovery.was_recovered(holder.entry.operation_id):
                        # a fenced writer's claim (it resumed after its heal and died before meeting the
                        # fence): it can never publish, so the claim goes
                        self._ledger.release(key, holder.entry.operation_id)
                        continue
                    raise RecoveryInvariantError(
                        f"{entry_key(key)}: key {key!r} is claimed by operation {holder.entry.operation_id}, "
                        "which has no recovery sidecar and was never recovered (the ledger was changed "
                        "outside the engine); left in place for inspection",
                        key=entry_key(key),
                    )
                if not writer_alive(pending, self._root):
                    self._recovery.heal()
                    continue
                if time.monotonic() + delay > give_up_at:
                    raise KeyInFlightError(
                        f"idempotency key {key!r} is held by commit {holder.entry.operation_id}, whose writer "
                        f"is still working after {2 * self._policy.lease_s:g} s; nothing of this commit is "
                        "visible: retry later",
                        key=entry_key(key),
                    )
                time.sleep(delay)
                delay = min(2 * delay, self._policy.backoff_cap_s)
                self._sidecar = self._keeper.renew_if_due(self._sidecar)
        except BaseException:
            if self._claim is None:
                self._discard_own_sidecar()
            # else we hold the key: our sidecar must outlive us, so the heal that discards it releases it
            raise

    def _discard_own_sidecar(self) -> None:
        try:
            self._sidecars.delete(self.operation_id)
        except Exception as exc:  # nothing advanced: heal discards it as an orphan
            log.warning(
                "could not delete the sidecar of commit %s (%s); the next heal discards it",
                self.operation_id,
                exc,
            )

    def _write_table_versions(
        self,
        writes: dict[str, TableWrite],
        mode: str,
        bases: dict[str, int | None],
        written: dict[str, TableVersion],
    ) -> None:
        """Phase B: a version for every table not yet written (all on the first attempt; after a re-base,
        only the moved tables), at most ``REQUESTS_IN_FLIGHT`` at a time. Every sidecar rewrite a taken
        number causes is made before that version is written (see :meth:`_write_version`). The first
        failure raises once the writes in flight have finished; no further write is started (the sidecar
        names every table since Phase A, so any subset written is recovered like a crash between them).

        While ``commit.after_table_version`` is armed the versions are written one at a time, in table
        order, so that ``@K`` fires after exactly K+1 versions (the fault matrix crashes between them)."""
        todo = [name for name in sorted(writes) if name not in written]
        if len(todo) <= 1 or is_armed("commit.after_table_version") or in_pool_thread():
            for name in todo:
                written[name] = self._write_version(writes[name], mode, bases[name])
                failpoint("commit.after_table_version")
            return
        futures = {executor().submit(self._write_version, writes[n], mode, bases[n]): n for n in todo}
        try:
            for future in as_completed(futures):
                written[futures[future]] = future.result()
                failpoint("commit.after_table_version")
        finally:
            settle(list(futures))

    def _provisional(
        self, state: ManifestState, writes: dict[str, TableWrite], mode: str, bases: dict[str, int | None]
    ) -> CommitRecord:
        """This attempt's record as far as it is known before Phase B (its version and its changes' count,
        which decide the records leaving the manifest's tail; the versions Phase B takes may differ)."""
        return CommitRecord(
            state.manifest.version + 1,
            codec.now_iso(),
            None,
            self.operation_id,
            None,
            mode,
            False,
            tuple(TableChange(n, bases[n], _next(bases[n])) for n in sorted(writes)),
            self._app,
        )

    def _publish(
        self,
        state: ManifestState,
        record: CommitRecord,
        writes: dict[str, TableWrite],
        mode: str,
        stored: frozenset[str],
    ) -> bool:
        """Phase C: the manifest CAS (after the retiring records not in ``stored``). True when this commit
        is now visible."""
        failpoint("commit.before_publish")
        self._sidecar = self._keeper.renew_if_due(self._sidecar)
        schemas = {n: w.schema for n, w in writes.items()} if mode == "create" else {}
        return self._manifests.publish(state, state.manifest.advance(record, schemas), stored) is not None

    def _after_lost_publish(
        self,
        state: ManifestState,
        writes: dict[str, TableWrite],
        mode: str,
        bases: dict[str, int | None],
        written: dict[str, TableVersion],
        expected_version: int | None,
        idempotency_key: str | None,
        attempt: int,
    ) -> Commit | None:
        """The outcome of a lost publish, given the manifest that won: the finished commit when a healer
        rolled ours forward (our lease lapsed), CommitFencedError when a healer fenced ours (it judged us
        dead by our lease and rolled us back: we must never publish), the landed commit of the same key (a
        replay), an error on a conflict (our versions undone), or None after re-basing the moved tables
        for another attempt.

        Every heal that fences us publishes its fence record after the manifest version our sidecar names
        (the one our last CAS was based on), so the records after it (``landed``) show it, exactly while
        they are retained. A writer that fell further behind than the retention cannot rule a fence out,
        and gives up the same way (nothing of it is visible)."""
        landed = self._recovery.landed(self._sidecar, state.manifest)  # a healer rolled ours forward
        if landed is not None and landed.is_fence:
            self._abandon()
            raise CommitFencedError(
                f"commit {self.operation_id} was judged dead by its sidecar lease and fenced by a heal "
                f"(manifest version {landed.version}, by {landed.actor}); nothing of it is visible and it "
                "holds no idempotency key: retry it",
                key=layout.MANIFEST_KEY,
            )
        if landed is not None:
            return self._finish(landed, attempt)
        if self._sidecar.manifest_version < state.manifest.history_floor:
            self._abandon()
            raise CommitFencedError(
                f"commit {self.operation_id} was based on manifest version {self._sidecar.manifest_version}, "
                f"which left the retained history (now from {state.manifest.history_floor}): a heal's fence "
                "cannot be ruled out, so it does not publish; nothing of it is visible: retry it",
                key=layout.MANIFEST_KEY,
            )
        try:
            self._rebase(state, writes, mode, bases, written, expected_version, idempotency_key)
        except _Replay as replay:
            self._abandon()
            return Commit(replay.record.version, replay.record, attempt, replayed=True)
        except (CommitConflictError, TableExistsError):
            self._abandon()
            raise
        return None

    def _write_version(self, write: TableWrite, mode: str, base: int | None) -> TableVersion:
        """Phase B for one table: the first free version at or above the sidecar's pin."""
        make = self._versions.successor(
            write.table, base, self.operation_id, mode, write.schema, write.fragments, write.replaced
        )

        def record_new_pin(number: int) -> None:  # the sidecar names a version before the head reaches it
            # Under the lock: concurrent Phase B writers each add their table's pin to the latest sidecar
            # and PUT it in turn, so the stored sidecar always names every pin moved so far.
            with self._sidecar_lock:
                self._sidecar = self._keeper.write(self._sidecar.with_pin(write.table, number))

        first = self._sidecar.tables[write.table].post_commit_pin
        return self._versions.write_next(make, write.table, first, record_new_pin)

    def _rebase(
        self,
        state: ManifestState,
        writes: dict[str, TableWrite],
        mode: str,
        bases: dict[str, int | None],
        written: dict[str, TableVersion],
        expected_version: int | None,
        idempotency_key: str | None,
    ) -> None:
        """After a lost publish: raise a conflict, or re-base moved tables (appends) for the next attempt."""
        if idempotency_key is not None:
            landed = state.manifest.record_for_key(idempotency_key)
            if landed is not None:
                raise _Replay(landed)
        if (replay := app_replay(self._manifests, state.manifest, self._app)) is not None:
            raise _Replay(replay.record)  # the same application version won the race
        check_expected_version(state, expected_version)
        pins = dict(self._sidecar.tables)
        for name in writes:
            now_pin = _pin(state, name)
            if now_pin == bases[name]:
                continue  # untouched by the winner: our version of it is still built on the current pin
            if mode == "create":
                raise TableExistsError(
                    f"table {name!r} was created concurrently", key=layout.table_prefix(name)
                )
            if mode == "overwrite":
                writes[name] = self._rebased_overwrite(writes[name], bases[name], now_pin)
            if mode == "compact":  # rebases over appends; conflicts once its fragments are gone
                assert now_pin is not None  # tables are never dropped
                self._versions.check_replaceable(name, now_pin, writes[name].replaced)
            first = max(_next(now_pin), written[name].version + 1)
            bases[name] = now_pin
            del written[name]
            pins[name] = replace(pins[name], expected_version=now_pin, post_commit_pin=first)
        self._sidecar = self._keeper.write(
            replace(self._sidecar, manifest_version=state.manifest.version, tables=pins)
        )

    def _rebased_overwrite(self, write: TableWrite, base: int | None, now_pin: int | None) -> TableWrite:
        """``write`` (an overwrite planned on table version ``base``) re-planned on ``now_pin``, which a
        concurrent commit published: a partition overwrite keeps the fragments of ``now_pin`` outside its
        partitions, then its own, when the winner changed only fragments outside them. CommitConflictError
        otherwise, and for a whole-table overwrite (it would discard the winner's write unseen)."""
        conflict = CommitConflictError(
            f"overwrite of table {write.table!r} conflicts with a concurrent commit: expected table version "
            f"{base} but the manifest now pins {now_pin}",
            expected=base,
            actual=now_pin,
            table=write.table,
            key=layout.table_prefix(write.table),
        )
        keeps = write.keeps
        if keeps is None or now_pin is None:
            raise conflict
        before = set() if base is None else set(self._versions.fragments(write.table, base))
        after = self._versions.fragments(write.table, now_pin)
        if any(not keeps(key) for key, _, _ in before.symmetric_difference(after)):
            raise CommitConflictError(
                f"{conflict} that changed the partitions it replaces",
                expected=base,
                actual=now_pin,
                table=write.table,
                key=layout.table_prefix(write.table),
            )
        ours = tuple(fragment for fragment in write.fragments if not keeps(fragment[0]))
        return replace(write, fragments=tuple(f for f in after if keeps(f[0])) + ours)

    def _finish(self, record: CommitRecord, attempts: int) -> Commit:
        failpoint("commit.after_publish")
        pending = False
        try:  # Phase D: the commit is durable; a failure here only leaves work for the next heal
            if self._key is not None:
                self._ledger.publish(self._key, record, self._claim)  # before the sidecar goes, or heal does
                failpoint("commit.after_key_publish")
            self._sidecars.delete(self.operation_id)
        except Exception as exc:
            log.warning(
                "commit %s is durable but its sidecar delete failed (%s); the next write's heal consumes it",
                self.operation_id,
                exc,
            )
            pending = True
        failpoint("commit.after_sidecar_delete")
        return Commit(record.version, record, attempts, sidecar_pending=pending)

    def _abandon(self) -> None:
        """Undo our own unpublished operation (we are its live writer, so no one else touches it)."""
        try:
            self._recovery.resolve(self._sidecar, abandon=True)
        except Exception as exc:
            log.warning(
                "could not roll back abandoned commit %s (%s); the next heal will", self.operation_id, exc
            )


MAX_APP_ID_CHARS = 256


def check_app(app_id: object, app_version: object) -> tuple[str, int] | None:
    """The (app_id, app_version) watermark a commit sets, or None for neither. ConfigurationError (a
    ValueError; before any I/O) unless both or neither are given, ``app_id`` is non-empty plain text of at
    most ``MAX_APP_ID_CHARS`` characters and ``app_version`` an int in [0, 2**63)."""
    if app_id is None and app_version is None:
        return None
    if (
        not isinstance(app_id, str)
        or not app_id
        or len(app_id) > MAX_APP_ID_CHARS
        or not is_plain_text(app_id)
    ):
        raise ConfigurationError(
            f"app_id must be non-empty text of at most {MAX_APP_ID_CHARS} characters given with "
            f"app_version, not {app_id!r}"
        )
    if type(app_version) is not int or not 0 <= app_version < 2**63:
        raise ConfigurationError(
            f"app_version must be an int in [0, 2**63) given with app_id, not {app_version!r} (app {app_id!r})"
        )
    return app_id, app_version


def app_replay(manifests: ManifestStore, manifest: Manifest, app: tuple[str, int] | None) -> Commit | None:
    """The replay a commit setting watermark ``app`` is when ``manifest`` has the application at or above
    that version, else None. Its record is that of the commit that set the watermark while the history
    retains it; past the retention, a stand-in naming only the manifest version, the application and
    its watermark (``changes`` empty, the other fields blank): the watermark itself never expires."""
    mark = manifest.applied(app)
    if mark is None:
        return None
    assert app is not None
    record = manifests.record_at(manifest, mark.manifest_version) or CommitRecord(
        mark.manifest_version, "", None, "", None, "", False, (), (app[0], mark.version)
    )
    return Commit(mark.manifest_version, record, 0, replayed=True)


def _pin(state: ManifestState, table: str) -> int | None:
    entry = state.manifest.tables.get(table)
    return None if entry is None else entry.version


def _next(pin: int | None) -> int:
    return 0 if pin is None else pin + 1


def check_expected_version(state: ManifestState, expected_version: int | None) -> None:
    """Raise CommitConflictError naming both versions unless ``expected_version`` is None or current."""
    if expected_version is not None and state.manifest.version != expected_version:
        raise CommitConflictError(
            f"expected manifest version {expected_version} but the current version is {state.manifest.version}",
            expected=expected_version,
            actual=state.manifest.version,
            key=layout.MANIFEST_KEY,
        )
