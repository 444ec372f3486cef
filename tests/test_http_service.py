"""Issue 32's "Done when", through real HTTP: the example catalog service (examples/catalog_service.py)
runs under uvicorn in its own process on memory, local and SeaweedFS, and every answer of the
Idempotency-Key table is checked from a real client; effects are counted in the engine table (GET).
The storage requests each answer costs are counted in process (the same app, httpx's ASGI transport)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest

from contract_tests.counting import CountingAdapter
from contract_tests.http_chaos import _free_port
from storage_adapter import open_adapter
from storage_adapter.engine import failpoints
from storage_adapter.idempotency import uuid7_key

ROOT = Path(__file__).resolve().parent.parent
SERVICE = ROOT / "examples" / "catalog_service.py"
TABLE_URL = "/v1/namespaces/default/tables/rows"
ARGS = ["--lease", "1", "--skew-grace", "0.2", "--wait", "3", "--engine-lease", "1", "--lifetime", "1800"]
# Two principals, proven by their bearer tokens; the API is mounted under /catalog, and every commit
# answer carries Iceberg-size table metadata (stored as the record's attachment).
TOKENS = {"token-of-a": "tenant-a", "token-of-b": "tenant-b"}
PREFIX = "/catalog"
METADATA_BYTES = 100_000
SERVICE_ARGS = [
    *ARGS,
    "--prefix",
    PREFIX,
    "--metadata-bytes",
    str(METADATA_BYTES),
    *(arg for token, principal in TOKENS.items() for arg in ("--token", f"{token}={principal}")),
]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class Running:
    """One service process: its base URL and a client. ``args``: the service's settings (lease, wait...,
    the prefix and the tokens of ``SERVICE_ARGS``)."""

    def __init__(self, url: str, env: dict[str, str], log: Path, args: Sequence[str] = SERVICE_ARGS) -> None:
        port = _free_port()
        self.base = f"http://127.0.0.1:{port}{PREFIX}"
        command = [sys.executable, str(SERVICE), url, "--port", str(port), "--failpoints-route", *args]
        with log.open("wb") as stderr:
            self.process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
        self.log = log
        self.http = httpx.Client(base_url=self.base, timeout=60, headers=bearer("token-of-a"))
        deadline = time.monotonic() + 120
        while True:
            assert self.process.poll() is None, log.read_text()
            try:
                if self.http.get("/v1/config").status_code == 200:
                    break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the service did not start"
                time.sleep(0.05)

    def post(
        self, key: str | None, request_id: str, token: str = "token-of-a", **body: Any
    ) -> httpx.Response:
        headers = bearer(token) if key is None else {"Idempotency-Key": key, **bearer(token)}
        return self.http.post(TABLE_URL, json={"request_id": request_id, **body}, headers=headers)

    def effects(self, request_id: str) -> int:
        rows = self.http.get(TABLE_URL).json()["rows"]
        return sum(row["request_id"] == request_id for row in rows)

    def arm(self, spec: str) -> None:
        assert self.http.put("/_failpoints", content=spec).status_code == 204

    def close(self) -> None:
        self.http.close()
        self.process.terminate()
        self.process.wait(timeout=30)


@pytest.fixture(scope="module", params=["memory", "local", "seaweedfs"])
def service(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    env.pop("STORAGE_ADAPTER_FAILPOINTS", None)
    run = uuid.uuid4().hex[:8]
    if request.param == "memory":
        url = f"memory://catalog-{run}"
    elif request.param == "local":
        url = f"file://{tmp_path_factory.mktemp('catalog')}"
    else:
        endpoint = request.getfixturevalue("embedded_seaweedfs")
        env.update(endpoint.environment())
        url = endpoint.url(f"catalog-{run}")
    running = Running(url, env, tmp_path_factory.mktemp("logs") / "service.log")
    yield running
    running.close()
    # The one exception a test provokes on purpose: the handler's crash after its effect. Any other is a
    # raw error of the service.
    log = running.log.read_text()
    failures = log.split("Exception in ASGI application")[1:]
    assert all("failpoints.SimulatedCrash" in failure for failure in failures), log
    assert log.count("Traceback") == len(failures), log


def test_config_shows_the_key_lifetime_as_an_iso8601_duration(service: Running) -> None:
    config = service.http.get("/v1/config").json()
    assert config["idempotency-key-lifetime"] == "PT30M"


def error_type(answer: httpx.Response) -> str:
    """The type of an error answer: the service's, and the middleware's, are Iceberg's ErrorModel."""
    assert answer.headers["content-type"] == "application/json", answer.text
    error = answer.json()["error"]
    assert error["code"] == answer.status_code and isinstance(error["message"], str)
    return str(error["type"])


def test_a_missing_or_malformed_key_is_400_and_runs_nothing(service: Running) -> None:
    request_id = uuid.uuid4().hex
    for key in (None, "", "not-a-key", str(uuid.uuid4()), uuid7_key().upper()):
        answer = service.post(key, request_id)
        assert answer.status_code == 400, key
        assert error_type(answer) == "idempotency_key_invalid"
    assert service.effects(request_id) == 0


