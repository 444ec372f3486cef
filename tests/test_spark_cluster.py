"""The Spark data path on a multi-process cluster: ``local-cluster[2,1,1024]`` runs each executor in a JVM
of its own (as standalone, YARN or Kubernetes do), where ``local[N]`` runs every task in the driver's.
Write, read and stream through the data source and through the native path on ``file://``; an executor
JVM SIGKILLed mid-write leaves the table exact, and a re-run of the same application version is a replay.

Stress tier: each test starts a driver of its own (spark_cluster_worker.py: a process holds one
SparkContext, the session's ``spark`` is ``local[4]``) and two executor JVMs, 1-3 minutes on a shared
2-core host, over the default tier's budget.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from storage_adapter.engine import Engine

pytestmark = pytest.mark.stress


def run_driver(scenario: str, tmp_path: Path) -> tuple[Engine, dict[str, Any]]:
    root, workdir = tmp_path / "root", tmp_path / "work"
    root.mkdir()
    workdir.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            str(Path(__file__).with_name("spark_cluster_worker.py")),
            scenario,
            f"file://{root}",
            str(workdir),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return Engine.open(f"file://{root}"), json.loads(done.stdout.strip().splitlines()[-1])


def test_write_read_and_stream_on_a_cluster(tmp_path: Path) -> None:
    engine, report = run_driver("roundtrip", tmp_path)
    assert len(report["executors"]) == 2 and report["driver"] not in report["executors"]
    assert report["source"] == {"rows": 20_000, "id_sum": sum(range(20_000)), "distinct_ids": 20_000}
    assert report["native"] == {"rows": 20_000, "id_sum": sum(range(20_000, 40_000)), "distinct_ids": 20_000}
    assert report["native_partitions"] == ["d0", "d1", "d2"]
    assert report["streamed"] == report["native_streamed"] == list(range(20))
    assert report["stream_watermark"] == report["native_stream_watermark"] == 1  # two micro-batches
    assert sorted(engine.read("native").column("id").to_pylist()) == list(range(20_000, 40_000))


def test_an_executor_killed_mid_write_leaves_the_table_exact_and_a_rerun_replays(tmp_path: Path) -> None:
    """Per path (data source, native), one executor JVM is SIGKILLed while both run the write's tasks: its
    task fails and runs again on the other (or its replacement); the table holds every row once, the same
    application version again publishes nothing, and vacuum leaves exactly the published files."""
    engine, report = run_driver("kill", tmp_path)
    rows = report["rows"]
    for path in ("source_kill", "native_kill"):
        kill = report[path]
        assert kill["killed"] in kill["executors_before"] and kill["failed_tasks"] >= 1, kill
    exact = {"rows": rows, "id_sum": sum(range(rows)), "distinct_ids": rows}
    assert report["source"] == report["native"] == exact
    assert report["replayed_versions"] == 0 and report["native_rerun_replayed"]
    engine.vacuum(grace_s=0)
    for table in ("source", "native"):
        published = {f.key for f in engine.files(table)}
        assert {i.key for i in engine.adapter.list(f"tables/{table}/data")} == published
