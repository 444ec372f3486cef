"""The chaos campaign's HTTP mode (contract_tests.http_chaos, ``storage-adapter chaos --http``): real
clients against the example catalog service in its own process, killed -9 and restarted.

Default tier: one small seeded run on local (40 requests, a few kills: 5-10 s on a quiet machine, a
minute when it is loaded, since every generation's start is slower), the schedule's replay, and the
oracle shown not to be vacuous. ``-m stress``: 2,000 requests on local and 1,000 on SeaweedFS.
``CHAOS_SEED`` replaces the fixed seeds (a failure prints the replay command line)."""

from __future__ import annotations

import dataclasses
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from contract_tests import chaos
from contract_tests.http_chaos import (
    HttpCampaign,
    HttpChaosConfig,
    http_digest,
    http_schedule,
    plan_http_request,
    run_http_campaign,
)
from storage_adapter.idempotency import UUIDV7_KEYS, uuid7_key
from storage_adapter.servers.server import S3Endpoint

SEEDS = {"local": 21, "seaweedfs": 23}
STRESS_SIZES = {"local": (2000, 16), "seaweedfs": (1000, 16)}


def _seed(target: str) -> int:
    return int(os.environ.get("CHAOS_SEED") or SEEDS[target])


def _campaign(target: str, url: str, requests: int, workers: int) -> chaos.CampaignResult:
    result = run_http_campaign(
        _seed(target), HttpChaosConfig(requests=requests, workers=workers), url, target
    )
    print(result.render(max_violations=5))
    assert result.stats["requests"] == requests and result.stats["kills"] >= 1
    assert result.ok, result.render(max_violations=5)
    return result


def test_one_seed_gives_one_http_schedule(capsys: pytest.CaptureFixture[str]) -> None:
    config = HttpChaosConfig(requests=300)
    plans, generations = http_schedule(7, config)
    assert http_schedule(7, config) == (plans, generations)
    assert http_digest(*http_schedule(8, config)) != http_digest(plans, generations)
    assert http_schedule(7, HttpChaosConfig(requests=10))[0] == plans[:10]
    assert plan_http_request(7, 123, config) == plans[123]
    assert all(UUIDV7_KEYS.validate(plan.key) for plan in plans)
    attempts = [a for plan in plans for a in plan.attempts]
    assert (
        any(a.cut for a in attempts) and any(a.drop_s for a in attempts) and any(a.hedge_s for a in attempts)
    )
    assert any(g.exit for g in generations) and any(g.error for g in generations)
    argv = ["--http", "--seed", "5", "--requests", "20", "--target", "local", "--print-schedule"]
    assert chaos.main(argv) == 0
    first = capsys.readouterr().out
    assert chaos.main(argv) == 0
    assert capsys.readouterr().out == first and "schedule digest" in first and "server generation 63" in first


def test_the_http_mode_refuses_a_store_that_dies_with_the_server(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        chaos.main(["--http", "--seed", "1", "--requests", "5", "--target", "memory"]) == chaos.EXIT_BAD_INPUT
    )
    assert "outlives the server" in capsys.readouterr().err


def test_http_chaos_campaign_finds_no_violation(tmp_path: Path) -> None:
    result = _campaign("local", f"file://{tmp_path}/root", 40, 8)
    assert result.stats.get("answers:replay:200") == 40  # every request ended acknowledged, and replayed


def test_the_http_oracle_catches_a_client_that_changes_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A planted bug: a client that sends every retry with a new key. An attempt whose answer was lost
    (cut, dropped, killed) after its commit is then applied again: the oracle reads the double effect
    from the tables, through the same judge as the in-process campaign."""
    send = HttpCampaign._send

    def forgetful(self: HttpCampaign, log: Any, n: int, attempt: Any, phase: str) -> Any:
        fresh = chaos.RequestLog(dataclasses.replace(log.plan, key=uuid7_key()))
        answer = send(self, fresh, n, attempt, phase)
        log.raw.extend(fresh.raw)
        return answer

    monkeypatch.setattr(HttpCampaign, "_send", forgetful)
    config = HttpChaosConfig(requests=24, workers=8, cut_rate=0.5, drop_rate=0.3)
    result = run_http_campaign(3, config, f"file://{tmp_path}/root", "local")
    assert "double_effect" in result.violation_counts(), result.render()
    assert "chaos --http --seed 3 --requests 24" in result.render()


@pytest.mark.stress
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("target", ["local", "seaweedfs"])
def test_http_chaos_campaign_stress(
    target: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests, workers = STRESS_SIZES[target]
    if target == "local":
        _campaign(target, f"file://{tmp_path}/root", requests, workers)
    else:
        endpoint: S3Endpoint = request.getfixturevalue("embedded_seaweedfs")
        for name, value in endpoint.environment().items():  # the service processes inherit the endpoint
            monkeypatch.setenv(name, value)
        _campaign(target, endpoint.url(f"chaos-http-{uuid.uuid4().hex[:8]}"), requests, workers)
