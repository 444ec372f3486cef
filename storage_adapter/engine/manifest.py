"""The manifest: the single visibility authority, published by compare-and-swap on one key.

``_manifest.json`` holds the manifest version, the pinned version and schema of every table, the
application watermarks (``app_id -> (app_version, manifest version)``, set by the publish of the commit
that carries them and never trimmed: O(applications)), and the commit records of its last ``TAIL`` versions (fewer when ``retention`` is smaller or the records are
large: at most ``TAIL_CHANGES`` table changes in all). The tables come in
two parts: a *table map* ``__tables/{V}-{operation}.json`` (every table's pin and schema as of version V,
immutable, named by the manifest) and the entries of the tables changed since then, inline (at most
``CHANGED_LIMIT``; a schema inline only for a table created since). The publish that would carry more
inline entries writes a new table map first and names it instead. So a commit writes O(its own tables)
bytes, plus a table map every ``CHANGED_LIMIT`` distinct tables changed (Delta's log + checkpoint). A commit becomes
visible by exactly one ``write_if_match`` of a whole new manifest whose newest record describes that
commit, so data, history and idempotency key land in one atomic step; nothing else is ever written to make
a commit visible. Each body names its own version and publishing operation, so two manifests never have
equal bytes (no ABA on S3, whose ETags are content MD5s).

Older records, back to ``retention`` versions, live in ``__history/`` (history.py): the publisher of a
manifest writes the record it drops from the tail before its CAS, so the manifest's size, and with it
the cost of every commit and snapshot, is bounded whatever the retention. Format 1 manifests (every
retained record inline) are read as they are; the first publish over one stores its records in
``__history/`` and its idempotency keys in the key ledger, so nothing it answered is lost by the upgrade.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from storage_adapter.engine import codec, layout
from storage_adapter.engine.errors import CorruptManifestError, HistoryExpiredError, UnknownTableError
from storage_adapter.engine.failpoints import failpoint
from storage_adapter.engine.history import CommitRecord, HistoryStore, TableChange
from storage_adapter.engine.key_ledger import KeyLedger
from storage_adapter.engine.parallel import Started, map_bounded, start
from storage_adapter.errors import NotFoundError
from storage_adapter.protocol import StorageAdapter
from storage_adapter.stored_json import StoredJSONError, items
from storage_adapter.stored_json import field as json_field

MANIFEST_FORMAT = "storage-adapter-engine/manifest"
MANIFEST_FORMAT_VERSION = 2  # 1: every retained record inline; 2: the last TAIL records inline
APPS_FORMAT_VERSION = 3  # 2 plus application watermarks: written only once a watermark exists, so that an
# engine that does not know watermarks refuses the manifest instead of publishing over it without them
DEFAULT_RETENTION = 256  # versions of history kept for time travel (records in __history/)
TAIL = 16  # records inline in the manifest (~235 bytes each): the recent past commits look up for free
TAIL_CHANGES = 256  # table changes inline across the tail (a 100-table commit's record is ~3 KB)
CHANGED_LIMIT = 32  # table entries inline beside the table map before a publish writes a new map
TABLE_MAP_FORMAT = "storage-adapter-engine/table-map"

__all__ = ["CommitRecord", "Manifest", "ManifestState", "ManifestStore", "TableChange", "TableEntry"]


@dataclass(frozen=True)
class TableEntry:
    version: int
    schema: str  # tables.schema_to_text form


@dataclass(frozen=True)
class AppWatermark:
    """An application's watermark: the highest ``app_version`` it committed, and the manifest version
    that commit published."""

    version: int
    manifest_version: int


@dataclass(frozen=True)
class TableMapRef:
    """The table map a manifest builds on: written by the publisher of ``version`` (``operation_id``)."""

    version: int
    operation_id: str

    @property
    def key(self) -> str:
        return layout.table_map_key(self.version, self.operation_id)


@dataclass(frozen=True)
class Manifest:
    """One published manifest. Immutable: a new version is a new object (see :meth:`advance`).

    ``tables`` is every table, resolved (the table map overlaid with the inline entries); ``inline`` names
    the tables whose entries the manifest carries itself, ``created`` those of them created since the map
    (their schema is inline too). Without a map every table is inline and created."""

    version: int
    operation_id: str
    tables: dict[str, TableEntry] = field(default_factory=dict)
    commits: tuple[CommitRecord, ...] = ()  # the tail: records of the last versions, oldest first
    retention: int = DEFAULT_RETENTION
    format_version: int = MANIFEST_FORMAT_VERSION  # as decoded (1 until the first publish upgrades it)
    table_map: TableMapRef | None = None
    inline: frozenset[str] = frozenset()
    created: frozenset[str] = frozenset()
    applications: dict[str, AppWatermark] = field(default_factory=dict)  # app_id -> its watermark

    def applied(self, app: tuple[str, int] | None) -> AppWatermark | None:
        """The watermark of ``app``'s application when it is at or above ``app``'s version (a commit
        with it would apply twice: it is a replay), else None."""
        if app is None:
            return None
        found = self.applications.get(app[0])
        return found if found is not None and found.version >= app[1] else None

    @property
    def history_floor(self) -> int:
        """The oldest manifest version whose pins can still be reconstructed (``retention`` versions back)."""
        return max(0, self.version - self.retention)

    @property
    def tail_floor(self) -> int:
        """The newest version whose record is not inline: records of later versions are in ``commits``."""
        return self.commits[0].version - 1 if self.commits else self.version

    def check_retained(self, version: int) -> None:
        """HistoryExpiredError unless ``version`` is inside the retained history."""
        if not self.history_floor <= version <= self.version:
            raise HistoryExpiredError(
                f"manifest version {version} is outside the retained history "
                f"[{self.history_floor}, {self.version}]",
                key=layout.MANIFEST_KEY,
            )

    def stored_record_versions(self, after: int) -> range:
        """Versions after ``after`` whose records are not inline (read them with HistoryStore.read)."""
        self.check_retained(after)
        return range(after + 1, self.tail_floor + 1)

    def entry(self, table: str) -> TableEntry:
        found = self.tables.get(table)
        if found is None:
            raise UnknownTableError(
                f"unknown table {table!r} at manifest version {self.version}; tables: {sorted(self.tables)}",
                key=layout.table_prefix(table),
            )
        return found

    def record_for_operation(self, operation_id: str) -> CommitRecord | None:
        """The inline record of ``operation_id`` (exact for operations based on ``tail_floor`` or later)."""
        return next((r for r in reversed(self.commits) if r.operation_id == operation_id), None)

    def record_for_key(self, idempotency_key: str) -> CommitRecord | None:
        """The inline record carrying ``idempotency_key`` (the key ledger is the exact answer)."""
        return next((r for r in reversed(self.commits) if r.idempotency_key == idempotency_key), None)

    def pins_at(self, version: int, records: tuple[CommitRecord, ...]) -> dict[str, int]:
        """Table pins as of manifest ``version``, rebuilt by undoing ``records`` newest first: the records
        of every version after it (``ManifestStore.records_after``); ValueError for any other list."""
        self.check_retained(version)
        if [r.version for r in records] != list(range(version + 1, self.version + 1)):
            raise ValueError(
                f"pins_at({version}) needs the records of versions {version + 1}..{self.version}"
            )
        pins = {name: entry.version for name, entry in self.tables.items()}
        for record in reversed(records):
            for change in record.changes:
                if change.from_version is None:
                    pins.pop(change.table, None)
                else:
                    pins[change.table] = change.from_version
        return pins

    def advance(self, record: CommitRecord, schemas: dict[str, str]) -> Manifest:
        """The next manifest: pins moved by ``record``, the record appended, the tail trimmed (see
        :meth:`_tail_with`). ``schemas`` gives the schema of tables the record creates."""
        tables = dict(self.tables)
        for change in record.changes:
            schema = schemas.get(change.table) or tables[change.table].schema
            tables[change.table] = TableEntry(change.to_version, schema)
        table_map = self.table_map
        if table_map is None:  # every table inline, with its schema
            inline, created = frozenset(tables), frozenset(tables)
        else:
            inline = self.inline | {change.table for change in record.changes}
            created = self.created | {c.table for c in record.changes if c.from_version is None}
        if len(inline) > CHANGED_LIMIT:  # the publish writes the whole map (ManifestStore.publish)
            inline, created = frozenset(), frozenset()
            table_map = TableMapRef(record.version, record.operation_id)
        applications = self.applications
        if record.app is not None:  # set in the same publish as the commit: atomic with it
            applications = {**applications, record.app[0]: AppWatermark(record.app[1], record.version)}
        format_version = APPS_FORMAT_VERSION if applications else MANIFEST_FORMAT_VERSION
        return replace(
            self,
            version=record.version,
            operation_id=record.operation_id,
            tables=tables,
            commits=self._tail_with(record),
            format_version=format_version,
            table_map=table_map,
            inline=inline,
            created=created,
            applications=applications,
        )

    def _tail_with(self, record: CommitRecord) -> tuple[CommitRecord, ...]:
        """``record`` and the newest of the current tail, up to ``TAIL`` records (``retention`` if fewer)
        holding at most ``TAIL_CHANGES`` table changes in all (``record`` is kept whatever its size)."""
        kept, changes = [record], len(record.changes)
        for older in reversed(self.commits):
            if len(kept) >= min(TAIL, self.retention) or changes + len(older.changes) > TAIL_CHANGES:
                break
            kept.append(older)
            changes += len(older.changes)
        return tuple(reversed(kept))

    @property
    def new_table_map(self) -> TableMapRef | None:
        """The table map this manifest's publisher writes: its own, when it is the version the map is of."""
        return (
            self.table_map if self.table_map is not None and self.table_map.version == self.version else None
        )

    def encode(self) -> bytes:
        def entry(name: str) -> dict[str, Any]:
            found, with_schema = self.tables[name], self.table_map is None or name in self.created
            return {"version": found.version, **({"schema": found.schema} if with_schema else {})}

        inline = self.tables if self.table_map is None else self.inline
        body: dict[str, Any] = {
            "version": self.version,
            "operation_id": self.operation_id,
            "retention": self.retention,
            "tables": {n: entry(n) for n in sorted(inline)},
            "commits": [r.to_json() for r in self.commits],
        }
        if self.format_version != 1:
            ref = self.table_map
            body["table_map"] = (
                None if ref is None else {"version": ref.version, "operation_id": ref.operation_id}
            )
        if self.applications:
            body["applications"] = {
                app_id: [mark.version, mark.manifest_version] for app_id, mark in self.applications.items()
            }
        return codec.encode(MANIFEST_FORMAT, self.format_version, body)

    def encode_table_map(self) -> bytes:
        """The table map of this manifest: every table's pin and schema."""
        return codec.encode(
            TABLE_MAP_FORMAT,
            1,
            {
                "version": self.version,
                "operation_id": self.operation_id,
                "tables": {
                    n: {"version": e.version, "schema": e.schema} for n, e in sorted(self.tables.items())
                },
            },
        )

    @classmethod
    def decode(
        cls,
        raw: bytes,
        key: str = layout.MANIFEST_KEY,
        load_table_map: Callable[[TableMapRef], dict[str, TableEntry]] | None = None,
    ) -> Manifest:
        """The manifest in ``raw``; ``load_table_map`` gives the entries of the table map it names (a
        manifest without one decodes without it). CorruptManifestError for anything malformed."""
        doc = codec.decode(
            raw, key, MANIFEST_FORMAT, (1, MANIFEST_FORMAT_VERSION, APPS_FORMAT_VERSION), CorruptManifestError
        )
        try:
            table_map = None
            if doc["format_version"] != 1 and (ref := json_field(doc, "table_map", dict, optional=True)):
                table_map = TableMapRef(json_field(ref, "version", int), json_field(ref, "operation_id", str))
            if table_map is not None and load_table_map is None:
                raise ValueError(f"{key} builds on table map {table_map.key}: decode it with load_table_map")
            tables = {} if table_map is None or load_table_map is None else dict(load_table_map(table_map))
            created = set()
            for name, entry in json_field(doc, "tables", dict).items():
                schema = json_field(entry, "schema", str, optional=True)
                if schema is None and name not in tables:
                    raise CorruptManifestError(
                        f"{key}: table {name!r} has no schema, inline or in the table map", key=key
                    )
                if schema is not None:
                    created.add(name)
                tables[name] = TableEntry(json_field(entry, "version", int), schema or tables[name].schema)
            commits = tuple(CommitRecord.from_json(r, key) for r in json_field(doc, "commits", list))
            marks = (
                json_field(doc, "applications", dict, optional=True)
                if doc["format_version"] == APPS_FORMAT_VERSION
                else None
            )
            applications = {
                app_id: AppWatermark(*items(mark, (int, int), f"watermark of application {app_id!r}"))
                for app_id, mark in (marks or {}).items()
            }
            manifest = cls(
                version=json_field(doc, "version", int),
                operation_id=json_field(doc, "operation_id", str),
                tables=tables,
                commits=commits,
                retention=json_field(doc, "retention", int),
                format_version=doc["format_version"],
                table_map=table_map,
                inline=frozenset(json_field(doc, "tables", dict)),
                created=frozenset(created),
                applications=applications,
            )
        except StoredJSONError as exc:
            raise codec.malformed(key, CorruptManifestError, exc) from exc
        if manifest.retention < 1:
            raise CorruptManifestError(f"{key}: retention {manifest.retention} is not positive", key=key)
        if commits and commits[-1].version != manifest.version:
            raise CorruptManifestError(f"{key}: last commit record is not the manifest version", key=key)
        if [r.version for r in commits] != list(
            range(manifest.version - len(commits) + 1, manifest.version + 1)
        ):
            raise CorruptManifestError(f"{key}: the inline commit records are not consecutive", key=key)
        if manifest.format_version != 1 and len(commits) > min(TAIL, manifest.retention):
            raise CorruptManifestError(f"{key}: {len(commits)} inline records exceed the tail", key=key)
        return manifest


