"""``storage-adapter chaos --http``: the seeded chaos campaign over real HTTP.

Real clients (``httpx``, one thread each) retry real requests against the example catalog service
(examples/catalog_service.py: ``IdempotencyMiddleware`` over the commit engine, an ``EngineReconciler``)
running in a separate process, which the campaign kills with ``kill -9`` and restarts, generation after
generation: each generation is killed at a random time after it is ready, or kills itself (SIGKILL, the
engine's ``exit`` failpoint) at a commit step, and may fail a commit step with an injected storage error.
Clients cut responses mid-body (they drop the connection after a few bytes), give up waiting for an
answer, and send concurrent duplicates. Every choice comes from the seed: request ``i``'s from
``random.Random(f"{seed}:{i}")``, generation ``g``'s from ``f"{seed}:server:{g}"``.

A request is one ``Idempotency-Key`` (a UUIDv7 drawn from the seed) appending one row, its request id, to
one of eight tables. After the chaos phase, the server is restarted clean; requests without a definite
answer get clean retries, the others one replay; then the oracle of the in-process campaign
(``contract_tests.chaos.judge``) counts effects per request id in the tables and checks every answer
against them, and the final records. A response outside the documented answers, or a traceback in a
server's log, is a raw error. See docs/idempotency.md, "Chaos campaign".
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx

from contract_tests.chaos import (
    Answer,
    CampaignResult,
    RequestLog,
    Violation,
    effects_of,
    judge,
    record_answer,
    request_rng,
    schedule_digest,
)
from storage_adapter.adapter import open_adapter
from storage_adapter.engine import Engine, EngineSettings, failpoints
from storage_adapter.engine.failpoints import COMMIT_POINTS
from storage_adapter.http import RESPONSE_NOT_STORED
from storage_adapter.idempotency import IdempotencyStore, uuid7_key
from storage_adapter.idempotency.responses import (
    IN_PROGRESS,
    RECONCILE_ERROR,
    RECONCILE_FAILED,
    RECORD_CORRUPT,
    REPLAY_FAILED,
    STORE_FAILED,
    STORE_UNAVAILABLE,
)

SERVICE = Path(__file__).resolve().parent.parent / "examples" / "catalog_service.py"
HTTP_TARGETS = ("local", "seaweedfs")  # a memory store dies with its server process: nothing to restart
NAMESPACE = "chaos"
TABLES = tuple(f"{NAMESPACE}.t{i}" for i in range(8))
REALM = "chaos"  # the principal the campaign's bearer token proves: the example service's realm
TOKEN = "chaos-campaign-token"
AUTHORIZATION = {"authorization": f"Bearer {TOKEN}"}
# Commit steps a generation may die at (SIGKILL) or fail at (InjectedFault); publish.before_cas is left
# out because the startup heal's roll-forward passes it too, and a server must come up.
POINTS = tuple(point for point in COMMIT_POINTS if point != "publish.before_cas")
# The documented answers besides 2xx and the 4xx the oracle judges (docs/idempotency.md, "Over HTTP").
DEFINED_PROBLEMS = {
    409: {IN_PROGRESS},
    503: {IN_PROGRESS, STORE_UNAVAILABLE, "commit_failed"},
    500: {
        RECONCILE_FAILED,
        RECONCILE_ERROR,
        STORE_FAILED,
        RECORD_CORRUPT,
        REPLAY_FAILED,
        RESPONSE_NOT_STORED,
    },
}
BASE_MS = 1_767_225_600_000  # 2026-01-01: the keys' UUIDv7 time, so a key is a function of the seed
READY_TIMEOUT_S = 120.0
REFUSED_PAUSE_S = 0.2  # a client's pause after a refused connection (the server is restarting)


@dataclass(frozen=True)
class HttpChaosConfig:
    """Everything the schedule depends on, besides the seed. Times in seconds."""

    requests: int = 200
    workers: int = 16
    retries: int = 8  # attempts of a logical request in the chaos phase
    lease_s: float = 0.5  # the service's idempotency lease
    skew_grace_s: float = 0.2
    wait_s: float = 1.0  # how long a duplicate waits for the owner before 503
    lifetime_s: float = 3600.0
    retention: int = 12  # the engine's retained commit records: keys leave the manifest quickly
    engine_lease_s: float = 2.0  # a dead writer's sidecar is healed this long after it was written
    kill_after_s: tuple[float, float] = (1.0, 4.0)  # a generation lives this long after it is ready
    failpoint_kill_rate: float = 0.5  # share of generations that die at a commit step instead
    engine_error_rate: float = 0.3  # share of generations that fail a commit step with a storage error
    cut_rate: float = 0.1  # attempts whose client drops the connection a few bytes into the body
    drop_rate: float = 0.1  # attempts whose client gives up before the answer
    hedge_rate: float = 0.1  # attempts followed by a concurrent duplicate
    prefix: str = "/catalog"  # the service's API is mounted under it, as catalogs commonly are
    metadata_bytes: int = 100_000  # table metadata in each commit answer: Iceberg-size responses

    @property
    def lease_window_s(self) -> float:
        return self.lease_s + self.skew_grace_s


@dataclass(frozen=True)
class HttpAttempt:
    wait_s: float  # the client's backoff before sending it
    cut: int | None = None  # the client reads this many bytes of the body, then drops the connection
    drop_s: float | None = None  # the client gives up waiting for the answer after this long
    hedge_s: float | None = None  # a concurrent duplicate is sent this long after the attempt

    def describe(self) -> str:
        parts = [f"wait={self.wait_s:.3f}"]
        if self.cut is not None:
            parts.append(f"cut_after={self.cut}B")
        if self.drop_s is not None:
            parts.append(f"drop_after={self.drop_s:.3f}")
        if self.hedge_s is not None:
            parts.append(f"hedge_after={self.hedge_s:.3f}")
        return " ".join(parts)


@dataclass(frozen=True)
class HttpRequestPlan:
    index: int
    key: str
    request_id: str
    attempts: tuple[HttpAttempt, ...]

    @property
    def table(self) -> str:
        return TABLES[self.index % len(TABLES)]

    def describe(self) -> list[str]:
        return [f"#{self.index} key={self.key} request_id={self.request_id} table={self.table}"] + [
            f"  attempt {n}: {a.describe()}" for n, a in enumerate(self.attempts)
        ]


@dataclass(frozen=True)
class Generation:
    """One life of the server: killed ``after_s`` after it is ready, unless ``exit`` (a failpoint spec:
    SIGKILL at a commit step) ends it first; ``error`` fails a commit step with a storage error."""

    index: int
    after_s: float
    exit: str | None = None
    error: str | None = None

    @property
    def spec(self) -> str:
        return ";".join(part for part in (self.exit, self.error) if part)

    def describe(self) -> list[str]:
        return [f"server generation {self.index}: kill after {self.after_s:.3f}s {self.spec}".rstrip()]


def plan_http_request(seed: int, index: int, config: HttpChaosConfig) -> HttpRequestPlan:
    """Request ``index``'s schedule: a pure function of (seed, index, config)."""
    rng = request_rng(seed, index)
    key = uuid7_key(BASE_MS + index, rng.getrandbits(74))
    attempts = []
    for n in range(config.retries):
        wait = 0.0 if n == 0 else rng.uniform(0.0, 1.5) * config.lease_window_s
        cut = rng.randrange(1, 40) if rng.random() < config.cut_rate else None
        drop = rng.uniform(0.005, 0.3) if cut is None and rng.random() < config.drop_rate else None
        hedge = rng.uniform(0.0, 2.0) * config.lease_s if rng.random() < config.hedge_rate else None
        attempts.append(HttpAttempt(round(wait, 4), cut, None if drop is None else round(drop, 4), hedge))
    return HttpRequestPlan(index, key, f"h{seed}-{index}", tuple(attempts))


