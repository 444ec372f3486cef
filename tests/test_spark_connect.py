"""Every Spark path on a Spark Connect session (docs/spark.md, "Spark Connect"): a server started from the
PySpark wheel (tests/connect_server.py, once per run), a client with no JVM in a subprocess
(tests/connect_client.py: PySpark will not hold a Connect and a classic session in one process). Measured
on 2 cores: the server answers 14 to 44 s after launch (as the machine's load goes), a client connects in
about 4 s; the default-tier test 45 to 67 s in all, each stress test about 30 s more (api mode: 50 to 80 s)."""

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


def test_a_registered_connect_session_the_native_write_its_refusals_and_typed_errors(
    connect_server: Any, root: str
) -> None:
    """One test, so that one server serves the default tier (its xdist workers would each start one)."""
    observed = run_client(connect_server, root, "session", "native", "refusals", "errors")
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

    refused = observed["refusals"]
    assert refused["bad_mode"]["type"] == "ValueError"  # before create_table=True created anything
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


@pytest.mark.stress  # about 30 s on 2 cores (three jobs, each planned in fresh Python workers on the server)
def test_the_data_source_writes_reads_back_exactly_and_a_rerun_adds_nothing(
    connect_server: Any, root: str
) -> None:
    observed = run_client(connect_server, root, "datasource")["datasource"]
    assert observed["read_ids"] == observed["expected"]
    assert observed["engine_ids"] == observed["expected"]  # the re-run of version 1 was a replay


@pytest.mark.stress  # micro-batches planned and committed in the server's Python workers: about 30 s
def test_a_named_stream_lands_each_micro_batch_once_across_a_restart(connect_server: Any, root: str) -> None:
    observed = run_client(connect_server, root, "streaming")["streaming"]
    assert observed["first_rows"] == 5
    assert observed["replayed"] is True  # Spark did run batch 0 again after the restart
    assert observed["ids"] == observed["expected"]  # and it added nothing
    assert observed["app_version"] == 2


@pytest.mark.stress  # Spark starts a Connect server inside the client's process: 50 to 80 s
def test_spark_api_mode_connect_gives_a_registered_session_of_a_local_server(tmp_path: Path) -> None:
    observed = run("api-mode", f"file://{tmp_path}", ("session", "native"))
    assert observed["session"]["connect"] is True and observed["session"]["pushdown"] == "true"
    assert observed["native"]["ids"] == observed["native"]["expected"]


@pytest.mark.stress  # two native writes and two reads on the server: 20 to 35 s
def test_the_native_read_gives_the_snapshot_and_an_older_version(connect_server: Any, root: str) -> None:
    observed = run_client(connect_server, root, "native_read")["native_read"]
    assert observed["ids"] == observed["expected"]
    assert observed["older"] == observed["expected"][: len(observed["expected"]) // 2]
    assert observed["schema"] == "struct<id:bigint,day:string,score:decimal(22,1)>"  # the table's types
