"""A SparkSession configured for this project's jobs (any master: ``local[N]`` here, a cluster in production).

Executors reopen adapters from their pickled config; worker processes must run this interpreter
(``PYSPARK_PYTHON``) to see the package.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def spark_session(master: str = "local[2]", app_name: str = "storage-adapter") -> Any:
    """Get or create a SparkSession: UI off, driver on loopback, quiet logs, small shuffles."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session
