"""Bulk-load throughput: Spark ``bulk_load`` against one process writing the same rows with pyarrow.

Both sides commit the same rows (id int64, label string, score float64) into a fresh table through the
same adapter, in the same run, interleaved round by round; the Spark side also generates its rows in the
executors. Spark's start-up is excluded (one session serves every round). Prints a table and writes
``bulk_load.json`` into the results directory. Numbers are reported, never asserted.

    python -m bench.bulk_load [--rows N] [--rounds R] [--master local[4]] [--results DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa

from storage_adapter import open_adapter
from storage_adapter.engine import Engine
from storage_adapter.protocol import StorageAdapter
from storage_adapter.spark import spark_session
from storage_adapter.spark.load import bulk_load

SCHEMA = pa.schema([("id", pa.int64()), ("label", pa.string()), ("score", pa.float64())])


def arrow_rows(rows: int) -> pa.Table:
    ids = pa.array(range(rows), pa.int64())
    labels = pa.array([f"row-{i}" for i in range(rows)], pa.string())
    scores = pa.array([i * 0.5 for i in range(rows)], pa.float64())
    return pa.Table.from_arrays([ids, labels, scores], schema=SCHEMA)


def spark_rows(spark: Any, rows: int, partitions: int) -> Any:
    """The same rows as ``arrow_rows``, generated in the executors."""
    return spark.range(0, rows, numPartitions=partitions).selectExpr(
        "id", "concat('row-', id) AS label", "CAST(id AS DOUBLE) / 2 AS score"
    )


def fresh_engine(adapter: StorageAdapter) -> Engine:
    engine = Engine.open(adapter.child(f"bulk-{uuid.uuid4().hex[:10]}"))
    engine.create_table("events", SCHEMA)
    return engine


def measure(adapter: StorageAdapter, spark: Any, rows: int, rounds: int, partitions: int) -> dict[str, Any]:
    table = arrow_rows(rows)
    # Warm up: the first job of a session starts Python workers and JIT-compiles the plan.
    bulk_load(fresh_engine(adapter), "events", spark_rows(spark, 1000, partitions))
    single, parallel = [], []
    for _ in range(rounds):
        engine = fresh_engine(adapter)
        started = time.perf_counter()
        engine.commit({"events": table})
        single.append(time.perf_counter() - started)

        engine = fresh_engine(adapter)
        frame = spark_rows(spark, rows, partitions)
        started = time.perf_counter()
        load = bulk_load(engine, "events", frame, max_rows_per_fragment=max(1, rows // partitions))
        parallel.append(time.perf_counter() - started)
        assert load.rows == rows
    single_s, parallel_s = statistics.median(single), statistics.median(parallel)
    return {
        "backend": adapter.capabilities.backend,
        "rows": rows,
        "partitions": partitions,
        "pyarrow_single_process_s": single_s,
        "spark_bulk_load_s": parallel_s,
        "pyarrow_rows_per_s": rows / single_s,
        "spark_rows_per_s": rows / parallel_s,
        "spark_over_pyarrow_throughput": single_s / parallel_s,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--master", default="local[4]")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--results", type=Path, default=Path("results/bench"))
    args = parser.parse_args(argv)
    from storage_adapter.servers.seaweedfs import SeaweedFS

    results = []
    with (
        tempfile.TemporaryDirectory() as local_root,
        SeaweedFS(bucket="bench") as endpoint,
        endpoint.scoped(),
    ):
        # Spark's Python workers start inside the server's scope: they inherit its client settings.
        spark = spark_session(args.master, "bench-bulk-load")
        targets = [
            open_adapter(f"file://{local_root}"),
            open_adapter(endpoint.url(), **endpoint.adapter_options()),
        ]
        for adapter in targets:
            results.append(measure(adapter, spark, args.rows, args.rounds, args.partitions))
        spark.stop()
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "bulk_load.json").write_text(json.dumps(results, indent=2))
    print(
        f"bulk load of {args.rows} rows, {args.partitions} partitions on {args.master}, median of {args.rounds}"
    )
    print(f"{'backend':<8} {'pyarrow 1 proc':>16} {'spark bulk_load':>16} {'spark/pyarrow':>14}")
    for r in results:
        print(
            f"{r['backend']:<8} {r['pyarrow_rows_per_s']:>11,.0f} r/s {r['spark_rows_per_s']:>11,.0f} r/s"
            f" {r['spark_over_pyarrow_throughput']:>13.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
