"""An end-to-end Spark pipeline over the engine: raw CSV in, two tables out in ONE commit, read back
through ``format("storage_adapter")``, and a re-run that changes nothing.

    python examples/spark_pipeline.py [URL] [--option name=value ...]

URL is the engine's storage root (default: a fresh local directory); options are ``open_adapter``'s
(endpoint, access_key_id, ...; credentials may also come from the environment). Spark's console progress
is on: a person is watching.

The job is keyed by an application watermark (``app_id="orders-pipeline"``, ``app_version`` = the run's
batch number), so running the same batch again is a replay: no Spark job runs and nothing is doubled.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import logging
import random
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa

from storage_adapter.engine import Engine, TableExistsError
from storage_adapter.spark import spark_session, write_tables

APP_ID = "orders-pipeline"
ORDERS = pa.schema(
    [("order_id", pa.int64()), ("customer", pa.string()), ("day", pa.string()), ("amount", pa.float64())]
)
TOTALS = pa.schema(
    [("day", pa.string()), ("customer", pa.string()), ("orders", pa.int64()), ("amount", pa.float64())]
)


def generate_raw(directory: Path, batch: int, rows: int = 600) -> Path:
    """Raw input as a producer would drop it: CSV files with a header, some rows invalid (amount <= 0)."""
    rng = random.Random(batch)
    directory.mkdir(parents=True, exist_ok=True)
    for part in range(3):
        with open(directory / f"orders-{batch}-{part}.csv", "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["order_id", "customer", "day", "amount"])
            for i in range(rows // 3):
                order_id = batch * 1_000_000 + part * 10_000 + i
                out.writerow(
                    [
                        order_id,
                        f"c{rng.randrange(5)}",
                        f"2026-11-{20 + rng.randrange(3)}",
                        round(rng.uniform(-5, 100), 2),
                    ]
                )
    return directory


def ensure_tables(engine: Engine) -> None:
    for name, schema, partition_by in (("orders", ORDERS, ["day"]), ("daily_totals", TOTALS, [])):
        with contextlib.suppress(TableExistsError):  # a later run: the tables are there
            engine.create_table(name, schema, partition_by=partition_by)


def run(spark: Any, url: str, options: dict[str, str], raw: Path, batch: int) -> dict[str, Any]:
    """One run of the job for input ``batch``; returns what it published and what reads back."""
    engine = Engine.open(url, options=options)
    ensure_tables(engine)
    orders = (
        spark.read.option("header", "true")
        .schema("order_id LONG, customer STRING, day STRING, amount DOUBLE")
        .csv(str(raw))
        .where("amount > 0")
    )
    totals = orders.groupBy("day", "customer").agg({"order_id": "count", "amount": "sum"})
    totals = totals.withColumnRenamed("count(order_id)", "orders").withColumnRenamed("sum(amount)", "amount")
    load = write_tables(engine, {"orders": orders, "daily_totals": totals}, app_id=APP_ID, app_version=batch)
    reader = spark.read.format("storage_adapter").options(**options)
    read_back = {t: reader.option("table", t).load(url).count() for t in ("orders", "daily_totals")}
    return {
        "version": None if load.commit is None else load.commit.version,
        "replayed": bool(load.commit and load.commit.replayed),
        "rows_written": load.rows,
        "read_back": read_back,
        "engine_rows": {t: engine.read(t).num_rows for t in read_back},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("url", nargs="?", help="storage root URL (default: a fresh local directory)")
    parser.add_argument("--option", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    workdir = Path(tempfile.mkdtemp(prefix="spark-pipeline-"))
    url = args.url or f"file://{workdir / 'warehouse'}"
    options = dict(item.split("=", 1) for item in args.option)
    spark = spark_session("local[2]", "storage-adapter-example", progress=True)
    raw = generate_raw(workdir / "raw", batch=1)
    first = run(spark, url, options, raw, batch=1)
    again = run(spark, url, options, raw, batch=1)  # the same job again: a replay, nothing doubled
    print(json.dumps({"first": first, "rerun": again}, indent=2))
    spark.stop()


if __name__ == "__main__":
    main()