def plan_generation(seed: int, index: int, config: HttpChaosConfig) -> Generation:
    """Server generation ``index``'s injections: a pure function of (seed, index, config). Generation 0
    creates the service's tables: nothing is injected into it (it is killed -9 all the same)."""
    rng = random.Random(f"{seed}:server:{index}")
    after = round(rng.uniform(*config.kill_after_s), 4)
    if index == 0:
        return Generation(index, after)
    exit_at = error = None
    points = list(POINTS)
    if rng.random() < config.failpoint_kill_rate:
        point = rng.choice(points)
        points.remove(point)
        exit_at = f"{point}=exit@{rng.randrange(40)}"
    if rng.random() < config.engine_error_rate:
        error = f"{rng.choice(points)}=error*{rng.choice((1, 1, 2))}@{rng.randrange(40)}"
    return Generation(index, after, exit_at, error)


SCHEDULED_GENERATIONS = 64  # the generations --print-schedule shows and the digest covers


def http_schedule(seed: int, config: HttpChaosConfig) -> tuple[list[HttpRequestPlan], list[Generation]]:
    plans = [plan_http_request(seed, index, config) for index in range(config.requests)]
    return plans, [plan_generation(seed, g, config) for g in range(SCHEDULED_GENERATIONS)]


class Service:
    """The example catalog service in its own process, one generation at a time, on one port."""

    def __init__(self, url: str, config: HttpChaosConfig, workdir: Path) -> None:
        self.url = url
        self.config = config
        self.workdir = workdir
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}{config.prefix}"
        self.process: subprocess.Popen[bytes] | None = None
        self.logs: list[Path] = []
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self.env.pop(failpoints.ENV_VAR, None)

    def start(self, generation: Generation | None) -> bool:
        """Start a generation (None: nothing injected) and wait until it answers. False when it died
        before it was ready (a failpoint of its startup, or a port still held)."""
        c = self.config
        env = dict(self.env)
        if generation is not None and generation.spec:
            env[failpoints.ENV_VAR] = generation.spec
        log = self.workdir / f"server-{len(self.logs)}.log"
        self.logs.append(log)
        args = [
            sys.executable,
            str(SERVICE),
            self.url,
            "--port",
            str(self.port),
            "--tables",
            ",".join(TABLES),
            "--lease",
            str(c.lease_s),
            "--skew-grace",
            str(c.skew_grace_s),
            "--wait",
            str(c.wait_s),
            "--lifetime",
            str(c.lifetime_s),
            "--retention",
            str(c.retention),
            "--engine-lease",
            str(c.engine_lease_s),
            "--prefix",
            c.prefix,
            "--token",
            f"{TOKEN}={REALM}",
            "--metadata-bytes",
            str(c.metadata_bytes),
        ]
        with log.open("wb") as stderr:
            self.process = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            with contextlib.suppress(httpx.TransportError):
                ready = httpx.get(f"{self.base}/v1/config", headers=AUTHORIZATION, timeout=1.0)
                if ready.status_code == 200:
                    return True
            time.sleep(0.05)
        raise RuntimeError(f"the catalog service did not answer within {READY_TIMEOUT_S:g} s (log: {log})")

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def tracebacks(self) -> list[str]:
        """Every traceback a generation printed (an unhandled exception: a raw error)."""
        found = []
        for index, log in enumerate(self.logs):
            text = log.read_text(errors="replace")
            if "Traceback" in text:
                found.append(f"server generation {index}: {text[text.index('Traceback') :][:1500]}")
        return found


