"""kill -9 of the owning process at each crash point; retries converge to exactly one applied commit with
the right (replayed) outcome. On local and SeaweedFS (a memory store dies with its process)."""

from __future__ import annotations

import base64
import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from idempotency_crash_worker import CRASH_POINTS, committed_keys, open_engine, run_commit

from storage_adapter.idempotency import IdempotencyStore, RecordStatus

LOADED_CI = timedelta(seconds=60)  # per-request deadline: these tests are about crashes, not latency
WORKER = Path(__file__).with_name("idempotency_crash_worker.py")
# What the first retry after the crash must answer: (replayed, record status found before it).
EXPECTED = {
    "after_reserve": (False, RecordStatus.IN_PROGRESS),  # reconciled NOT_APPLIED: taken over and run
    # Killed inside Engine.commit: the reconciler's heal rolls the dead writer's sidecar back or forward
    # (the engine decides); NOT_APPLIED then runs, APPLIED finalizes from the engine's commit record.
    "commit.after_sidecar": (False, RecordStatus.IN_PROGRESS),
    "commit.before_publish": (True, RecordStatus.IN_PROGRESS),  # every table version written: rolled forward
    "commit.after_publish": (True, RecordStatus.IN_PROGRESS),  # published: APPLIED
    "after_commit": (True, RecordStatus.IN_PROGRESS),  # reconciled APPLIED: finalized from the engine
    "after_finalize": (True, RecordStatus.FINALIZED),  # plain replay
}


def crash_at(adapter: Any, key: str, point: str, workdir: Path) -> None:
    """Run the worker until it reaches ``point``, then SIGKILL it."""
    marker = workdir / f"{point}.reached"
    spec = workdir / f"{point}.json"
    spec.write_text(
        json.dumps(
            {
                "adapter": base64.b64encode(pickle.dumps(adapter)).decode(),
                "key": key,
                "crash_at": point,
                "marker": str(marker),
                "lease_s": 30,
            }
        )
    )
    process = subprocess.Popen(
        [sys.executable, str(WORKER), str(spec)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            if process.poll() is not None:
                raise AssertionError(f"worker exited before {point}: {process.stderr.read().decode()}")  # type: ignore[union-attr]
            if time.monotonic() > deadline:
                raise AssertionError(f"worker never reached {point}")
            time.sleep(0.05)
        os.kill(process.pid, signal.SIGKILL)
    finally:
        process.kill()
        process.wait(30)
    assert process.returncode == -signal.SIGKILL


def retrier_store(adapter: Any) -> IdempotencyStore:
    """The store as a retrying client sees it: its clock is past the crashed owner's lease (no sleeping)."""
    return IdempotencyStore(
        adapter.child("store"),
        clock=lambda: datetime.now(UTC) + timedelta(minutes=10),
        call_timeout=LOADED_CI,
    )


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_kill_9_of_the_owner_converges_to_one_commit(adapter: Any, point: str, tmp_path: Path) -> None:
    if not adapter.capabilities.shared_across_processes:
        pytest.skip("a memory store dies with the killed process: nothing to recover")
    key = str(uuid.uuid4())
    # Opened before the crash, so the dead writer's sidecar is healed by the reconciler, not by open.
    engine = open_engine(adapter)
    crash_at(adapter, key, point, tmp_path)

    store = retrier_store(adapter)
    replayed, status_before = EXPECTED[point]
    found = store.load("tenant-a", key)
    assert found is not None and found.record.status is status_before

    first = run_commit(store, engine, key)
    assert committed_keys(engine) == [f"tenant-a/{key}"]  # exactly one applied commit
    (record,) = [r for r in engine.history() if r.mode != "create"]
    landed = engine.find_commit(record.idempotency_key)
    assert landed is not None and (first.status, first.summary) == (201, {"version": landed.version})
    assert first.replayed is replayed
    second = run_commit(store, engine, key)
    assert (second.status, second.summary, second.replayed) == (201, first.summary, True)
    settled = store.load("tenant-a", key)
    assert settled is not None and settled.record.status is RecordStatus.FINALIZED


@pytest.mark.parametrize("point", ["after_reserve", "commit.before_publish", "after_commit"])
def test_concurrent_retries_after_a_crash_converge(adapter: Any, point: str, tmp_path: Path) -> None:
    """Several clients retry at once after the owner died: one takes over (or finalizes from the engine),
    the others wait and replay; still exactly one commit, one answer."""
    if not adapter.capabilities.shared_across_processes:
        pytest.skip("a memory store dies with the killed process: nothing to recover")
    key = str(uuid.uuid4())
    engine = open_engine(adapter)
    crash_at(adapter, key, point, tmp_path)
    store = retrier_store(adapter)
    barrier = threading.Barrier(4)
    answers: list[Any] = []

    def retry() -> None:
        barrier.wait()
        answers.append(run_commit(store, engine, key))

    threads = [threading.Thread(target=retry) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert committed_keys(engine) == [f"tenant-a/{key}"]
    assert len({(a.status, json.dumps(a.summary)) for a in answers}) == 1 and answers[0].status == 201
    assert sum(not a.replayed for a in answers) == (1 if point == "after_reserve" else 0)
