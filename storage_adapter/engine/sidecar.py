"""Recovery sidecars: the durable intent of a commit in flight, and who is still working on it.

A writer writes ``__recovery/{operation_id}.json`` (Phase A) before its first table head advances and
deletes it (Phase D) after the manifest publish. The sidecar names, per table, the manifest pin when the
writer started (``expected_version``; null when the commit creates the table) and the version the commit
will publish (``post_commit_pin``), plus what a roll-forward needs to publish the commit on the writer's
behalf (mode, actor, idempotency key, schemas of created tables).

Liveness, so heal never recovers a commit whose writer is still working (see docs/recovery.md):
the sidecar carries the writer's host, pid and a lease (``lease_expires_at``) that the writer renews while
it works. A writer in this process is alive exactly while it is registered in :data:`LIVE`; on the same
host, a writer whose pid is gone is dead at once; elsewhere, it is dead when its lease has expired.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from storage_adapter.engine import codec, layout
from storage_adapter.engine.errors import CorruptSidecarError
from storage_adapter.engine.failpoints import failpoint
from storage_adapter.engine.history import decode_app
from storage_adapter.protocol import StorageAdapter
from storage_adapter.stored_json import StoredJSONError, timestamp
from storage_adapter.stored_json import field as json_field
from storage_adapter.types import ObjectInfo

SIDECAR_FORMAT = "storage-adapter-engine/recovery-sidecar"
SIDECAR_SCHEMA_VERSIONS = (1,)
HOST = socket.gethostname()


@dataclass(frozen=True)
class SidecarPin:
    key: str  # the table's prefix
    expected_version: int | None  # manifest pin at start; None: the commit creates the table
    post_commit_pin: int  # the version this commit publishes
    schema: str | None = None  # for a created table: its schema (needed to roll the creation forward)


@dataclass(frozen=True)
class Sidecar:
    operation_id: str
    writer_kind: str  # "commit" or "create_table"
    actor: str | None
    started_at: str
    lease_expires_at: str
    host: str
    pid: int
    manifest_version: int  # the manifest version the writer (last) based its attempt on
    mode: str
    idempotency_key: str | None
    tables: dict[str, SidecarPin] = field(default_factory=dict)
    # Set by a recovery about to roll the commit forward (with ``manifest_version`` the manifest it
    # publishes over), so the next heal knows who published it even after its record left the history.
    rolling_forward: bool = False
    app: tuple[str, int] | None = None  # (app_id, app_version): the watermark the commit sets

    @property
    def key(self) -> str:
        return layout.sidecar_key(self.operation_id)

    def encode(self) -> bytes:
        return codec.encode(
            SIDECAR_FORMAT,
            1,
            {
                "operation_id": self.operation_id,
                "writer_kind": self.writer_kind,
                "actor": self.actor,
                "started_at": self.started_at,
                "lease_expires_at": self.lease_expires_at,
                "host": self.host,
                "pid": self.pid,
                "manifest_version": self.manifest_version,
                "mode": self.mode,
                "idempotency_key": self.idempotency_key,
                "rolling_forward": self.rolling_forward,
                **({} if self.app is None else {"app": [self.app[0], self.app[1]]}),
                "tables": {
                    name: {
                        "key": p.key,
                        "expected_version": p.expected_version,
                        "post_commit_pin": p.post_commit_pin,
                        "schema": p.schema,
                    }
                    for name, p in self.tables.items()
                },
            },
        )

    @classmethod
    def decode(cls, raw: bytes, key: str) -> Sidecar:
        doc = codec.decode(raw, key, SIDECAR_FORMAT, SIDECAR_SCHEMA_VERSIONS, CorruptSidecarError)
        try:
            tables = {
                name: SidecarPin(
                    json_field(p, "key", str),
                    json_field(p, "expected_version", int, optional=True),
                    json_field(p, "post_commit_pin", int),
                    json_field(p, "schema", str, optional=True),
                )
                for name, p in json_field(doc, "tables", dict).items()
            }
            app = json_field(doc, "app", list, optional=True)
            started_at = json_field(doc, "started_at", str)
            lease_expires_at = json_field(doc, "lease_expires_at", str)
            for moment in (started_at, lease_expires_at):  # kept as text; parsed here so heal cannot fail
                timestamp(moment)
            sidecar = cls(
                operation_id=json_field(doc, "operation_id", str),
                writer_kind=json_field(doc, "writer_kind", str),
                actor=json_field(doc, "actor", str, optional=True),
                started_at=started_at,
                lease_expires_at=lease_expires_at,
                host=json_field(doc, "host", str),
                pid=json_field(doc, "pid", int),
                manifest_version=json_field(doc, "manifest_version", int),
                mode=json_field(doc, "mode", str),
                idempotency_key=json_field(doc, "idempotency_key", str, optional=True),
                tables=tables,
                rolling_forward=json_field(doc, "rolling_forward", bool, optional=True) is True,
                app=None if app is None else decode_app(app),
            )
        except StoredJSONError as exc:
            raise codec.malformed(key, CorruptSidecarError, exc) from exc
        if layout.operation_id_from_key(key) != sidecar.operation_id:
            raise CorruptSidecarError(f"{key}: operation_id does not match the key; left in place", key=key)
        return sidecar

    def lease_expired(self, now: datetime) -> bool:
        return codec.parse_iso(self.lease_expires_at) <= now

    def with_pin(self, table: str, post_commit_pin: int) -> Sidecar:
        tables = dict(self.tables)
        tables[table] = replace(tables[table], post_commit_pin=post_commit_pin)
        return replace(self, tables=tables)


def lease_deadline(lease_s: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=lease_s)).isoformat(timespec="microseconds")


class LiveOperations:
    """Operations whose writer is running in this process, per engine root. Heal skips them, which is
    what serializes in-process heal with in-process writers.

    Also the operations whose writer in this process has returned (:meth:`returned`): a sidecar of one
    that is still pending (its commit failed, or its Phase D did) has a dead writer whatever its lease
    says, so heal reads it at once even where it skips recently written sidecars."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: dict[str, set[str]] = {}
        self._claimed: dict[str, set[str]] = {}
        self._returned: dict[str, set[str]] = {}

    def register(self, root: str, operation_id: str) -> None:
        with self._lock:
            self._live.setdefault(root, set()).add(operation_id)

    def unregister(self, root: str, operation_id: str) -> None:
        with self._lock:
            self._live.get(root, set()).discard(operation_id)
            self._returned.setdefault(root, set()).add(operation_id)

    def returned(self, root: str) -> frozenset[str]:
        """Operations whose writer in this process has returned and that no heal has forgotten yet."""
        with self._lock:
            return frozenset(self._returned.get(root, ()))

    def forget(self, root: str, operation_ids: Iterable[str]) -> None:
        """Drop returned operations whose sidecar a listing taken after they returned no longer shows (a
        sidecar never comes back once deleted): the set never outgrows the writes between two heals."""
        with self._lock:
            self._returned.get(root, set()).difference_update(operation_ids)

    def is_live(self, root: str, operation_id: str) -> bool:
        with self._lock:
            return operation_id in self._live.get(root, set())

    def claim(self, root: str, operation_id: str) -> bool:
        """Claim a sidecar for recovery by one thread of this process; False if another thread has it."""
        with self._lock:
            claimed = self._claimed.setdefault(root, set())
            if operation_id in claimed or operation_id in self._live.get(root, set()):
                return False
            claimed.add(operation_id)
            return True

    def release(self, root: str, operation_id: str) -> None:
        with self._lock:
            self._claimed.get(root, set()).discard(operation_id)