def test_keys_belong_to_the_principal_a_token_proves_never_to_a_header(service: Running) -> None:
    key, request_id = uuid7_key(), uuid.uuid4().hex
    for headers in ({}, bearer("not-a-token"), {"Authorization": "Basic dXNlcjpwYXNz"}):
        answer = service.http.post(
            TABLE_URL,
            json={"request_id": request_id},
            headers={"Idempotency-Key": key, "Authorization": ""} | headers,
        )
        assert (answer.status_code, error_type(answer)) == (401, "NotAuthorizedException")
    first = service.post(key, request_id)
    assert first.status_code == 200
    # Another principal with the same key: its own request (a header naming the first's realm does not
    # make it the first's), so its own effect, never the first's answer.
    other = service.http.post(
        TABLE_URL,
        json={"request_id": request_id},
        headers={"Idempotency-Key": key, "x-tenant": "tenant-a", **bearer("token-of-b")},
    )
    assert other.status_code == 200 and "idempotent-replayed" not in other.headers
    assert other.json()["version"] != first.json()["version"]
    assert service.effects(request_id) == 2


def test_a_retry_gets_the_first_answer_and_one_effect(service: Running) -> None:
    key, request_id = uuid7_key(), uuid.uuid4().hex
    first = service.post(key, request_id)
    assert first.status_code == 200 and "idempotent-replayed" not in first.headers
    for _ in range(2):
        again = service.post(key, request_id)
        assert (again.status_code, again.content) == (200, first.content)
        for name in ("content-type", "etag", "location"):
            assert again.headers[name] == first.headers[name]
        assert again.headers["idempotent-replayed"] == "true"
    assert len(first.json()["metadata"]["properties"]["padding"]) == METADATA_BYTES
    assert service.effects(request_id) == 1


def test_the_same_key_with_another_body_is_422_and_runs_nothing(service: Running) -> None:
    key, request_id, other = uuid7_key(), uuid.uuid4().hex, uuid.uuid4().hex
    assert service.post(key, request_id).status_code == 200
    conflict = service.post(key, other)
    assert (conflict.status_code, error_type(conflict)) == (422, "idempotency_key_conflict")
    assert service.post(key, request_id, payload="another payload").status_code == 422
    assert (service.effects(request_id), service.effects(other)) == (1, 0)


def test_concurrent_duplicates_have_one_effect_and_are_replayed_or_told_to_retry(service: Running) -> None:
    key, request_id = uuid7_key(), uuid.uuid4().hex

    async def send_all() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=service.base, timeout=60) as http:
            body, headers = {"request_id": request_id}, {"Idempotency-Key": key, **bearer("token-of-a")}
            return await asyncio.gather(*(http.post(TABLE_URL, json=body, headers=headers) for _ in range(8)))

    answers = asyncio.run(send_all())
    ok = [a for a in answers if a.status_code == 200]
    assert ok and len({a.content for a in ok}) == 1
    assert sum("idempotent-replayed" not in a.headers for a in ok) <= 1
    for answer in answers:
        assert answer.status_code == 200 or (
            answer.status_code == 503 and answer.headers["retry-after"] == "1"
        )
    assert service.effects(request_id) == 1


def test_a_handler_that_raised_after_its_effect_is_never_applied_again(service: Running) -> None:
    key, request_id = uuid7_key(), uuid.uuid4().hex
    service.arm("commit.after_publish=crash*1")  # the commit is durable, then the handler raises
    try:
        crashed = service.post(key, request_id)
    finally:
        service.arm("")
    assert crashed.status_code == 500
    for _ in range(2):
        retry = service.post(key, request_id)  # reconciled from the engine: APPLIED, replayed
        assert retry.status_code == 200 and retry.headers["idempotent-replayed"] == "true"
    assert service.effects(request_id) == 1


def test_a_5xx_is_not_replayed(service: Running) -> None:
    key, request_id = uuid7_key(), uuid.uuid4().hex
    service.arm("commit.before_sidecar=error*1")  # the engine's storage fails before any effect
    try:
        failed = service.post(key, request_id)
    finally:
        service.arm("")
    assert (failed.status_code, error_type(failed)) == (503, "commit_failed")
    retry = service.post(key, request_id)  # not the 503 again: reconciled (NOT_APPLIED), then run
    assert retry.status_code == 200 and "idempotent-replayed" not in retry.headers
    assert service.effects(request_id) == 1


# -- what each answer costs in storage requests ---------------------------------------------------------------
class Split:
    """An adapter root whose children count their requests apart: the service's engine and its
    idempotency store."""

    def __init__(self, url: str) -> None:
        self.inner = open_adapter(url)
        self.counting: dict[str, CountingAdapter] = {}

    def child(self, name: str) -> CountingAdapter:
        self.counting[name] = CountingAdapter(self.inner.child(name))
        return self.counting[name]

    def counts(self) -> dict[str, Counter[str]]:
        return {name: Counter(adapter.counts) for name, adapter in self.counting.items()}

    def reset(self) -> None:
        for adapter in self.counting.values():
            adapter.reset()


