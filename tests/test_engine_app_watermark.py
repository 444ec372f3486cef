"""Issue 19, item 2: the application watermark (Delta's txnAppId/txnVersion), job-level exactly-once that
never expires: replays past the commit-record retention and the key window, races between two runs of
one application version, and crashes at every commit step (rolled forward with the commit, or not at
all). Every test runs on every embedded backend."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import pyarrow as pa
import pytest

from storage_adapter.engine import CommitRequest, Engine, EngineSettings
from storage_adapter.engine import failpoints as fp
from storage_adapter.engine.failpoints import COMMIT_POINTS, ENV_VAR, SimulatedCrash
from storage_adapter.engine.layout import MANIFEST_KEY, RECOVERY_PREFIX
from storage_adapter.engine.manifest import Manifest
from storage_adapter.engine.recovery import HealReport

SCHEMA = pa.schema([("id", pa.int64())])


def data(count: int, start: int = 0) -> pa.Table:
    return pa.table({"id": list(range(start, start + count))}, schema=SCHEMA)


@pytest.fixture
def engine(adapter):
    fp.disarm()
    eng = Engine.open(adapter, actor="apps", settings=EngineSettings(retention=4))
    eng.create_table("t", SCHEMA)
    eng.create_table("u", SCHEMA)
    yield eng
    fp.disarm()


def test_rerun_after_ten_times_retention_is_a_replay(engine):
    first = engine.commit({"t": data(5)}, CommitRequest(app_id="job", app_version=1))
    assert not first.replayed and engine.app_version("job") == 1 and first.record.app == ("job", 1)
    for i in range(40):
        engine.commit({"u": data(1, i)})
    again = engine.commit({"t": data(5)}, CommitRequest(app_id="job", app_version=1))
    assert again.replayed and again.version == first.version
    assert again.record.app == ("job", 1) and again.record.changes == ()  # its record left the history
    assert engine.read("t").num_rows == 5
    assert engine.precheck(["t"], CommitRequest(app_id="job", app_version=1)) is not None
    refs = [engine.write_fragment("t", data(5))]
    # below the watermark: a replay too
    assert engine.commit_fragments({"t": refs}, CommitRequest(app_id="job", app_version=0)).replayed
    nxt = engine.commit({"t": data(5)}, CommitRequest(app_id="job", app_version=2))
    assert not nxt.replayed and engine.read("t").num_rows == 10 and engine.app_version("job") == 2
    assert engine.app_version("other") is None
    assert Engine.open(engine.adapter, read_only=True).app_version("job") == 2


def test_replay_within_retention_returns_the_commit_record(engine):
    first = engine.commit({"t": data(1)}, CommitRequest(app_id="job", app_version=7, actor="alice"))
    again = engine.commit({"t": data(1)}, CommitRequest(app_id="job", app_version=7))
    assert again.replayed and again.record == first.record and engine.read("t").num_rows == 1


@pytest.mark.parametrize(
    ("app_id", "app_version"),
    [
        ("job", None),
        (None, 1),
        ("", 1),
        ("job", -1),
        ("job", True),
        ("job", 1.0),
        ("job", 2**63),
        (3, 1),
        ("bad\nid", 1),
        ("x" * 257, 1),
    ],
)
def test_bad_watermarks_are_refused_before_io(engine, adapter, app_id, app_version):
    before = adapter.read_bytes(MANIFEST_KEY)
    data_files = len(adapter.list("tables/t/data"))
    with pytest.raises(ValueError, match="app_"):
        engine.commit({"t": data(1)}, CommitRequest(app_id=app_id, app_version=app_version))
    with pytest.raises(ValueError, match="app_"):
        engine.commit_fragments({"t": []}, CommitRequest(app_id=app_id, app_version=app_version))
    assert adapter.read_bytes(MANIFEST_KEY) == before and len(adapter.list("tables/t/data")) == data_files


def test_two_runs_of_one_version_racing_publish_once(engine):
    other = Engine.open(engine.adapter, actor="twin")
    won = []
    fp.arm(
        "commit.before_publish",
        lambda _: won.append(other.commit({"t": data(3)}, CommitRequest(app_id="job", app_version=1))),
        times=1,
    )
    # loses the CAS, re-checks on rebase
    lost = engine.commit({"t": data(3)}, CommitRequest(app_id="job", app_version=1))
    assert not won[0].replayed and lost.replayed and lost.version == won[0].version
    assert engine.read("t").num_rows == 3 and engine.adapter.list(RECOVERY_PREFIX) == []
    threads, results = [], []
    for _ in range(4):
        thread = threading.Thread(
            target=lambda: results.append(
                Engine.open(engine.adapter).commit({"t": data(1)}, CommitRequest(app_id="job", app_version=2))
            )
        )
        threads.append(thread)
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(r.replayed for r in results) == [False, True, True, True]
    assert engine.read("t").num_rows == 4 and engine.app_version("job") == 2


def test_watermark_travels_with_multi_table_and_overwrite_commits(engine):
    engine.commit({"t": data(2), "u": data(2)}, CommitRequest(app_id="a", app_version=0))
    engine.commit({"t": data(1)}, CommitRequest(mode="overwrite", app_id="b", app_version=5))
    assert (engine.app_version("a"), engine.app_version("b")) == (0, 5)
    assert engine.commit({"t": data(9)}, CommitRequest(mode="overwrite", app_id="b", app_version=5)).replayed
    assert engine.read("t").num_rows == 1
    assert Manifest.decode(engine.adapter.read_bytes(MANIFEST_KEY)).format_version == 3


CRASHES = [  # (failpoint, skip, visible after heal)
    ("commit.after_sidecar", 0, False),
    ("commit.after_table_version", 0, False),
    ("commit.before_publish", 0, True),
    ("publish.before_cas", 0, True),
    ("commit.after_publish", 0, True),
    ("commit.after_sidecar_delete", 0, True),
]


@pytest.mark.parametrize(("point", "skip", "visible"), CRASHES, ids=[p for p, _, _ in CRASHES])
def test_crash_at_every_step_moves_watermark_with_the_commit(engine, adapter, point, skip, visible):
    with fp.armed(point, "crash", times=1, skip=skip), pytest.raises(SimulatedCrash):
        engine.commit({"t": data(4), "u": data(1)}, CommitRequest(app_id="job", app_version=3))
    reopened = Engine.open(adapter)  # heals: rolls forward (watermark included) or rolls back (neither)
    assert reopened.app_version("job") == (3 if visible else None)
    assert reopened.read("t").num_rows == (4 if visible else 0)
    rerun = reopened.commit({"t": data(4), "u": data(1)}, CommitRequest(app_id="job", app_version=3))
    assert rerun.replayed is visible
    assert reopened.read("t").num_rows == 4 and reopened.app_version("job") == 3
    assert adapter.list(RECOVERY_PREFIX) == []


def test_crashed_commit_is_rolled_back_when_a_rerun_set_the_watermark_first(engine, adapter):
    with fp.armed("commit.before_publish", "crash", times=1), pytest.raises(SimulatedCrash):
        engine.commit({"t": data(4)}, CommitRequest(app_id="job", app_version=3))
    # the crashed writer's sidecar is still pending when the re-run (another engine, same process) lands
    rerun = Engine(adapter, actor=None, read_only=False, settings=engine.settings)
    # no heal before the rerun (a report of nothing found: the commit reads whether its heal recovered)
    rerun._recovery.heal = lambda full=True: HealReport(0, (), (), 0)  # type: ignore[method-assign]
    # the re-run writes another table, so the crashed commit's own pins are still exactly rollable forward
    assert not rerun.commit({"u": data(4)}, CommitRequest(app_id="job", app_version=3)).replayed
    fp.disarm()
    healed = Engine.open(adapter)  # the crashed one must not roll forward: the watermark is already at 3
    assert (healed.read("t").num_rows, healed.read("u").num_rows) == (0, 4) and healed.app_version("job") == 3
    assert adapter.list(RECOVERY_PREFIX) == []


KILLED_WRITER = """
import json, sys
import pyarrow as pa
from storage_adapter.engine import CommitRequest, Engine
engine = Engine.open(sys.argv[1], options=json.loads(sys.argv[2]))
engine.commit({"t": pa.table({"id": [1, 2, 3]})}, CommitRequest(app_id="job", app_version=9))
"""


@pytest.mark.parametrize("point", [p for p in COMMIT_POINTS if "_key_" not in p])  # key steps: no key here
def test_kill9_at_every_commit_step_then_rerun_applies_exactly_once(engine, adapter, point):
    """A real SIGKILL (failpoint action ``exit``) at each step of a watermarked commit; the re-run of the
    same application version after the restart lands the rows exactly once."""
    if not adapter.capabilities.shared_across_processes:
        pytest.skip("memory stores are per process")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), ENV_VAR: f"{point}=exit"}
    options = json.dumps(dict(adapter.config.options))
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITER, adapter.url, options], env=env, check=False)
    assert killed.returncode == -signal.SIGKILL
    restarted = Engine.open(adapter)  # heals the dead writer's sidecar
    landed = restarted.app_version("job") == 9
    assert restarted.read("t").num_rows == (
        3 if landed else 0
    )  # the watermark moved with the rows, or neither
    rerun = restarted.commit({"t": data(3, 1)}, CommitRequest(app_id="job", app_version=9))
    assert rerun.replayed is landed
    assert restarted.read("t").num_rows == 3 and restarted.app_version("job") == 9
    assert adapter.list(RECOVERY_PREFIX) == []
