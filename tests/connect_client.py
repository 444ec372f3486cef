"""Subprocess for the Spark Connect tests: a client with no JVM (a Connect session cannot share a process
with the classic session of the other Spark tests: PySpark refuses it, and marks the whole process as
Connect). Runs the named scenarios against the server, two at a time on the one session (as threads of
an application share a Connect session; each scenario has a folder of its own), and prints one JSON line:
each scenario's observations (or the error it raised: its type and message) and seconds.

Usage: python connect_client.py SC_URL ROOT_DIR SCENARIO... (ROOT_DIR: a folder both share, file://).
SC_URL ``api-mode``: no server; ``spark.api.mode=connect`` starts one in the client's process.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from storage_adapter import open_adapter
from storage_adapter.engine import Engine
from storage_adapter.registry import HadoopRoot
from storage_adapter.spark import spark_session, typed_errors, write
from storage_adapter.spark.native import check_shared_root, hadoop_location
from storage_adapter.spark.session import is_connect

ROWS = 600
SERVER = [""]  # the SC_URL argument


def frame(spark: Any, first: int = 0, rows: int = ROWS) -> Any:
    return spark.range(first, first + rows, 1, 2).selectExpr(
        "id", "cast(id % 3 as string) AS day", "id * 0.5 AS score"
    )


def ids(url: str, table: str) -> list[int]:
    return sorted(Engine.open(url, read_only=True).read(table).column("id").to_pylist())


def error_of(call: Callable[[], Any]) -> dict[str, str]:
    try:
        call()
    except Exception as exc:
        return {"type": type(exc).__name__, "message": str(exc)[:2000], "length": str(len(str(exc)))}
    return {}


def session(spark: Any, root: str) -> dict[str, Any]:
    """spark_session(remote=...) gives a Connect session with the data source registered."""
    observed = {
        "connect": is_connect(spark),
        "pushdown": spark.conf.get("spark.sql.python.filterPushdown.enabled"),
        "sparkContext": error_of(lambda: spark.sparkContext),
    }
    if SERVER[0].startswith("sc://"):  # SPARK_REMOTE names the same server: the same session
        os.environ["SPARK_REMOTE"] = SERVER[0]
        observed["spark_remote_same"] = spark_session() is spark
    return observed


def datasource(spark: Any, root: str) -> dict[str, Any]:
    """A write (creating the table), a read back, and a re-run of the same application version."""
    url = f"{root}/datasource"

    def save(first: int) -> None:
        (
            frame(spark, first)
            .write.format("storage_adapter")
            .option("table", "events")
            .option("createTable", "true")
            .option("appId", "nightly")
            .option("appVersion", "1")
            .mode("append")
            .save(url)
        )

    save(0)
    read = spark.read.format("storage_adapter").option("table", "events").load(url)
    read_ids = sorted(row.id for row in read.select("id").collect())
    save(ROWS)  # a re-run of application version 1 (other rows): a replay, adds nothing
    return {"engine_ids": ids(url, "events"), "read_ids": read_ids, "expected": list(range(ROWS))}


def native(spark: Any, root: str) -> dict[str, Any]:
    """The native write on a file:// root both share, partitioned, creating the table; then an append."""
    url = f"{root}/native"
    first = write(frame(spark), url, "events", create_table=True, partition_by=["day"])
    second = write(frame(spark, ROWS), url, "events")
    engine = Engine.open(url, read_only=True)
    table = engine.read("events")
    days = {str(d) for d in table.column("day").to_pylist()}
    return {
        "ids": ids(url, "events"),
        "expected": list(range(2 * ROWS)),
        "versions": [
            first.commit.version if first.commit else None,
            second.commit.version if second.commit else None,
        ],
        "days": sorted(days),
        "staging_left": [
            i.key for i in engine.adapter.list("tables/events/data/_staging") if "probe" in i.key
        ],
    }


def native_read(spark: Any, root: str) -> dict[str, Any]:
    """storage_adapter.spark.read on Connect: the latest snapshot and an older version, exactly."""
    from storage_adapter.spark.native_read import read

    url = f"{root}/native_read"
    write(frame(spark), url, "events", create_table=True, partition_by=["day"])
    write(frame(spark, ROWS), url, "events")
    latest = read(spark, url, "events")
    return {
        "ids": sorted(row.id for row in latest.select("id").collect()),
        "expected": list(range(2 * ROWS)),
        "older": sorted(row.id for row in read(spark, url, "events", version=2).select("id").collect()),
        "schema": latest.schema.simpleString(),
    }


