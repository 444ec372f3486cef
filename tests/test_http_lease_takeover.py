"""Twenty concurrent duplicates of one request, split across two servers of the example catalog service
(examples/catalog_service.py, two uvicorn processes) over one store (a SeaweedFS bucket, a local
directory), with the machine's cores kept busy so that an owner can be starved past its lease and a
duplicate on the other server takes the key over while the owner still works.

The oracle, per burst: exactly one row with the request id in the engine table; every answer a 200 with
the same body (at most one of them without ``idempotent-replayed``: the one run's), or 503
``idempotency_in_progress`` with ``Retry-After``, or 503 ``idempotency_no_effect`` with ``Retry-After``
(a stopped owner whose engine commit the other server's heal fenced: nothing of it landed, so the retry
is the answer). A failing burst keeps everything in the assertion
message: every answer's status, headers, body and timing, the idempotency record's history as a watcher
polling it saw it (every revision it caught: status, reservation, executor, heartbeat and lease), the
final record, and anything the servers logged.

``-m stress``: the campaign, ``LEASE_RUNS`` bursts (default 100) per backend and lease setting, under
busy-loop processes pinned to every core.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_http_service import ARGS, SERVICE, SERVICE_ARGS, TABLE_URL, TOKENS, Running, bearer

from storage_adapter import open_adapter
from storage_adapter.engine import failpoints
from storage_adapter.idempotency import IdempotencyStore, Owned, Policy, uuid7_key
from storage_adapter.servers.server import S3Endpoint

DUPLICATES = 20
TOKEN = "token-of-a"
REALM = TOKENS[TOKEN]  # the principal the token proves: the realm of every key (principal_realm)
# test_http_service's deployment: the API under its prefix, its bearer tokens, Iceberg-size table
# metadata in every commit answer (stored as the record's attachment)
DEPLOYMENT = SERVICE_ARGS[len(ARGS) :]
# The service's settings (examples/catalog_service.py's flags): test_http_service's short ones (a 1 s lease,
# 0.2 s skew grace, 3 s wait, a 1 s engine writer lease), a 2 s lease, and the service's defaults (30 s
# lease, 5 s grace, 30 s wait, 30 s engine lease).
SETTINGS: dict[str, Sequence[str]] = {
    "lease1": ARGS,
    # a 1 s idempotency lease over a 30 s engine writer lease: a stall of a few seconds lapses the first
    # only, so a stopped owner's engine commit is never healed under it by the other server
    "lease1-engine30": ["--lease", "1", "--skew-grace", "0.2", "--wait", "3", "--engine-lease", "30"],
    "lease2": [
        "--lease",
        "2",
        "--skew-grace",
        "0.2",
        "--wait",
        "5",
        "--engine-lease",
        "2",
        "--lifetime",
        "1800",
    ],
    "defaults": [],
}
SETTINGS = {name: [*args, *DEPLOYMENT] for name, args in SETTINGS.items()}


# -- load ------------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def cpu_load(per_core: int) -> Iterator[list[int]]:
    """``per_core`` busy-loop processes pinned to each core of this machine (the pids), ended on exit."""
    cores = sorted(os.sched_getaffinity(0))
    busy: list[subprocess.Popen[bytes]] = []
    try:
        for core in cores:
            for _ in range(per_core):
                process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
                busy.append(process)
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(process.pid, {core})
        yield [p.pid for p in busy]
    finally:
        for process in busy:
            process.kill()
        for process in busy:
            process.wait()


# -- two servers over one store -------------------------------------------------------------------------------
@dataclass
class Pair:
    """Two service processes over the store at ``url``, and the store's own view of the records."""

    url: str
    servers: list[Running]
    store: IdempotencyStore

    def close(self) -> None:
        for server in self.servers:
            server.close()

    def executors(self) -> dict[str, str]:
        """executor id (host:pid) -> server name, for the history."""
        return {f"{socket.gethostname()}:{s.process.pid}": f"server{i}" for i, s in enumerate(self.servers)}

    def pids(self) -> dict[str, int]:
        return {f"{socket.gethostname()}:{s.process.pid}": s.process.pid for s in self.servers}

    def logged(self) -> list[str]:
        """What the servers logged (at warning level a quiet service logs nothing: a traceback, or the
        engine's warning of a commit durable without its key's ledger entry, is a finding)."""
        found = []
        for i, server in enumerate(self.servers):
            log = server.log.read_text(errors="replace")
            if log.strip():
                found.append(f"server{i} log ({server.log}):\n{log[-6000:]}")
        return found


