"""A user's AWS environment never reaches the servers the project starts (issue 34), and a user-supplied
endpoint still takes it: the one precedence rule (explicit options > URL > environment > defaults, the
credentials as one group) in both directions.

The hostile environment is what a user who also works with AWS has in the shell: static keys, a session
token, a profile that does not exist, a foreign endpoint and region, ``AWS_ALLOW_HTTP=false``, and every
``STORAGE_ADAPTER_*`` variable an adapter option reads set to a wrong value. (``STORAGE_ADAPTER_FAILPOINTS``
is a fault-injection hook, honoured on purpose, not a setting.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storage_adapter import open_adapter
from storage_adapter.config import parse_url
from storage_adapter.registry import registered
from storage_adapter.servers.server import S3Endpoint, is_client_setting

REPO = Path(__file__).resolve().parent.parent
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
# What each adapter setting that a variable can carry would do wrong on the embedded SeaweedFS: unquoted
# If-Match (still accepted there, so only the resolved config shows it); any other such variable gets text
# no option accepts.
_WRONG = {"STORAGE_ADAPTER_S3_UNQUOTED_IF_MATCH": "true"}
HOSTILE = {
    "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
    "AWS_SECRET_ACCESS_KEY": SECRET,
    "AWS_SESSION_TOKEN": "FwoGZXIvYXdzEXAMPLEsessiontoken",
    "AWS_PROFILE": "no-such-profile",
    "AWS_DEFAULT_PROFILE": "no-such-profile",
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
    "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9",
    "AWS_REGION": "ap-southeast-7",
    "AWS_DEFAULT_REGION": "ap-southeast-7",
    "AWS_ALLOW_HTTP": "false",
    **{
        var: _WRONG.get(var, "wrong-value")
        for backend in registered()
        for option in backend.options.values()
        for var in option.env
        if var.startswith("STORAGE_ADAPTER_")
    },
}


def hostile_process_environment() -> dict[str, str]:
    """This process's environment without pytest's and AWS variables, plus the hostile ones."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and not is_client_setting(k)}
    return {**base, **HOSTILE}


def client_settings() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if is_client_setting(name)}


