"""IdempotencyMiddleware in process (httpx's ASGI transport, memory storage): what the real-HTTP tests of
the example service (tests/test_http_service.py) cannot reach cheaply: streamed bodies at the storage
limit, cookies, the 409 setting, a store outage, NoEffect, a bare ASGI app and Starlette's own middleware
list. Every answer is in docs/idempotency.md, "Over HTTP"."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from contract_tests.counting import CountingAdapter
from storage_adapter import open_adapter
from storage_adapter.errors import BackendUnavailableError
from storage_adapter.http import (
    HttpSettings,
    IdempotencyMiddleware,
    IdempotentRoute,
    NotIdempotentError,
    catalog_config,
    http_result,
    owner_context,
)
from storage_adapter.idempotency import (
    IdempotencyStore,
    NoEffect,
    Policy,
    ReconcileVerdict,
    Reconciliation,
    uuid7_key,
)

ROUTES = [IdempotentRoute("POST", "/things/{name}", "create-thing", "thing/{name}")]
QUICK = Policy(first_wait_s=0.01, max_wait_s=0.05, total_wait_s=0.3)


class Service:
    """A Starlette app whose POST /things/{name} counts its runs and answers what the test sets."""

    def __init__(self) -> None:
        self.runs = 0
        self.commit_keys: list[str] = []
        self.answer: Callable[[Request], Awaitable[Response]] = self.created
        self.app = Starlette(routes=[Route("/things/{name}", self.post, methods=["POST"])])

    async def post(self, request: Request) -> Response:
        self.runs += 1
        context = owner_context(request.scope)
        assert request.state.idempotency is context
        self.commit_keys.append(context.commit_key)
        return await self.answer(request)

    def held(self) -> asyncio.Event:
        """From now on every run waits for the returned event, then answers ``created``: an owner
        that stays in flight for as long as the test needs."""
        release = asyncio.Event()

        async def slow(request: Request) -> Response:
            await release.wait()
            return await self.created(request)

        self.answer = slow
        return release

    async def created(self, request: Request) -> Response:
        body = await request.json()
        name = request.path_params["name"]
        response = JSONResponse({"name": name, "size": body["size"], "run": self.runs}, status_code=201)
        response.headers["location"] = f"/things/{name}"
        response.headers["etag"] = f'"v{self.runs}"'
        response.headers["x-trace"] = f"run-{self.runs}"
        response.set_cookie("session", f"secret-{self.runs}")
        return response


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://service")


def wrapped(service: Service, store: IdempotencyStore, **kwargs: Any) -> IdempotencyMiddleware:
    settings = kwargs.pop("settings", HttpSettings(wait=QUICK))
    return IdempotencyMiddleware(service.app, store, ROUTES, settings=settings, **kwargs)


def memory_store(**kwargs: Any) -> IdempotencyStore:
    return IdempotencyStore(open_adapter(f"memory://http-{uuid.uuid4().hex[:8]}"), **kwargs)


def post(http: httpx.AsyncClient, key: str | None, body: Any = None, path: str = "/things/a") -> Any:
    headers = {} if key is None else {"Idempotency-Key": key}
    return http.post(path, json={"size": 1} if body is None else body, headers=headers)


def test_keys_are_uuidv7_and_checked_before_any_storage_request() -> None:
    async def run() -> None:
        service = Service()
        counting = CountingAdapter(open_adapter(f"memory://http-{uuid.uuid4().hex[:8]}"))
        async with client(wrapped(service, IdempotencyStore(counting))) as http:
            for bad in (None, "", "nope", str(uuid.uuid4()), uuid7_key().upper()):
                answer = await post(http, bad)
                assert answer.status_code == 400, bad
                assert answer.headers["content-type"] == "application/problem+json"
                assert answer.json()["type"] == "idempotency_key_invalid"
            assert (await http.get("/things/a")).status_code == 405  # other routes pass through
        assert service.runs == 0 and counting.total == 0

    asyncio.run(run())


def test_replay_carries_status_body_and_the_headers_that_matter_never_a_cookie() -> None:
    async def run() -> None:
        service = Service()
        async with client(wrapped(service, memory_store())) as http:
            key = uuid7_key()
            first = await post(http, key)
            assert first.status_code == 201 and "set-cookie" in first.headers
            again = await post(http, key)
            assert (again.status_code, again.content) == (201, first.content)
            for name in ("content-type", "location", "etag"):
                assert again.headers[name] == first.headers[name]
            assert "set-cookie" not in again.headers and "x-trace" not in again.headers
            assert (
                again.headers["idempotent-replayed"] == "true" and "idempotent-replayed" not in first.headers
            )
            assert (await post(http, key, {"size": 2})).json()["type"] == "idempotency_key_conflict"
            assert (await post(http, key, path="/things/b")).status_code == 422
        assert service.runs == 1

    asyncio.run(run())


def streaming(chunks: list[bytes], status: int = 201) -> Callable[[Request], Awaitable[Response]]:
    async def answer(request: Request) -> Response:
        async def body() -> AsyncIterator[bytes]:
            for chunk in chunks:
                await asyncio.sleep(0)
                yield chunk

        return StreamingResponse(body(), status_code=status, media_type="application/octet-stream")

    return answer


def test_streamed_bodies_are_stored_up_to_the_limit_and_never_run_twice_above_it() -> None:
    async def run() -> None:
        service = Service()
        settings = HttpSettings(wait=QUICK, max_response_bytes=1000)
        async with client(wrapped(service, memory_store(), settings=settings)) as http:
            small, large = [b"\x00\xff" * 100] * 4, [b"x" * 400] * 3  # 800 bytes (not UTF-8), 1,200
            service.answer = streaming(small)
            key = uuid7_key()
            first = await post(http, key)
            again = await post(http, key)
            assert (again.status_code, again.content) == (
                201,
                b"".join(small),
            ) and first.content == again.content
            service.answer = streaming(large)
            key = uuid7_key()
            first = await post(http, key)
            assert (first.status_code, first.content) == (201, b"".join(large))
            for _ in range(2):
                again = await post(http, key)
                assert again.status_code == 500 and again.json()["type"] == "idempotency_replay_failed"
                assert "applied once" in again.json()["detail"]
        assert service.runs == 2

    asyncio.run(run())


def test_a_5xx_is_never_stored_and_is_reconciled_before_a_rerun() -> None:
    class Verdict:
        def __init__(self, verdict: ReconcileVerdict) -> None:
            self.verdict, self.asked = verdict, 0

        def reconcile(self, record: Any) -> Reconciliation:
            self.asked += 1
            return Reconciliation(self.verdict)

    async def run() -> None:
        service = Service()
        not_applied = Verdict(ReconcileVerdict.NOT_APPLIED)
        async with client(wrapped(service, memory_store(), reconciler=not_applied)) as http:
            key = uuid7_key()
            service.answer = lambda request: _json(503, {"error": "busy"})
            assert (await post(http, key)).status_code == 503
            service.answer = service.created
            retry = await post(http, key)
            assert (retry.status_code, "idempotent-replayed" in retry.headers) == (201, False)
            assert not_applied.asked == 1 and service.runs == 2
        service = Service()
        async with client(wrapped(service, memory_store())) as http:  # no reconciler: never a rerun
            key = uuid7_key()
            service.answer = lambda request: _json(500, {"error": "after the write"})
            assert (await post(http, key)).status_code == 500
            for _ in range(2):
                retry = await post(http, key)
                assert (retry.status_code, retry.json()["type"]) == (500, "idempotency_reconcile_failed")
            assert service.runs == 1

    asyncio.run(run())


async def _json(status: int, body: Any) -> Response:
    return JSONResponse(body, status_code=status)


def test_an_app_exception_is_not_no_effect_unless_it_is_no_effect() -> None:
    """An exception is a complete 500: Starlette's own when Starlette made one (it answers, then raises),
    the layer's ``idempotency_app_error`` when the exception reaches the middleware bare; NoEffect a 503
    with Retry-After, the key free again."""

    async def run() -> None:
        service = Service()
        app = wrapped(service, memory_store())
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://service") as http:
            key = uuid7_key()

            async def reset(request: Request) -> Response:
                raise ConnectionResetError("after the write")

            service.answer = reset
            failed = await post(http, key)
            assert (failed.status_code, failed.text) == (500, "Internal Server Error")
            service.answer = service.created
            retry = await post(http, key)
            assert (retry.status_code, retry.json()["type"]) == (500, "idempotency_reconcile_failed")
            assert service.runs == 1
            key = uuid7_key()

            async def refuse(request: Request) -> Response:
                raise NoEffect("refused before any write")

            service.answer = refuse
            refused = await post(http, key)
            assert (refused.status_code, refused.json()["type"]) == (503, "idempotency_no_effect")
            assert refused.headers["retry-after"] == "1"
            service.answer = service.created
            assert (await post(http, key)).status_code == 201 and service.runs == 3

        async def bare(scope: Any, receive: Any, send: Any) -> None:
            raise ConnectionResetError("after the write")

        async with client(IdempotencyMiddleware(bare, memory_store(), ROUTES)) as http:
            failed = await post(http, uuid7_key())
            assert (failed.status_code, failed.json()["type"]) == (500, "idempotency_app_error")
            assert failed.headers["content-length"] == str(len(failed.content))

    asyncio.run(run())


def test_a_route_the_middleware_passed_through_has_no_owner_context() -> None:
    """A template that does not match the path the framework routes would leave idempotency off
    silently: the route's ``owner_context`` raises instead, naming what the middleware saw."""
    seen: list[BaseException] = []

    async def endpoint(request: Request) -> Response:
        try:
            owner_context(request.scope)
        except NotIdempotentError as exc:
            seen.append(exc)
        return Response(status_code=204)

    app = Starlette(routes=[Route("/other/{name}", endpoint, methods=["POST"])])

    async def run() -> None:
        async with client(IdempotencyMiddleware(app, memory_store(), ROUTES)) as http:
            assert (await http.post("/other/a", json={})).status_code == 204
        async with client(app) as http:  # no middleware at all
            assert (await http.post("/other/a", json={})).status_code == 204

    asyncio.run(run())
    assert len(seen) == 2
    assert "POST '/other/a'" in str(seen[0]) and "POST /things/{name}" in str(seen[0])
    assert "no IdempotencyMiddleware" in str(seen[1])


