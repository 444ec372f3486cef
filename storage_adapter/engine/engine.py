"""Engine: atomic multi-table commits of Arrow data on any ObjectStorageAdapter.

Layering (each module one job): layout (keys) -> codec (metadata JSON) -> tables (fragments, table
versions) -> manifest (the visibility authority) -> sidecar/audit/recovery (crash safety) -> commit (the
writer protocol) -> vacuum -> this facade. Only the adapter's public API is used, so the engine runs
unchanged on memory, local and S3.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import pyarrow as pa
from ulid import ULID

from storage_adapter.adapter import open_adapter
from storage_adapter.engine import codec, compaction, layout
from storage_adapter.engine.audit import AuditLog, AuditRecord
from storage_adapter.engine.commit import (
    Commit,
    CommitOperation,
    CommitPolicy,
    TableWrite,
    app_replay,
    check_app,
    check_expected_version,
)
from storage_adapter.engine.errors import (
    KeyWindowExpiredError,
    ReadOnlyEngineError,
    SchemaMismatchError,
    StaleFragmentError,
    TableExistsError,
)
from storage_adapter.engine.history import CommitRecord
from storage_adapter.engine.key_ledger import KeyLedger, KeyState, check_key, entry_key
from storage_adapter.engine.manifest import DEFAULT_RETENTION, ManifestState, ManifestStore
from storage_adapter.engine.parallel import Started, map_bounded, start
from storage_adapter.engine.recovery import HealReport, Recovery, recovered_by
from storage_adapter.engine.request import DEFAULT_REQUEST, CommitRequest
from storage_adapter.engine.schema import (
    Partition,
    PartitionFilter,
    check_in_filter,
    check_partition_by,
    conform,
    filter_texts,
    fragment_plan,
    matches,
    partition_of_key,
    plan_fragments,
    table_layout,
    table_schema_text,
)
from storage_adapter.engine.snapshot import Snapshot
from storage_adapter.engine.tables import (
    DEFAULT_CHECKPOINT_INTERVAL,
    DataFile,
    Fragment,
    FragmentRef,
    TableVersionStore,
    encode_fragment,
    fragment_ref,
    read_fragment,
    schema_fingerprint,
    store_fragment,
    write_fragment,
)
from storage_adapter.engine.vacuum import VacuumReport, vacuum
from storage_adapter.errors import ConfigurationError, NotFoundError
from storage_adapter.protocol import StorageAdapter

log = logging.getLogger(__name__)
Filters = dict[str, dict[str, set[str | None]]]  # replace_where per table as filter_texts gives it


@dataclass(frozen=True)
class EngineSettings:
    """``retention``: manifest versions of history kept (time travel, ``history()``), set when the root is
    initialized; the manifest carries only the last few records, older ones are stored one per object.
    ``key_window_s``: how long vacuum keeps an idempotency key's ledger entry after its commit (exact
    replays and ``find_commit`` for at least that long; keep it above the idempotency records' lifetime).
    ``max_attempts``: publish attempts of a non-conflicting append. ``lease_s``: a writer's sidecar lease.
    ``grace_s``: vacuum's grace period; commits refuse fragments older than half.
    ``checkpoint_interval``: how many deltas deep a table version gets a checkpoint (docs/engine.md, "The
    table version log")."""

    retention: int = DEFAULT_RETENTION
    key_window_s: float = 7 * 24 * 3600.0
    max_attempts: int = 32
    lease_s: float = 30.0
    grace_s: float = 24 * 3600.0
    checkpoint_interval: int = DEFAULT_CHECKPOINT_INTERVAL


class Engine:
    """Tables of Arrow data under one storage root. Thread-safe; any number of engines in any number of
    processes may share a root (memory roots: one process).

    Every write entry point (``create_table``, ``commit``, ``commit_fragments``, ``vacuum``) first heals
    pending recovery sidecars of dead writers (one LIST when there are none).
    """

    def __init__(
        self, adapter: StorageAdapter, *, actor: str | None, read_only: bool, settings: EngineSettings
    ) -> None:
        self._adapter = adapter
        self._actor = actor
        self._read_only = read_only
        self._settings = settings
        self._root = adapter.url
        self._manifests = ManifestStore(adapter)
        self._versions = TableVersionStore(adapter, checkpoint_interval=settings.checkpoint_interval)
        self._ledger = KeyLedger(adapter)
        self._recovery = Recovery(
            adapter, self._root, recovered_by(actor), settings.max_attempts, self._versions, settings.lease_s
        )
        self._layouts: dict[str, tuple[pa.Schema, tuple[str, ...]]] = {}  # tables are never re-schemaed
        self.last_heal: HealReport | None = None

    @classmethod
    def open(
        cls,
        url_or_adapter: str | StorageAdapter,
        actor: str | None = None,
        read_only: bool = False,
        *,
        options: Mapping[str, Any] | None = None,
        settings: EngineSettings | None = None,
    ) -> Engine:
        """Open the engine rooted at a URL (with adapter ``options``) or an adapter.

        Read-write: initializes an empty root (manifest version 0, one winner) and runs a full recovery
        sweep; fails loudly if the sweep does (listing error, corrupt sidecar, invariant violation).
        Read-only: only checks the manifest is present and valid (NotFoundError, CorruptManifestError);
        pending or corrupt sidecars do not matter to readers.
        """
        adapter: StorageAdapter
        if isinstance(url_or_adapter, str):
            adapter = open_adapter(url_or_adapter, **dict(options or {}))
        elif isinstance(url_or_adapter, StorageAdapter):
            adapter = url_or_adapter
        else:  # e.g. an obstore store: it needs its capabilities declared to become an adapter
            raise ConfigurationError(
                f"Engine.open takes a URL or a StorageAdapter, not {type(url_or_adapter).__name__}; wrap an "
                "obstore store with open_adapter(store=..., capabilities=Capabilities(...)) first"
            )
        settings = settings or EngineSettings()
        engine = cls(adapter, actor=actor, read_only=read_only, settings=settings)
        if read_only:
            engine._manifests.load()
            return engine
        try:
            engine._manifests.load()
        except NotFoundError:
            engine._manifests.initialize(str(ULID()), settings.retention)
        engine.heal()
        return engine

    @property
    def adapter(self) -> StorageAdapter:
        return self._adapter

    @property
    def settings(self) -> EngineSettings:
        return self._settings

    # -- writes ---------------------------------------------------------------------------------------
    def create_table(
        self, name: str, schema: pa.Schema, actor: str | None = None, *, partition_by: Sequence[str] = ()
    ) -> Commit:
        """Create an empty table with ``schema`` (any Arrow schema; its metadata is dropped): one commit.
        TableExistsError if it exists (also when created concurrently by another writer).

        ``partition_by``: the partition columns, stored with the table for good; each must be in
        ``schema`` with a string, integer, boolean or date type (SchemaMismatchError, a ValueError,
        before any I/O otherwise). Fragments are then written one per partition value combination, under
        ``<data prefix>/<col>=<quoted value>/...`` (see docs/engine.md, "Partitioned tables")."""
        layout.check_table_name(name)
        columns = check_partition_by(name, schema, partition_by)
        state = self._begin_write()
        if name in state.manifest.tables:
            raise TableExistsError(f"table {name!r} already exists", key=layout.table_prefix(name))
        write = TableWrite(name, table_schema_text(schema, columns), ())
        return self._operation().run(
            state,
            {name: write},
            "create",
            expected_version=None,
            idempotency_key=None,
            actor=actor or self._actor,
        )

    def partition_by(self, table: str) -> tuple[str, ...]:
        """The table's partition columns (empty for an unpartitioned table). UnknownTableError."""
        return self._table_layout(table)[1]

    def write_fragment(self, table: str, data: pa.Table | pa.RecordBatchReader) -> FragmentRef:
        """Write ``data`` as one immutable Parquet file under the table's data prefix (a fresh ULID key)
        after making it fit the table's schema (:func:`conform`), streamed one row group at a time: a
        ``RecordBatchReader`` of any size is written in about a row group of memory, each batch conformed
        as it comes (its schema is checked before anything is written). Invisible until committed by
        ``commit_fragments``; reclaimed by vacuum if never committed. Raises UnknownTableError,
        SchemaMismatchError; unpartitioned tables only (``write_fragments`` splits by partition).

        Allowed on read-only engines: a fragment changes nothing visible, and executors of a bulk load
        should open ``read_only=True`` (no recovery sweep per task) and leave the commit to the driver."""
        schema, partition_by = self._table_layout(table)
        if partition_by:
            raise SchemaMismatchError(
                f"table {table!r} is partitioned by {list(partition_by)}: write its data with write_fragments",
                key=layout.table_prefix(table),
            )
        if isinstance(data, pa.RecordBatchReader):
            # The reader's schema is checked now; its batches are conformed one at a time, as written.
            fitted = conform(table, schema, data.schema.empty_table()).schema
            batches = (part for batch in data for part in conform(table, schema, batch).to_batches())
            data = pa.RecordBatchReader.from_batches(fitted, batches)
        else:
            data = conform(table, schema, data)
        return write_fragment(self._adapter, table, data, str(ULID()))

    def write_fragments(self, table: str, data: pa.Table) -> list[FragmentRef]:
        """Write ``data`` (made to fit the table's schema by :func:`conform`, by column name) as immutable
        Parquet fragments: one per partition value combination (one in all for an unpartitioned table;
        none for no rows), each under its partition's key prefix with ``FragmentRef.partition`` set.
        Invisible until committed by ``commit_fragments``; reclaimed by vacuum if never committed. Raises
        UnknownTableError, SchemaMismatchError (before anything is written). Allowed on read-only
        engines (executors of a bulk load)."""
        schema, partition_by = self._table_layout(table)
        planned = plan_fragments(table, conform(table, schema, data), partition_by)
        return self._store(table, planned)

    def commit_fragments(
        self, fragments: Mapping[str, Sequence[FragmentRef]], request: CommitRequest = DEFAULT_REQUEST
    ) -> Commit:
        """Publish written fragments as one atomic commit over all named tables, as ``request`` says
        (:class:`CommitRequest`: mode, expected version, idempotency key, actor, replace_where,
        application watermark; checked when it was made).

        ``append`` adds them; ``overwrite`` replaces each named table's content with them, or, for a
        table named in ``replace_where``, only its fragments whose partition matches that table's filter
        (Delta's replaceWhere: every new fragment must match it, and its columns must be partition
        columns; SchemaMismatchError/ValueError before any I/O otherwise). Appends that
        lose the publish race to non-conflicting commits rebase and retry (``settings.max_attempts``).
        Raises, with nothing visible: CommitConflictError (``expected_version`` is not the manifest version,
        or an overwrite raced another commit to its table), UnknownTableError, SchemaMismatchError,
        StaleFragmentError, CorruptManifestError. With ``idempotency_key`` already landed, returns that
        commit (``replayed=True``) and writes nothing; KeyInFlightError while another commit holds it.
        With ``key_issued_at`` (when the key was first used) the engine refuses a key whose ledger entry
        may already be gone (KeyWindowExpiredError, before any I/O; see docs/engine.md, "Idempotency keys").

        ``app_id``/``app_version``: the application watermark (Delta's txnAppId/txnVersion). When
        ``app_version(app_id)`` is already at or above ``app_version`` the commit is a replay
        (``replayed=True``, nothing written); otherwise the watermark is set to ``app_version`` in the
        same manifest publish as the commit. Never expires.
        """
        state = self._begin_commit(request)
        if (replay := self._key_replay(state, request.idempotency_key)) is not None:
            return replay
        return self._commit(state, {t: tuple(refs) for t, refs in fragments.items()}, request)

    def commit(self, data: Mapping[str, pa.Table], request: CommitRequest = DEFAULT_REQUEST) -> Commit:
        """``write_fragments`` for each table's data, then ``commit_fragments``, with every check made
        before any data file is written. Same ``request``, guarantees and errors as ``commit_fragments``."""
        state = self._begin_commit(request)
        replayed, filters = self._prechecked(state, data.keys(), request)
        if replayed is not None:
            return replayed
        planned: dict[str, list[tuple[Partition, pa.Table, str]]] = {}
        for table, table_data in data.items():
            schema, partition_by = table_layout(state.manifest.tables[table].schema)
            planned[table] = plan_fragments(table, conform(table, schema, table_data), partition_by)
            for partition, _, key in planned[table]:
                check_in_filter(table, key, partition, filters.get(table))
        bodies = {table: encode_fragment(parts[0][1]) for table, parts in planned.items() if len(parts) == 1}
        # A streamed body's size is known once written; several fragments per table: PUT concurrently first.
        if len(bodies) < len(planned) or any(body.whole is None for body in bodies.values()):
            stored = {table: tuple(self._store(table, parts)) for table, parts in planned.items()}
            return self._commit(state, stored, request)
        # The common case, one small fragment per table: its PUT overlaps the commit's sidecar PUT (both
        # are durable before any table version names the fragment: the protocol waits for them there).
        refs: dict[str, tuple[FragmentRef, ...]] = {}
        puts = []
        for table, parts in planned.items():
            partition, rows, key = parts[0]
            refs[table] = (fragment_ref(table, rows.schema, bodies[table], key, partition),)
            puts.append(
                partial(store_fragment, self._adapter, table, rows.schema, bodies[table], key, partition)
            )
        data_written = start(puts)
        try:
            return self._commit(state, refs, request, data_written)
        finally:
            data_written.settle()  # a commit that raised or replayed before waiting: nothing left in flight

    def compact(
        self,
        table: str,
        target_bytes: int = compaction.DEFAULT_TARGET_BYTES,
        min_fragments: int = compaction.DEFAULT_MIN_FRAGMENTS,
        actor: str | None = None,
    ) -> Commit | None:
        """Rewrite runs of small fragments of ``table`` into fragments of up to ``target_bytes`` and publish
        them as one ``compact`` commit; None when the policy finds nothing to do (fewer than
        ``min_fragments`` fragments under ``target_bytes``; see compaction.py). Rows and their order are
        unchanged and readers see the compaction whole or not at all. Concurrent appends are kept (it
        rebases over them); CommitConflictError when a concurrent commit removed a fragment it rewrites
        (an overwrite, another compaction): nothing visible, its new fragments are left to vacuum."""
        state = self._begin_write()
        entry = state.manifest.entry(table)
        schema, partition_by = table_layout(entry.schema)

        def partition_of(key: str) -> Partition:
            return partition_of_key(layout.data_prefix(table), key, partition_by)

        groups = compaction.plan(
            self._versions.fragments(table, entry.version), target_bytes, min_fragments, partition_of
        )
        if not groups:
            return None
        replaced = compaction.rewrite(
            groups,
            schema,
            lambda key: read_fragment(self._adapter, key),
            lambda data, first: self._store(table, [fragment_plan(table, partition_of(first), data)])[0],
        )
        write = TableWrite(table, entry.schema, (), replaced)
        commit = self._operation().run(
            state,
            {table: write},
            "compact",
            expected_version=None,
            idempotency_key=None,
            actor=actor or self._actor,
        )
        self._checkpoint(commit)
        return commit

    def vacuum(self, grace_s: float | None = None, dry_run: bool = False) -> VacuumReport:
        """Delete table files no retained version references and older than the grace period
        (default ``settings.grace_s``). Heals first; never deletes what a live commit may publish. Deletes
        only objects the engine wrote, known by their names (``layout.own_key``): what another tool left
        under the engine's prefixes is kept and named in ``VacuumReport.foreign``."""
        self.heal()  # vacuum reads the manifest itself, after its listing
        return vacuum(
            self._adapter,
            self._versions,
            self._settings.grace_s if grace_s is None else grace_s,
            dry_run,
            key_window_s=self._settings.key_window_s,
        )

    def heal(self, *, full: bool = True) -> HealReport:
        """Recover pending sidecars of dead writers now. Full by default (a killed same-host writer is
        recovered at once); every commit first runs a light one, which leaves sidecars written within the
        last lease unread (see Recovery.heal)."""
        self._check_writable()
        self.last_heal = self._recovery.heal(full=full)
        return self.last_heal

    # -- reads ----------------------------------------------------------------------------------------
    def snapshot(self, version: int | None = None) -> Snapshot:
        """The current manifest's pins (one GET), or those of an older manifest ``version`` inside the
        retained history (HistoryExpiredError outside it): one more GET per version older than the
        manifest's inline tail (``manifest.TAIL`` versions), concurrent. ConfigurationError, before any
        request, for a ``version`` that is not an int >= 0 (a bool included)."""
        if version is not None and (type(version) is not int or version < 0):
            # before any request: "1" or 1.5 would fail deep in the history lookup, True read as 1
            raise ConfigurationError(
                f"version must be None or a manifest version (an int >= 0), not {version!r}",
                key=self._adapter.url,
            )
        manifest = self._manifests.load().manifest
        version = manifest.version if version is None else version
        pins = manifest.pins_at(version, self._manifests.records_after(manifest, version))
        return Snapshot(version, pins, {n: manifest.tables[n].schema for n in pins})

    def read(
        self,
        table: str,
        snapshot_or_version: Snapshot | int | None = None,
        *,
        columns: Sequence[str] | None = None,
        where: PartitionFilter | None = None,
    ) -> pa.Table:
        """The table's rows as of the snapshot (a fresh one if None; a manifest version if an int).
        Reads only immutable files named by that one snapshot: with ``where``, only the fragments of the
        matching partitions; with ``columns``, only those columns of each (in that order)."""
        snap = self._snapshot_of(snapshot_or_version)
        schema = snap.schema(table)
        names = None if columns is None else list(columns)
        if names is not None:
            if isinstance(columns, str) or any(schema.get_field_index(c) < 0 for c in names):
                raise SchemaMismatchError(
                    f"table {table!r}: read columns {columns!r} must be a sequence of its columns "
                    f"{schema.names}",
                    key=layout.table_prefix(table),
                )
            schema = pa.schema([schema.field(c) for c in names])
        fragments = [(key, size) for (key, _, size), _ in self._pruned(table, snap, where)]
        parts = self._read_fragments(fragments, names)
        if not parts:
            return schema.empty_table()
        # A fragment Spark's own writer wrote may say non-nullable where the table allows nulls (it holds
        # none there): read as the table's schema, as every fragment is.
        return pa.concat_tables([p if p.schema.equals(schema) else p.cast(schema) for p in parts])

    def files(
        self,
        table: str,
        snapshot_or_version: Snapshot | int | None = None,
        *,
        where: PartitionFilter | None = None,
    ) -> tuple[DataFile, ...]:
        """Exactly the Parquet files of the table in one snapshot (a fresh one if None; a manifest
        version if an int), in row order, pruned to the partitions ``where`` matches. The only correct
        file list for outside readers: the table's data folder also holds overwritten, orphaned and
        uncommitted files (docs/engine.md, "Reading with other engines")."""
        snap = self._snapshot_of(snapshot_or_version)
        root = self._adapter.url.rstrip("/")
        return tuple(
            DataFile(key, f"{root}/{key}", rows, size, partition)
            for (key, rows, size), partition in self._pruned(table, snap, where)
        )

    def app_version(self, app_id: str) -> int | None:
        """The application watermark of ``app_id`` (the highest ``app_version`` committed with it), or
        None if it never committed. One GET of the manifest."""
        check_app(app_id, 0)
        mark = self._manifests.load().manifest.applications.get(app_id)
        return None if mark is None else mark.version

    def history(self) -> list[CommitRecord]:
        """Retained commit records (the last ``retention`` versions), oldest first: the manifest's inline
        tail and one GET per older record (concurrent)."""
        manifest = self._manifests.load().manifest
        return list(self._manifests.records_after(manifest, manifest.history_floor))

    def find_commit(self, idempotency_key: str) -> CommitRecord | None:
        """The visible commit carrying ``idempotency_key``, or None when no commit with it is visible.

        Exact for every key whose ledger entry is kept (``settings.key_window_s`` after its commit; see
        docs/engine.md, "Idempotency keys"), whatever the manifest's retention: one GET of the key's
        ledger entry (a second, of the manifest, only for a key no published ledger entry names). None
        also while a commit holding the key is still in flight: a commit with the key waits for that one to land or
        be rolled back, so it cannot apply twice. ValueError for a key that is not a non-empty str."""
        return self._landed(None, check_key(idempotency_key))

    def audit_log(self) -> list[AuditRecord]:
        return AuditLog(self._adapter).records()

    # -- internals ------------------------------------------------------------------------------------
    def _read_fragments(
        self, fragments: list[tuple[str, int]], columns: list[str] | None = None
    ) -> list[pa.Table]:
        """Every fragment's rows (only ``columns`` when given: a large fragment's read by range), in the
        order of ``fragments`` ((key, size) each): one GET each (a large one's projection: its footer and
        column chunks), concurrently (a table of n fragments reads in about n / ``REQUESTS_IN_FLIGHT``
        round trips, not n). The first failure raises, and fragments not yet requested are not requested."""
        return map_bounded(
            lambda fragment: read_fragment(self._adapter, fragment[0], columns, fragment[1]), fragments
        )

    def _check_writable(self) -> None:
        if self._read_only:
            raise ReadOnlyEngineError(f"engine at {self._root} was opened read-only", key=self._root)

    def _begin_write(self) -> ManifestState:
        """Every write entry: a light heal (its cost does not grow with the writers in flight), and the
        manifest the operation builds on. The manifest GET overlaps the heal's LIST (one round trip, not
        two); a heal that recovered anything may have moved the manifest, so then it is read again. Any
        manifest read is only a base: a stale one loses the publish CAS, never a commit."""
        self._check_writable()
        manifest = start([self._manifests.load])
        try:
            self.last_heal = self._recovery.heal(full=False)
        except BaseException:
            manifest.settle()
            raise
        state: ManifestState = manifest.results()[0]
        return self._manifests.load() if self.last_heal.recovered else state

    def _operation(self) -> CommitOperation:
        policy = CommitPolicy(max_attempts=self._settings.max_attempts, lease_s=self._settings.lease_s)
        return CommitOperation(self._adapter, self._root, policy, self._versions, self._recovery)

    def _table_layout(self, table: str) -> tuple[pa.Schema, tuple[str, ...]]:
        """The table's schema and partition columns (cached: tables are never re-schemaed)."""
        found = self._layouts.get(table)
        if found is None:
            found = table_layout(self._manifests.load().manifest.entry(table).schema)
            self._layouts[table] = found
        return found

    def _snapshot_of(self, snapshot_or_version: Snapshot | int | None) -> Snapshot:
        if isinstance(snapshot_or_version, Snapshot):
            return snapshot_or_version
        return self.snapshot(snapshot_or_version)

    def _pruned(
        self, table: str, snap: Snapshot, where: PartitionFilter | None
    ) -> list[tuple[Fragment, Partition]]:
        """The fragments of ``table`` in ``snap``, in row order, with their partitions, those outside
        ``where`` left out (the filter is checked before any fragment list is read)."""
        version = snap.table_version(table)  # UnknownTableError
        schema, partition_by = table_layout(snap.schemas[table])
        allowed = None if where is None else filter_texts(table, schema, partition_by, where)
        prefix = layout.data_prefix(table)
        found = []
        for fragment in self._versions.fragments(table, version):
            partition = partition_of_key(prefix, fragment[0], partition_by)
            if allowed is None or matches(partition, allowed):
                found.append((fragment, partition))
        return found

    def _store(self, table: str, planned: Sequence[tuple[Partition, pa.Table, str]]) -> list[FragmentRef]:
        """Write planned fragments (``plan_fragments``): encoded here on one thread, PUT concurrently."""
        bodies = [encode_fragment(data) for _, data, _ in planned]
        return map_bounded(
            lambda i: store_fragment(
                self._adapter, table, planned[i][1].schema, bodies[i], planned[i][2], planned[i][0]
            ),
            range(len(planned)),
        )

    def _replace_filters(
        self, state: ManifestState, tables: Iterable[str], replace_where: Mapping[str, PartitionFilter] | None
    ) -> Filters:
        """``replace_where`` (an overwrite's: the request checked that) checked against the commit (tables
        it writes, partition columns, values of their types) as text sets per column. Before any I/O of
        the commit's own."""
        if replace_where is None:
            return {}
        names = set(tables)
        filters: Filters = {}
        for table, where in replace_where.items():
            if table not in names:
                raise ConfigurationError(
                    f"replace_where names table {table!r}, which the commit does not write"
                )
            schema, partition_by = table_layout(state.manifest.entry(table).schema)
            filters[table] = filter_texts(table, schema, partition_by, where)
        return filters

    def precheck(self, tables: Iterable[str], request: CommitRequest = DEFAULT_REQUEST) -> Commit | None:
        """The checks a commit with ``request`` makes before it writes any data, for writers that produce
        data elsewhere first (a Spark job): the landed commit (``replayed=True``) if the request's
        ``idempotency_key`` already landed or the application watermark of its ``app_id`` is at or above
        its ``app_version``, else None. Raises UnknownTableError, ValueError (no tables, a
        ``replace_where`` table the commit does not write), SchemaMismatchError (a ``replace_where``
        filter on a non-partition column or with a value of the wrong type), CommitConflictError
        (``expected_version``), KeyWindowExpiredError. Heals first, like every write entry point. The
        commit itself checks again. The request's ``actor`` is not used."""
        names = list(tables)
        state = self._begin_commit(request)
        replayed, _ = self._prechecked(state, names, request)
        return replayed

    def _begin_commit(self, request: CommitRequest) -> ManifestState:
        """The setup every commit entry point shares (the request checked itself when it was made): refuse
        a key issued beyond the key window, before any I/O, then :meth:`_begin_write`."""
        self._check_key_window(request.idempotency_key, request.key_issued_at)
        return self._begin_write()

    def _prechecked(
        self, state: ManifestState, tables: Iterable[str], request: CommitRequest
    ) -> tuple[Commit | None, Filters]:
        """The replay ``request`` is on ``state`` (its key landed, its application watermark reached), if
        any; else the commit's tables and expected version checked and its ``replace_where`` filters."""
        names = list(tables)
        if (replay := self._key_replay(state, request.idempotency_key)) is not None:
            return replay, {}
        if (replay := app_replay(self._manifests, state.manifest, request.app)) is not None:
            return replay, {}
        self._check_tables(state, names)
        check_expected_version(state, request.expected_version)
        return None, self._replace_filters(state, names, request.replace_where)

    def _check_key_window(self, key: str | None, issued_at: datetime | None) -> None:
        """KeyWindowExpiredError when the key was issued so long ago (``key_window_s``, less one lease for
        clocks that disagree) that its ledger entry may have been vacuumed: committing it could apply it
        twice. Before any I/O. (The request checked ``issued_at`` is an aware datetime given with a key.)"""
        if key is None or issued_at is None:
            return
        age = (datetime.now(UTC) - issued_at).total_seconds()
        usable = self._settings.key_window_s - self._settings.lease_s
        if age > usable:
            raise KeyWindowExpiredError(
                f"idempotency key {key!r} was issued {age:.0f} s ago, beyond the engine's key window "
                f"({self._settings.key_window_s:g} s less a {self._settings.lease_s:g} s lease for clock "
                "skew): its earlier commit may no longer be on record, so it is refused; nothing was written",
                key=entry_key(key),
            )

    def _key_replay(self, state: ManifestState, key: str | None) -> Commit | None:
        """The replay of a commit whose idempotency ``key`` already landed (None: no key, or not landed).
        Every entry point asks this before it writes anything, so a retry of a landed commit writes
        nothing: not a fragment, not a sidecar, not a ledger entry."""
        if key is not None and (landed := self._landed(state, key)):
            return Commit(landed.version, landed, 0, replayed=True)
        return None

    def _landed(self, state: ManifestState | None, key: str) -> CommitRecord | None:
        """The visible commit carrying ``key``: its published ledger entry, else the manifest's retained
        record of it: a key committed before the ledger existed, or one whose holder published its commit
        and has not yet marked the entry published (it is visible all the same: a retry must replay it,
        not write anything)."""
        entry = self._ledger.read(key)
        if entry is not None and entry.entry.state is KeyState.PUBLISHED:
            return entry.entry.record
        return (state or self._manifests.load()).manifest.record_for_key(key)

    def _check_tables(self, state: ManifestState, tables: Iterable[str]) -> None:
        names = list(tables)
        if not names:
            raise ConfigurationError("a commit needs at least one table")
        for table in names:
            state.manifest.entry(table)  # UnknownTableError

    def _commit(
        self,
        state: ManifestState,
        refs: dict[str, tuple[FragmentRef, ...]],
        request: CommitRequest,
        data_written: Started | None = None,
    ) -> Commit:
        """Check ``refs`` against ``state`` (tables, schemas, partitions, ``replace_where``, age) and run the
        commit protocol (commit.py) on them with ``request``. ``data_written``: the PUTs of ``refs``'
        fragments when they are still in flight (the protocol waits for them before any table version)."""
        self._check_tables(state, refs.keys())
        filters = self._replace_filters(state, refs.keys(), request.replace_where)
        oldest_allowed = datetime.now(UTC) - timedelta(seconds=self._settings.grace_s / 2)
        writes: dict[str, TableWrite] = {}
        for table, table_refs in refs.items():
            schema_text = state.manifest.tables[table].schema
            schema, partition_by = table_layout(schema_text)
            fingerprint = schema_fingerprint(schema)
            prefix = layout.data_prefix(table)
            for ref in table_refs:
                if ref.table != table or not ref.key.startswith(prefix + "/"):
                    raise SchemaMismatchError(
                        f"fragment {ref.key} belongs to table {ref.table!r}, not {table!r}", key=ref.key
                    )
                if ref.schema_fingerprint != fingerprint:
                    raise SchemaMismatchError(
                        f"fragment {ref.key} does not have table {table!r}'s schema", key=ref.key
                    )
                try:
                    laid_out = partition_of_key(prefix, ref.key, partition_by)
                except ValueError as exc:
                    raise SchemaMismatchError(f"table {table!r}: {exc}", key=ref.key) from exc
                if laid_out != tuple(ref.partition):
                    raise SchemaMismatchError(
                        f"fragment {ref.key} says partition {ref.partition!r} but lies in {laid_out!r}",
                        key=ref.key,
                    )
                check_in_filter(table, ref.key, laid_out, filters.get(table))
                if codec.parse_iso(ref.written_at) < oldest_allowed:
                    raise StaleFragmentError(
                        f"fragment {ref.key} was written at {ref.written_at}, more than half the grace period "
                        f"({self._settings.grace_s / 2:.0f} s) ago: vacuum may reclaim it; write it again",
                        key=ref.key,
                    )
            added = tuple((r.key, r.rows, r.bytes) for r in table_refs)
            keeps = None
            if table in filters:  # a partition overwrite: the pinned content outside the filter, then ours
                keeps = partial(_outside, prefix, partition_by, filters[table])
                pinned = self._versions.fragments(table, state.manifest.tables[table].version)
                added = tuple(f for f in pinned if keeps(f[0])) + added
            writes[table] = TableWrite(table, schema_text, added, keeps=keeps)
        commit = self._operation().run(
            state,
            writes,
            request.mode_name,
            expected_version=request.expected_version,
            idempotency_key=request.idempotency_key,
            actor=request.actor or self._actor,
            app=request.app,
            data_written=data_written,
        )
        self._checkpoint(commit)
        return commit

    def _checkpoint(self, commit: Commit) -> None:
        """After a publish, write the checkpoint of each table version it published that is due one.
        Best effort: a checkpoint only shortens later reads, so a failure is logged, never raised (the
        next commit of the table writes one instead)."""
        if commit.replayed:
            return
        for table, version in commit.tables.items():
            try:
                self._versions.checkpoint_if_due(table, version)
            except Exception as exc:
                log.warning(
                    "could not write the checkpoint of table %r version %d (%s); a later commit will",
                    table,
                    version,
                    exc,
                )


def _outside(
    data_prefix: str, partition_by: Sequence[str], allowed: Mapping[str, set[str | None]], key: str
) -> bool:
    """Whether the fragment at ``key`` lies outside the partitions ``allowed`` matches (a partition
    overwrite keeps it)."""
    return not matches(partition_of_key(data_prefix, key, partition_by), allowed)
