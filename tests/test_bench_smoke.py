"""Smoke test of `storage-adapter bench`: it runs end to end and writes its table, JSON and chart.

Numbers are never asserted (they belong to bench/ and reports); only that every part was measured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def _run_module(module: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -m module args``, asserted to exit 0 (its output's tail is the failure message)."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _bench(results: Path, backends: str) -> dict[str, object]:
    done = _run_module(
        "contract_tests", "bench", "--quick", "--backends", backends, "--results", str(results), timeout=900
    )
    assert "## Targets" in done.stdout
    for name in ("bench.md", "bench.json", "bench.png"):
        assert (results / name).stat().st_size > 0
    return json.loads((results / "bench.json").read_text())


# The benches measure, they promise nothing: their smoke runs are in the stress tier (nightly).
@pytest.mark.stress
def test_bench_quick_memory_and_local(tmp_path: Path) -> None:
    data = _bench(tmp_path, "memory,local")
    latency = {(r["backend"], r["op"], r["client"]) for r in data["latency"]}
    for op in ("get", "put", "write_if_absent", "write_if_match", "list"):
        assert ("local", op, "adapter") in latency and ("memory", op, "obstore") in latency
    assert ("local", "write_if_match", "obstore") not in latency  # raw LocalStore has no conditional update
    # Issue 20's hot path, side by side: the floors of a local read, list_dir everywhere, seeds unmeasured.
    assert {("local", "get", "open().read()"), ("local", "get", "pyarrow.fs")} <= latency
    assert ("memory", "list_dir", "adapter") in latency and ("local", "list_dir", "obstore") in latency
    assert ("local", "put", "open().read()") not in latency
    targets = {t["target"] for t in data["targets"]}
    assert "local 1KiB get p50, adapter / open().read()" in targets
    assert "memory 1KiB list p50, adapter / obstore" in targets
    assert {r["in_flight"] for r in data["concurrency"]} == {1, 8, 64}
    assert {(r["mode"], r["processes"]) for r in data["local_cas"]} == {
        (m, n) for m in ("adapter", "floor") for n in (1, 2, 4)
    }
    assert all(isinstance(t["met"], bool) for t in data["targets"])
    assert {(r["backend"], r["client"]) for r in data["async_gets"]} == {
        (b, c)
        for b in ("memory", "local")
        for c in ("adapter-async (one event loop)", "adapter (thread pool)")
    }


@pytest.mark.stress
def test_bench_quick_with_seaweedfs(tmp_path: Path) -> None:
    """Includes boto3 and s3fs; starts its own SeaweedFS inside the bench process (about 30 s)."""
    data = _bench(tmp_path, "seaweedfs")
    clients = {r["client"] for r in data["latency"] if r["backend"] == "seaweedfs"}
    # The four clients side by side, and the adapter's own variants beside them (its no-copy read, its
    # listing without SeaweedFS's prefix confirmation), named as the adapter's.
    assert {"adapter", "obstore", "boto3", "s3fs"} <= clients
    assert all(c.startswith("adapter") for c in clients - {"obstore", "boto3", "s3fs"}), clients
    assert any("boto3" in t["target"] for t in data["targets"])
    assert any("async twin" in t["target"] for t in data["targets"])


@pytest.mark.stress
def test_scaling_curves_quick_on_memory(tmp_path: Path) -> None:
    """bench.scaling draws every curve with its goal (sizes from --quick); numbers are not asserted."""
    out = tmp_path / "scaling"
    _run_module("bench.scaling", "--quick", "--backends", "memory", "--out", str(out), timeout=600)
    data = json.loads(out.with_suffix(".json").read_text())
    assert set(data["curves"]) == {
        "history",
        "key_lookup",
        "tables",
        "catalog",
        "fragments",
        "orphans",
        "records",
        "writers",
        "writers_shared",
    }
    for entry in data["curves"].values():
        assert entry["goal"] and len(entry["backends"]["memory"]["points"]) == 3
    assert out.with_suffix(".png").stat().st_size > 0


@pytest.mark.stress
def test_engine_peers_quick_on_local(tmp_path: Path) -> None:
    """bench.engine_peers (issue 44) at its smoke size on local: every system's rows, the report's shape.
    No number is asserted (only the counts of rows lost and failed, which are exact)."""
    pytest.importorskip("deltalake")
    pytest.importorskip("lance")
    out = tmp_path / "peers"
    _run_module("bench.engine_peers", "--quick", "--backends", "local", "--out", str(out), timeout=300)
    data = json.loads((out / "engine_peers.json").read_text())
    rows = {(r["system"], r["backend"], r["measurement"]): r for r in data["rows"]}
    systems = ("engine", "engine (durable=False)", "delta-rs", "lance")
    for system in systems:
        for measurement in (
            "commit p50, commits 1-5",
            "commit p50, commits 8-12",
            "whole-table read",
            "one-column read (id)",
            "requests per commit",
            "2 writers x 3 appends: commits/s",
        ):
            assert (system, "local", measurement) in rows, (system, measurement)
        assert rows[(system, "local", "2 writers x 3 appends: rows lost")]["value"] == 0
        assert system in data["promises"]
    # this engine's requests are counted through the adapter; a peer's own I/O is not
    assert rows[("engine", "local", "requests per commit")]["value"] is not None
    assert rows[("lance", "local", "requests per commit")]["value"] is None
    assert ("engine", "local", "two-table atomic commit p50") in rows
    assert "## What each system promises" in (out / "engine_peers.md").read_text()
    assert (out / "engine_peers.png").stat().st_size > 0