def start_pair(
    url: str, env: dict[str, str], options: dict[str, Any], logs: Path, args: Sequence[str]
) -> Pair:
    servers: list[Running] = []
    try:
        for i in range(2):
            servers.append(Running(url, env, logs / f"server{i}.log", args))
    except BaseException:
        for server in servers:
            server.close()
        raise
    adapter = open_adapter(url, **options).child("idempotency")
    return Pair(url, servers, IdempotencyStore(adapter, lifetime=timedelta(hours=1), call_timeout=None))


@contextlib.contextmanager
def pair_on(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, args: Sequence[str]
) -> Iterator[Pair]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env.pop("STORAGE_ADAPTER_FAILPOINTS", None)
    options: dict[str, Any] = {}
    if backend == "local":
        url = f"file://{tmp_path / 'store'}"
        (tmp_path / "store").mkdir()
    else:
        endpoint: S3Endpoint = request.getfixturevalue("embedded_seaweedfs")
        env.update(endpoint.environment())
        url = endpoint.url(f"lease-{uuid.uuid4().hex[:8]}")
        options = endpoint.adapter_options()
    logs = tmp_path / "logs"
    logs.mkdir()
    pair = start_pair(url, env, options, logs, args)
    try:
        yield pair
    finally:
        pair.close()


# -- one burst ----------------------------------------------------------------------------------------------------
def error_type(body: bytes) -> str | None:
    """The error type of an answer's body, as the service renders it: the Iceberg REST ``ErrorModel``
    (``{"error": {"type", ...}}``, the example's renderer) or problem+json (``{"type", ...}``)."""
    try:
        document = json.loads(body)
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    error = document.get("error")
    found = error.get("type") if isinstance(error, dict) else document.get("type")
    return found if isinstance(found, str) else None


@dataclass
class Answer:
    server: int
    sent_s: float
    took_s: float
    status: int | None
    headers: list[tuple[str, str]]
    body: bytes
    error: str | None = None

    @property
    def replayed(self) -> bool:
        return any(name.lower() == "idempotent-replayed" for name, _ in self.headers)

    def header(self, name: str) -> str | None:
        return next((v for n, v in self.headers if n.lower() == name), None)

    def kind(self) -> str:
        if self.status is None:
            return f"error {self.error}"
        if self.status == 200:
            return "200 replayed" if self.replayed else "200 run"
        return f"{self.status} {error_type(self.body)}"

    def render(self) -> str:
        headers = ", ".join(f"{n}: {v}" for n, v in self.headers)
        shown = self.body.decode(errors="replace")
        return (
            f"server{self.server} sent +{self.sent_s:.3f}s took {self.took_s:.3f}s -> {self.status} "
            f"{self.error or ''}\n      headers: {headers}\n      body: {shown[:1500]}"
        )


