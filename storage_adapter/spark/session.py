"""A SparkSession configured for this project's jobs (any master: ``local[N]`` here, a cluster in production),
or a Spark Connect client session (``remote="sc://host:port"``, ``SPARK_REMOTE``, or ``spark.api.mode`` set
to ``connect``: docs/spark.md, "Spark Connect").

Executors reopen adapters from their pickled config; worker processes must run this interpreter
(``PYSPARK_PYTHON``) to see the package (on Connect: the server's Python workers must import it). The
session has the ``storage_adapter`` data source registered.
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
    remote: str | None = None,
    progress: bool = False,
    settings: Mapping[str, str] | None = None,
) -> Any:
    """Get or create a SparkSession with ``format("storage_adapter")`` registered: driver on loopback,
    small shuffles. ``progress=True`` (the CLI, examples: where a person watches) keeps Spark's console
    progress bar and warnings; otherwise (tests, services) the UI, the bar and all but errors are off.
    ``settings``: more Spark settings for a session created here (e.g. the driver JVM's options).

    Spark Connect: ``remote`` (``sc://host:port``), else ``SPARK_REMOTE`` in the environment, gives a
    Connect client session of that server (``SparkSession.builder.remote(url)``, Spark's documented way:
    no JVM in this process; ``master`` and the local settings above are the server's business, only
    ``settings`` are set on the session). ``spark.api.mode=connect`` (in ``settings`` or as
    ``SPARK_API_MODE``) with no URL: Spark starts a local Connect server on ``master`` in this process.
    Either way the data source is registered, and nothing asks for the (absent) ``sparkContext``."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from storage_adapter.spark.datasource import register

    url = remote or os.environ.get("SPARK_REMOTE")
    if url is not None:
        session = SparkSession.builder.remote(url).config(map=dict(settings or {})).getOrCreate()
        register(session)
        return session
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
    if not is_connect(session):  # spark.api.mode=connect: a Connect session of a local server
        session.sparkContext.setLogLevel("WARN" if progress else "ERROR")
    register(session)
    return session


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect client session (no JVM in this process: no ``sparkContext``)."""
    return type(spark).__module__.startswith("pyspark.sql.connect.")