class HttpCampaign:
    def __init__(
        self,
        seed: int,
        config: HttpChaosConfig,
        url: str,
        options: dict[str, Any],
        target: str,
        workdir: Path,
    ) -> None:
        self.seed = seed
        self.config = config
        self.url = url
        self.options = options
        self.target = target
        self.plans, self.generations = http_schedule(seed, config)
        self.logs = [RequestLog(plan) for plan in self.plans]
        self.service = Service(url, config, workdir)
        self.stats: Counter[str] = Counter()
        self.global_events: list[str] = []
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.client = httpx.Client(headers={**AUTHORIZATION, "connection": "close"})

    def _t(self) -> str:
        return f"{time.monotonic() - self.started:8.3f}s"

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.stats[name] += n

    # -- the server's lives -----------------------------------------------------------------------------
    def _killer(self) -> None:
        index = 0
        while not self._stop.is_set():
            generation = plan_generation(self.seed, index, self.config)
            self._count("generations")
            if not self.service.start(generation):
                self._count("kills:startup")
                self.global_events.append(f"{self._t()} generation {index} died before it was ready")
                index += 1
                continue
            deadline = time.monotonic() + generation.after_s
            while not self._stop.is_set() and self.service.alive and time.monotonic() < deadline:
                time.sleep(0.01)
            died = not self.service.alive
            self.service.kill()
            self._count("kills:failpoint" if died else "kills:time")
            how = f"killed itself ({generation.exit})" if died else "killed -9"
            self.global_events.append(f"{self._t()} generation {index} {how}")
            index += 1

    # -- one attempt ------------------------------------------------------------------------------------
    def _send(self, log: RequestLog[HttpRequestPlan], n: int, attempt: HttpAttempt, phase: str) -> Answer:
        plan = log.plan
        url = f"{self.service.base}/v1/namespaces/{NAMESPACE}/tables/{plan.table.split('.', 1)[1]}"
        sent = time.monotonic() - self.started
        try:
            with self.client.stream(
                "POST",
                url,
                json={"request_id": plan.request_id},
                headers={"Idempotency-Key": plan.key},
                timeout=attempt.drop_s if attempt.drop_s is not None else 60.0,
            ) as response:
                if attempt.cut is not None:
                    got = next(response.iter_raw(attempt.cut), b"")
                    self._count("cuts")
                    note = f"cut by the client after {len(got)} bytes of a {response.status_code}"
                    return Answer(phase, n, None, note=note, sent_s=sent)
                content = response.read()
        except httpx.ConnectError:
            raise  # the server is down: the caller waits for the next generation and sends it again
        except httpx.TransportError as exc:
            self._count("drops" if attempt.drop_s is not None else "transport_errors")
            return Answer(phase, n, None, note=f"no answer: {type(exc).__name__}", sent_s=sent)
        status = response.status_code
        replayed = response.headers.get("idempotent-replayed") == "true"
        try:
            body = json.loads(content)
        except ValueError:
            body = content.decode(errors="replace")
        problem = _problem_type(body)
        answer = Answer(phase, n, status, body, replayed, problem, sent_s=sent)
        defined = (
            (200 <= status < 300 and isinstance(body, dict) and isinstance(body.get("version"), int))
            or status in (400, 422)  # judged by the oracle (bad_4xx)
            or problem in DEFINED_PROBLEMS.get(status, ())
        )
        if not defined:
            log.raw.append(f"attempt {n} ({phase}): {status} {content[:300]!r}")
            return replace(answer, note=f"RAW ERROR {status} {content[:120]!r}")
        return answer

    def _attempt(self, log: RequestLog[HttpRequestPlan], n: int, attempt: HttpAttempt, phase: str) -> Answer:
        """Send an attempt until the server takes the connection: a refused one (the server is down
        between generations) is sent again after a pause, and is not one of the request's attempts."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                answer = self._send(log, n, attempt, phase)
                self._count("attempts")  # reached the server (a refused connection is sent again)
                return answer
            except httpx.ConnectError as exc:
                self._count("refused")
                if time.monotonic() > deadline:
                    return Answer(phase, n, None, note=f"no answer: {type(exc).__name__}")
                time.sleep(REFUSED_PAUSE_S)

    def _record(self, log: RequestLog[HttpRequestPlan], answer: Answer) -> None:
        record_answer(log, answer, self._t())
        self._count(f"answers:{answer.phase}:{answer.status if answer.status is not None else 'none'}")

    def _request(self, log: RequestLog[HttpRequestPlan]) -> None:
        hedges = []
        for n, attempt in enumerate(log.plan.attempts):
            time.sleep(attempt.wait_s)
            if attempt.hedge_s is not None:
                hedge = threading.Thread(target=self._hedge, args=(log, n, attempt.hedge_s), daemon=True)
                hedge.start()
                hedges.append(hedge)
            answer = self._attempt(log, n, attempt, "chaos")
            self._record(log, answer)
            if answer.definite:
                break
        for hedge in hedges:
            hedge.join()

    def _hedge(self, log: RequestLog[HttpRequestPlan], n: int, delay_s: float) -> None:
        time.sleep(delay_s)
        self._count("hedges")
        self._record(log, self._attempt(log, n, HttpAttempt(0.0), "hedge"))

    def _settle(self, log: RequestLog[HttpRequestPlan]) -> None:
        """The client's last word, against a server left alone: clean retries until a definite answer
        (a dead owner's lease expires in between), then one replay."""
        definite = any(a.definite for a in log.answers)
        for n in range(3):
            if definite:
                break
            time.sleep(self.config.lease_window_s)
            answer = self._attempt(log, n, HttpAttempt(0.0), "settle")
            self._record(log, answer)
            definite = answer.definite
        if definite:
            self._record(log, self._attempt(log, 0, HttpAttempt(0.0), "replay"))

    # -- run and judge ----------------------------------------------------------------------------------
    def run(self) -> CampaignResult:
        # The service creates the tables (its schema) when a generation starts.
        killer = threading.Thread(target=self._killer, name="chaos-http-killer", daemon=True)
        killer.start()
        try:
            with ThreadPoolExecutor(self.config.workers, thread_name_prefix="chaos-http-client") as pool:
                for future in [pool.submit(self._request, log) for log in self.logs]:
                    future.result()
            self._stop.set()
            killer.join()  # it killed the last generation -9, wherever it was
            if not self.service.start(None):
                raise RuntimeError("the catalog service did not start for the settle phase")
            with ThreadPoolExecutor(self.config.workers, thread_name_prefix="chaos-http-settle") as pool:
                for future in [pool.submit(self._settle, log) for log in self.logs]:
                    future.result()
        finally:
            self._stop.set()
            killer.join()
            self.service.stop()
            self.client.close()
        adapter = open_adapter(self.url, **self.options)
        engine = Engine.open(adapter.child("engine"), actor="chaos-http", settings=self._engine_settings())
        rows, key_of_version = effects_of(engine, TABLES)
        store = IdempotencyStore(
            adapter.child("idempotency"),
            lifetime=timedelta(seconds=self.config.lifetime_s),
            lease=timedelta(seconds=self.config.lease_s),
            skew_grace=timedelta(seconds=self.config.skew_grace_s),
        )
        grace = timedelta(seconds=self.config.skew_grace_s)
        violations = judge(self.logs, rows, key_of_version, store, REALM, grace)
        violations += [Violation("raw_exception", None, None, text) for text in self.service.tracebacks()]
        stats = dict(sorted(self.stats.items()))
        stats["kills"] = sum(v for k, v in self.stats.items() if k.startswith("kills:"))
        stats["requests"] = len(self.logs)
        return CampaignResult(
            self.seed,
            self.target,
            self.url,
            self.config,
            http_digest(self.plans, self.generations),
            time.monotonic() - self.started,
            stats,
            violations,
            list(self.logs),
            self.global_events,
            mode="--http",
        )

    def _engine_settings(self) -> EngineSettings:
        return EngineSettings(retention=self.config.retention, lease_s=self.config.engine_lease_s)


def _problem_type(body: object) -> str | None:
    """The problem type of an error answer: the service's errors are Iceberg's ``{"error": {"type"}}``."""
    error = body.get("error") if isinstance(body, dict) else None
    kind = error.get("type") if isinstance(error, dict) else None
    return kind if isinstance(kind, str) else None


def http_digest(plans: Sequence[HttpRequestPlan], generations: Sequence[Generation]) -> str:
    return schedule_digest([*plans, *generations])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_http_campaign(
    seed: int, config: HttpChaosConfig, url: str, target: str, options: dict[str, Any] | None = None
) -> CampaignResult:
    """Run one HTTP campaign against the empty root ``url`` of ``target`` (one of HTTP_TARGETS)."""
    if target not in HTTP_TARGETS:
        raise ValueError(
            f"the HTTP mode needs storage that outlives the server: {HTTP_TARGETS}, not {target!r}"
        )
    if not SERVICE.exists():
        raise FileNotFoundError(f"the HTTP mode runs the example service {SERVICE}: run it from a clone")
    with tempfile.TemporaryDirectory(prefix="chaos-http-") as workdir:
        return HttpCampaign(seed, config, url, dict(options or {}), target, Path(workdir)).run()