@pytest.mark.parametrize("status", [503, 409])
def test_an_in_progress_duplicate_waits_then_gets_retry_after(status: int) -> None:
    async def run() -> None:
        service = Service()
        release = service.held()
        settings = HttpSettings(wait=QUICK, in_progress_status=status, retry_after_s=2)
        async with client(wrapped(service, memory_store(), settings=settings)) as http:
            key = uuid7_key()
            owner = asyncio.create_task(post(http, key))
            await asyncio.sleep(0.1)
            duplicate = await post(http, key)
            assert (duplicate.status_code, duplicate.headers["retry-after"]) == (status, "2")
            assert duplicate.json()["type"] == "idempotency_in_progress"
            assert duplicate.json()["status"] == status  # the body says what the status line says
            waiting = asyncio.create_task(post(http, key))  # waits, and replays once the owner finalizes
            await asyncio.sleep(0.05)
            release.set()
            first, replayed = await owner, await waiting
            assert (replayed.status_code, replayed.content) == (201, first.content)
            assert replayed.headers["idempotent-replayed"] == "true"
        assert service.runs == 1

    asyncio.run(run())


class Outage:
    """An adapter whose every request is unavailable while ``down``."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.down = inner, True

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.down:
                raise BackendUnavailableError("injected outage", key=str(args[:1]))
            return method(*args, **kwargs)

        return call


def test_a_store_outage_is_503_with_retry_after_and_runs_nothing() -> None:
    async def run() -> None:
        service = Service()
        outage = Outage(open_adapter(f"memory://http-{uuid.uuid4().hex[:8]}"))
        store = IdempotencyStore(outage)  # type: ignore[arg-type]
        async with client(wrapped(service, store)) as http:
            key = uuid7_key()
            answer = await post(http, key)
            assert (answer.status_code, answer.headers["retry-after"]) == (503, "1")
            assert answer.json()["type"] == "idempotency_store_unavailable" and service.runs == 0
            outage.down = False
            assert (await post(http, key)).status_code == 201 and service.runs == 1

    asyncio.run(run())


def test_a_bare_asgi_app_and_starlettes_middleware_list() -> None:
    """No framework needed; and Starlette's own ``Middleware(...)`` list builds it as any middleware."""
    runs = []

    async def bare(scope: Any, receive: Any, send: Any) -> None:
        message = await receive()
        runs.append(message["body"])
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
        )
        await send({"type": "http.response.body", "body": b"ok ", "more_body": True})
        await send({"type": "http.response.body", "body": b"done", "more_body": False})

    store = memory_store(lifetime=timedelta(minutes=30))

    async def run() -> None:
        key = uuid7_key()
        async with client(IdempotencyMiddleware(bare, store, ROUTES)) as http:
            for _ in range(2):
                answer = await post(http, key)
                assert (answer.status_code, answer.text, answer.headers["content-type"]) == (
                    200,
                    "ok done",
                    "text/plain",
                )
        service = Service()
        app = Starlette(
            routes=service.app.routes,
            middleware=[Middleware(IdempotencyMiddleware, store=store, routes=ROUTES)],
        )
        async with client(app) as http:
            assert (await post(http, uuid7_key())).status_code == 201

    asyncio.run(run())
    assert runs == [b'{"size":1}'] and catalog_config(store) == {"idempotency-key-lifetime": "PT30M"}


