"""Subprocess for the streaming test: a named file-source query writing ``format("storage_adapter")``,
one input file per micro-batch, run until the input is drained (``availableNow``). Named, as production
queries are: Spark then hands the sink ``queryName`` among its options.

Usage: python spark_stream_worker.py URL OPTIONS_JSON TABLE SOURCE_DIR CHECKPOINT_DIR. Prints one JSON line:
the table's row count and the query's application watermark.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from storage_adapter.engine import Engine
from storage_adapter.spark import spark_session

QUERY_NAME = "events_to_storage_adapter"


def run_query(spark: Any, url: str, options: dict[str, str], table: str, source: str, checkpoint: str) -> str:
    """Run the query (named QUERY_NAME) until its input is drained; returns its id (stable across restarts)."""
    stream = (
        spark.readStream.schema("id LONG, day STRING, score DOUBLE")
        .option("maxFilesPerTrigger", 1)
        .json(source)
    )
    query = (
        stream.writeStream.format("storage_adapter")
        .options(**options)
        .option("table", table)
        .option("checkpointLocation", checkpoint)
        .queryName(QUERY_NAME)
        .trigger(availableNow=True)
        .start(url)
    )
    query.awaitTermination()
    return str(query.id)


def main(url: str, options: dict[str, str], table: str, source: str, checkpoint: str) -> None:
    spark = spark_session("local[2]", "stream-worker")
    query_id = run_query(spark, url, options, table, source, checkpoint)
    spark.stop()
    engine = Engine.open(url, read_only=True, options=options)
    print(
        json.dumps(
            {
                "rows": engine.read(table).num_rows,
                "app_version": engine.app_version(f"spark-query-{query_id}"),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5])
