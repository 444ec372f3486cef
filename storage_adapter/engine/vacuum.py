"""Vacuum: delete table files that no retained manifest version references, after a grace period.

Retained: every table version pinned by a manifest version inside the history window (so time travel
within the window keeps working), every table version above a table's current pin (heads of commits
in flight or awaiting recovery), and every version (and checkpoint) a read of those walks through. A
file is deleted only if nothing retained references it AND it is older than the grace period. The listing is taken before the manifest is read, so a file written after the
listing is never a candidate; commits refuse fragments older than half the grace period, so no commit
can publish a reference to a fragment vacuum may consider (see docs/engine.md, "grace rule").

Every file in a staging folder (``layout.staging_prefix``: what a Spark job's own Parquet writer left
there, data or not) is a candidate like an unreferenced fragment; the staged files a commit published are
referenced where they lie.

Commit records stored in ``__history/`` at or below the history floor are deleted (nothing reads them),
and table maps (``__tables/``) other than the current manifest's once older than the grace period.
Key ledger entries (key_ledger.py) are kept for the key window: vacuum deletes a published entry once it
is older than that (an entry still claimed belongs to a commit in flight and is never a candidate).

Vacuum deletes only objects the engine wrote, known by the exact shape of their names (``layout.own_key``):
a fragment's ULID name (or a Spark file's name in a partition folder), a file in a staging folder named as
the native Spark path names its jobs, a table map's, a history record's, a ledger entry's. Anything else
under the engine's prefixes is another tool's: never read, never deleted, reported in
``VacuumReport.foreign`` with the entries listings skip there (``adapter.skipped``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime

from storage_adapter.engine import codec, layout
from storage_adapter.engine.history import CommitRecord
from storage_adapter.engine.key_ledger import KeyEntry, KeyState
from storage_adapter.engine.layout import OwnKind
from storage_adapter.engine.manifest import Manifest, ManifestStore
from storage_adapter.engine.tables import TableVersionStore
from storage_adapter.protocol import StorageAdapter
from storage_adapter.types import ObjectInfo, SkippedObject


@dataclass(frozen=True)
class VacuumReport:
    """What one vacuum did (``dry_run``: would do). ``deleted``: the table files deleted; the other
    counts as commented. ``foreign``: what it did not recognise as the engine's, never deleted."""

    deleted: tuple[str, ...]
    kept_referenced: int
    kept_young: int
    dry_run: bool
    staging_removed: int = 0  # crash leftovers the adapter reclaimed (local staging files), same grace
    keys_expired: int = 0  # published key ledger entries older than the key window, deleted
    history_expired: int = 0  # commit records below the history floor (no longer retained), deleted
    table_maps_removed: int = 0  # table maps no manifest builds on any more, older than the grace
    # What another tool left under the engine's prefixes, sorted: every listed key whose name is not of
    # the engine's shapes (layout.own_key) and that no retained version references, and every entry the
    # listings skip there (adapter.skipped: folder markers, names no key can have, local symlinks). Never
    # read, never deleted: for an operator to look at.
    foreign: tuple[str, ...] = ()


def retained_versions(manifest: Manifest, records: tuple[CommitRecord, ...]) -> set[tuple[str, int]]:
    """(table, version) pinned by any manifest version in the history window, given its ``records``."""
    retained = {(name, entry.version) for name, entry in manifest.tables.items()}
    for record in records:
        for change in record.changes:
            retained.add((change.table, change.to_version))
            if change.from_version is not None:
                retained.add((change.table, change.from_version))
    return retained


def retained_closure(
    versions: TableVersionStore, resolve: set[tuple[str, int]], keep: set[tuple[str, int]]
) -> tuple[set[tuple[str, int]], set[str]]:
    """``keep`` plus every version (and so checkpoint) a read of a version in ``resolve`` walks through,
    and the fragment keys their resolved contents list: a fragment only older versions of the chain list
    (replaced by a compaction) is not referenced."""
    closure = set(keep)
    referenced: set[str] = set()
    for table, number in sorted(resolve):  # ascending: each resolution starts from the one before, cached
        closure.update((table, version) for version in versions.chain(table, number))
        referenced.update(key for key, _, _ in versions.fragments(table, number))
    return closure, referenced


_TABLE_FILES = {
    OwnKind.TABLE_VERSION: "version",
    OwnKind.CHECKPOINT: "checkpoint",
    OwnKind.FRAGMENT: "data",
    OwnKind.STAGED: "data",  # a staged job's file (Spark's, data or not): reclaimed like a fragment
}


def _parse(key: str) -> tuple[str, str, int | None] | None:
    """(table, "version"|"checkpoint"|"data", version number) for a table file key of the engine's
    (``layout.own_key``), else None. A checkpoint is kept exactly as long as its version."""
    own = layout.own_key(key)
    if own is None or own.kind not in _TABLE_FILES or own.table is None:
        return None
    return (own.table, _TABLE_FILES[own.kind], own.version)


