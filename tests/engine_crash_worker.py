"""Subprocess workers and shared checks for the engine's tests (imported by spawn children, or run as a script).

As a script (the kill -9 campaign): ``python engine_crash_worker.py URL OPTIONS_JSON WORKER ACK_FILE N``
opens the engine and runs N two-table commits; commit i appends ``rows_per_commit`` rows tagged
``{WORKER}-{i}`` to tables ``a`` and ``b``. After each acknowledged commit it appends the tag to ACK_FILE
and fsyncs, so the parent knows exactly which commits were acknowledged before it killed the process.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from typing import Any

import pyarrow as pa

from storage_adapter.engine import CommitRequest, Engine
from storage_adapter.engine.layout import RECOVERY_PREFIX
from storage_adapter.engine.manifest import ManifestStore
from storage_adapter.engine.tables import TableVersionStore

SCHEMA = pa.schema([("tag", pa.string()), ("n", pa.int64())])
ROWS_PER_COMMIT = {"a": 3, "b": 2}


def batch(tag: str, rows: int) -> pa.Table:
    return pa.table({"tag": [tag] * rows, "n": list(range(rows))}, schema=SCHEMA)


def assert_converged(adapter: Any) -> None:
    """No pending sidecar, and every table's head holds exactly its pinned content."""
    assert adapter.list(RECOVERY_PREFIX) == []
    versions = TableVersionStore(adapter)
    for name, entry in ManifestStore(adapter).load().manifest.tables.items():
        head = versions.head(name, entry.version)
        assert versions.fragments(name, head) == versions.fragments(name, entry.version)


def check_all_or_nothing(
    engine: Engine,
    tag_prefix: str,
    acknowledged: list[str],
    rows_per_commit: dict[str, int] = ROWS_PER_COMMIT,
) -> int:
    """Check the commits tagged ``{tag_prefix}-i`` in one snapshot: each has all its rows in every table or
    none; every acknowledged one is there; besides them at most the next (in flight) one. Returns how many
    unacknowledged commits landed."""
    snap = engine.snapshot()
    per_table = {
        table: Counter(
            t for t in engine.read(table, snap).column("tag").to_pylist() if t.startswith(f"{tag_prefix}-")
        )
        for table in rows_per_commit
    }
    tag_sets = [set(counts) for counts in per_table.values()]
    landed = set.union(*tag_sets)
    assert all(tags == landed for tags in tag_sets), f"not all-or-nothing: {per_table}"
    for table, rows in rows_per_commit.items():
        assert all(count == rows for count in per_table[table].values()), per_table[table]
    assert set(acknowledged) <= landed, f"acknowledged commits lost: {sorted(set(acknowledged) - landed)}"
    in_flight = landed - set(acknowledged)
    assert in_flight <= {f"{tag_prefix}-{len(acknowledged)}"}, f"unexpected commits {sorted(in_flight)}"
    return len(in_flight)


def append_worker(adapter: Any, table: str, worker: int, commits: int) -> list[int]:
    """Append ``commits`` single-row batches to ``table``; return the manifest versions acknowledged."""
    engine = Engine.open(adapter, actor=f"worker-{worker}")
    return [engine.commit({table: batch(f"{worker}-{i}", 1)}).version for i in range(commits)]


def run_commits(url: str, options: dict[str, Any], worker: str, ack_path: str, commits: int) -> None:
    engine = Engine.open(url, actor=f"crash-worker-{worker}", options=options)
    with open(ack_path, "a", encoding="utf-8") as ack:
        for i in range(commits):
            tag = f"{worker}-{i}"
            engine.commit(
                {t: batch(tag, rows) for t, rows in ROWS_PER_COMMIT.items()},
                CommitRequest(idempotency_key=tag),
            )
            ack.write(tag + "\n")
            ack.flush()
            os.fsync(ack.fileno())


if __name__ == "__main__":
    run_commits(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]))