class RecordWatch:
    """Polls the key's record from the test process while the burst runs and keeps every distinct version
    it sees (a revision it missed shows as a gap in the revisions)."""

    def __init__(
        self, store: IdempotencyStore, key: str, names: dict[str, str], stall: Stall | None = None
    ) -> None:
        self.stall = stall
        self.store = store
        self.key = key
        self.names = names
        self.seen: list[tuple[float, Any]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch {key}", daemon=True)
        self.started = time.monotonic()

    def __enter__(self) -> RecordWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._look()  # the final version
        if self.stall is not None:
            self.stall.join()

    def _look(self) -> None:
        try:
            stored = self.store.load(REALM, self.key)
        except Exception as exc:
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return
        record = None if stored is None else stored.record
        if record is not None and (not self.seen or self.seen[-1][1] != record):
            self.seen.append((time.monotonic() - self.started, record))
            if self.stall is not None:
                self.stall.owner_seen(record, self.started)

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self._look()

    def reservations(self) -> int:
        return len({record.reservation_id for _, record in self.seen})

    def render(self) -> str:
        lines = []
        for at, r in self.seen:
            lines.append(
                f"  +{at:.3f}s rev {r.revision} {r.status.value} reservation {r.reservation_id[:8]} by "
                f"{self.names.get(r.executor_id, r.executor_id)} heartbeat {r.heartbeat_at.time()} lease to "
                f"{r.lease_expires_at.time()} http {r.http_status} subtype {r.error_subtype} "
                f"summary {str(r.summary)[:200]}"
            )
        if self.errors:
            lines.append(f"  watch errors: {self.errors[:5]}")
        if self.stall is not None and self.stall.done is not None:
            lines.append(f"  stall: {self.stall.done}")
        return "\n".join(lines) or "  (never seen)"


class Stall:
    """Stops the first owner's whole process (SIGSTOP: no thread of it runs, as under a long pause of the
    machine or the VM) ``after_s`` after the watch saw its reservation, for ``for_s``, then SIGCONT."""

    def __init__(self, pids: dict[str, int], after_s: float, for_s: float) -> None:
        self.pids = pids
        self.after_s = after_s
        self.for_s = for_s
        self.done: str | None = None
        self._thread: threading.Thread | None = None

    def owner_seen(self, record: Any, started: float) -> None:
        if self._thread is not None or record.executor_id not in self.pids:
            return
        pid = self.pids[record.executor_id]
        self._thread = threading.Thread(target=self._stall, args=(pid, record, started), daemon=True)
        self._thread.start()

    def _stall(self, pid: int, record: Any, started: float) -> None:
        time.sleep(self.after_s)
        at = time.monotonic() - started
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(self.for_s)
        finally:
            os.kill(pid, signal.SIGCONT)
        self.done = (
            f"pid {pid} (owner of reservation {record.reservation_id[:8]}) stopped at +{at:.3f}s "
            f"for {self.for_s:.3f}s"
        )

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()


async def _send_all(pair: Pair, key: str, body: dict[str, Any], n: int) -> list[Answer]:
    started = time.monotonic()
    headers = {"Idempotency-Key": key, **bearer(TOKEN)}

    async def one(http: httpx.AsyncClient, i: int) -> Answer:
        server = i % len(pair.servers)
        sent = time.monotonic()
        try:
            answer = await http.post(pair.servers[server].base + TABLE_URL, json=body, headers=headers)
        except httpx.HTTPError as exc:
            took = time.monotonic() - sent
            return Answer(server, sent - started, took, None, [], b"", f"{type(exc).__name__}: {exc}")
        took = time.monotonic() - sent
        return Answer(
            server, sent - started, took, answer.status_code, list(answer.headers.items()), answer.content
        )

    limits = httpx.Limits(max_connections=2 * n, max_keepalive_connections=2 * n)
    async with httpx.AsyncClient(timeout=300, limits=limits) as http:
        return list(await asyncio.gather(*(one(http, i) for i in range(n))))


@dataclass
class Burst:
    key: str
    request_id: str
    answers: list[Answer]
    effects: int
    watch: RecordWatch
    problems: list[str] = field(default_factory=list)

    def render(self, pair: Pair) -> str:
        kinds = Counter(a.kind() for a in self.answers)
        lines = [
            f"key {self.key} request_id {self.request_id}: {self.effects} effect(s); answers {dict(kinds)}",
            f"problems: {self.problems}",
            f"servers: {pair.executors()}",
            "answers:",
            *(f"  [{i}] {a.render()}" for i, a in enumerate(self.answers)),
            "record history (polled):",
            self.watch.render(),
        ]
        return "\n".join(lines)


FRESH_REPLAY = "200 answers without idempotent-replayed"
# The answers that tell the client to retry (with Retry-After): another request holds the key, or the
# example's commit was fenced by the other server's heal and had no effect (the key free again).
RETRY_ANSWERS = ("503 idempotency_in_progress", "503 idempotency_no_effect")


def judge(answers: list[Answer], effects: int) -> list[str]:
    """The oracle: the problems of one burst (none: it passed)."""
    problems = []
    if effects != 1:
        problems.append(f"{effects} effects, not 1")
    ok = [a for a in answers if a.status == 200]
    if not ok:
        problems.append("no 200 answer")
    if len({a.body for a in ok}) > 1:
        problems.append(f"{len({a.body for a in ok})} different 200 bodies")
    unreplayed = sum(not a.replayed for a in ok)
    if unreplayed > 1:
        problems.append(f"{unreplayed} {FRESH_REPLAY}")
    for i, answer in enumerate(answers):
        retry = answer.kind() in RETRY_ANSWERS and answer.header("retry-after")
        if answer.status != 200 and not retry:
            problems.append(f"answer [{i}] is {answer.kind()}")
    return problems


def burst(pair: Pair, n: int = DUPLICATES, stall: Stall | None = None) -> Burst:
    key, request_id = uuid7_key(), uuid.uuid4().hex
    with RecordWatch(pair.store, key, pair.executors(), stall) as watch:
        answers = asyncio.run(_send_all(pair, key, {"request_id": request_id}, n))
    effects = pair.servers[0].effects(request_id)
    result = Burst(key, request_id, answers, effects, watch)
    result.problems = judge(answers, effects)
    return result


@dataclass
class CampaignResult:
    runs: int = 0
    failed: list[str] = field(default_factory=list)
    kinds: Counter[str] = field(default_factory=Counter)
    takeovers: int = 0  # bursts whose record had more than one reservation
    seconds: float = 0.0

    def summary(self) -> str:
        return (
            f"{self.runs} bursts of {DUPLICATES} in {self.seconds:.0f} s: {len(self.failed)} failed, "
            f"{self.takeovers} with a takeover; "
            f"answers {dict(self.kinds)}"
        )


def campaign(
    pair: Pair,
    runs: int,
    report: Path | None = None,
    stalls: tuple[float, float, float] | None = None,
    seed: int = 0,
) -> CampaignResult:
    """``runs`` bursts; ``stalls`` = (latest start, shortest, longest): each burst's owner process is
    stopped once, a seeded time after its reservation was seen, for a seeded duration."""
    result = CampaignResult()
    started = time.monotonic()
    draw = random.Random(seed)
    for _ in range(runs):
        stall = None
        if stalls is not None:
            latest, shortest, longest = stalls
            stall = Stall(pair.pids(), draw.uniform(0, latest), draw.uniform(shortest, longest))
        one = burst(pair, stall=stall)
        result.runs += 1
        result.kinds.update(a.kind() for a in one.answers)
        takeover = one.watch.reservations() > 1
        result.takeovers += takeover
        if not one.problems:
            continue
        detail = one.render(pair)
        result.failed.append(detail)
        if report is not None:
            with report.open("a") as out:
                out.write(detail + "\n\n")
    result.seconds = time.monotonic() - started
    logged = pair.logged()
    if logged:
        result.failed.append("the servers logged:\n" + "\n".join(logged))
    return result


def _assert_clean(result: CampaignResult) -> None:
    print(result.summary())
    assert not result.failed, result.summary() + "\n\n" + "\n\n".join(result.failed[:10])


# -- the mechanism, deterministically: two middleware instances in process, an injected clock ------------------
def _catalog_service() -> Any:
    sys.path.insert(0, str(SERVICE.parent))
    try:
        import catalog_service
    finally:
        sys.path.remove(str(SERVICE.parent))
    return catalog_service


class InProcess:
    """Two instances of the example service (``build``) over one memory store, in this process, whose
    idempotency stores read one injected clock (``now``): a stall is the clock jumping past the lease plus
    the skew grace while the other instance serves a duplicate."""

    LEASE = timedelta(seconds=30)
    GRACE = timedelta(seconds=5)

    def __init__(self) -> None:
        service = _catalog_service()
        root = open_adapter(f"memory://lease-{uuid.uuid4().hex[:8]}")
        self.now = [datetime.now(UTC)]
        quick = Policy(first_wait_s=0.01, max_wait_s=0.05, total_wait_s=0.3)
        self.stores: list[IdempotencyStore] = []  # each instance's store, made by build with our clock

        def store(*args: Any, **kwargs: Any) -> IdempotencyStore:
            self.stores.append(IdempotencyStore(*args, clock=lambda: self.now[0], **kwargs))
            return self.stores[-1]

        made = service.IdempotencyStore
        service.IdempotencyStore = store
        try:
            self.apps = [
                service.build(root, principals=TOKENS, lease=self.LEASE, skew_grace=self.GRACE, wait=quick)
                for _ in range(2)
            ]
        finally:
            service.IdempotencyStore = made
        assert len(self.stores) == 2

    def _run(self, server: int, method: str, **kwargs: Any) -> httpx.Response:
        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.apps[server])
            async with httpx.AsyncClient(
                transport=transport, base_url="http://catalog", headers=bearer(TOKEN)
            ) as http:
                return await http.request(method, TABLE_URL, **kwargs)

        return asyncio.run(send())

    def post(self, server: int, key: str, request_id: str) -> Answer:
        started = time.monotonic()
        answer = self._run(server, "POST", json={"request_id": request_id}, headers={"Idempotency-Key": key})
        took = time.monotonic() - started
        return Answer(server, 0.0, took, answer.status_code, list(answer.headers.items()), answer.content)

    def effects(self, request_id: str) -> int:
        rows = self._run(0, "GET").json()["rows"]
        return sum(row["request_id"] == request_id for row in rows)


