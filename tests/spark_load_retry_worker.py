"""Subprocess for the bulk-load retry test: its own SparkSession allowing task retries (local[2,4]).

Usage: python spark_load_retry_worker.py URL OPTIONS_JSON bulk_load|datasource (the load function, or
``df.write.format("storage_adapter")``). Executors inherit STORAGE_ADAPTER_FAILPOINTS,
so the first fragment each Python worker writes fails its task attempt after the fragment is durable.
Prints one JSON line: the loaded rows, committed fragments and every data file present afterwards.
"""

from __future__ import annotations

import json
import sys

import pyarrow as pa

from storage_adapter.engine import Engine
from storage_adapter.spark import spark_session
from storage_adapter.spark.load import bulk_load

SCHEMA = pa.schema([("id", pa.int64()), ("label", pa.string())])


def main(url: str, options: dict[str, object], path: str) -> None:
    engine = Engine.open(url, options=options)
    engine.create_table("events", SCHEMA)
    spark = spark_session("local[2,4]", "bulk-load-retry")
    frame = spark.range(0, 2000, numPartitions=4).selectExpr("id", "concat('row-', id) AS label")
    if path == "bulk_load":
        bulk_load(engine, "events", frame, max_rows_per_fragment=250)
    else:
        writer = frame.write.format("storage_adapter").options(**{k: str(v) for k, v in options.items()})
        writer.option("table", "events").option("maxRowsPerFragment", "250").mode("append").save(url)
    spark.stop()
    table = engine.read("events")
    print(
        json.dumps(
            {
                "rows": table.num_rows,
                "distinct_ids": len(set(table.column("id").to_pylist())),
                "committed": sorted(f.key for f in engine.files("events")),
                "data_files": sorted(
                    i.key for i in engine.adapter.list("tables/events") if i.key.endswith(".parquet")
                ),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3])
