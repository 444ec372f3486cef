"""Real crash campaign: kill -9 a subprocess at random moments of its commits, reopen, check.

Each trial starts ``engine_crash_worker.py`` (two-table commits, acknowledgements fsynced to a file),
kills it with SIGKILL after a random delay, and a third of the trials also arm a random protocol failpoint
through the environment (``exit`` = SIGKILL at that exact step). Then a read-write open recovers, and:

* all-or-nothing: every commit tag has all its rows in both tables or none in either;
* durability: every acknowledged commit is visible;
* nothing invented: visible tags are acknowledged ones plus at most the one in flight;
* convergence: no sidecar is left and every head holds its pinned content.

Default: ``KILL9_TRIALS`` (12) trials per shared backend (local, SeaweedFS), about a minute in all;
``-m stress``: 60 per backend (deselected by default; ``pytest -m stress``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from engine_crash_worker import ROWS_PER_COMMIT, SCHEMA, assert_converged, check_all_or_nothing

from storage_adapter.engine import Engine
from storage_adapter.engine.failpoints import COMMIT_POINTS, ENV_VAR
from storage_adapter.engine.layout import RECOVERY_PREFIX

WORKER = Path(__file__).with_name("engine_crash_worker.py")
TRIALS = int(os.environ.get("KILL9_TRIALS", "12"))
STRESS_TRIALS = 60


def run_campaign(adapter, tmp_path: Path, trials: int, seed: int) -> Counter[str]:
    if not adapter.capabilities.shared_across_processes:
        pytest.skip("memory stores are per process")
    rng = random.Random(seed)
    setup = Engine.open(adapter)
    for table in ROWS_PER_COMMIT:
        setup.create_table(table, SCHEMA)
    options = json.dumps(dict(adapter.config.options))
    stats: Counter[str] = Counter()
    for trial in range(trials):
        tag_prefix, ack = f"t{trial}", tmp_path / f"ack-{trial}.txt"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        env.pop(ENV_VAR, None)
        if rng.random() < 1 / 3:
            point = rng.choice(COMMIT_POINTS)
            env[ENV_VAR] = f"{point}=exit@{rng.randrange(4)}"
            stats[f"failpoint:{point}"] += 1
        process = subprocess.Popen([sys.executable, str(WORKER), adapter.url, options, tag_prefix, str(ack),
                                    "100000"], env=env, stderr=subprocess.PIPE)  # fmt: skip
        try:
            process.wait(timeout=rng.uniform(0.8, 3.0))
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
        _, stderr = process.communicate()
        if process.returncode != -signal.SIGKILL:
            pytest.fail(
                f"worker exited {process.returncode} instead of being killed: {stderr.decode()[-2000:]}"
            )
        stats["pending_sidecar_at_kill"] += bool(adapter.list(RECOVERY_PREFIX))
        acknowledged = ack.read_text().split() if ack.exists() else []
        stats["acknowledged_commits"] += len(acknowledged)
        stats["unacknowledged_but_landed"] += check_all_or_nothing(
            Engine.open(adapter), tag_prefix, acknowledged
        )
        assert_converged(adapter)
        stats["trials"] += 1
    for record in Engine.open(adapter).audit_log():
        stats[f"audit:{record.outcome.value}"] += 1
    print(f"\nkill -9 campaign on {adapter.backend} (seed {seed}): {dict(sorted(stats.items()))}")
    return stats


def test_kill9_campaign(adapter, tmp_path):
    stats = run_campaign(adapter, tmp_path, TRIALS, seed=int(time.time()) % 10_000)
    assert stats["trials"] == TRIALS


@pytest.mark.stress
def test_kill9_campaign_stress(adapter, tmp_path):
    stats = run_campaign(adapter, tmp_path, STRESS_TRIALS, seed=int(time.time()) % 10_000)
    assert stats["trials"] == STRESS_TRIALS