STALLS = {
    # the owner reserved the key and is not scheduled before its app starts (no heartbeat runs yet)
    "after_reserve": None,
    # the owner's app is inside its engine commit, before anything is written
    "before_commit": "commit.before_sidecar",
    # the owner's commit is durable and done; its finalize has not run
    "after_commit": "commit.after_sidecar_delete",
}


def stalled_owner(stall: str) -> tuple[list[Answer], int]:
    """Server 0 owns a key and stalls past its lease at ``stall``: meanwhile the clock jumps past its lease
    and skew grace and server 1 serves a duplicate to its end; then server 0 goes on, and each server
    answers one more duplicate. The four answers (server 0's first) and the effects."""
    service = InProcess()
    key, request_id = uuid7_key(), uuid.uuid4().hex
    answers: list[Answer] = []

    def stalled(*_: object) -> None:
        service.now[0] += service.LEASE + service.GRACE + timedelta(seconds=1)
        answers.append(service.post(1, key, request_id))

    point = STALLS[stall]
    store = service.stores[0]
    reserve = store.reserve
    if point is None:

        def reserve_then_stall(*args: Any, **kwargs: Any) -> Any:
            claim = reserve(*args, **kwargs)
            if isinstance(claim, Owned) and not answers:
                stalled()
            return claim

        store.reserve = reserve_then_stall  # type: ignore[method-assign]
    else:
        failpoints.arm(point, stalled, times=1)
    try:
        answers.insert(0, service.post(0, key, request_id))
    finally:
        failpoints.disarm()
        store.reserve = reserve  # type: ignore[method-assign]
    assert len(answers) == 2, f"the stall at {stall} did not happen"
    for server in (0, 1):
        answers.append(service.post(server, key, request_id))
    return answers, service.effects(request_id)


