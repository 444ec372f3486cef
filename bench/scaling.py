"""Scaling curves of the engine and the idempotency store: cost as the work grows, with the goal beside
each curve (issue 17), on memory, local and SeaweedFS in one run.

    python -m bench.scaling [--backends memory,local,seaweedfs,s3-model] [--curves records,...] [--quick]
                            [--out results/scaling]

Each curve is a list of points ``{x, requests, seconds, bytes}``; requests come from CountingAdapter
(deterministic), seconds are wall time (noisy on a shared machine), bytes are metadata bytes written.
Writes ``<out>.json`` and, where matplotlib is installed, ``<out>.png`` (one panel per curve, one line
per backend). ``s3-model`` is memory with a modeled 20 ms round trip per request: it shows what
overlapping requests buys where latency, not this machine's CPU, is the cost. The append-bytes curve is
bench/table_log.py's.

Curves and goals:

* ``history``: the n-th keyed commit (n = 50 .. 2,000): requests and time, medians of the 21 commits up
  to it; goal: the 2,000th costs at most 2x the 50th.
* ``key_lookup``: ``find_commit`` of the first key after n commits; goal: O(1) requests.
* ``tables``: a commit touching k tables (k = 1 .. 100): time; goal: at most ~2x a 1-table commit.
* ``catalog``: a one-table commit in a catalog of c tables (c = 10 .. 1,000): manifest bytes (and time);
  goal: independent of the tables the commit does not touch.
* ``fragments``: a full read of a table of f fragments (f = 100 .. 10,000): time; goal: 10x the
  fragments in at most 10x the time.
* ``orphans``: vacuum of g unreferenced files (g = 100 .. 10,000): requests; goal: O(g / 1,000).
* ``records``: ``purge_expired`` among r live records and r/100 expired ones, after a first purge (which
  reads every record and indexes it; its cost is the point's ``first_requests``): requests; goal:
  O(expired), plus two listings of r/1,000 pages (docs/idempotency.md).
* ``writers`` / ``writers_shared``: w writers (w = 1 .. 8) appending one-row commits for
  ``WRITERS_SECONDS``, one table each / all on one table (bench/contention.py's run: threads on memory,
  processes elsewhere): requests per commit, with commits per second and CommitRetriesExhaustedError in
  each point; goal: no exhausted retries, requests per commit bounded, and (one table each) commits per
  second non-decreasing from 1 to 4 writers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa

from bench.contention import engine_contention
from contract_tests.counting import CountingAdapter
from storage_adapter.adapter import open_adapter
from storage_adapter.engine import CommitRequest, Engine, EngineSettings
from storage_adapter.engine.layout import MANIFEST_KEY
from storage_adapter.engine.manifest import CHANGED_LIMIT
from storage_adapter.idempotency import IdempotencyStore
from storage_adapter.protocol import StorageAdapter

SCHEMA = pa.schema([("id", pa.int64())])
BACKENDS = ("memory", "local", "seaweedfs", "s3-model")
MODEL_LATENCY_S = 0.02  # s3-model: memory plus a 20 ms round trip per request (S3 in-region is 10-30 ms)


def rows(n: int, start: int = 0) -> pa.Table:
    return pa.table({"id": list(range(start, start + n))}, schema=SCHEMA)


@contextlib.contextmanager
def roots(backend: str) -> Iterator[Callable[[str], StorageAdapter]]:
    """A factory of fresh, empty adapter roots on ``backend``."""
    if backend == "memory":
        yield lambda name: open_adapter(f"memory://scaling-{name}-{uuid.uuid4().hex[:8]}")
    elif backend == "s3-model":  # request latency without a server's CPU on these 2 cores
        yield lambda name: CountingAdapter(
            open_adapter(f"memory://scaling-{name}-{uuid.uuid4().hex[:8]}"), latency_s=MODEL_LATENCY_S
        )
    elif backend == "local":
        with tempfile.TemporaryDirectory(prefix="scaling-") as tmp:
            yield lambda name: open_adapter(f"file://{tmp}/{name}-{uuid.uuid4().hex[:8]}")
    else:
        from storage_adapter.servers.seaweedfs import SeaweedFS

        with SeaweedFS(bucket="scaling") as endpoint, endpoint.scoped():
            options = endpoint.adapter_options()
            yield lambda name: open_adapter(endpoint.url(f"{name}-{uuid.uuid4().hex[:8]}"), **options)


def measured(counting: CountingAdapter, call: Callable[[], Any]) -> dict[str, float]:
    before = sum(counting.counts.values())
    started = time.perf_counter()
    call()
    return {"requests": sum(counting.counts.values()) - before, "seconds": time.perf_counter() - started}


def history(root: StorageAdapter, marks: tuple[int, ...]) -> list[dict[str, float]]:
    """The n-th keyed commit, as the median of the 21 commits up to it (``HISTORY_WINDOW``): one commit
    in 100 also writes its table's checkpoint (O(fragments), docs/engine.md), so a single commit at a
    round number would measure the checkpoint, not the history; ``max_seconds`` shows that commit."""
    counting = CountingAdapter(root)
    engine = Engine.open(counting, settings=EngineSettings())
    engine.create_table("t", SCHEMA)
    points: list[dict[str, float]] = []
    window: list[dict[str, float]] = []
    for n in range(1, max(marks) + 1):
        window = [
            *window,
            measured(
                counting, partial(engine.commit, {"t": rows(1, n)}, CommitRequest(idempotency_key=f"k{n}"))
            ),
        ]
        window = window[-HISTORY_WINDOW:]
        if n in marks:
            points.append(
                {
                    "x": n,
                    "requests": statistics.median(p["requests"] for p in window),
                    "seconds": statistics.median(p["seconds"] for p in window),
                    "max_seconds": max(p["seconds"] for p in window),
                }
            )
    return points


HISTORY_WINDOW = 21


def key_lookup(root: StorageAdapter, marks: tuple[int, ...]) -> list[dict[str, float]]:
    counting = CountingAdapter(root)
    engine = Engine.open(counting, settings=EngineSettings(retention=16))
    engine.create_table("t", SCHEMA)
    points = []
    for n in range(1, max(marks) + 1):
        engine.commit({"t": rows(1, n)}, CommitRequest(idempotency_key=f"k{n}"))
        if n in marks:
            points.append({"x": n, **measured(counting, partial(engine.find_commit, "k1"))})
    return points


def tables(root: StorageAdapter, marks: tuple[int, ...]) -> list[dict[str, float]]:
    counting = CountingAdapter(root)
    engine = Engine.open(counting)
    names = [f"t{i}" for i in range(max(marks))]
    for name in names:
        engine.create_table(name, SCHEMA)
    return [
        {"x": k, **measured(counting, partial(engine.commit, {n: rows(1) for n in names[:k]}))} for k in marks
    ]


def catalog(root: StorageAdapter, marks: tuple[int, ...]) -> list[dict[str, float]]:
    points = []
    for c in marks:
        counting = CountingAdapter(root.child(f"c{c}"))
        engine = Engine.open(counting)
        for i in range(c):
            engine.create_table(f"t{i}", SCHEMA)
        for i in range(CHANGED_LIMIT + 1):  # past the creations' inline entries: the steady state
            engine.commit({f"t{i % c}": rows(1, i)})
        point = measured(counting, partial(engine.commit, {"t0": rows(1)}))
        points.append({"x": c, **point, "bytes": len(counting.read_bytes(MANIFEST_KEY))})
    return points


def fragments(root: StorageAdapter, marks: tuple[int, ...]) -> list[dict[str, float]]:
    points = []
    for f in marks:
        counting = CountingAdapter(root.child(f"f{f}"))
        engine = Engine.open(counting)
        engine.create_table("t", SCHEMA)
        refs = [engine.write_fragment("t", rows(1, i)) for i in range(f)]
        engine.commit_fragments({"t": refs})
        reader = Engine.open(counting, read_only=True)  # cold caches: what a new reader pays
        points.append({"x": f, **measured(counting, partial(reader.read, "t"))})
    return points


def orphans(root: StorageAdapter, marks: tuple[int, ...]) -> list[dict[str, float]]:
    points = []
    for g in marks:
        counting = CountingAdapter(root.child(f"g{g}"))
        engine = Engine.open(counting)
        engine.create_table("t", SCHEMA)
        for i in range(g):
            engine.write_fragment("t", rows(1, i))  # never committed: garbage once past the grace period
        points.append({"x": g, **measured(counting, partial(engine.vacuum, grace_s=0.0))})
    return points


def records(root: StorageAdapter, marks: tuple[int, ...]) -> list[dict[str, float]]:
    return [{"x": r, **second_purge(CountingAdapter(root.child(f"r{r}")), r)} for r in marks]


def second_purge(counting: CountingAdapter, live: int) -> dict[str, float]:
    """The cost of a purge among ``live`` records and 1% as many due ones (``expired``), after a first purge
    that found nothing due and so read and indexed every record (``first_requests``)."""
    start = datetime.now(UTC)
    now = start
    stores = (
        (IdempotencyStore(counting, clock=lambda: now), live),  # lifetime 24 h
        (IdempotencyStore(counting, clock=lambda: now, lifetime=timedelta(minutes=10)), max(1, live // 100)),
    )
    for store, n in stores:
        for _ in range(n):
            store.reserve("bench", str(uuid.uuid4()), operation="o", resource="r", fingerprint="f")
    purger = stores[0][0]
    first = measured(counting, partial(purger.purge_expired, start))
    now = start + timedelta(minutes=20)  # the short-lived records are due (and their leases stale)
    return {
        "expired": stores[1][1],
        "first_requests": first["requests"],
        **measured(counting, partial(purger.purge_expired, now)),
    }


def writers(root: StorageAdapter, marks: tuple[int, ...], same_table: bool) -> list[dict[str, float]]:
    points = []
    for w in marks:
        result = engine_contention(root.child(f"w{w}"), w, same_table, WRITERS_SECONDS)
        points.append(
            {
                "x": w,
                "requests": result.requests_per_commit,
                "commits_per_s": result.commits_per_s,
                "exhausted": result.exhausted,
            }
        )
    return points


WRITERS_SECONDS = 2.0  # per point: 4 points of both writers curves in about half a minute on memory
CURVES: dict[str, tuple[Callable[[StorageAdapter, tuple[int, ...]], list[dict[str, float]]], str, str]] = {
    "history": (history, "seconds", "the 2,000th keyed commit costs <= 2x the 50th"),
    "key_lookup": (key_lookup, "requests", "find_commit answers in O(1) requests whatever the history"),
    "tables": (tables, "seconds", "a k-table commit takes <= ~2x a 1-table commit up to k = 100"),
    "catalog": (
        catalog,
        "bytes",
        "a 1-table commit's manifest bytes do not grow with the tables not touched",
    ),
    "fragments": (fragments, "seconds", "10x the fragments read in <= 10x the time"),
    "orphans": (orphans, "requests", "vacuum costs O(garbage / 1,000) requests"),
    "records": (records, "requests", "purge costs O(expired) requests (+ 2 listings of r/1,000 pages)"),
    "writers": (
        partial(writers, same_table=False),
        "requests",
        "w writers, one table each: 0 exhausted, requests/commit bounded, commits/s non-decreasing to w=4",
    ),
    "writers_shared": (
        partial(writers, same_table=True),
        "requests",
        "w writers on one table: 0 exhausted retries, requests/commit bounded",
    ),
}
MARKS = {
    "history": (50, 500, 2000),
    "key_lookup": (50, 500, 2000),
    "tables": (1, 10, 100),
    "catalog": (10, 100, 1000),
    "fragments": (100, 1000, 10000),
    "orphans": (100, 1000, 10000),
    "records": (100, 1000, 10000),
    "writers": (1, 2, 4, 8),
    "writers_shared": (1, 2, 4, 8),
}
QUICK = {
    "history": (10, 50, 200),
    "key_lookup": (10, 50, 200),
    "tables": (1, 5, 20),
    "catalog": (5, 20, 60),
    "fragments": (10, 100, 300),
    "orphans": (10, 100, 300),
    "records": (10, 100, 300),
    "writers": (1, 2, 4),
    "writers_shared": (1, 2, 4),
}


def ratio(points: list[dict[str, float]], measure: str) -> float:
    """Cost of the last point over the first: the number each goal bounds."""
    first = max(points[0][measure], 1e-9)
    return points[-1][measure] / first


def run(backends: list[str], quick: bool, curves: list[str]) -> dict[str, Any]:
    marks = QUICK if quick else MARKS
    results: dict[str, Any] = {"quick": quick, "curves": {}}
    for backend in backends:
        with roots(backend) as fresh:
            for name, (curve, measure, goal) in CURVES.items():
                if name not in curves:
                    continue
                points = curve(fresh(name), marks[name])
                entry = results["curves"].setdefault(name, {"measure": measure, "goal": goal, "backends": {}})
                entry["backends"][backend] = {"points": points, "last_over_first": ratio(points, measure)}
    return results


def plot(results: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    curves = results["curves"]
    figure, axes = plt.subplots(1, len(curves), figsize=(4 * len(curves), 3.4), squeeze=False)
    for axis, (name, entry) in zip(axes[0], curves.items(), strict=True):
        for backend, data in entry["backends"].items():
            xs = [p["x"] for p in data["points"]]
            axis.plot(xs, [p[entry["measure"]] for p in data["points"]], marker="o", label=backend)
        axis.set_xscale("log")
        axis.set_title(f"{name}\n({entry['goal']})", fontsize=7)
        axis.set_ylabel(entry["measure"], fontsize=7)
        axis.legend(fontsize=6)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default="memory,local,seaweedfs")
    parser.add_argument("--curves", default=",".join(CURVES), help="comma-separated curve names")
    parser.add_argument("--quick", action="store_true", help="small sizes (seconds, for smoke tests)")
    parser.add_argument("--out", default="results/scaling", help="output path without extension")
    args = parser.parse_args(argv)
    backends = [b for b in args.backends.split(",") if b]
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown:
        parser.error(f"unknown backends {unknown}; choose from {list(BACKENDS)}")
    curves = [c for c in args.curves.split(",") if c]
    if unknown_curves := sorted(set(curves) - set(CURVES)):
        parser.error(f"unknown curves {unknown_curves}; choose from {list(CURVES)}")
    results = run(backends, args.quick, curves)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1))
    drawn = plot(results, out.with_suffix(".png"))
    for name, entry in results["curves"].items():
        ratios = {b: round(d["last_over_first"], 2) for b, d in entry["backends"].items()}
        print(f"{name:<14} {entry['measure']:<9} last/first {ratios}   goal: {entry['goal']}")
    print(f"wrote {out.with_suffix('.json')}" + (f" and {out.with_suffix('.png')}" if drawn else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