@dataclass(frozen=True)
class ManifestState:
    """A manifest together with the storage token of exactly the bytes it was decoded from."""

    manifest: Manifest
    token: str


class _TableMapCache:
    """Decoded table maps, by root and key, shared by every ManifestStore of the process: a map is
    immutable and its key unique (version and operation), so an entry never goes stale. Bounded (LRU)."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._maps: OrderedDict[tuple[str, str], dict[str, TableEntry]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, root: str, key: str, load: Callable[[], dict[str, TableEntry]]) -> dict[str, TableEntry]:
        with self._lock:
            found = self._maps.get((root, key))
            if found is not None:
                self._maps.move_to_end((root, key))
                return found
        loaded = load()
        self.put(root, key, loaded)
        return loaded

    def put(self, root: str, key: str, tables: dict[str, TableEntry]) -> None:
        with self._lock:
            self._maps[(root, key)] = dict(tables)
            self._maps.move_to_end((root, key))
            while len(self._maps) > self._size:
                self._maps.popitem(last=False)


_TABLE_MAPS = _TableMapCache(8)


class ManifestStore:
    """Loads and publishes the manifest on one adapter."""

    def __init__(self, adapter: StorageAdapter) -> None:
        self._adapter = adapter
        self.history = HistoryStore(adapter)

    def load(self) -> ManifestState:
        """The current manifest: one GET, and one more for its table map unless this process read that
        map before. NotFoundError if the engine root was never initialized; CorruptManifestError if it
        cannot be decoded (the object is left untouched)."""
        try:
            versioned = self._adapter.read_versioned(layout.MANIFEST_KEY)
        except NotFoundError as exc:
            raise NotFoundError(
                f"no engine manifest at {layout.MANIFEST_KEY} under {self._adapter.url}: open it read-write "
                "once to initialize",
                key=layout.MANIFEST_KEY,
                backend=exc.backend,
            ) from exc
        return ManifestState(Manifest.decode(versioned.data, load_table_map=self._table_map), versioned.token)

    def _table_map(self, ref: TableMapRef) -> dict[str, TableEntry]:
        def load() -> dict[str, TableEntry]:
            try:
                raw = self._adapter.read_bytes(ref.key)
            except NotFoundError as exc:
                raise CorruptManifestError(
                    f"{layout.MANIFEST_KEY} builds on table map {ref.key}, which is missing", key=ref.key
                ) from exc
            doc = codec.decode(raw, ref.key, TABLE_MAP_FORMAT, (1,), CorruptManifestError)
            try:
                if (json_field(doc, "version", int), json_field(doc, "operation_id", str)) != (
                    ref.version,
                    ref.operation_id,
                ):
                    raise CorruptManifestError(
                        f"{ref.key}: holds the table map of another manifest", key=ref.key
                    )
                return {
                    name: TableEntry(json_field(entry, "version", int), json_field(entry, "schema", str))
                    for name, entry in json_field(doc, "tables", dict).items()
                }
            except StoredJSONError as exc:
                raise codec.malformed(ref.key, CorruptManifestError, exc) from exc

        return _TABLE_MAPS.get(self._adapter.url, ref.key, load)

    def initialize(self, operation_id: str, retention: int) -> bool:
        """Create manifest version 0 if there is none (write_if_absent: one winner). True if created."""
        manifest = Manifest(0, operation_id, retention=retention)
        return self._adapter.write_if_absent(layout.MANIFEST_KEY, manifest.encode()) is not None

    def records_after(self, manifest: Manifest, version: int) -> tuple[CommitRecord, ...]:
        """The records of the versions after ``version`` up to ``manifest``'s, oldest first: the inline
        tail and, before it, one GET per stored record (concurrent). HistoryExpiredError outside the
        retained history."""
        stored = tuple(self.history.read(manifest.stored_record_versions(version)))
        return (*stored, *(r for r in manifest.commits if r.version > version))

    def record_at(self, manifest: Manifest, version: int) -> CommitRecord | None:
        """The commit record of manifest ``version`` while ``manifest`` retains it (inline: free; stored:
        one GET), else None."""
        inline = next((r for r in manifest.commits if r.version == version), None)
        if inline is not None or not manifest.history_floor < version <= manifest.tail_floor:
            return inline
        try:
            return self.history.read([version])[0]
        except HistoryExpiredError:  # fell out of the history since ``manifest`` was read
            return None

    def retiring(self, current: ManifestState, new: Manifest) -> list[tuple[str, bytes]]:
        """The (key, body) of each record ``new`` drops from ``current``'s tail and still retains: the
        history objects its publish must store first."""
        kept = {record.version for record in new.commits}
        return [
            self.history.stored_object(r)
            for r in current.manifest.commits
            if r.version not in kept and r.version > new.history_floor
        ]

    def start_retiring(self, current: ManifestState, new: Manifest) -> tuple[Started, frozenset[str]]:
        """Start storing :meth:`retiring` (create-only, on the shared pool) while the caller works; the
        started writes and their keys, for ``publish``'s ``stored``."""
        objects = self.retiring(current, new)
        writes = [partial(self._adapter.write_if_absent, key, body) for key, body in objects]
        return start(writes), frozenset(key for key, _ in objects)

    def publish(
        self, current: ManifestState, new: Manifest, stored: frozenset[str] = frozenset()
    ) -> ManifestState | None:
        """Compare-and-swap ``new`` over ``current``: the new state, or None if the manifest moved.

        First, so that no manifest ever lacks a retained record or names a missing map: the records ``new``
        drops from the tail are stored in the history (one write_if_absent each: usually one; none for
        those whose keys are in ``stored``, which the caller stored already), and the table map ``new``
        builds on is written when ``new`` is the version it is of (every ``CHANGED_LIMIT`` distinct tables
        changed), all concurrently; over a format 1 manifest (the upgrade) its keyed records are entered
        in the key ledger (one write_if_absent each, once)."""
        objects = [(key, body) for key, body in self.retiring(current, new) if key not in stored]
        if (table_map := new.new_table_map) is not None:
            objects.append((table_map.key, new.encode_table_map()))  # a unique key: never taken
        map_bounded(lambda stored: self._adapter.write_if_absent(*stored), objects)
        if table_map is not None:
            _TABLE_MAPS.put(self._adapter.url, table_map.key, new.tables)  # the next load needs no GET
        if current.manifest.format_version == 1:
            _enter_legacy_keys(KeyLedger(self._adapter), current.manifest.commits)
        failpoint("publish.before_cas")
        token = self._adapter.write_if_match(layout.MANIFEST_KEY, new.encode(), current.token)
        return None if token is None else ManifestState(new, token)


def _enter_legacy_keys(ledger: KeyLedger, records: tuple[CommitRecord, ...]) -> None:
    """Publish in the key ledger every keyed record of a format 1 manifest (written before the ledger, or
    by a writer that published its entry since: then this is a no-op). Without this, such a key would be
    forgotten once its record left the tail, and a retry would apply it again."""
    for record in records:
        if record.idempotency_key is not None:
            ledger.enter_published(record.idempotency_key, record)