# -- the tests --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "stall",
    [
        "after_reserve",
        "before_commit",
        "after_commit",
    ],
)
def test_an_owner_stalled_past_its_lease_while_the_other_server_takes_over(stall: str) -> None:
    """Server 0 owns the key and stalls past its lease at ``stall``; server 1 takes the duplicate over,
    reconciles, and runs or replays; then server 0 goes on. One effect, one body, at most one answer
    without ``idempotent-replayed``, and every later duplicate replays it."""
    answers, effects = stalled_owner(stall)
    problems = judge(answers, effects)
    if not all(a.replayed for a in answers[2:]):
        problems.append("a later duplicate was not replayed")
    detail = "\n".join(f"  [{i}] {a.render()}" for i, a in enumerate(answers))
    assert not problems, f"{problems}; {effects} effect(s)\n{detail}"


def _runs() -> int:
    return int(os.environ.get("LEASE_RUNS", "100"))


@pytest.mark.stress
@pytest.mark.timeout(7200)
@pytest.mark.parametrize("settings", ["lease1", "lease2", "defaults"])
@pytest.mark.parametrize("backend", ["local", "seaweedfs"])
def test_duplicates_split_across_two_servers_under_cpu_load_stress(
    backend: str, settings: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """``LEASE_RUNS`` bursts (default 100) under ``LEASE_LOAD_PER_CORE`` (default 3) busy loops per core."""
    per_core = int(os.environ.get("LEASE_LOAD_PER_CORE", "3"))
    with pair_on(backend, request, tmp_path, SETTINGS[settings]) as pair, cpu_load(per_core):
        result = campaign(pair, _runs(), tmp_path / "failures.txt")
    _assert_clean(result)


@pytest.mark.stress
@pytest.mark.timeout(7200)
@pytest.mark.parametrize("settings", ["lease1-engine30", "lease1", "lease2"])
@pytest.mark.parametrize("backend", ["local", "seaweedfs"])
def test_duplicates_split_across_two_servers_with_the_owner_stopped_stress(
    backend: str, settings: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """``LEASE_RUNS`` bursts, each with its owner's process stopped (SIGSTOP) 0 to ``LEASE_STALL_AFTER``
    s (default 0.15) after its reservation, for one to three leases: a takeover in most bursts."""
    lease = {"lease1-engine30": 1.0, "lease1": 1.0, "lease2": 2.0}[settings]
    after = float(os.environ.get("LEASE_STALL_AFTER", "0.15"))
    with pair_on(backend, request, tmp_path, SETTINGS[settings]) as pair:
        result = campaign(pair, _runs(), tmp_path / "failures.txt", (after, lease, 3 * lease))
    _assert_clean(result)
