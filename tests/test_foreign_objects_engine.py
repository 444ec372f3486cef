"""Everything built on listings holds in folders holding objects other tools wrote (issue 41, item 3).

A real bucket holds what other tools left beside the engine's files: objects with ordinary names the engine
never wrote, and (local) names no key can have and symlinks, which listings skip and report. The engine
opens, heals, commits, reads, compacts and vacuums among them, reads none of them as its metadata, deletes
none of them, and vacuum reports them (``VacuumReport.foreign``); the idempotency store's purge and the
local adapter's ``remove_orphans`` leave them alone too. Memory and local, each test under its own root;
one test on every backend (SeaweedFS and Azurite too) plants folder markers and names only S3 and Azure
can hold through the backend's raw store.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from ulid import ULID

from contract_tests.foreign_clauses import listable
from storage_adapter.adapter import open_adapter
from storage_adapter.engine import CommitRequest, Engine, EngineSettings, layout
from storage_adapter.engine.errors import CorruptMetadataError, CorruptSidecarError
from storage_adapter.engine.key_ledger import entry_key
from storage_adapter.errors import StorageError
from storage_adapter.idempotency import Finalized, IdempotencyStore, Owned
from storage_adapter.protocol import StorageAdapter

SCHEMA = pa.schema([("id", pa.int64())])
FOREIGN_BODY = b"not the engine's: another tool wrote this"

# Objects with ordinary valid names that the engine never writes, in every folder it lists.
FOREIGN_KEYS = (
    "tables/readme.txt",
    "tables/t/readme.txt",
    "tables/t/data/readme.txt",
    "tables/t/data/foreign.parquet",
    "tables/t/data/part-00000-0f0e0d0c-0b0a-0908-0706-050403020100-c000.parquet",
    "tables/t/data/col=x/foreign.parquet",
    "tables/t/data/_staging/somejob/part-00000.parquet",
    "tables/t/data/_staging/somejob/_SUCCESS",
    "tables/t/_versions/notes.json",
    "tables/t/_versions/00000000000000000001.json.bak",
    "tables/t/_versions/old/00000000000000000001.json",
    "tables/t/_checkpoints/notes.json",
    "tables/Not A Table/data/01HZZZZZZZZZZZZZZZZZZZZZZZ.parquet",
    "__tables/x.json",
    "__history/notes.json",
    "__history/old/00000000000000000001.json",
    "__keys/readme.json",
    "__keys/ab/cd.json",
    "__recovery/notes.json",
    "__recovery/readme.txt",
    "__audit/notes.json",
)
# Names no key can have and a symlink, planted straight on disk (local only): listings skip them.
ODD_NAMES = (
    "tables/t/data/tab\tname.parquet",
    "tables/t/_versions/bell\x07.json",
    "__keys/tab\tentry.json",
    "__recovery/bell\x07.json",
)
SYMLINK = "tables/t/data/link.parquet"


@dataclass
class Root:
    """An engine root on one backend, and how to plant what another tool would leave in it."""

    adapter: StorageAdapter
    directory: Path | None  # the local root's directory; None on memory

    def plant(self, key: str, body: bytes = FOREIGN_BODY) -> None:
        """An object another tool wrote: on local a file written straight into the root, else a write."""
        if self.directory is None:
            self.adapter.write(key, body)
            return
        path = self.directory / key
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as file:
            file.write(body)

    def plant_foreign(self) -> list[str]:
        """Every foreign object (and on local, every odd name and the symlink); their names."""
        for key in FOREIGN_KEYS:
            self.plant(key)
        planted = list(FOREIGN_KEYS)
        if self.directory is not None:
            for name in ODD_NAMES:
                self.plant(name)
            target = self.directory.parent / f"outside-{uuid.uuid4().hex}"
            target.write_bytes(FOREIGN_BODY)
            (self.directory / SYMLINK).symlink_to(target)
            planted += [*ODD_NAMES, SYMLINK]
        return planted

    def still_there(self, names: list[str]) -> list[str]:
        """The planted ``names`` still holding their bytes (read from disk on local)."""
        if self.directory is None:
            return [n for n in names if self.adapter.read_if_exists(n) == FOREIGN_BODY]
        return [n for n in names if os.path.lexists(self.directory / n)]


@pytest.fixture(params=["memory", "local"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Root]:
    if request.param == "memory":
        yield Root(open_adapter(f"memory://foreign-{uuid.uuid4().hex}"), None)
    else:
        directory = tmp_path / "root"
        directory.mkdir()
        yield Root(open_adapter(f"file://{directory}"), directory)


def rows(start: int, count: int = 2) -> pa.Table:
    return pa.table({"id": list(range(start, start + count))}, schema=SCHEMA)


def ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def engine_with_table(root: Root, **settings: Any) -> Engine:
    engine = Engine.open(root.adapter, settings=EngineSettings(**settings))
    engine.create_table("t", SCHEMA)
    engine.commit({"t": rows(0)}, CommitRequest(idempotency_key="k-0"))
    return engine


# -- the engine works among foreign objects --------------------------------------------------------------
def test_open_heal_commit_read_compact_history_and_audit_ignore_foreign_objects(root: Root) -> None:
    engine = engine_with_table(root)
    planted = root.plant_foreign()
    reopened = Engine.open(root.adapter)  # the full recovery sweep lists __recovery/
    assert reopened.heal().recovered == ()
    reopened.commit({"t": rows(10)}, CommitRequest(idempotency_key="k-1"))
    reopened.commit({"t": rows(20)})
    assert ids(reopened.read("t")) == [0, 1, 10, 11, 20, 21]
    assert reopened.compact("t", min_fragments=2) is not None
    assert ids(reopened.read("t")) == [0, 1, 10, 11, 20, 21]
    snapshot = reopened.snapshot()
    # The file list outside readers (Spark's data source) take: only the snapshot's own fragments.
    assert all(layout.is_own_key(f.key) for f in reopened.files("t", snapshot))
    assert [r.version for r in reopened.history()][-1] == snapshot.version
    assert reopened.find_commit("k-1") is not None
    assert reopened.audit_log() == []
    assert ids(Engine.open(root.adapter, read_only=True).read("t")) == [0, 1, 10, 11, 20, 21]
    assert engine.snapshot().version == snapshot.version
    assert root.still_there(planted) == planted


def test_vacuum_deletes_only_its_own_files_and_reports_the_rest(root: Root) -> None:
    engine = engine_with_table(root, key_window_s=0.0)
    orphan = engine.write_fragment("t", rows(99))  # never committed: vacuum's to reclaim
    job = layout.staging_prefix("t", uuid.uuid4().hex)  # a native Spark job's folder that never committed
    root.plant(f"{job}/part-00000-0f0e0d0c-0b0a-0908-0706-050403020100-c000.parquet")
    root.plant(f"{job}/_SUCCESS")
    engine.commit({"t": rows(10)}, CommitRequest(mode="overwrite"))  # the first fragment is garbage now
    planted = root.plant_foreign()
    report = engine.vacuum(grace_s=0)
    assert orphan.key in report.deleted
    assert {f"{job}/_SUCCESS", f"{job}/part-00000-0f0e0d0c-0b0a-0908-0706-050403020100-c000.parquet"} <= set(
        report.deleted
    )
    assert not set(report.deleted) & set(planted)
    assert report.keys_expired == 1  # k-0's ledger entry, past the window; the foreign ones are skipped
    assert root.still_there(planted) == planted
    assert set(report.foreign) == set(planted)
    assert list(report.foreign) == sorted(report.foreign)
    assert ids(engine.read("t")) == [10, 11]
    again = engine.vacuum(grace_s=0)
    assert again.deleted == () and set(again.foreign) == set(planted)
    assert root.still_there(planted) == planted


def test_dry_run_reports_foreign_objects_and_deletes_nothing(root: Root) -> None:
    engine = engine_with_table(root)
    root.plant("tables/t/data/foreign.parquet")
    root.plant("__tables/x.json")
    report = engine.vacuum(grace_s=0, dry_run=True)
    assert report.foreign == ("__tables/x.json", "tables/t/data/foreign.parquet")
    assert root.still_there(["tables/t/data/foreign.parquet", "__tables/x.json"]) == [
        "tables/t/data/foreign.parquet",
        "__tables/x.json",
    ]


def test_vacuum_keeps_a_foreign_parquet_file_in_the_data_folder(root: Root) -> None:
    engine = engine_with_table(root)
    root.plant("tables/t/data/foreign.parquet")
    root.plant("tables/t/data/col=x/foreign.parquet")
    assert engine.vacuum(grace_s=0).deleted == ()
    assert root.still_there(["tables/t/data/foreign.parquet", "tables/t/data/col=x/foreign.parquet"]) == [
        "tables/t/data/foreign.parquet",
        "tables/t/data/col=x/foreign.parquet",
    ]


def test_vacuum_keeps_files_in_a_staging_folder_no_spark_job_of_the_engine_named(root: Root) -> None:
    engine = engine_with_table(root)
    root.plant("tables/t/data/_staging/somejob/part-00000.parquet")
    assert engine.vacuum(grace_s=0).deleted == ()
    assert root.still_there(["tables/t/data/_staging/somejob/part-00000.parquet"]) != []


def test_vacuum_keeps_a_foreign_object_among_the_table_maps(root: Root) -> None:
    engine = engine_with_table(root)
    root.plant("__tables/x.json")
    assert engine.vacuum(grace_s=0).table_maps_removed == 0
    assert root.still_there(["__tables/x.json"]) == ["__tables/x.json"]


def test_key_expiry_skips_a_foreign_object_under_the_ledger(root: Root) -> None:
    engine = engine_with_table(root, key_window_s=0.0)
    root.plant("__keys/readme.json")
    assert engine.vacuum(grace_s=0).keys_expired == 1
    assert root.still_there(["__keys/readme.json"]) == ["__keys/readme.json"]


def test_foreign_objects_in_the_recovery_and_audit_folders_are_not_read(root: Root) -> None:
    engine = engine_with_table(root)
    root.plant("__recovery/notes.json")
    root.plant("__audit/notes.json")
    Engine.open(root.adapter).commit({"t": rows(5)})
    assert engine.heal().recovered == () and engine.audit_log() == []


def test_a_foreign_history_object_is_not_taken_for_a_commit_record(root: Root) -> None:
    engine = engine_with_table(root)
    root.plant("__history/old/00000000000000000001.json")
    assert engine._manifests.history.stored_versions() == []


# -- corrupt metadata at the engine's own names is still refused ------------------------------------------
def test_corrupt_metadata_at_an_own_name_is_still_refused(root: Root) -> None:
    engine = engine_with_table(root, key_window_s=0.0)
    sidecar = layout.sidecar_key(str(ULID()))
    root.plant(sidecar, b"{not json")
    with pytest.raises(CorruptSidecarError):
        engine.heal()
    root.adapter.delete(sidecar)
    root.plant(entry_key("k-0"), b"{not json")
    with pytest.raises(CorruptMetadataError):
        engine.vacuum(grace_s=0)
    root.adapter.delete(entry_key("k-0"))
    root.plant(layout.audit_key(str(ULID())), b"{not json")
    with pytest.raises(CorruptMetadataError):
        engine.audit_log()


def test_own_name_shapes_are_recognised_exactly() -> None:
    own = [
        layout.MANIFEST_KEY,
        layout.version_key("t", 3),
        layout.checkpoint_key("t", 3),
        layout.data_key("t", str(ULID())),
        layout.data_key("t", str(ULID()), "a=1/b=__null__"),
        layout.data_key("t", "part-00003-0f0e0d0c-0b0a-0908-0706-050403020100-c000.snappy", "a=1"),
        f"{layout.staging_prefix('t', uuid.uuid4().hex)}/_temporary/0/x",
        layout.table_map_key(4, str(ULID())),
        layout.history_key(4),
        layout.sidecar_key(str(ULID())),
        layout.audit_key(str(ULID())),
        entry_key("any key"),
    ]
    assert [key for key in own if not layout.is_own_key(key)] == []
    foreign = [
        *FOREIGN_KEYS,
        layout.data_key("t", str(ULID()).lower()),
        layout.data_key("t", "part-00003-0f0e0d0c-0b0a-0908-0706-050403020100-c000"),  # Spark's, unplaced
        f"{layout.staging_prefix('t', uuid.uuid4().hex.upper())}/x",
        f"{layout.staging_prefix('t', uuid.uuid4().hex)}",
        "__keys/" + "a" * 63 + ".json",
        "__tables/00000000000000000004.json",
        "_manifest.json.bak",
    ]
    assert [key for key in foreign if layout.is_own_key(key)] == []


# -- the idempotency store and remove_orphans -------------------------------------------------------------
def test_purge_neither_fails_on_nor_deletes_foreign_objects_in_the_store(root: Root) -> None:
    store = IdempotencyStore(root.adapter, lifetime=timedelta(hours=1))
    key = str(uuid.uuid4())
    owned = store.reserve("r", key, operation="op", resource="x", fingerprint="f")
    assert isinstance(owned, Owned)
    done = store.finalize(owned, http_status=201, summary={}, attachment=b"metadata")
    assert isinstance(done, Finalized)
    attachment = store.attachment_location(done.record)
    assert attachment is not None
    slot, mine = attachment.split("/", 2)[2].rsplit("/", 1)
    foreign = [
        "idempotency/readme.txt",
        "idempotency/records/readme.json",
        "idempotency/records/ab/cd.json",
        "idempotency/expiry/readme.txt",
        f"idempotency/expiry/{'a' * 40}/{'b' * 40}/notes.txt",
        "idempotency/attachments/readme.txt",
        f"idempotency/attachments/{slot}/notes.txt",
        f"idempotency/attachments/{slot}/{mine}.bak",
        f"idempotency/attachments/{slot}/{mine.split('-')[0]}",
        f"idempotency/attachments/{'a' * 40}/{'b' * 40}/{mine.upper()}",
    ]
    for name in foreign:
        root.plant(name)
    assert store.purge_expired(datetime.now(UTC)) == 0  # not due: the record is kept and indexed
    assert store.attachment(done.record) == b"metadata"
    assert store.purge_expired(datetime.now(UTC) + timedelta(days=1)) == 1
    assert root.still_there(foreign) == foreign
    assert not root.adapter.exists(attachment)  # purged with its record


def test_remove_orphans_removes_only_staging_names_of_twelve_digits(tmp_path: Path) -> None:
    adapter = open_adapter(f"file://{tmp_path}")
    folder = tmp_path / "tables" / "t" / "data"
    folder.mkdir(parents=True)
    names = ["x#123", "x#1234567890123", "x#12345678901a", "x#", "#123456789012", "readme.txt"]
    staged = "x#123456789012"
    old = time.time() - 3600
    for name in [*names, staged]:
        (folder / name).write_bytes(FOREIGN_BODY)
        os.utime(folder / name, (old, old))
    young = "y#123456789012"  # a staging file this young may be a live writer's
    (folder / young).write_bytes(FOREIGN_BODY)
    assert adapter.remove_orphans(min_age_s=60) == 1
    assert sorted(os.listdir(folder)) == sorted([*names, young])


# -- on every backend, through its raw store: markers and names only S3 and Azure can hold --------------
# Planted through Backend.foreign_writer (raw requests on S3 and Azure, the file system on local, obstore on
# memory), inside the folders the engine lists: folder markers at several depths, names no key can have,
# and an object with a valid name. A store that cannot hold one skips it (contract_tests.foreign_clauses).
RAW_PLANTED = (
    ("tables/", b""),
    ("tables/t/data/", b""),
    ("tables/t/data/col=x/", b""),
    ("tables/t/_versions/", b""),
    ("__recovery/", b""),
    ("tables/t/data/tab\tname.parquet", FOREIGN_BODY),
    ("tables/t/data//double.parquet", FOREIGN_BODY),
    ("tables/t/_versions/bell\x07.json", FOREIGN_BODY),
    ("__keys/back\\slash.json", FOREIGN_BODY),
    ("tables/t/data/readme.txt", FOREIGN_BODY),
)


def test_the_engine_works_among_what_another_client_planted_on_every_backend(adapter: StorageAdapter) -> None:
    """Open, commit, read, heal and vacuum (dry run and real) a table whose folders hold what another
    client wrote there, on memory, local, SeaweedFS and Azurite; afterwards every planted entry is still
    there, byte for byte as the raw store holds it, and vacuum names every one of them."""
    config = adapter.config  # type: ignore[attr-defined]
    writer = config.spec.foreign_writer(config)
    engine_with_table(Root(adapter, None))
    sent: dict[str, bytes] = {}
    for name, data in RAW_PLANTED:
        try:
            writer.put(name, data)
        except StorageError:  # this store cannot hold the name
            continue
        sent[name] = data
    try:
        held = {name: size for name, size in listable(writer, sent).items() if not layout.is_own_key(name)}
        assert held, "the store held none of the planted entries"
        reopened = Engine.open(adapter)
        reopened.commit({"t": rows(2)}, CommitRequest(idempotency_key="k-1"))
        assert ids(reopened.read("t")) == [0, 1, 2, 3]
        reopened.heal()
        assert set(reopened.vacuum(grace_s=0, dry_run=True).foreign) == set(held)
        report = reopened.vacuum(grace_s=0)
        assert set(report.foreign) == set(held) and not set(report.deleted) & set(held)
        after = writer.held()
        assert {name: after.get(name) for name in held} == held
        assert ids(Engine.open(adapter).read("t")) == [0, 1, 2, 3]
    finally:
        for name in writer.held():
            if not layout.is_own_key(name):
                with contextlib.suppress(StorageError):
                    writer.remove(name)
