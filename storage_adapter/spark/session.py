"""A SparkSession configured for this project's jobs (any master: ``local[N]`` here, a cluster in production).

Executors reopen adapters from their pickled config; worker processes must run this interpreter
(``PYSPARK_PYTHON``) to see the package. The session has the ``storage_adapter`` data source registered.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any


def spark_session(
    master: str = "local[2]",
    app_name: str = "storage-adapter",
    *,
    progress: bool = False,
    settings: Mapping[str, str] | None = None,
) -> Any:
    """Get or create a SparkSession with ``format("storage_adapter")`` registered: driver on loopback,
    small shuffles. ``progress=True`` (the CLI, examples: where a person watches) keeps Spark's console
    progress bar and warnings; otherwise (tests, services) the UI, the bar and all but errors are off.
    ``settings``: more Spark settings for a session created here (e.g. the driver JVM's options)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from storage_adapter.spark.datasource import register

    session = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "true" if progress else "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.python.worker.reuse", "true")
        .config(map=dict(settings or {}))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN" if progress else "ERROR")
    register(session)
    return session