LIVE = LiveOperations()


def _pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def writer_alive(sidecar: Sidecar, root: str) -> bool:
    """Whether the sidecar's writer may still be working on it (see the module docstring)."""
    if sidecar.host == HOST and sidecar.pid == os.getpid():
        return LIVE.is_live(root, sidecar.operation_id)
    if sidecar.host == HOST and not _pid_running(sidecar.pid):
        return False
    return not sidecar.lease_expired(datetime.now(UTC))


def writer_surely_dead(sidecar: Sidecar, root: str) -> bool:
    """Whether the sidecar's writer is known dead, not just presumed dead by an expired lease: it ran in
    this process and returned, or on this host and its pid is gone. Only a writer presumed dead by its
    lease can still be running (stopped, paused, starved), so only its recovery needs a fence."""
    if sidecar.host == HOST and sidecar.pid == os.getpid():
        return not LIVE.is_live(root, sidecar.operation_id)
    return sidecar.host == HOST and not _pid_running(sidecar.pid)


class SidecarStore:
    """Sidecar I/O on one adapter, with the storage failpoints of the fault matrix."""

    def __init__(self, adapter: StorageAdapter) -> None:
        self._adapter = adapter

    def write(self, sidecar: Sidecar) -> None:
        """Write (or, by its owner, rewrite) the sidecar: an atomic replace, so readers see all or none."""
        failpoint("recovery.sidecar_write")
        self._adapter.write(sidecar.key, sidecar.encode())

    def delete(self, operation_id: str) -> None:
        failpoint("recovery.sidecar_delete")
        self._adapter.delete(layout.sidecar_key(operation_id))

    def list_pending(self) -> dict[str, ObjectInfo]:
        """Key -> listing entry of every pending sidecar: one LIST request. A sidecar's ``token`` changes
        whenever it is rewritten (lease renewal, new pin) and its ``last_modified`` is the store's time of
        that write. Failures raise: heal never skips silently. Only sidecars are listed, known by the
        shape of their names (``layout.sidecar_key``: an operation's ULID): another tool's object in the
        folder is not read (vacuum reports it)."""
        failpoint("recovery.sidecar_list")
        return {
            info.key: info
            for info in self._adapter.list(layout.RECOVERY_PREFIX)
            if layout.is_own_key(info.key, layout.OwnKind.SIDECAR)
        }

    def read(self, key: str) -> Sidecar | None:
        """The sidecar, or None if it vanished since it was listed (its writer finished: benign)."""
        failpoint("recovery.sidecar_read")
        raw = self._adapter.read_if_exists(key)
        return None if raw is None else Sidecar.decode(raw, key)


class LeaseKeeper:
    """Renews a live writer's lease by rewriting its sidecar once half the lease has passed."""

    def __init__(self, store: SidecarStore, lease_s: float) -> None:
        self._store = store
        self._lease_s = lease_s
        self._written_at = 0.0

    def write(self, sidecar: Sidecar) -> Sidecar:
        sidecar = replace(sidecar, lease_expires_at=lease_deadline(self._lease_s))
        self._store.write(sidecar)
        self._written_at = time.monotonic()
        return sidecar

    def renew_if_due(self, sidecar: Sidecar) -> Sidecar:
        if time.monotonic() - self._written_at < self._lease_s / 2:
            return sidecar
        return self.write(sidecar)
