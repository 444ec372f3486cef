"""The HTTP layer's promises the mutation campaign found unguarded (docs/mutation.md, "The layers built on
the adapter"): the size bounds of HttpSettings hold at their edge. ``max_request_bytes`` is the largest
body fingerprinted (413 above: nothing stored, the app does not run); ``max_response_bytes`` the largest
response body stored for replay (above: applied once, never replayed). And a client that leaves before
its body is complete has no request: the app does not run on the part received, and nothing is stored."""

from __future__ import annotations

import asyncio
from typing import Any

from test_http_middleware import QUICK, ROUTES, Service, client, memory_store, post, streaming, wrapped

from storage_adapter.http import HttpSettings, IdempotencyMiddleware
from storage_adapter.idempotency import uuid7_key

LIMIT = 1000


def test_a_request_body_of_exactly_max_request_bytes_runs_one_byte_more_is_413() -> None:
    async def run() -> None:
        service = Service()
        settings = HttpSettings(wait=QUICK, max_request_bytes=LIMIT)
        async with client(wrapped(service, memory_store(), settings=settings)) as http:
            # {"size":1,"pad":"..."}: 19 bytes of JSON around the padding
            at_limit = {"size": 1, "pad": "p" * (LIMIT - 19)}
            over = {"size": 1, "pad": "p" * (LIMIT - 18)}
            assert len(http.build_request("POST", "/", json=at_limit).content) == LIMIT
            key = uuid7_key()
            first = await post(http, key, at_limit)
            again = await post(http, key, at_limit)
            assert (first.status_code, again.status_code, again.headers["idempotent-replayed"]) == (
                201,
                201,
                "true",
            )
            refused = await post(http, uuid7_key(), over)
            assert refused.status_code == 413
            assert refused.json()["type"] == "idempotency_request_too_large"
        assert service.runs == 1

    asyncio.run(run())


def test_a_response_body_of_exactly_max_response_bytes_is_replayed_one_byte_more_is_not() -> None:
    async def run() -> None:
        service = Service()
        settings = HttpSettings(wait=QUICK, max_response_bytes=LIMIT)
        async with client(wrapped(service, memory_store(), settings=settings)) as http:
            for size, replayed in ((LIMIT, True), (LIMIT + 1, False)):
                chunks = [b"r" * (size - 1), b"!"]
                service.answer = streaming(chunks)
                key = uuid7_key()
                first = await post(http, key)
                again = await post(http, key)
                assert (first.status_code, first.content) == (201, b"".join(chunks))
                if replayed:
                    assert (again.status_code, again.content) == (201, first.content), size
                else:
                    assert again.json()["type"] == "idempotency_replay_failed", size
        assert service.runs == 2

    asyncio.run(run())


def test_a_client_that_leaves_before_its_body_is_complete_runs_nothing_and_stores_nothing() -> None:
    runs: list[Any] = []
    sent: list[Any] = []
    store = memory_store()
    key = uuid7_key()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        runs.append(await receive())
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"created", "more_body": False})

    messages = [
        {"type": "http.request", "body": b'{"size":', "more_body": True},
        {"type": "http.disconnect"},
    ]

    async def receive() -> Any:
        return messages.pop(0)

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/things/a",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"idempotency-key", key.encode())],
    }
    asyncio.run(IdempotencyMiddleware(app, store, ROUTES)(scope, receive, send))
    assert (runs, sent, store.load("default", key)) == ([], [], None)
