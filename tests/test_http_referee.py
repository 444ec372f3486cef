"""Issue 46: promises of the HTTP idempotency layer an outside reviewer broke with planted bugs that every
test let pass, each tested through the ASGI middleware (docs/idempotency.md, "Over HTTP"):

* a key reused with another request (method, path, query string or body; the same route's operation and
  resource) is refused 422 ``idempotency_key_conflict``, the app not run again (8);
* the outcome is stored before the response's last body chunk goes out: a retry issued from inside the
  server's ``send`` of that chunk, before the app gets control back, is the stored replay, and the app
  ran once (9).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from storage_adapter import open_adapter
from storage_adapter.http import HttpSettings, IdempotencyMiddleware, IdempotentRoute
from storage_adapter.idempotency import IdempotencyStore, Policy, uuid7_key

QUICK = Policy(first_wait_s=0.01, max_wait_s=0.05, total_wait_s=0.3)
# Two routes of one operation on one resource, each under two methods: a request differs from another in
# its method, its path, its query string or its body alone.
ROUTES = [
    *(
        IdempotentRoute(method, path, "put-thing", "thing/{name}")
        for path in ("/things/{name}", "/v2/things/{name}")
        for method in ("POST", "PUT")
    ),
    IdempotentRoute("POST", "/gadgets/{name}", "put-gadget", "gadget/{name}"),
]
PATHS = ("/things/{name}", "/v2/things/{name}", "/gadgets/{name}")


def memory_store() -> IdempotencyStore:
    return IdempotencyStore(open_adapter(f"memory://http-ref-{uuid.uuid4().hex[:8]}"))


class Things:
    """A Starlette app answering every route of ROUTES 201 with what it got; counts its runs."""

    def __init__(self) -> None:
        self.runs = 0
        self.app = Starlette(routes=[Route(p, self.put, methods=["POST", "PUT"]) for p in PATHS])

    async def put(self, request: Request) -> Response:
        self.runs += 1
        body = await request.json()
        return JSONResponse({"run": self.runs, "query": request.url.query, "body": body}, status_code=201)


# (method, path with query, body) of the first request, then of each request that differs from it in one part
FIRST = ("POST", "/things/a?mode=append", {"size": 1})
OTHERS = {
    "query": ("POST", "/things/a?mode=overwrite", {"size": 1}),
    "no_query": ("POST", "/things/a", {"size": 1}),
    "method": ("PUT", "/things/a?mode=append", {"size": 1}),
    "path": ("POST", "/v2/things/a?mode=append", {"size": 1}),
    "body": ("POST", "/things/a?mode=append", {"size": 2}),
    "resource": ("POST", "/things/b?mode=append", {"size": 1}),
    "route": ("POST", "/gadgets/a?mode=append", {"size": 1}),
}


@pytest.mark.parametrize("part", sorted(OTHERS))
def test_a_key_reused_with_a_request_that_differs_in_one_part_is_refused_422(part: str) -> None:
    """Every part of the request is in its fingerprint: the same key with another query string alone
    (same method, path and body), another method, another path of the same operation and resource, or
    another body, or another resource or route is 422 ``idempotency_key_conflict``, the app not run; the
    first request still replays."""

    async def run() -> None:
        things = Things()
        middleware = IdempotencyMiddleware(
            things.app, memory_store(), ROUTES, settings=HttpSettings(wait=QUICK)
        )
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=middleware), base_url="http://t"
        ) as http:
            key = uuid7_key()

            def send(method: str, target: str, body: Any) -> Awaitable[httpx.Response]:
                return http.request(method, target, json=body, headers={"Idempotency-Key": key})

            first = await send(*FIRST)
            assert first.status_code == 201 and first.json()["query"] == "mode=append"
            other = await send(*OTHERS[part])
            assert other.status_code == 422 and other.json()["type"] == "idempotency_key_conflict", other.text
            again = await send(*FIRST)
            assert (again.status_code, again.content) == (201, first.content)
            assert again.headers["idempotent-replayed"] == "true"
        assert things.runs == 1

    asyncio.run(run())


# -- 9: stored before the last chunk goes out ---------------------------------------------------------------
async def _bare_streamed(scope: Any, receive: Any, send: Any) -> None:
    await receive()
    await send({"type": "http.response.start", "status": 201, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"made ", "more_body": True})
    await send({"type": "http.response.body", "body": b"once", "more_body": False})


def _starlette(kind: str) -> Callable[[Request], Awaitable[Response]]:
    async def answer(request: Request) -> Response:
        await request.body()
        if kind == "streaming":

            async def chunks() -> Any:
                yield b"made "
                yield b"once"

            return StreamingResponse(chunks(), status_code=201, media_type="text/plain")
        return Response(b"made once", status_code=201, media_type="text/plain")

    return answer


@pytest.mark.parametrize("kind", ["bare_asgi", "starlette_response", "starlette_streaming"])
def test_a_retry_issued_as_the_last_body_chunk_is_sent_is_the_replay_and_the_app_ran_once(kind: str) -> None:
    """The server's ``send`` of the response's last body chunk issues the retry itself, synchronously,
    before it returns to the app: the outcome must already be stored, so the retry is the replay (same
    status and body, ``idempotent-replayed``), never a second run nor an in-progress answer. A middleware
    that sent the last chunk first and stored after would answer it 503 in progress."""
    runs = 0

    async def counted(scope: Any, receive: Any, send: Any) -> None:
        nonlocal runs
        runs += 1
        if kind == "bare_asgi":
            await _bare_streamed(scope, receive, send)
        else:
            route = Route("/things/{name}", _starlette(kind.removeprefix("starlette_")), methods=["POST"])
            await Starlette(routes=[route])(scope, receive, send)

    async def run() -> None:
        middleware = IdempotencyMiddleware(counted, memory_store(), ROUTES, settings=HttpSettings(wait=QUICK))
        key = uuid7_key().encode()

        async def request(send: Callable[[Any], Awaitable[None]]) -> None:
            scope = {
                "type": "http",
                "asgi": {"version": "3.0"},
                "http_version": "1.1",
                "method": "POST",
                "scheme": "http",
                "path": "/things/a",
                "raw_path": b"/things/a",
                "root_path": "",
                "query_string": b"",
                "headers": [(b"idempotency-key", key), (b"content-type", b"application/json")],
                "server": ("t", 80),
                "client": ("c", 1),
            }
            delivered = False

            async def receive() -> dict[str, Any]:
                nonlocal delivered
                if not delivered:
                    delivered = True
                    return {"type": "http.request", "body": b'{"size": 1}', "more_body": False}
                await asyncio.Event().wait()  # the client stays: no disconnect
                raise AssertionError("unreachable")

            await middleware(scope, receive, send)

        first: list[dict[str, Any]] = []
        retry: list[dict[str, Any]] = []

        async def first_send(message: dict[str, Any]) -> None:
            first.append(message)
            last = message["type"] == "http.response.body" and not message.get("more_body", False)
            if last and not retry:
                await request(_collect(retry))  # the client has the last byte: it retries at once

        await asyncio.wait_for(request(first_send), 30)
        for answer in (first, retry):
            assert answer[0]["type"] == "http.response.start"
        assert [m["status"] for m in (first[0], retry[0])] == [201, 201], retry
        assert _body(first) == _body(retry) == b"made once"
        assert (b"idempotent-replayed", b"true") in retry[0]["headers"]
        assert runs == 1

    asyncio.run(run())


def _collect(into: list[dict[str, Any]]) -> Callable[[dict[str, Any]], Awaitable[None]]:
    async def send(message: dict[str, Any]) -> None:
        into.append(message)

    return send


def _body(messages: list[dict[str, Any]]) -> bytes:
    return b"".join(m.get("body", b"") for m in messages if m["type"] == "http.response.body")
