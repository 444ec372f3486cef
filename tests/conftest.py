"""Shared fixtures for the project's own tests.

The storage-contract plugin (contract_tests.plugin) is active here; ``adapter`` and ``embedded_seaweedfs``
name its prefixed fixtures for this project's tests: a test taking ``adapter`` runs once per embedded
backend (memory, local, SeaweedFS and Azurite: pyproject.toml's ``storage_embedded``) under a fresh
prefix. ``spark`` is one SparkSession for
the whole run; ``connect_server`` one Spark Connect server (its clients run in subprocesses).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contract_tests.plugin import ServerPool
from storage_adapter.protocol import StorageAdapter
from storage_adapter.servers.server import S3Endpoint, ServerEndpoint, is_client_setting


def scrub_client_settings() -> list[str]:
    """Remove from this process's environment every client setting the caller's shell holds (``AWS_*``,
    ``AZURE_*``, ``AZURITE_*``, ``STORAGE_ADAPTER_*``: ``storage_adapter.servers.server.is_client_setting``,
    the rule the servers the project starts already follow), and return their names.

    The suite's one mechanism for being hermetic: the product rightly takes, say, ``AWS_ENDPOINT_URL`` as
    an S3 client's default, and the tests assume a clean environment, so whoever exported one for a local
    MinIO would see tests fail that pass elsewhere. Run in ``pytest_configure``, before any fixture, in
    the controller and in every xdist worker (a worker inherits the controller's cleaned environment,
    scrubs again for the same result). A test about the environment sets what it needs itself
    (``monkeypatch.setenv``, or a subprocess's ``env``)."""
    names = sorted(name for name in os.environ if is_client_setting(name))
    for name in names:
        del os.environ[name]
    return names


# `storage-adapter check` appends its summary to $GITHUB_STEP_SUMMARY when that is set: in GitHub Actions,
# every check the tests run in a subprocess would append one to the job's page. The tests that mean to
# write a summary set it themselves.
os.environ.pop("GITHUB_STEP_SUMMARY", None)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from storage_adapter.spark import spark_session

    session = spark_session("local[4]", "storage-adapter-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Spark Connect server from the PySpark wheel (tests/connect_server.py), for the whole run."""
    from connect_server import ConnectServer  # tests/ is on the path

    server = ConnectServer.start(tmp_path_factory.mktemp("connect-server"))
    yield server
    server.stop()


@pytest.fixture
def adapter(storage_contract_adapter: StorageAdapter) -> StorageAdapter:
    """The contract plugin's adapter: a test taking it runs once per embedded backend, under a fresh prefix."""
    return storage_contract_adapter


@pytest.fixture(scope="session")
def embedded_seaweedfs(storage_contract_servers: ServerPool) -> S3Endpoint:
    """One SeaweedFS S3 server for the whole run (shared with the contract's seaweedfs target)."""
    endpoint = storage_contract_servers.endpoint("seaweedfs")
    assert isinstance(endpoint, S3Endpoint)
    return endpoint


@pytest.fixture(scope="session")
def embedded_azurite(storage_contract_servers: ServerPool) -> ServerEndpoint:
    """One Azurite for the whole run (shared with the contract's azurite target)."""
    return storage_contract_servers.endpoint("azurite")


# -- the default tier's budget (docs/ci.md) ------------------------------------------------------------------
# A test in the default tier that takes longer than this on the 2-core reference machine is moved to
# `-m stress` or split, with the reason beside it; the summary at the end of every run names any that do.
SLOW_TEST_BUDGET_S = 60.0
SLOWEST_SHOWN = 15


class DurationLedger:
    """Each test's whole duration (setup, call and teardown), the run's wall time, and the summary the
    run ends with: wall time, the slowest tests, any over the budget. ``--durations-json PATH`` also
    writes every duration (``ci/durations.py`` turns it into docs/ci.md's tables)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.seconds: dict[str, float] = {}
        self.outcomes: dict[str, str] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration
        if report.when == "call" or report.outcome != "passed":
            self.outcomes[report.nodeid] = report.outcome

    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        wall = time.monotonic() - self.started
        write = terminalreporter.write_line
        terminalreporter.section("time")
        write(f"pytest wall time: {wall / 60:.1f} min ({wall:.0f} s) for {len(self.seconds)} tests")
        slowest = sorted(self.seconds.items(), key=lambda item: -item[1])
        write(f"the {SLOWEST_SHOWN} slowest (setup + call + teardown):")
        for nodeid, seconds in slowest[:SLOWEST_SHOWN]:
            write(f"  {seconds:7.1f} s  {nodeid}")
        over = [(n, s) for n, s in slowest if s > SLOW_TEST_BUDGET_S and not _is_stress(config)]
        for nodeid, seconds in over:
            write(f"OVER BUDGET ({SLOW_TEST_BUDGET_S:.0f} s, default tier): {nodeid} took {seconds:.0f} s")
        target = config.getoption("durations_json")
        if target:
            path = Path(target)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(
                json.dumps(
                    {
                        "wall_s": round(wall, 1),
                        "markexpr": config.getoption("markexpr"),
                        "tests": [
                            {"nodeid": n, "seconds": round(s, 3), "outcome": self.outcomes.get(n, "passed")}
                            for n, s in slowest
                        ],
                    },
                    indent=1,
                )
            )


def _is_stress(config: pytest.Config) -> bool:
    return "stress" in (config.getoption("markexpr") or "") and "not stress" not in config.getoption(
        "markexpr"
    )


# One target's run of a test that is over the budget, or that proves on it nothing the default tier's other
# targets do not, goes to the stress tier, with why (keys: ``name[params]``, or ``file::name[params]``
# where another module has a test of that name).
STRESS_ONLY = {
    "test_retried_task_attempts_leave_only_invisible_reclaimable_fragments[seaweedfs-datasource]": "36 s; the same retry path runs on the local target, SeaweedFS's fragments in the other bulk tests",
    "test_retried_task_attempts_leave_only_invisible_reclaimable_fragments[seaweedfs-bulk_load]": "30 s; as above",
    "test_retried_task_attempts_leave_only_invisible_reclaimable_fragments[local-bulk_load]": "46-69 s (a Spark "
    "driver of its own, every retry a fresh Python worker); bulk_load and the data source write with the same "
    "task code (storage_adapter/spark/load.py), whose retries the [local-datasource] run keeps in the default "
    "tier, and bulk_load's other tests run there",
    # The async twin on Azurite: its driver is the S3 one's (obstore's async client, listings through the
    # same raw client), so these clauses prove the async code on SeaweedFS, local and memory, and Azurite's
    # answers in the sync twin; on Azurite's async runs they cost 90 s of the tier.
    **dict.fromkeys(
        [
            f"test_contract_async.py::test_injected_faults_are_reported_never_mistaken_for_outcomes[azurite-{kind}]"
            for kind in ("unavailable", "denied", "broken", "panic")
        ]
        + [
            "test_contract_async.py::test_iter_list_yields_what_list_returns_page_by_page[azurite]",
            "test_contract_async.py::test_delete_many_deletes_a_large_batch[azurite]",
        ],
        "15-29 s each on Azurite's async twin; the same clause runs on Azurite in the sync twin and on the "
        "async driver's code with SeaweedFS",
    ),
    # The data source's checks of options and schemas, and its complete-mode stream, run the same code on
    # every root (they refuse, align or replace before or above any storage call): the local target keeps
    # them, SeaweedFS keeps the data source's reads, writes, overwrites, failed jobs and streams.
    **dict.fromkeys(
        [
            f"test_spark_datasource.py::{name}[seaweedfs{suffix}]"
            for name, suffix in (
                ("test_missing_or_bad_options_are_typed_errors", ""),
                ("test_empty_dataframes", ""),
                ("test_a_complete_mode_stream_replaces_the_table_in_each_micro_batch", ""),
                ("test_reordered_columns_are_aligned_by_name", ""),
                ("test_by_position_and_safe_widening", ""),
                ("test_columns_that_cannot_fit_are_refused_before_any_task", "-columns1"),
                ("test_columns_that_cannot_fit_are_refused_before_any_task", "-columns2"),
                ("test_columns_that_cannot_fit_are_refused_before_any_task", "-columns3"),
            )
        ],
        "3-19 s each; the data source refuses, aligns or replaces above the storage: the local target keeps it",
    ),
}


# The modules whose tests run on Azurite (the embedded targets' fourth, pyproject.toml) in the default tier
# (issue 33): the contract (sync, async, a wrapped AzureStore), the engine's commits, crashes and recovery,
# idempotency, and the cheap ones beside them. Azurite's runs of the others (the Spark data source and
# loads, the stress campaigns) are stress: Azure needs nothing of the data source that the engine's tests
# here do not exercise, and the default tier has 15 minutes (docs/ci.md).
AZURITE_DEFAULT_TIER = frozenset(
    {
        "test_contract_embedded.py",
        "test_contract_async.py",
        "test_contract_wrapped_store.py",
        "test_engine_core.py",
        "test_engine_app_watermark.py",
        "test_engine_processes.py",
        "test_engine_streams.py",
        "test_exactly_once_engine.py",
        "test_table_log.py",
        "test_recovery_matrix.py",
        "test_recovery_kill9.py",
        "test_idempotency_store.py",
        "test_idempotency_attachments.py",
        "test_idempotency_ownership.py",
        "test_idempotency_handler.py",
        "test_idempotency_crash.py",
        "test_idempotency_concurrency.py",
        "test_linearizability_history.py",
        "test_adapter_read_memory.py",
        "test_streams.py",
        "test_fsspec_filesystem.py",
        "test_foreign_objects_engine.py",
        "test_hypothesis_state_machine.py",
    }
)


def _target_name(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    target = callspec.params.get("storage_contract_target") if callspec is not None else None
    return getattr(target, "name", None)


@pytest.hookimpl(tryfirst=True)  # before -m selects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``STRESS_ONLY`` items, the clauses a module leaves out of its ``DEFAULT_TIER_CLAUSES`` (when it
    names some), and Azurite's items outside ``AZURITE_DEFAULT_TIER``, as stress."""
    for item in items:
        default_tier = getattr(getattr(item, "module", None), "DEFAULT_TIER_CLAUSES", None)
        clause = getattr(item, "originalname", item.name)
        azurite_elsewhere = _target_name(item) == "azurite" and item.path.name not in AZURITE_DEFAULT_TIER
        if (
            item.name in STRESS_ONLY
            or f"{item.path.name}::{item.name}" in STRESS_ONLY
            or (default_tier is not None and clause not in default_tier)
            or azurite_elsewhere
        ):
            item.add_marker(pytest.mark.stress)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--durations-json", metavar="PATH", help="write every test's duration to PATH (JSON)")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Before any other plugin's configuration, any collection or fixture: the suite is hermetic."""
    scrub_client_settings()
    if not hasattr(config, "workerinput"):  # under pytest-xdist the controller sees every worker's reports
        config.pluginmanager.register(DurationLedger(), "storage-adapter-duration-ledger")
