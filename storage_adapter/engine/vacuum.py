"""Vacuum: delete table files that no retained manifest version references, after a grace period.

Retained: every table version pinned by a manifest version inside the history window (so time travel
within the window keeps working), and every table version above a table's current pin (heads of commits
in flight or awaiting recovery). A file is deleted only if nothing retained references it AND it is older
than the grace period. The listing is taken before the manifest is read, so a file written after the
listing is never a candidate; commits refuse fragments older than half the grace period, so no commit
can publish a reference to a fragment vacuum may consider (see docs/engine.md, "grace rule").
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from storage_adapter.engine import layout
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
    adapter: StorageAdapter, versions: TableVersionStore, grace_s: float, dry_run: bool = False
) -> VacuumReport:
    """Delete unreferenced table files older than ``grace_s``. The caller has healed pending sidecars."""
    listing = [(info, parsed) for info in adapter.list(layout.TABLES_PREFIX) if (parsed := _parse(info.key))]
    manifest = ManifestStore(adapter).load().manifest
    cutoff = _age_cutoff(grace_s)
    keep = retained_versions(manifest)
    for _, (table, kind, number) in listing:
        entry = manifest.tables.get(table)
        if kind == "version" and number is not None and (entry is None or number > entry.version):
            keep.add((table, number))
    referenced: set[str] = set()
    for _, (table, kind, number) in listing:
        if kind == "version" and (table, number) in keep:
            referenced.update(key for key, _, _ in versions.read(table, number).fragments)  # type: ignore[arg-type]
    deleted: list[str] = []
    kept_referenced = kept_young = 0
    for info, (table, kind, number) in listing:
        if (kind == "version" and (table, number) in keep) or (kind == "data" and info.key in referenced):
            kept_referenced += 1
        elif not _older(info, cutoff):
            kept_young += 1
        else:
            deleted.append(info.key)
    staging_removed = 0
    if not dry_run:
        for key in deleted:
            adapter.delete(key)
        staging_removed = adapter.remove_orphans(min_age_s=grace_s)
    return VacuumReport(tuple(deleted), kept_referenced, kept_young, dry_run, staging_removed)