def test_storage_requests_per_http_request() -> None:
    """The idempotency layer's requests per HTTP request (docs/idempotency.md quotes these), beside the
    engine's own for the commit, counted on memory through the same app in process."""
    sys.path.insert(0, str(SERVICE.parent))
    try:
        import catalog_service
    finally:
        sys.path.remove(str(SERVICE.parent))
    root = Split(f"memory://costs-{uuid.uuid4().hex[:8]}")
    app = catalog_service.build(root, principals={"token": "tenant"})  # type: ignore[arg-type]
    measured: dict[str, dict[str, Counter[str]]] = {}

    async def measure() -> None:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://catalog", headers=bearer("token")
        ) as http:

            async def cost(name: str, key: str | None, request_id: str, status: int, fault: str = "") -> None:
                root.reset()
                failpoints.arm_from_spec(fault)
                headers = {} if key is None else {"Idempotency-Key": key}
                try:
                    answer = await http.post(TABLE_URL, json={"request_id": request_id}, headers=headers)
                    got = answer.status_code
                except failpoints.SimulatedCrash:  # a BaseException: the transport does not make it a 500
                    got = 500
                finally:
                    failpoints.disarm()
                assert got == status, name
                measured[name] = root.counts()

            key = uuid7_key()
            await cost("first", key, "r1", 200)
            await cost("replay", key, "r1", 200)
            await cost("conflict", key, "r2", 422)
            await cost("bad key", "nope", "r3", 400)
            crashed, failed = uuid7_key(), uuid7_key()
            await cost("crash after the commit", crashed, "r4", 500, "commit.after_publish=crash*1")
            await cost("retry after it (APPLIED)", crashed, "r4", 200)
            await cost("503 before any effect", failed, "r5", 503, "commit.before_sidecar=error*1")
            await cost("retry after it (NOT_APPLIED, run)", failed, "r5", 200)

    asyncio.run(measure())
    for name, counts in measured.items():
        print(
            f"{name}: "
            + "; ".join(f"{part} {sum(c.values())} {dict(sorted(c.items()))}" for part, c in counts.items())
        )
    store = {name: sum(counts["idempotency"].values()) for name, counts in measured.items()}
    engine = {name: sum(counts["engine"].values()) for name, counts in measured.items()}
    assert measured["first"]["idempotency"] == Counter({"write_if_absent": 1, "write_if_match": 1})
    assert measured["replay"]["idempotency"] == Counter({"write_if_absent": 1, "read_versioned": 1})
    assert (store["replay"], engine["replay"], store["conflict"], engine["conflict"]) == (2, 0, 2, 0)
    assert (store["bad key"], engine["bad key"]) == (0, 0)
    # a crash after the effect: reserve, then cancel as unsettled; its retry: reserve, read, takeover by
    # CAS, finalize the reconciled outcome (the engine: heal's listing and the key's ledger entry)
    assert store["crash after the commit"] == 2 and store["retry after it (APPLIED)"] == 4
    assert store["503 before any effect"] == 2 and store["retry after it (NOT_APPLIED, run)"] == 5


def test_a_fenced_commit_is_answered_as_no_effect_and_its_retry_applies_once() -> None:
    """The engine fenced the route's commit (CommitFencedError: a heal judged the stopped writer dead and
    rolled it back; nothing of it visible, no key held): the example answers 503
    ``idempotency_no_effect`` with ``Retry-After`` (the key free again), never ``commit_failed``; the
    retry with the same key commits it, once. In process, through the same app; the fence is raised at
    the commit's first step (tests/test_exactly_once_engine.py makes real ones)."""
    from storage_adapter.engine import CommitFencedError

    sys.path.insert(0, str(SERVICE.parent))
    try:
        import catalog_service
    finally:
        sys.path.remove(str(SERVICE.parent))
    app = catalog_service.build(f"memory://fenced-{uuid.uuid4().hex[:8]}", principals={"token": "tenant"})

    def fenced(name: str) -> None:
        raise CommitFencedError("fenced by a heal (injected)", key="manifest.json")

    async def run() -> None:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://c", headers=bearer("token")
        ) as http:
            key = uuid7_key()
            with_key = {"Idempotency-Key": key}
            failpoints.arm("commit.before_sidecar", fenced, times=1)
            try:
                first = await http.post(TABLE_URL, json={"request_id": "fenced"}, headers=with_key)
            finally:
                failpoints.disarm()
            assert first.status_code == 503 and first.headers.get("retry-after"), first.text
            assert first.json()["error"]["type"] == "idempotency_no_effect", first.text
            assert (await http.get(TABLE_URL)).json()["rows"] == []
            retry = await http.post(TABLE_URL, json={"request_id": "fenced"}, headers=with_key)
            assert retry.status_code == 200 and "idempotent-replayed" not in retry.headers, retry.text
            again = await http.post(TABLE_URL, json={"request_id": "fenced"}, headers=with_key)
            assert (again.status_code, again.headers["idempotent-replayed"]) == (200, "true")
            rows = (await http.get(TABLE_URL)).json()["rows"]
            assert [r["request_id"] for r in rows] == ["fenced"]

    asyncio.run(run())
