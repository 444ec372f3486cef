"""No lost update across processes (spawn), and vacuum's grace rule, on shared backends."""

from __future__ import annotations

import multiprocessing

import pytest
from engine_crash_worker import SCHEMA, append_worker, batch

from storage_adapter.engine import CommitRequest, Engine, EngineSettings, StaleFragmentError
from storage_adapter.engine.tables import FragmentRef

PROCESSES = 3
COMMITS_EACH = 6


def test_processes_appending_concurrently_lose_no_update(adapter):
    if not adapter.capabilities.shared_across_processes:
        pytest.skip("memory stores are per process")
    engine = Engine.open(adapter)
    engine.create_table("t", SCHEMA)
    context = multiprocessing.get_context("spawn")
    with context.Pool(PROCESSES) as pool:
        results = pool.starmap(append_worker, [(adapter, "t", w, COMMITS_EACH) for w in range(PROCESSES)])
    acknowledged = sorted(v for versions in results for v in versions)
    assert acknowledged == list(range(2, 2 + PROCESSES * COMMITS_EACH))  # one manifest version each
    tags = engine.read("t").column("tag").to_pylist()
    assert sorted(tags) == sorted(f"{w}-{i}" for w in range(PROCESSES) for i in range(COMMITS_EACH))
    assert [r.version for r in engine.history()] == list(range(1, 2 + PROCESSES * COMMITS_EACH))


def test_vacuum_reclaims_only_unreferenced_files_past_grace(adapter):
    engine = Engine.open(adapter, settings=EngineSettings(retention=2))
    engine.create_table("t", SCHEMA)
    orphan = engine.write_fragment("t", batch("orphan", 1))  # never committed
    engine.commit({"t": batch("old", 2)})
    engine.commit({"t": batch("new", 1)}, CommitRequest(mode="overwrite"))
    engine.commit({"t": batch("newer", 1)})
    assert engine.vacuum().deleted == ()  # default grace: everything is young
    report = engine.vacuum(grace_s=0)
    assert [r.version for r in engine.history()] == [3, 4]  # window [2, 4]: table versions 0 and 1 are out
    assert orphan.key in report.deleted
    # version 1 ("old") stays: manifest version 2 (the window's floor) pins it; and so does version 0,
    # the full version version 1's delta is resolved from
    assert sorted(k for k in report.deleted if k.endswith(".json")) == []
    assert sorted(engine.read("t").column("tag").to_pylist()) == ["new", "newer"]
    assert engine.read("t", 3).column("tag").to_pylist() == ["new"]  # retained versions still read
    assert engine.vacuum(grace_s=0).deleted == ()
    assert not adapter.exists(orphan.key)


def test_commit_refuses_fragments_vacuum_may_reclaim(adapter):
    engine = Engine.open(adapter, settings=EngineSettings(grace_s=10.0))
    engine.create_table("t", SCHEMA)
    ref = engine.write_fragment("t", batch("x", 1))
    stale = FragmentRef(
        ref.table, ref.key, ref.rows, ref.bytes, ref.schema_fingerprint, "2000-01-01T00:00:00+00:00"
    )
    with pytest.raises(StaleFragmentError):
        engine.commit_fragments({"t": [stale]})
    assert engine.read("t").num_rows == 0