def vacuum(
    adapter: StorageAdapter,
    versions: TableVersionStore,
    grace_s: float,
    dry_run: bool = False,
    key_window_s: float | None = None,
) -> VacuumReport:
    """Delete unreferenced table files older than ``grace_s`` and, with ``key_window_s``, published key
    ledger entries older than that. The caller has healed pending sidecars.

    The listing (streamed, kept as parsed keys only) is taken before the manifest is read; retained
    versions resolve through their whole chain (retained_closure). Deletes go in batches
    (``delete_many``: one request per 1,000 keys where the backend has a multi-object delete)."""
    skipped: list[str] = []  # what listings leave out under the engine's prefixes: another tool's
    listing = []
    unrecognised: list[str] = []  # foreign unless a retained version references it (a commit_fragments ref)
    for info in _objects(adapter, layout.TABLES_PREFIX, skipped):
        parsed = _parse(info.key)
        if parsed is None:
            unrecognised.append(info.key)
        else:
            listing.append((info, parsed))
    manifests = ManifestStore(adapter)
    manifest = manifests.load().manifest
    cutoff = codec.age_cutoff(grace_s)
    keep = retained_versions(manifest, manifests.records_after(manifest, manifest.history_floor))
    for _, (table, kind, number) in listing:
        entry = manifest.tables.get(table)
        if kind == "version" and number is not None and (entry is None or number > entry.version):
            keep.add((table, number))
    listed = {(table, number) for _, (table, kind, number) in listing if kind == "version"}
    keep, referenced = retained_closure(versions, keep & listed, keep)
    deleted: list[str] = []
    kept_referenced = kept_young = 0
    for info, (table, kind, number) in listing:
        if (kind != "data" and (table, number) in keep) or (kind == "data" and info.key in referenced):
            kept_referenced += 1
        elif not codec.written_before(info, cutoff):
            kept_young += 1
        else:
            deleted.append(info.key)
    staging_removed = keys_expired = 0
    foreign = [key for key in unrecognised if key not in referenced]
    own: dict[OwnKind, list[tuple[ObjectInfo, layout.OwnKey]]] = {k: [] for k in _OTHER_PREFIXES.values()}
    for prefix, own_kind in _OTHER_PREFIXES.items():
        for info in _objects(adapter, prefix, skipped):
            found = layout.own_key(info.key)
            if found is not None and found.kind is own_kind:
                own[own_kind].append((info, found))
            else:
                foreign.append(info.key)
    expired_history = [  # records at or below the history floor: nothing reads them
        info.key
        for info, found in own[OwnKind.HISTORY]
        if found.version is not None and found.version <= manifest.history_floor
    ]
    current_map = None if manifest.table_map is None else manifest.table_map.key
    old_maps = [  # a reader of an older manifest may still be fetching its map: the grace covers it
        info.key
        for info, _ in own[OwnKind.TABLE_MAP]
        if info.key != current_map and codec.written_before(info, cutoff)
    ]
    if not dry_run:
        adapter.delete_many(deleted)
        adapter.delete_many(expired_history)
        adapter.delete_many(old_maps)
        staging_removed = adapter.remove_orphans(min_age_s=grace_s)
        if key_window_s is not None:
            entries = [info for info, _ in own[OwnKind.KEY_ENTRY]]
            keys_expired = _expire_keys(adapter, entries, codec.age_cutoff(key_window_s))
    return VacuumReport(
        tuple(deleted),
        kept_referenced,
        kept_young,
        dry_run,
        staging_removed,
        keys_expired,
        len(expired_history),
        len(old_maps),
        tuple(sorted([*foreign, *skipped])),
    )


# The prefixes vacuum lists besides ``tables/``, each once, by the kind of object the engine keeps there:
# its own are worked on, anything else is another tool's.
_OTHER_PREFIXES = {
    layout.TABLE_MAPS_PREFIX: OwnKind.TABLE_MAP,
    layout.HISTORY_PREFIX: OwnKind.HISTORY,
    layout.KEYS_PREFIX: OwnKind.KEY_ENTRY,
    layout.RECOVERY_PREFIX: OwnKind.SIDECAR,
    layout.AUDIT_PREFIX: OwnKind.AUDIT,
}


def _objects(adapter: StorageAdapter, prefix: str, skipped: list[str]) -> Iterator[ObjectInfo]:
    """The objects under ``prefix``, streamed, in one pass that also adds to ``skipped`` the names of the
    entries listings leave out there (``adapter.entry_pages``)."""
    for page in adapter.entry_pages(prefix):
        for entry in page:
            if isinstance(entry, SkippedObject):
                skipped.append(entry.name)
            else:
                yield entry


def _expire_keys(adapter: StorageAdapter, entries: list[ObjectInfo], cutoff: datetime) -> int:
    """Delete the published ledger entries among the listed ``entries`` last written before ``cutoff``
    (in one ``delete_many``). A published entry never changes again, so reading it and then deleting it
    races with nothing."""
    expired = [
        info.key
        for info in entries
        if codec.written_before(info, cutoff)
        and (raw := adapter.read_if_exists(info.key)) is not None
        and KeyEntry.decode(raw, info.key).state is KeyState.PUBLISHED
    ]
    return adapter.delete_many(expired)