@pytest.fixture
def hostile(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    for name in [n for n in os.environ if is_client_setting(n)]:
        monkeypatch.delenv(name)
    for name, value in HOSTILE.items():
        monkeypatch.setenv(name, value)
    yield client_settings()


def _run(
    args: list[str], tmp_path: Path, timeout: float = 900, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``args`` in the hostile environment, from ``cwd`` (default ``tmp_path``; the checkout's root for
    ``python -m bench...``: the benches are not an installed package)."""
    done = subprocess.run(
        args,
        cwd=tmp_path if cwd is None else cwd,
        env=hostile_process_environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert SECRET not in done.stdout + done.stderr  # the user's secret is never printed either
    return done


# -- the test suite itself is hermetic (issue 45) ----------------------------------------------------------
# Azure settings of another account beside HOSTILE's AWS ones: what a user of both clouds has exported.
FOREIGN_AZURE = {
    "AZURE_STORAGE_ACCOUNT_NAME": "someoneelses",
    "AZURE_STORAGE_ACCOUNT_KEY": "c29tZW9uZSBlbHNlJ3Mga2V5",
    "AZURE_STORAGE_USE_EMULATOR": "false",
    "AZURITE_ACCOUNTS": "someoneelses:c29tZW9uZSBlbHNlJ3Mga2V5",
}


def test_the_suite_scrubs_the_callers_client_settings_before_any_test(tmp_path: Path) -> None:
    """tests/conftest.py's ``scrub_client_settings`` makes a pytest run over this suite the same whatever
    the caller's shell holds: a child pytest, started with HOSTILE's AWS settings (endpoint, region,
    keys, a missing profile, every ``STORAGE_ADAPTER_*`` option variable wrong) and another Azure
    account's, runs the wire test that fails under a foreign ``AWS_ENDPOINT_URL`` when nothing scrubs it,
    and a probe that finds no client setting left."""
    probe = tmp_path / "test_probe.py"
    probe.write_text(
        "import os\n"
        "from storage_adapter.servers.server import is_client_setting\n\n\n"
        "def test_no_client_setting_is_left():\n"
        "    assert [name for name in os.environ if is_client_setting(name)] == []\n"
    )
    wire = "tests/test_wire_clauses.py::test_the_wire_addresses_the_bucket_and_prefix_the_adapter_addresses"
    done = subprocess.run(
        # the probe is given by path: the rootdir (and so tests/conftest.py) is still the checkout's
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(REPO),
            wire,
            str(probe),
        ],
        cwd=REPO,
        env={**hostile_process_environment(), **FOREIGN_AZURE},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "5 passed" in done.stdout, done.stdout[-4000:] + done.stderr[-2000:]


def test_the_scrub_removes_every_client_setting_and_keeps_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import scrub_client_settings  # tests/ is on the path

    for name, value in {**HOSTILE, **FOREIGN_AZURE, "STORAGE_ADAPTER_FAILPOINTS": "x=error*1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PATH_NOT_A_CLIENT_SETTING", "kept")
    removed = scrub_client_settings()
    assert set(removed) >= {*HOSTILE, *FOREIGN_AZURE, "STORAGE_ADAPTER_FAILPOINTS"}
    assert client_settings() == {} and os.environ["PATH_NOT_A_CLIENT_SETTING"] == "kept"


# -- the precedence rule, both directions ------------------------------------------------------------------
def test_every_option_prefers_explicit_over_environment_over_default() -> None:
    """For every option of every registered backend that a variable can carry: given beats the variable,
    the variable beats the default (checked through each option's own type)."""
    samples: dict[type, tuple[Any, Any]] = {
        bool: (True, False),
        int: (7, 9),
        float: (2.5, 3.5),
        str: ("a", "b"),
    }
    checked = 0
    for backend in registered():
        url = {"s3": "s3://bucket", "file": "file:///tmp/precedence", "memory": "memory://p"}.get(
            backend.name
        )
        if url is None:
            continue
        base = {"endpoint": "http://127.0.0.1:1"} if backend.name == "s3" else {}
        for name, option in backend.options.items():
            if not option.env or option.kind not in samples or option.group or name in base:
                continue
            given, from_env = samples[option.kind]
            if name == "conditional_put":
                given, from_env = "disabled", "etag"
            env = {option.env[0]: str(from_env).lower() if option.kind is bool else str(from_env)}
            assert parse_url(url, {**base, name: given}, env).option(name) == given, name
            assert parse_url(url, base, env).option(name) == from_env, name
            assert parse_url(url, base, {}).option(name) == option.default, name
            checked += 1
    assert checked >= 6  # region, endpoint-free S3 switches and the adapter's own (unquoted_if_match)


def test_credentials_come_from_one_source() -> None:
    """Keys given explicitly take no session token or profile of the environment; a profile given takes
    no keys from it; with nothing given, the environment's keys and token come together."""
    env = {
        "AWS_ACCESS_KEY_ID": "env-key",
        "AWS_SECRET_ACCESS_KEY": "env-secret",
        "AWS_SESSION_TOKEN": "env-token",
        "AWS_PROFILE": "env-profile",
    }
    explicit = parse_url("s3://b", {"access_key_id": "k", "secret_access_key": "s"}, env)
    assert (
        explicit.option("access_key_id"),
        explicit.option("session_token"),
        explicit.option("profile"),
    ) == (
        "k",
        None,
        None,
    )
    named = parse_url("s3://b", {"profile": "mine"}, env)
    assert (named.option("profile"), named.option("access_key_id"), named.option("session_token")) == (
        "mine",
        None,
        None,
    )
    ambient = parse_url("s3://b", {}, env)
    assert (ambient.option("access_key_id"), ambient.option("session_token")) == ("env-key", "env-token")
    assert ambient.option("profile") == "env-profile"


def test_a_user_supplied_endpoint_takes_the_users_environment(hostile: dict[str, str]) -> None:
    """The other direction: a URL opened without options resolves from the environment as documented."""
    config = parse_url("s3://users-bucket/p", {})
    assert config.option("endpoint") == HOSTILE["AWS_ENDPOINT_URL_S3"]
    assert config.option("region") == HOSTILE["AWS_REGION"]
    assert config.option("access_key_id") == HOSTILE["AWS_ACCESS_KEY_ID"]
    assert config.option("session_token") == HOSTILE["AWS_SESSION_TOKEN"]
    assert config.option("allow_http") is False
    assert config.option("unquoted_if_match") is True


def test_a_started_servers_adapter_options_leave_nothing_to_the_environment(hostile: dict[str, str]) -> None:
    endpoint = S3Endpoint("srv", "http://127.0.0.1:1", "bkt", "srv-key", "srv-secret")
    in_hostile = parse_url(endpoint.url(), endpoint.adapter_options())
    assert in_hostile == parse_url(endpoint.url(), endpoint.adapter_options(), environ={})
    assert in_hostile.option("session_token") is None and in_hostile.option("profile") is None


def test_the_servers_scope_replaces_the_users_client_settings_and_restores_them(
    hostile: dict[str, str],
) -> None:
    endpoint = S3Endpoint("srv", "http://127.0.0.1:1", "bkt", "srv-key", "srv-secret")
    with endpoint.scoped():
        assert client_settings() == endpoint.environment()
        assert endpoint.process_environment() == dict(os.environ)
    assert client_settings() == hostile


# -- the main job, a bench and the Spark data source, with the hostile environment --------------------------
def test_peers_and_clients_of_a_started_server_ignore_the_users_environment(
    embedded_seaweedfs: S3Endpoint, hostile: dict[str, str]
) -> None:
    """boto3 (which fails on a missing profile even with keys given), s3fs and the adapter reach the
    server the project started."""
    from contract_tests.peers import open_peer

    adapter = open_adapter(embedded_seaweedfs.url("hostile-env"), **embedded_seaweedfs.adapter_options())
    token = adapter.write("k", b"v")
    assert adapter.write_if_match("k", b"w", token) is not None
    listed = embedded_seaweedfs.boto3_client().list_objects_v2(
        Bucket=embedded_seaweedfs.bucket, Prefix="hostile-env/"
    )
    assert [o["Key"] for o in listed["Contents"]] == ["hostile-env/k"]
    with embedded_seaweedfs.scoped():
        peer = open_peer(embedded_seaweedfs.url("hostile-env"), **embedded_seaweedfs.adapter_options())
        assert peer.read_bytes("k") == b"w"
    adapter.delete_prefix("hostile-env")
    assert client_settings() == hostile


# The clauses an environment variable can reach: each opens its adapter in the check's process (every
# clause does so the same way: the round trips stand for them), in spawned processes that open their own
# (every process race), through the options an adapter variable sets (the listings and delete_prefix;
# the declared capabilities) and across both kinds of history the linearizability checks
# record, and the wire clauses' raw requests (endpoint and keys resolved from the environment, signed by
# botocore, which reads AWS_PROFILE and the like). The rest of the contract runs on this server at default
# sizes in scripts/test.sh's stage and in tests/test_contract_embedded.py; a whole check here cost 65 s
# (docs/ci.md), this selection about 20 s.
ENVIRONMENT_SENSITIVE_CLAUSES = (
    "round_trip or processes or list or delete_prefix or capabilities or linearizable"
    " or if_none_match or delete_if_match"
)


def test_the_check_stage_of_a_started_seaweedfs_conforms(tmp_path: Path) -> None:
    """``ci/contract-stage seaweedfs`` (``storage-adapter check --server seaweedfs --no-peers``: the stage
    scripts/test.sh runs, and the SeaweedFS part of the main job), started from an unrelated directory with
    the user's AWS environment: every clause the environment can reach passes, the linearizability checks
    included, as without it; the report names the SeaweedFS build."""
    done = _run(
        [
            str(REPO / "ci" / "contract-stage"),
            "seaweedfs",
            "--threads",
            "4",
            "--processes",
            "2",
            "--increments",
            "5",
            "--clauses",
            ENVIRONMENT_SENSITIVE_CLAUSES,
            "--report",
            str(tmp_path / "stage"),
        ],
        tmp_path,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = json.loads((tmp_path / "stage.json").read_text())
    assert [t["name"] for t in report["targets"]] == ["seaweedfs"]
    assert report["targets"][0]["url"].startswith("s3://check/adapter-")
    assert report["sizes"] == {
        "threads": 4,
        "processes": 2,
        "increments": 5,
        "check_budget_s": 60.0,
        "clause_timeout_s": 300.0,
    }
    rows = {r["clause"]: r["outcome"] for r in report["results"]}
    for clause in (
        "test_round_trip_bytes",
        "test_write_if_absent_one_winner_processes",
        "test_cas_increments_processes",
        "test_capabilities_are_declared_and_honest",
        "test_mixed_history_is_linearizable_threads",
        "test_mixed_history_is_linearizable_processes",
        "test_delete_prefix_takes_whole_segments_and_leaves_no_trace",
        "test_put_if_none_match_with_the_current_etag_never_overwrites",
        "test_delete_if_match_with_a_stale_etag_never_deletes",
    ):
        assert rows.get(clause) == "pass", clause
    assert set(rows.values()) == {"pass"} and len(rows) >= 25
    assert report["selection"] == ENVIRONMENT_SENSITIVE_CLAUSES
    assert report["versions"]["seaweedfs"].startswith("version ")
    assert "seaweedfs: conforms - " in done.stdout


# Over budget with the rest (50 s: its own SeaweedFS and Spark session); the default tier runs the data
# source with this environment on the session's Spark below.
@pytest.mark.stress
def test_the_spark_bench_on_seaweedfs_runs(tmp_path: Path) -> None:
    """``python -m bench.spark_io`` (a bench, and the Spark data source writing and reading an engine table
    on a SeaweedFS it starts) with the user's AWS environment, at a tiny size."""
    done = _run(
        [
            sys.executable,
            "-m",
            "bench.spark_io",
            "--rows",
            "2000",
            "--rounds",
            "1",
            "--partitions",
            "2",
            "--backends",
            "seaweedfs",
            "--results",
            str(tmp_path),
        ],
        tmp_path,
        timeout=600,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    (row,) = json.loads((tmp_path / "spark_io.json").read_text())
    assert row["backend"] == "seaweedfs" and row["rows"] == 2000


@pytest.mark.stress
def test_the_storage_bench_on_seaweedfs_runs_with_its_peers(tmp_path: Path) -> None:
    """``storage-adapter bench --backends seaweedfs`` (boto3 and s3fs beside the adapter), quick sizes."""
    done = _run(
        [
            sys.executable,
            "-m",
            "contract_tests",
            "bench",
            "--quick",
            "--backends",
            "seaweedfs",
            "--results",
            str(tmp_path),
        ],
        tmp_path,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    data = json.loads((tmp_path / "bench.json").read_text())
    assert {"adapter", "obstore", "boto3", "s3fs"} <= {r["client"] for r in data["latency"]}


def test_the_spark_data_source_on_a_started_server_ignores_the_users_environment(
    embedded_seaweedfs: S3Endpoint, spark: Any, hostile: dict[str, str]
) -> None:
    """The data source with a started server's options, resolved on the driver with the user's AWS
    environment set: the table is written to and read back from that server (each task reopens the
    adapter from the same options)."""
    import pyarrow as pa

    from storage_adapter.engine import Engine

    options = {name: str(value) for name, value in embedded_seaweedfs.adapter_options().items()}
    prefix = f"hostile-spark-{os.getpid()}"
    url = embedded_seaweedfs.url(prefix)
    engine = Engine.open(open_adapter(url, **embedded_seaweedfs.adapter_options()))
    engine.create_table("t", pa.schema([("id", pa.int64()), ("day", pa.string())]))
    frame = spark.range(0, 40, numPartitions=2).selectExpr("id", "CAST(id % 3 AS STRING) AS day")
    frame.write.format("storage_adapter").mode("append").options(**options).option("table", "t").save(url)
    read = spark.read.format("storage_adapter").options(**options).option("table", "t").load(url)
    assert sorted(row.id for row in read.collect()) == list(range(40))
    assert engine.read("t").num_rows == 40
    open_adapter(embedded_seaweedfs.url(), **embedded_seaweedfs.adapter_options()).delete_prefix(prefix)
    assert client_settings() == hostile


# Over the default tier's 60 s budget (about 5 minutes). The default tier has its parts: the SeaweedFS
# stage at default sizes (scripts/test.sh), the stage and the peers above with this environment, and the
# CLI on memory and local with peers (tests/test_cli_check.py).
@pytest.mark.stress
def test_the_main_job_conforms_with_its_peers_at_default_sizes(tmp_path: Path) -> None:
    """The main job as the README runs it (``scripts/check.sh``: embedded memory, local, SeaweedFS and
    three peers; default sizes), with the user's AWS environment."""
    done = _run(
        [sys.executable, "-m", "contract_tests", "check", "--report", str(tmp_path / "check")], tmp_path
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    data = json.loads((tmp_path / "check.json").read_text())
    assert [t["name"] for t in data["targets"]] == [
        "memory",
        "local",
        "seaweedfs",
        "fsspec-memory",
        "fsspec-local",
        "s3fs",
    ]
    assert all(t["conforms"] for t in data["targets"] if not t["peer"])
    assert data["versions"]["seaweedfs"]
