"""Every Spark path on a Spark Connect session (docs/spark.md, "Spark Connect"): a server started from the
PySpark wheel (tests/connect_server.py, once per run), a client with no JVM in a subprocess
(tests/connect_client.py: PySpark will not hold a Connect and a classic session in one process). Measured
on 2 cores: the server answers 10 to 44 s after launch (as the machine's load goes), a client connects in
2 to 4 s, and its seven scenarios, two at a time (the stream beside the rest: most of their time is the
server's, planning and committing in fresh Python workers), take 20 s on a quiet machine (28 s one after
another): the test is 36 s quiet and up to about a minute beside the rest of the tier, one test so that
one server serves the whole tier. ``spark.api.mode=connect`` (a server in the
client's own process) is stress: 50 to 80 s more."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"file://{tmp_path_factory.mktemp('connect-root')}"


def run_client(server: Any, root: str, *names: str) -> dict[str, dict[str, Any]]:
    print(f"the Connect server answered {server.started_in:.1f} s after its launch")
    return run(server.url, root, names, server.tail)


def run(url: str, root: str, names: tuple[str, ...], tail: Any = str) -> dict[str, dict[str, Any]]:
    """One client process running the scenarios ``names``: their observations (the test fails on an
    error of any)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), str(HERE)])}
    env.pop("SPARK_REMOTE", None)
    done = subprocess.run(
        [sys.executable, str(HERE / "connect_client.py"), url, root, *names],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:] + tail()
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    print({k: round(v, 1) for k, v in answer.items() if k.endswith("seconds")})
    for name in names:
        assert "failed" not in answer[name], answer[name]["failed"]
    return {name: answer[name] for name in names}


def test_every_path_on_a_connect_session(connect_server: Any, root: str) -> None:
    """One test, one client process, every path (so that one server serves the default tier: its xdist
    workers would each start one): the registered session, the data source's batch write, read and re-run,
    a named stream across a restart, the native write and read, their refusals and typed errors."""
    observed = run_client(
        connect_server,
        root,
        "streaming",  # the longest first: the others run beside it, two at a time
        "session",
        "native",
        "native_read",
        "datasource",
        "refusals",
        "errors",
    )
    session = observed["session"]  # spark_session(remote=...)
    assert session["connect"] is True
    assert session["pushdown"] == "true"  # register(spark) ran: Python filter push-down is on
    assert "JVM_ATTRIBUTE_NOT_SUPPORTED" in session["sparkContext"]["message"]  # and it was never asked
    assert session["spark_remote_same"] is True  # spark_session() with SPARK_REMOTE: the same session

    native = observed["native"]  # on a file:// root the client and the server share
    assert native["ids"] == native["expected"]
    assert native["versions"] == [2, 3]  # created (1), then one commit per write
    assert native["days"] == ["0", "1", "2"]
    assert native["staging_left"] == []  # the shared-root probe is deleted

    read = observed["native_read"]  # storage_adapter.spark.read: the snapshot's files only
    assert read["ids"] == read["expected"]
    assert read["older"] == read["expected"][: len(read["expected"]) // 2]  # version=2
    assert read["schema"] == "struct<id:bigint,day:string,score:decimal(22,1)>"  # the table's types

    source = observed["datasource"]
    assert source["read_ids"] == source["expected"]
    assert source["engine_ids"] == source["expected"]  # the re-run of application version 1 was a replay

    stream = observed["streaming"]
    assert stream["first_rows"] == 5
    assert stream["replayed"] is True  # Spark did run batch 0 again after the restart
    assert stream["ids"] == stream["expected"]  # and it added nothing
    assert stream["app_version"] == 1  # batches 0 and 1, each once

    refused = observed["refusals"]
    assert refused["bad_mode"]["type"] == "ConfigurationError"  # before create_table=True created anything
    assert refused["unshared"]["type"] == "UnsupportedOperationError"
    assert "classic session" in refused["unshared"]["message"]
    assert refused["s3"]["type"] == "UnsupportedOperationError"  # the server was asked: no hadoop-aws
    assert "Connect server" in refused["s3"]["message"]
    assert refused["tables"] == []
    assert refused["left"] == ["_manifest.json"]  # the client's own Engine.open; no probe, no table

    error = observed["errors"]  # typed_errors(): the data source's error, without the server's stack trace
    assert error["type"] == "ConfigurationError"
    assert error["message"].startswith("unknown option(s) tabel for the storage_adapter data source")
    assert "JVM stacktrace" not in error["message"] and int(error["length"]) < 600


@pytest.mark.stress  # Spark starts a Connect server inside the client's process: 50 to 80 s
def test_spark_api_mode_connect_gives_a_registered_session_of_a_local_server(tmp_path: Path) -> None:
    observed = run("api-mode", f"file://{tmp_path}", ("session", "native"))
    assert observed["session"]["connect"] is True and observed["session"]["pushdown"] == "true"
    assert observed["native"]["ids"] == observed["native"]["expected"]
