"""Processes for the idempotency tests: the crash worker (run as a script and killed with SIGKILL at a
failpoint), the race worker (spawned processes and Spark tasks), and helpers around the real engine.

Run as ``python idempotency_crash_worker.py SPEC_JSON``; the spec names a pickled adapter (base64), the
request, and ``crash_at``: one of CRASH_POINTS. At that point the worker writes ``marker`` and sleeps
until the test kills it with ``kill -9``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import pickle
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa

from storage_adapter.engine import CommitRequest, Engine, TableExistsError, failpoints
from storage_adapter.idempotency import (
    HandlerResult,
    IdempotencyStore,
    IdempotentRequest,
    OwnerContext,
    Policy,
    Response,
    run_idempotent,
)
from storage_adapter.idempotency.engine_reconciler import EngineReconciler

# Where the owning process is killed: in the handler before committing, inside the engine's commit at
# each of its protocol steps (engine failpoints), after the commit returned, and after finalize.
ENGINE_POINTS = ("commit.after_sidecar", "commit.before_publish", "commit.after_publish")
CRASH_POINTS = ("after_reserve", *ENGINE_POINTS, "after_commit", "after_finalize")
TABLE = "orders"


def open_engine(adapter: Any) -> Engine:
    """The real engine under ``engine/`` with one table (created by whoever gets there first)."""
    engine = Engine.open(adapter.child("engine"))
    with contextlib.suppress(TableExistsError):  # another client created it: exactly what we wanted
        engine.create_table(TABLE, pa.schema([("id", pa.int64())]))
    return engine


def committed_keys(engine: Engine) -> list[str | None]:
    """Idempotency keys of every data commit in the engine's history (table creation excluded), without
    the reservation's creation time that ``commit_key`` appends ("realm/key")."""
    return [
        None if record.idempotency_key is None else record.idempotency_key.rsplit("@", 1)[0]
        for record in engine.history()
        if record.mode != "create"
    ]


def describe_commit(commit: Any) -> HandlerResult:
    """The response of a commit request, from the engine's Commit or its CommitRecord (both have it)."""
    return HandlerResult(201, {"version": commit.version})


def commit_request(key: str, realm: str = "tenant-a") -> IdempotentRequest:
    return IdempotentRequest(realm, key, "commit", "table/orders", {"rows": [1, 2, 3]})


def committing_handler(engine: Engine, pause: Any = lambda point: None) -> Any:
    def handler(ctx: OwnerContext) -> HandlerResult:
        pause("after_reserve")
        commit = engine.commit(
            {TABLE: pa.table({"id": [1, 2, 3]})},
            CommitRequest(idempotency_key=ctx.commit_key, key_issued_at=ctx.key_issued_at),
        )
        pause("after_commit")
        return describe_commit(commit)

    return handler


def run_commit(
    store: IdempotencyStore, engine: Engine, key: str, pause: Any = lambda point: None
) -> Response:
    reconciler = EngineReconciler(engine, describe_commit)
    return run_idempotent(
        store, commit_request(key), committing_handler(engine, pause), reconciler=reconciler
    )


def race_effect(adapter: Any, key: str, worker: str) -> tuple[str, int, bool]:
    """One client of a same-key race: the side effect writes a unique object under ``effects/``.
    Returns (summary as canonical JSON, status, replayed)."""
    # A generous deadline: the race measures exactly-once, not how a loaded CI machine's latency looks.
    store = IdempotencyStore(adapter, executor_id=worker, call_timeout=timedelta(seconds=60))

    def handler(ctx: OwnerContext) -> HandlerResult:
        effect = uuid.uuid4().hex
        adapter.write(f"effects/{effect}", worker)
        time.sleep(0.2)  # keep the request in flight so duplicates wait and then replay
        return HandlerResult(201, {"effect": effect})

    request = IdempotentRequest("tenant-a", key, "effect", "resource-1", {"n": 1})
    response = run_idempotent(store, request, handler, policy=Policy(first_wait_s=0.05))
    return (json.dumps(response.summary, sort_keys=True), response.status, response.replayed)


def race_process(adapter: Any, key: str, worker: str, barrier: Any, results: Any) -> None:
    barrier.wait()
    results.put(race_effect(adapter, key, worker))


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    adapter = pickle.loads(base64.b64decode(spec["adapter"]))
    marker = Path(spec["marker"])

    def pause(point: str) -> None:
        if point == spec["crash_at"]:
            marker.write_text(point)
            while True:
                time.sleep(60)  # the test kills us here with SIGKILL

    store = IdempotencyStore(
        adapter.child("store"), lease=timedelta(seconds=spec["lease_s"]), executor_id="crasher"
    )
    engine = open_engine(adapter)
    if spec["crash_at"] in ENGINE_POINTS:
        failpoints.arm(spec["crash_at"], pause)
    response = run_commit(store, engine, spec["key"], pause)
    print(json.dumps({"status": response.status, "summary": response.summary}), flush=True)
    pause("after_finalize")


if __name__ == "__main__":
    main(sys.argv[1])
