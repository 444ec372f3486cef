"""Vacuum: delete table files that no retained manifest version references, after a grace period.

Retained: every table version pinned by a manifest version inside the history window (so time travel
within the window keeps working), and every table version above a table's current pin (heads of commits
in flight or awaiting recovery). A file is deleted only if nothing retained references it AND it is older
than the grace period. The listing is taken before the manifest is read, so a file written after the
listing is never a candidate; commits refuse fragments older than half the grace period, so no commit
can publish a reference to a fragment vacuum may consider (see docs/engine.md, "grace rule").

Key ledger entries (key_ledger.py) are kept for the key window: vacuum deletes a published entry once it
is older than that (an entry still claimed belongs to a commit in flight and is never a candidate).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from storage_adapter.engine import layout
from storage_adapter.engine.key_ledger import KeyEntry, KeyState
from storage_adapter.engine.manifest import Manifest, ManifestStore
from storage_adapter.engine.tables import TableVersionStore
from storage_adapter.protocol import StorageAdapter
from storage_adapter.types import ObjectInfo


@dataclass(frozen=True)
class VacuumReport:
    deleted: tuple[str, ...]
    kept_referenced: int
    kept_young: int
    dry_run: bool
    staging_removed: int = 0  # crash leftovers the adapter reclaimed (local staging files), same grace
    keys_expired: int = 0  # published key ledger entries older than the key window, deleted


def retained_versions(manifest: Manifest) -> set[tuple[str, int]]:
    """(table, version) pinned by any manifest version in the history window."""
    retained = {(name, entry.version) for name, entry in manifest.tables.items()}
    for record in manifest.commits:
        for change in record.changes:
            retained.add((change.table, change.to_version))
            if change.from_version is not None:
                retained.add((change.table, change.from_version))
    return retained


def _parse(key: str) -> tuple[str, str, int | None] | None:
    """(table, "version"|"data", version number) for a table file key, else None."""
    parts = key.split("/")
    if len(parts) != 4 or parts[0] != layout.TABLES_PREFIX:
        return None
    if parts[2] == "_versions":
        number = layout.version_from_key(key)
        return None if number is None else (parts[1], "version", number)
    if parts[2] == "data" and parts[3].endswith(".parquet"):
        return (parts[1], "data", None)
    return None


def _age_cutoff(grace_s: float) -> datetime:
    return datetime.now(UTC) - timedelta(seconds=grace_s)


def _older(info: ObjectInfo, cutoff: datetime) -> bool:
    modified = info.last_modified
    if modified.tzinfo is None:
        modified = modified.replace(tzinfo=UTC)
    return modified < cutoff


def vacuum(
    adapter: StorageAdapter, versions: TableVersionStore, grace_s: float, dry_run: bool = False,
    key_window_s: float | None = None,
) -> VacuumReport:  # fmt: skip
    """Delete unreferenced table files older than ``grace_s`` and, with ``key_window_s``, published key
    ledger entries older than that. The caller has healed pending sidecars.

    One streamed listing, judged as it comes (memory: one table's referenced fragments plus the
    garbage): a table's ``_versions/`` files list before its ``data/`` files (``_`` < ``d``), so its
    referenced set is complete when its first data file arrives. The age cutoff is taken before the
    manifest is read, so every candidate was written before that read, as when the whole listing came
    first; a file listed later is younger than the cutoff and kept. Deletes go in batches
    (``delete_many``)."""
    cutoff = _age_cutoff(grace_s)
    manifest = ManifestStore(adapter).load().manifest
    retained = retained_versions(manifest)
    deleted: list[str] = []
    kept_referenced = kept_young = 0
    table: str | None = None
    referenced: set[str] = set()
    for info in adapter.iter_list(layout.TABLES_PREFIX):
        parsed = _parse(info.key)
        if parsed is None:
            continue
        name, kind, number = parsed
        if name != table:
            table, referenced = name, set()
        entry = manifest.tables.get(name)
        kept = (name, number) in retained or entry is None or (number or 0) > entry.version
        if kind == "version" and kept:
            referenced.update(key for key, _, _ in versions.read(name, number).fragments)  # type: ignore[arg-type]
            kept_referenced += 1
        elif kind == "data" and info.key in referenced:
            kept_referenced += 1
        elif not _older(info, cutoff):
            kept_young += 1
        else:
            deleted.append(info.key)
    staging_removed = keys_expired = 0
    if not dry_run:
        adapter.delete_many(deleted)
        staging_removed = adapter.remove_orphans(min_age_s=grace_s)
        if key_window_s is not None:
            keys_expired = _expire_keys(adapter, _age_cutoff(key_window_s))
    return VacuumReport(tuple(deleted), kept_referenced, kept_young, dry_run, staging_removed, keys_expired)


def _expire_keys(adapter: StorageAdapter, cutoff: datetime) -> int:
    """Delete published ledger entries last written before ``cutoff`` (in one ``delete_many``). A
    published entry never changes again, so reading it and then deleting it races with nothing."""
    expired = [
        info.key
        for info in adapter.iter_list(layout.KEYS_PREFIX)
        if _older(info, cutoff)
        and (raw := adapter.read_if_exists(info.key)) is not None
        and KeyEntry.decode(raw, info.key).state is KeyState.PUBLISHED
    ]
    return adapter.delete_many(expired)
