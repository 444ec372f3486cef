"""Subprocess driver for the cluster tests (test_spark_cluster.py): a session on ``local-cluster[2,1,1024]``,
where each executor is a JVM of its own started by a worker, as on a real cluster (``local[N]`` runs every
task in the driver's JVM). A process holds one SparkContext, so the tests' own ``local[4]`` session cannot
be this one.

Usage: python spark_cluster_worker.py SCENARIO ROOT_URL WORKDIR. Prints one JSON line (what the test checks).

* ``roundtrip``: a batch write through the data source and one through the native path
  (``storage_adapter.spark.write``), each read back through the data source; a named stream through the
  data source, and one through the native path (``foreachBatch``: the batch id as the application
  version), each until its input is drained.
* ``kill``: a write through the data source, then one through the native path, each with one executor JVM
  SIGKILLed while both executors run its tasks; then each is run again with the same application version.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from storage_adapter.engine import Engine
from storage_adapter.spark import spark_session, write

MASTER = "local-cluster[2,1,1024]"
SCHEMA = pa.schema([("id", pa.int64()), ("day", pa.string()), ("score", pa.float64())])
EXECUTOR_MAIN = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


def frame_of(spark: Any, rows: int, partitions: int, first: int = 0) -> Any:
    return spark.range(first, first + rows, numPartitions=partitions).selectExpr(
        "id", "concat('d', CAST(id % 3 AS STRING)) AS day", "CAST(id AS DOUBLE) / 2 AS score"
    )


def datasource_write(frame: Any, url: str, table: str, **options: str) -> None:
    frame.write.format("storage_adapter").mode("append").option("table", table).options(**options).save(url)


def datasource_summary(spark: Any, url: str, table: str) -> dict[str, Any]:
    """Count, id sum and distinct ids of the table, read through the data source on the executors."""
    row = (
        spark.read.format("storage_adapter")
        .option("table", table)
        .load(url)
        .selectExpr("count(*) AS n", "sum(id) AS total", "count(DISTINCT id) AS distinct_ids")
        .first()
    )
    return {"rows": row["n"], "id_sum": row["total"], "distinct_ids": row["distinct_ids"]}


def executor_pids() -> list[int]:
    """The executor JVMs below this driver (a worker in the driver's JVM starts each as a child process)."""
    children: dict[int, list[int]] = {}
    commands: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            commands[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # exited meanwhile
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    below, pending = [], [os.getpid()]
    while pending:
        for child in children.get(pending.pop(), []):
            below.append(child)
            pending.append(child)
    return sorted(pid for pid in below if EXECUTOR_MAIN in commands.get(pid, ""))


class ExecutorKiller(threading.Thread):
    """Watches the job Spark runs meanwhile: once a stage has finished a task and runs one on each
    executor, SIGKILLs the first executor JVM (mid-task: its task fails and runs again elsewhere)."""

    def __init__(self, spark: Any) -> None:
        super().__init__(daemon=True)
        self.tracker = spark.sparkContext.statusTracker()
        self.stopped = threading.Event()
        self.killed: int | None = None
        self.stage: int | None = None

    def run(self) -> None:
        while not self.stopped.is_set() and self.killed is None:
            for stage in self.tracker.getActiveStageIds():
                info = self.tracker.getStageInfo(stage)
                if info is not None and info.numCompletedTasks >= 1 and info.numActiveTasks >= 2:
                    pids = executor_pids()
                    if len(pids) == 2:
                        os.kill(pids[0], signal.SIGKILL)
                        self.killed, self.stage = pids[0], stage
                        return
            time.sleep(0.02)

    def failed_tasks(self) -> int:
        """The failed task attempts of the stage it killed an executor in (0 if it killed none)."""
        info = None if self.stage is None else self.tracker.getStageInfo(self.stage)
        return 0 if info is None else int(info.numFailedTasks)


def with_a_killed_executor(spark: Any, action: Any) -> dict[str, Any]:
    before = executor_pids()
    killer = ExecutorKiller(spark)
    killer.start()
    try:
        action()
    finally:
        killer.stopped.set()
        killer.join()
    return {"executors_before": before, "killed": killer.killed, "failed_tasks": killer.failed_tasks()}


def wait_for_executors(count: int, timeout_s: float = 120) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while len(pids := executor_pids()) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} executors never ran (found {pids})")
        time.sleep(0.2)
    return pids


def roundtrip(spark: Any, url: str, workdir: Path) -> dict[str, Any]:
    engine = Engine.open(url)
    engine.create_table("source", SCHEMA, partition_by=["day"])
    engine.create_table("native", SCHEMA, partition_by=["day"])
    engine.create_table("streamed", SCHEMA)
    engine.create_table("native_streamed", SCHEMA)
    datasource_write(frame_of(spark, 20_000, 4), url, "source", appId="roundtrip", appVersion="1")
    write(
        frame_of(spark, 20_000, 4, first=20_000), engine, "native", app_id="roundtrip-native", app_version=1
    )
    source = workdir / "stream-in"
    source.mkdir()
    for batch in range(2):
        rows = [{"id": batch * 10 + i, "day": f"d{i % 3}", "score": 1.0} for i in range(10)]
        (source / f"part-{batch}.json").write_text("\n".join(json.dumps(r) for r in rows))
    stream = spark.readStream.schema("id LONG, day STRING, score DOUBLE").option("maxFilesPerTrigger", 1)
    query = (
        stream.json(str(source))
        .writeStream.format("storage_adapter")
        .option("table", "streamed")
        .option("checkpointLocation", str(workdir / "checkpoint"))
        .queryName("cluster_stream")
        .trigger(availableNow=True)
        .start(url)
    )
    query.awaitTermination()

    def native_batch(frame: Any, batch_id: int) -> None:
        write(frame, engine, "native_streamed", app_id="cluster-native-stream", app_version=batch_id)

    native = (
        stream.json(str(source))
        .writeStream.foreachBatch(native_batch)
        .option("checkpointLocation", str(workdir / "native-checkpoint"))
        .queryName("cluster_native_stream")
        .trigger(availableNow=True)
        .start()
    )
    native.awaitTermination()
    return {
        "executors": executor_pids(),
        "driver": os.getpid(),
        "source": datasource_summary(spark, url, "source"),
        "native": datasource_summary(spark, url, "native"),
        "native_partitions": sorted({dict(f.partition)["day"] for f in engine.files("native")}),
        "streamed": sorted(engine.read("streamed").column("id").to_pylist()),
        "stream_watermark": engine.app_version(f"spark-query-{query.id}"),
        "native_streamed": sorted(engine.read("native_streamed").column("id").to_pylist()),
        "native_stream_watermark": engine.app_version("cluster-native-stream"),
    }


def kill(spark: Any, url: str, rows: int) -> dict[str, Any]:
    engine = Engine.open(url)
    engine.create_table("source", SCHEMA, partition_by=["day"])
    engine.create_table("native", SCHEMA, partition_by=["day"])
    # Many partitions: both executors are busy for several tasks, so the kill lands inside one.
    frame = frame_of(spark, rows, 16)
    options = {"appId": "killed-source", "appVersion": "1"}
    report: dict[str, Any] = {"rows": rows}
    report["source_kill"] = with_a_killed_executor(
        spark, lambda: datasource_write(frame, url, "source", **options)
    )
    wait_for_executors(2)
    report["native_kill"] = with_a_killed_executor(
        spark, lambda: write(frame, engine, "native", app_id="killed-native", app_version=1)
    )
    versions = engine.snapshot().version
    datasource_write(frame, url, "source", **options)  # the same application version again: a replay
    rerun = write(frame, engine, "native", app_id="killed-native", app_version=1)
    report["replayed_versions"] = engine.snapshot().version - versions
    report["native_rerun_replayed"] = rerun.commit is not None and rerun.commit.replayed
    report["source"] = datasource_summary(spark, url, "source")
    report["native"] = datasource_summary(spark, url, "native")
    return report


def main(scenario: str, url: str, workdir: str) -> None:
    spark = spark_session(MASTER, f"cluster-{scenario}")
    try:
        wait_for_executors(2)
        if scenario == "roundtrip":
            report = roundtrip(spark, url, Path(workdir))
        elif scenario == "kill":
            report = kill(spark, url, rows=1_000_000)
        else:
            raise SystemExit(f"unknown scenario {scenario!r} (roundtrip, kill)")
    finally:
        spark.stop()
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
