"""Spark bulk load (storage_adapter.spark.load): parallel fragment writes, one commit, nothing visible
from failed or retried tasks, orphans reclaimed by vacuum. On local and SeaweedFS (memory stores are
per-process, so executors cannot reach them: that case must be refused)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from storage_adapter import UnsupportedOperationError
from storage_adapter.engine import CommitConflictError, Engine, SchemaMismatchError
from storage_adapter.spark.load import bulk_load, write_tables

SCHEMA = pa.schema([("id", pa.int64()), ("label", pa.string()), ("score", pa.float64())])


def data_files(engine: Engine, table: str) -> set[str]:
    return {i.key for i in engine.adapter.list(f"tables/{table}") if i.key.endswith(".parquet")}


@pytest.fixture
def engine(adapter: Any) -> Engine:
    if not adapter.capabilities.shared_across_processes:
        pytest.skip("memory stores are per-process: Spark executors cannot reach them")
    engine = Engine.open(adapter)
    engine.create_table("events", SCHEMA)
    return engine


def frame_of(spark: Any, rows: int, partitions: int, first: int = 0) -> Any:
    return spark.range(first, first + rows, numPartitions=partitions).selectExpr(
        "id", "concat('row-', id) AS label", "CAST(id AS DOUBLE) / 2 AS score"
    )


def test_bulk_load_publishes_every_partition_in_one_commit(engine: Engine, spark: Any) -> None:
    key = str(uuid.uuid4())
    before = engine.snapshot().version
    load = bulk_load(
        engine, "events", frame_of(spark, 20_000, 6), idempotency_key=key, max_rows_per_fragment=2_000
    )
    assert load.rows == 20_000 and len(load.fragments) >= 6
    assert load.commit.version == before + 1  # one publish for the whole load
    table = engine.read("events")
    assert sorted(table.column("id").to_pylist()) == list(range(20_000))
    assert table.schema.equals(SCHEMA)
    assert engine.find_commit(key) is not None
    assert data_files(engine, "events") == {f.key for f in load.fragments}


def test_bulk_load_overwrite_replaces_the_table(engine: Engine, spark: Any) -> None:
    bulk_load(engine, "events", frame_of(spark, 1_000, 2))
    bulk_load(engine, "events", frame_of(spark, 300, 3, first=5_000), mode="overwrite")
    assert sorted(engine.read("events").column("id").to_pylist()) == list(range(5_000, 5_300))


def test_columns_are_matched_by_name_and_a_missing_one_is_refused_before_any_task(
    engine: Engine, spark: Any
) -> None:
    with pytest.raises(SchemaMismatchError, match="label"):
        bulk_load(engine, "events", frame_of(spark, 100, 2).select("id", "score"))
    assert data_files(engine, "events") == set()
    bulk_load(engine, "events", frame_of(spark, 100, 2).select("label", "id", "score"))
    assert engine.read("events").schema.equals(SCHEMA) and engine.read("events").num_rows == 100


def test_a_failed_job_commits_nothing_and_vacuum_reclaims_its_fragments(engine: Engine, spark: Any) -> None:
    version = engine.snapshot().version
    # One partition's rows cannot be cast to the table schema: that task stops, the driver raises.
    poisoned = frame_of(spark, 4_000, 4).selectExpr(
        "id", "label", "CASE WHEN id >= 3500 THEN 'not a number' ELSE CAST(score AS STRING) END AS score"
    )
    with pytest.raises(SchemaMismatchError, match="not a number"):
        write_tables(engine, {"events": poisoned}, allow_lossy=True, max_rows_per_fragment=500)
    assert engine.snapshot().version == version
    assert engine.read("events").num_rows == 0
    orphans = data_files(engine, "events")
    report = engine.vacuum(grace_s=0)
    assert set(report.deleted) == orphans
    assert data_files(engine, "events") == set()


@pytest.mark.parametrize("path", ["bulk_load", "datasource"])
def test_retried_task_attempts_leave_only_invisible_reclaimable_fragments(
    engine: Engine, tmp_path: Path, path: str
) -> None:
    """A task attempt that wrote a fragment and then failed is retried; the load holds every row exactly
    once, and the failed attempts' fragments are unreferenced until vacuum removes them."""
    adapter = engine.adapter
    options = dict(adapter.config.options)
    root = adapter.child("retry")
    # Two attempts fail in all, each after writing a fragment; every retry runs in a fresh Python worker,
    # so the budget is counted across processes.
    env = {
        **os.environ,
        "STORAGE_ADAPTER_FAILPOINTS": "spark_load.after_fragment=error*2",
        "STORAGE_ADAPTER_FAILPOINTS_DIR": str(tmp_path),
    }
    result = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).with_name("spark_load_retry_worker.py")),
            root.url,
            json.dumps(options),
            path,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome["rows"] == outcome["distinct_ids"] == 2_000
    orphans = set(outcome["data_files"]) - set(outcome["committed"])
    assert orphans, "the failpoint should have failed at least one attempt after its fragment was written"
    reopened = Engine.open(root)
    assert set(reopened.vacuum(grace_s=0).deleted) == orphans
    assert reopened.read("events").num_rows == 2_000


def test_memory_stores_are_refused(spark: Any) -> None:
    engine = Engine.open(f"memory://bulk-{uuid.uuid4().hex[:8]}")
    engine.create_table("events", SCHEMA)
    with pytest.raises(UnsupportedOperationError, match="per-process"):
        bulk_load(engine, "events", frame_of(spark, 10, 1))


def test_vacuum_also_reclaims_local_staging_leftovers(tmp_path: Path) -> None:
    """A writer killed mid-stage leaves `name#digits` beside its target; vacuum reclaims it past grace."""
    engine = Engine.open(f"file://{tmp_path}")
    engine.create_table("events", SCHEMA)
    leftover = tmp_path / "tables" / "events" / "leftover.parquet#123456789012"
    leftover.parent.mkdir(parents=True, exist_ok=True)
    leftover.write_bytes(b"half a file")
    assert engine.vacuum(grace_s=3600).staging_removed == 0  # young: may belong to a live writer
    os.utime(leftover, (0, 0))
    assert engine.vacuum(grace_s=3600).staging_removed == 1
    assert not leftover.exists()


def test_a_landed_key_or_a_stale_version_is_answered_before_the_job_runs(engine: Engine, spark: Any) -> None:
    """Replays and conflicts cost no Spark job and leave no orphan fragments."""
    key = str(uuid.uuid4())
    first = bulk_load(engine, "events", frame_of(spark, 100, 2), idempotency_key=key)
    files = data_files(engine, "events")
    again = bulk_load(engine, "events", frame_of(spark, 100, 2), idempotency_key=key)
    assert again.commit.replayed and again.commit.version == first.commit.version and again.fragments == ()
    with pytest.raises(CommitConflictError) as info:
        bulk_load(engine, "events", frame_of(spark, 100, 2), expected_version=first.commit.version - 1)
    assert (info.value.expected, info.value.actual) == (first.commit.version - 1, first.commit.version)
    assert data_files(engine, "events") == files  # neither wrote a fragment
    assert engine.read("events").num_rows == 100