def refusals(spark: Any, root: str) -> dict[str, Any]:
    """Refused native writes create nothing: a bad mode, a root the server's Spark does not see, and an
    s3:// root (the wheel's server has no hadoop-aws: asked of the server, not of this client)."""
    url = f"{root}/refused"
    engine = Engine.open(url)
    bad_mode = error_of(lambda: write(frame(spark), url, "bad_mode", create_table=True, mode="bogus"))
    elsewhere = HadoopRoot(uri=f"{root}/nowhere".replace("file://", "file:///tmp/not-shared-"), settings={})
    unshared = error_of(lambda: check_shared_root(spark, engine.adapter, elsewhere, "unshared"))
    s3 = open_adapter(
        "s3://bucket/prefix",
        endpoint="http://127.0.0.1:9",
        region="us-east-1",
        access_key_id="k",
        secret_access_key="s",
        allow_http=True,
    )
    started = time.monotonic()
    s3_error = error_of(lambda: hadoop_location(s3, spark))
    return {
        "bad_mode": bad_mode,
        "unshared": unshared,
        "s3": s3_error,
        "s3_seconds": time.monotonic() - started,
        "tables": Engine.open(url, read_only=True).snapshot().tables,
        "left": [i.key for i in engine.adapter.list("")],
    }


def errors(spark: Any, root: str) -> dict[str, Any]:
    """A misspelt option, through typed_errors(): the data source's ConfigurationError, its message alone."""

    def misspelt() -> None:
        with typed_errors():
            frame(spark).write.format("storage_adapter").option("table", "t").option("tabel", "x").mode(
                "append"
            ).save(f"{root}/errors")

    return error_of(misspelt)


def streaming(spark: Any, root: str) -> dict[str, Any]:
    """A named stream (tests/spark_stream_worker.py's query) restarted after the state a driver killed
    between the engine's publish and Spark's commit log leaves (batch 0 published, ``commits/0`` gone):
    the replayed batch 0 adds nothing, the later batches land once each."""
    import pyarrow as pa
    from spark_stream_worker import run_query  # tests/ is on the path

    url = f"{root}/stream"
    folder = Path(url.removeprefix("file://"))
    source, checkpoint = folder / "in", folder / "checkpoint"
    engine = Engine.open(url)
    engine.create_table(
        "events", pa.schema([("id", pa.int64()), ("day", pa.string()), ("score", pa.float64())])
    )

    def add(files: range) -> None:
        source.mkdir(parents=True, exist_ok=True)
        for f in files:
            rows = [{"id": f * 10 + i, "day": f"d{f}", "score": 1.0} for i in range(5)]
            (source / f"part-{f}.json").write_text("\n".join(json.dumps(r) for r in rows))

    add(range(1))
    run_query(spark, url, {}, "events", str(source), str(checkpoint))
    first_rows = engine.read("events").num_rows
    (checkpoint / "commits" / "0").unlink()
    (checkpoint / "commits" / ".0.crc").unlink(missing_ok=True)
    add(range(1, 2))
    query_id = run_query(spark, url, {}, "events", str(source), str(checkpoint))
    return {
        "first_rows": first_rows,
        "replayed": (checkpoint / "commits" / "0").exists(),
        "ids": ids(url, "events"),
        "expected": [f * 10 + i for f in range(2) for i in range(5)],
        "app_version": engine.app_version(f"spark-query-{query_id}"),
    }


SCENARIOS: dict[str, Callable[[Any, str], dict[str, Any]]] = {
    "session": session,
    "datasource": datasource,
    "native": native,
    "native_read": native_read,
    "refusals": refusals,
    "errors": errors,
    "streaming": streaming,
}


def main() -> None:
    url, root, *names = sys.argv[1:]
    SERVER[0] = url
    started = time.monotonic()
    if url == "api-mode":  # spark.api.mode=connect: Spark starts a local Connect server in this process
        spark = spark_session("local[1]", settings={"spark.api.mode": "connect"})
    else:
        spark = spark_session(remote=url)
    results: dict[str, Any] = {"connect_seconds": time.monotonic() - started}

    def run(name: str) -> None:
        began = time.monotonic()
        try:
            results[name] = SCENARIOS[name](spark, root)
        except Exception as exc:
            results[name] = {"failed": f"{type(exc).__name__}: {str(exc)[:2000]}"}
        results[name + "_seconds"] = time.monotonic() - began

    # Two at a time: most of a scenario's time is the server's (Python workers started, micro-batches
    # triggered), so a long one (the stream, listed first) runs beside the others.
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(run, names))
    results["scenarios_seconds"] = time.monotonic() - started - results["connect_seconds"]
    print(json.dumps(results))


if __name__ == "__main__":
    main()
