"""Processes for the idempotency tests: the crash worker (run as a script and killed with SIGKILL at a
failpoint), the race worker (spawned processes and Spark tasks), and a minimal storage-backed fake engine
with the two methods reconciliation needs (``commit`` and ``find_commit``).

Run as ``python idempotency_crash_worker.py SPEC_JSON``; the spec names a pickled adapter (base64), the
request, and ``crash_at``: one of CRASH_POINTS. At that point the worker writes ``marker`` and sleeps
until the test kills it with ``kill -9``.
"""

from __future__ import annotations

import base64
import json
import pickle
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

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

CRASH_POINTS = ("after_reserve", "mid_commit", "after_commit", "after_finalize")
LOG = "log.json"


@dataclass(frozen=True)
class CommitRecord:
    version: int
    idempotency_key: str | None


class FakeEngine:
    """A minimal engine on the adapter: a commit writes a data object, then publishes by CAS on one log
    object that records the idempotency key in the same write (so ``find_commit`` is exact and a second
    commit with a recorded key publishes nothing). ``before_publish`` is a failpoint hook."""

    def __init__(self, adapter: Any, before_publish: Any = None) -> None:
        self.adapter = adapter
        self.before_publish = before_publish

    def _log(self) -> tuple[list[dict[str, Any]], str | None]:
        versioned = self.adapter.read_versioned(LOG) if self.adapter.exists(LOG) else None
        return ([], None) if versioned is None else (json.loads(versioned.data), versioned.token)

    def commit(self, tables: dict[str, Any], mode: str = "append", idempotency_key: str | None = None) -> CommitRecord:
        data_key = f"data/{uuid.uuid4().hex}"
        self.adapter.write(data_key, json.dumps(tables))
        if self.before_publish is not None:
            self.before_publish()
        while True:
            log, token = self._log()
            for entry in log:
                if idempotency_key is not None and entry["key"] == idempotency_key:
                    return CommitRecord(entry["version"], idempotency_key)
            entry = {"version": len(log) + 1, "key": idempotency_key, "data": data_key}
            body = json.dumps([*log, entry])
            published = (
                self.adapter.write_if_absent(LOG, body) if token is None else self.adapter.write_if_match(LOG, body, token)
            )
            if published:
                return CommitRecord(entry["version"], idempotency_key)

    def find_commit(self, idempotency_key: str) -> CommitRecord | None:
        for entry in self._log()[0]:
            if entry["key"] == idempotency_key:
                return CommitRecord(entry["version"], idempotency_key)
        return None

    def commits(self) -> list[dict[str, Any]]:
        return self._log()[0]


def describe_commit(commit: CommitRecord) -> HandlerResult:
    return HandlerResult(201, {"version": commit.version})


def commit_request(key: str, realm: str = "tenant-a") -> IdempotentRequest:
    return IdempotentRequest(realm, key, "commit", "table/orders", {"rows": [1, 2, 3]})


def committing_handler(engine: FakeEngine, pause: Any = lambda point: None) -> Any:
    def handler(ctx: OwnerContext) -> HandlerResult:
        pause("after_reserve")
        commit = engine.commit({"orders": [1, 2, 3]}, idempotency_key=ctx.commit_key)
        pause("after_commit")
        return describe_commit(commit)

    return handler


def run_commit(store: IdempotencyStore, engine: FakeEngine, key: str, pause: Any = lambda point: None) -> Response:
    reconciler = EngineReconciler(engine, describe_commit)
    return run_idempotent(store, commit_request(key), committing_handler(engine, pause), reconciler=reconciler)


def race_effect(adapter: Any, key: str, worker: str) -> tuple[str, int, bool]:
    """One client of a same-key race: the side effect writes a unique object under ``effects/``.
    Returns (worker, status, summary's effect id, replayed) without the worker for Spark's sake."""
    store = IdempotencyStore(adapter, executor_id=worker)

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

    store = IdempotencyStore(adapter.child("store"), lease=timedelta(seconds=spec["lease_s"]), executor_id="crasher")
    engine = FakeEngine(adapter.child("engine"), before_publish=lambda: pause("mid_commit"))
    response = run_commit(store, engine, spec["key"], pause)
    print(json.dumps({"status": response.status, "summary": response.summary}), flush=True)
    pause("after_finalize")


if __name__ == "__main__":
    main(sys.argv[1])