def test_waiting_duplicates_hold_no_thread() -> None:
    """Forty duplicates wait for one owner on the event loop: the process does not grow a thread per
    waiting request (the store's requests share the middleware's bounded pool)."""

    async def run() -> None:
        service = Service()
        release = service.held()
        settings = HttpSettings(
            wait=Policy(first_wait_s=0.05, max_wait_s=0.1, total_wait_s=20), store_threads=4
        )
        async with client(wrapped(service, memory_store(), settings=settings)) as http:
            key = uuid7_key()
            owner = asyncio.create_task(post(http, key))
            await asyncio.sleep(0.1)
            before = threading.active_count()
            duplicates = [asyncio.create_task(post(http, key)) for _ in range(40)]
            peak = before
            for _ in range(20):
                await asyncio.sleep(0.05)
                peak = max(peak, threading.active_count())
            release.set()
            first, answers = await owner, await asyncio.gather(*duplicates)
        assert peak - before <= 8, (before, peak)  # 4 pool threads, each store request's deadline thread
        assert {a.status_code for a in answers} == {201} and {a.content for a in answers} == {first.content}
        assert service.runs == 1

    asyncio.run(run())


def test_what_is_stored_is_what_was_sent_and_the_scope_is_the_requests_own() -> None:
    """Cases found from outside (issue 42): a small body JSON escapes past the record's limit, a body
    compressed inside the middleware, a 204, a stream that fails before its first byte, and middleware
    around this one reading what the app wrote into the scope."""
    escaped = bytes(range(1, 32)) * 100  # 3,100 bytes of valid UTF-8 that JSON writes as 6 bytes each
    seen: list[tuple[Any, Any]] = []

    async def answer(request: Request) -> Response:
        request.state.user = "u-42"
        kind = request.path_params["name"]
        if kind == "escaped":
            return Response(escaped, 201, media_type="application/octet-stream")
        if kind == "empty":
            return Response(status_code=204)
        if kind == "stream":

            async def chunks() -> AsyncIterator[bytes]:
                if not refused:
                    refused.append(True)
                    raise NoEffect("refused before the first byte")
                yield b"streamed"

            return StreamingResponse(chunks(), 201)
        return JSONResponse({"padding": "x" * 2000}, 201)

    refused: list[bool] = []

    class Outer:  # as metrics and tracing instrumentations read the scope after the call
        def __init__(self, app: Any) -> None:
            self.app = app

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await self.app(scope, receive, send)
            if scope["type"] == "http":
                seen.append((getattr(scope.get("route"), "path", None), scope.get("state", {}).get("user")))

    routes = [Route("/things/{name}", answer, methods=["POST", "GET"])]
    store = memory_store()
    inside_gzip = [
        Middleware(Outer),
        Middleware(IdempotencyMiddleware, store=store, routes=ROUTES, settings=HttpSettings(wait=QUICK)),
        Middleware(GZipMiddleware, minimum_size=100),
    ]

    async def run() -> None:
        async with client(Starlette(routes=routes, middleware=inside_gzip)) as http:
            for name in ("escaped", "gzipped", "empty"):
                key = uuid7_key()
                encoding = "gzip" if name == "gzipped" else "identity"
                headers = {"Idempotency-Key": key, "Accept-Encoding": encoding}
                first = await http.post(f"/things/{name}", json={}, headers=headers)
                again = await http.post(f"/things/{name}", json={}, headers=headers)
                assert (again.status_code, again.content) == (first.status_code, first.content), name
                assert again.headers.get("content-encoding") == first.headers.get("content-encoding"), name
                assert again.headers["idempotent-replayed"] == "true", name
                if name == "gzipped":
                    assert first.headers["content-encoding"] == "gzip" and first.json()["padding"]
                if name == "empty":  # RFC 9110: no content-length on a 204
                    assert "content-length" not in first.headers and "content-length" not in again.headers
            assert (await http.get("/things/a")).status_code == 201  # passed through
        no_gzip = [Middleware(Outer), inside_gzip[1]]  # GZipMiddleware itself holds a start line back
        async with client(Starlette(routes=routes, middleware=no_gzip)) as http:
            key = uuid7_key()
            first = await post(http, key, path="/things/stream")
            # NoEffect before the stream's first byte: a whole 503, and the key was free
            assert (first.status_code, first.json()["type"]) == (503, "idempotency_no_effect")
            again = await post(http, key, path="/things/stream")
            assert (again.status_code, again.content) == (201, b"streamed")

    asyncio.run(run())
    # the first of each pair ran the app, which wrote the route and its state: visible around it
    assert ("/things/{name}", "u-42") in seen and seen[-1] == ("/things/{name}", "u-42")
    assert sum(route == "/things/{name}" and user == "u-42" for route, user in seen) == 6


def test_the_stored_form_of_an_inline_body_is_within_the_inline_limit() -> None:
    """What a reconciler's ``describe`` stores goes through ``http_result`` alone: a body is inline only
    when its stored form (JSON escapes a control byte as six) is within INLINE_BODY_BYTES; and a response
    whose headers leave no room for an inline body is stored with its body as the attachment."""
    escaped = bytes(range(1, 32)) * 100
    result = http_result(201, escaped)
    assert result.attachment == escaped and result.summary == {"body_attachment": len(escaped)}
    small = http_result(201, b'{"ok":true}')
    assert small.attachment is None and small.summary == {"body": '{"ok":true}'}

    big_etag = '"' + "e" * 9500 + '"'

    async def answer(request: Request) -> Response:
        return Response(b"x" * 7500, 201, headers={"etag": big_etag}, media_type="text/plain")

    app = Starlette(routes=[Route("/things/{name}", answer, methods=["POST"])])

    async def run() -> None:
        async with client(IdempotencyMiddleware(app, memory_store(), ROUTES)) as http:
            key = uuid7_key()
            first, again = await post(http, key), await post(http, key)
            assert (again.status_code, again.content, again.headers["etag"]) == (201, first.content, big_etag)

    asyncio.run(run())
