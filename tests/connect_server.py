"""A Spark Connect server from the PySpark wheel, for tests (docs/spark.md, "Spark Connect").

``ConnectServer.start()`` runs the wheel's ``spark-submit`` with the Connect server's class (what the
wheel's ``sbin/start-connect-server.sh --wait`` runs, without its daemon wrapper and pid files) on a free
loopback port, ``local[2]`` with a small driver heap, its Python workers on this interpreter with the
repository on their path (the data source runs there), and waits until a client's first query answers.
``stop()`` ends its process group; a test run killed before it still ends the server (the parent-death
signal). Imports nothing from the tests' conftest.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM when the process that started it dies, so a test run
    killed before its teardown leaves no server behind (spark-submit execs the JVM: the same process)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ConnectServer:
    """A running Connect server: ``url`` (``sc://127.0.0.1:PORT``), ``started_in`` (seconds from launch
    to the first answered query), its log file."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path
    started_in: float = 0.0

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @classmethod
    def start(
        cls, workdir: Path, *, master: str = "local[2]", memory: str = "768m", timeout: float = 180.0
    ) -> ConnectServer:
        import pyspark

        spark_home = Path(pyspark.__file__).parent
        port = free_port()
        log = workdir / "connect-server.log"
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(spark_home),
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
            SPARK_LOCAL_IP="127.0.0.1",
            PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p),
        )
        env.pop("SPARK_REMOTE", None)
        env.pop("SPARK_CONNECT_MODE_ENABLED", None)
        command = [
            str(spark_home / "bin" / "spark-submit"),
            "--class",
            SERVER_CLASS,
            "--name",
            "storage-adapter-connect-tests",
            "--master",
            master,
            "--driver-memory",
            memory,
            *("--conf", f"spark.connect.grpc.binding.port={port}"),
            *("--conf", "spark.connect.grpc.binding.address=127.0.0.1"),
            *("--conf", "spark.driver.host=127.0.0.1"),
            *("--conf", "spark.driver.bindAddress=127.0.0.1"),
            *("--conf", "spark.ui.enabled=false"),
            *("--conf", "spark.sql.shuffle.partitions=4"),
            *("--conf", "spark.python.worker.reuse=true"),
            *("--conf", f"spark.local.dir={workdir}"),
            "spark-internal",
        ]
        began = time.monotonic()
        with log.open("wb") as out:
            process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=workdir,
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        server = cls(process, port, log)
        try:
            server._wait(began + timeout)
        except BaseException:
            server.stop()
            raise
        server.started_in = time.monotonic() - began
        return server

    def _wait(self, deadline: float) -> None:
        """Until the port accepts a connection, then until a query answers."""
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the Connect server exited ({self.process.returncode}): {self.tail()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.5):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Connect server did not listen on {self.port}: {self.tail()}")
            time.sleep(0.2)
        # A first query, from a client process of its own: PySpark refuses a Connect session in a
        # process that already runs a classic one (the suite's workers share one), SESSION_ALREADY_EXIST.
        probe = f"from pyspark.sql import SparkSession; SparkSession.builder.remote({self.url!r}).getOrCreate().range(1).collect()"
        left = max(1.0, deadline - time.monotonic())
        answered = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=left)
        if answered.returncode != 0:
            raise RuntimeError(
                f"the Connect server did not answer a query: {answered.stderr[-2000:]} {self.tail()}"
            )

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)
