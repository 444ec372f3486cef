"""IdempotencyMiddleware where real services live (issue 42), through uvicorn on memory, local and
SeaweedFS: mounted under a prefix in each way Starlette and FastAPI mount an app (``uvicorn --root-path``,
a ``Mount``, an ``APIRouter(prefix=...)`` with dependencies, a sub-application), with background tasks,
exceptions the framework turns into a 500, ``NoEffect``, a 303 answered after the effect, a 1 MiB body
and an Iceberg ``ErrorModel`` answer. Every answer is in docs/idempotency.md, "Over HTTP"."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import APIRouter, BackgroundTasks, Depends, FastAPI, Header
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route

from storage_adapter import open_adapter
from storage_adapter.http import (
    HttpSettings,
    IdempotencyMiddleware,
    IdempotentRoute,
    iceberg_error,
    owner_context,
    problem_json,
)
from storage_adapter.http.renderers import ErrorRenderer
from storage_adapter.idempotency import IdempotencyStore, NoEffect, Policy, uuid7_key
from storage_adapter.servers.server import free_port

QUICK = Policy(first_wait_s=0.02, max_wait_s=0.1, total_wait_s=2.0)
TASK_WAIT_S = 5.0
BIG = 1024 * 1024


class Things:
    """The app's one idempotent route, ``POST .../things/{name}``: counts its runs per request id and
    answers as the body's ``do`` asks."""

    def __init__(self) -> None:
        self.runs: Counter[str] = Counter()
        self.refusals: set[str] = set()  # request ids whose first run raises NoEffect
        self.release = threading.Event()  # lets the background tasks end
        self.tasks_done: Counter[str] = Counter()

    def task(self, request_id: str, fail: bool) -> None:
        self.release.wait(TASK_WAIT_S)
        self.tasks_done[request_id] += 1
        if fail:
            raise RuntimeError("the background task failed after the response")

    async def answer(self, request: Request) -> Response:
        context = owner_context(request.scope)  # raises when the middleware passed the request through
        body = await request.json()
        request_id, do = body["id"], body["do"]
        self.runs[request_id] += 1
        created = {"id": request_id, "name": request.path_params["name"], "key": context.commit_key}
        if do in ("background", "background_fails"):
            task = BackgroundTask(self.task, request_id, do == "background_fails")
            return JSONResponse(created, 201, background=task)
        if do == "raise":
            raise ConnectionResetError("after the write")
        if do == "no_effect" and request_id not in self.refusals:
            self.refusals.add(request_id)
            raise NoEffect("refused before any write")
        if do == "redirect":
            return RedirectResponse(f"/things/{request_id}", 303)
        if do == "big":
            return Response(os.urandom(BIG), 201, media_type="application/octet-stream")
        if do == "iceberg_conflict":
            error = {
                "error": {"message": f"{request_id} changed", "type": "CommitFailedException", "code": 409}
            }
            return JSONResponse(error, 409)
        return JSONResponse(created, 201)


@dataclass
class Style:
    """One way of mounting the app: what uvicorn serves, its ``--root-path``, and where a client posts."""

    name: str
    root_path: str
    prefix: str
    build: Callable[[Things, IdempotencyStore], Any]
    errors: ErrorRenderer


def _middleware_kwargs(store: IdempotencyStore, template: str, errors: ErrorRenderer) -> dict[str, Any]:
    routes = [IdempotentRoute("POST", template, "create-thing", "thing/{name}")]
    return {"store": store, "routes": routes, "settings": HttpSettings(wait=QUICK, errors=errors)}


def _starlette(things: Things) -> Starlette:
    return Starlette(routes=[Route("/things/{name}", things.answer, methods=["POST"])])


def root_path_app(things: Things, store: IdempotencyStore) -> Any:
    return IdempotencyMiddleware(
        _starlette(things), **_middleware_kwargs(store, "/things/{name}", problem_json)
    )


def mount_app(things: Things, store: IdempotencyStore) -> Any:
    inner = IdempotencyMiddleware(
        _starlette(things), **_middleware_kwargs(store, "/things/{name}", problem_json)
    )
    return Starlette(routes=[Mount("/catalog", app=inner)])


def _fastapi_router(things: Things, prefix: str) -> APIRouter:
    async def tenant(x_trace: str | None = Header(default=None)) -> str:  # a dependency, as services have
        return x_trace or "none"

    router = APIRouter(prefix=prefix)

    @router.post("/things/{name}")
    async def create(
        name: str, request: Request, tasks: BackgroundTasks, trace: str = Depends(tenant)
    ) -> Any:
        body = await request.json()
        if body["do"] in ("background", "background_fails"):  # FastAPI's own BackgroundTasks
            context = owner_context(request.scope)
            things.runs[body["id"]] += 1
            tasks.add_task(things.task, body["id"], body["do"] == "background_fails")
            created = {"id": body["id"], "name": name, "key": context.commit_key}
            return JSONResponse(created, 201)
        return await things.answer(request)

    return router


def router_app(things: Things, store: IdempotencyStore) -> Any:
    app = FastAPI()
    app.include_router(_fastapi_router(things, "/catalog/v1"))
    app.add_middleware(
        IdempotencyMiddleware, **_middleware_kwargs(store, "/catalog/v1/things/{name}", iceberg_error)
    )
    return app


def subapp_app(things: Things, store: IdempotencyStore) -> Any:
    sub = FastAPI()
    sub.include_router(_fastapi_router(things, ""))
    sub.add_middleware(IdempotencyMiddleware, **_middleware_kwargs(store, "/things/{name}", iceberg_error))
    outer = FastAPI()
    outer.mount("/catalog", sub)
    return outer


STYLES = {
    "root_path": Style("root_path", "/catalog", "", root_path_app, problem_json),
    "mount": Style("mount", "", "/catalog", mount_app, problem_json),
    "router": Style("router", "", "/catalog/v1", router_app, iceberg_error),
    "subapp": Style("subapp", "", "/catalog", subapp_app, iceberg_error),
}


class Served:
    """One app under uvicorn, in a thread of this process."""

    def __init__(self, app: Any, root_path: str, prefix: str) -> None:
        self.port = free_port()
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, root_path=root_path, log_level="critical", lifespan="off"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.01)
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}{prefix}", timeout=30)

    def post(self, request_id: str, do: str, key: str | None, **headers: str) -> httpx.Response:
        if key is not None:
            headers["Idempotency-Key"] = key
        return self.http.post("/things/a", json={"id": request_id, "do": do}, headers=headers)

    def close(self) -> None:
        self.http.close()
        self.server.should_exit = True
        self.thread.join(timeout=30)


@dataclass
class Service:
    served: Served
    things: Things
    style: Style


@pytest.fixture(scope="module", params=["memory", "local", "seaweedfs"])
def backend_root(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    run = uuid.uuid4().hex[:8]
    if request.param == "memory":
        return lambda: open_adapter(f"memory://mounted-{run}-{uuid.uuid4().hex[:6]}")
    if request.param == "local":
        root = tmp_path_factory.mktemp("mounted")
        return lambda: open_adapter(f"file://{root}/{uuid.uuid4().hex[:6]}")
    endpoint = request.getfixturevalue("embedded_seaweedfs")
    return lambda: open_adapter(
        endpoint.url(f"mounted-{run}/{uuid.uuid4().hex[:6]}"), **endpoint.adapter_options()
    )


@pytest.fixture(scope="module", params=sorted(STYLES))
def service(request: pytest.FixtureRequest, backend_root: Any) -> Iterator[Service]:
    style = STYLES[request.param]
    things = Things()
    store = IdempotencyStore(backend_root(), lifetime=timedelta(minutes=30))
    served = Served(style.build(things, store), style.root_path, style.prefix)
    yield Service(served, things, style)
    things.release.set()
    served.close()


def _error_type(service: Service, answer: httpx.Response) -> str:
    """The layer's problem type, as the style's renderer put it."""
    body = answer.json()
    if service.style.errors is iceberg_error:
        assert answer.headers["content-type"] == "application/json"
        assert body["error"]["code"] == answer.status_code and body["error"]["message"]
        return str(body["error"]["type"])
    assert answer.headers["content-type"] == "application/problem+json"
    return str(body["type"])


def test_every_mount_style_keeps_idempotency(service: Service) -> None:
    served, things = service.served, service.things
    request_id, key = uuid.uuid4().hex, uuid7_key()
    first = served.post(request_id, "created", key)
    assert first.status_code == 201, first.text
    for _ in range(2):
        again = served.post(request_id, "created", key)
        assert (again.status_code, again.content, again.headers["idempotent-replayed"]) == (
            201,
            first.content,
            "true",
        )
    assert things.runs[request_id] == 1
    missing = served.post(uuid.uuid4().hex, "created", None)
    assert missing.status_code == 400 and _error_type(service, missing) == "idempotency_key_invalid"
    conflict = served.post(uuid.uuid4().hex, "created", key)
    assert conflict.status_code == 422 and _error_type(service, conflict) == "idempotency_key_conflict"


def test_two_keys_on_one_request_are_refused(service: Service) -> None:
    served, request_id = service.served, uuid.uuid4().hex
    headers = [("Idempotency-Key", uuid7_key()), ("Idempotency-Key", uuid7_key())]
    answer = served.http.post("/things/a", json={"id": request_id, "do": "created"}, headers=headers)
    assert answer.status_code == 400 and _error_type(service, answer) == "idempotency_key_invalid"
    assert "2 Idempotency-Key headers" in answer.text and service.things.runs[request_id] == 0


@pytest.mark.parametrize("do", ["background", "background_fails"])
def test_a_background_task_runs_after_the_client_has_the_response(service: Service, do: str) -> None:
    served, things = service.served, service.things
    request_id, key = uuid.uuid4().hex, uuid7_key()
    things.release.clear()
    try:
        first = served.post(request_id, do, key)
        assert first.status_code == 201 and things.tasks_done[request_id] == 0  # the task still waits
    finally:
        things.release.set()
    deadline = time.monotonic() + TASK_WAIT_S
    while things.tasks_done[request_id] == 0:
        assert time.monotonic() < deadline, "the background task never ran"
        time.sleep(0.01)
    again = served.post(request_id, do, key)  # a task that failed changes nothing of the stored answer
    assert (again.status_code, again.content, again.headers["idempotent-replayed"]) == (
        201,
        first.content,
        "true",
    )
    assert things.runs[request_id] == 1 and things.tasks_done[request_id] == 1


def test_an_app_exception_is_a_complete_500_and_is_never_run_again(service: Service) -> None:
    served, request_id, key = service.served, uuid.uuid4().hex, uuid7_key()
    first = served.post(request_id, "raise", key)  # a cut connection would raise here
    assert first.status_code == 500 and int(first.headers["content-length"]) == len(first.content)
    for _ in range(2):  # no reconciler: the terminal answer, never a second run
        retry = served.post(request_id, "raise", key)
        assert retry.status_code == 500 and _error_type(service, retry) == "idempotency_reconcile_failed"
    assert service.things.runs[request_id] == 1


def test_no_effect_is_a_503_with_retry_after_that_leaves_the_key_free(service: Service) -> None:
    served, request_id, key = service.served, uuid.uuid4().hex, uuid7_key()
    refused = served.post(request_id, "no_effect", key)
    assert (refused.status_code, refused.headers["retry-after"]) == (503, "1")
    assert _error_type(service, refused) == "idempotency_no_effect"
    retry = served.post(request_id, "no_effect", key)  # the app now accepts it: the key was free
    assert retry.status_code == 201 and "idempotent-replayed" not in retry.headers
    assert service.things.runs[request_id] == 2


def test_a_redirect_after_the_effect_is_stored_and_never_run_twice(service: Service) -> None:
    served, request_id, key = service.served, uuid.uuid4().hex, uuid7_key()
    first = served.post(request_id, "redirect", key)
    assert first.status_code == 303 and first.headers["location"] == f"/things/{request_id}"
    again = served.post(request_id, "redirect", key)
    assert (again.status_code, again.headers["location"], again.headers["idempotent-replayed"]) == (
        303,
        first.headers["location"],
        "true",
    )
    assert service.things.runs[request_id] == 1


@pytest.mark.parametrize("do", ["big", "iceberg_conflict"])
def test_a_large_body_and_an_iceberg_error_replay_byte_for_byte(service: Service, do: str) -> None:
    served, request_id, key = service.served, uuid.uuid4().hex, uuid7_key()
    first = served.post(request_id, do, key)
    assert first.status_code == (201 if do == "big" else 409)
    assert len(first.content) == (BIG if do == "big" else len(first.content))
    for _ in range(2):
        again = served.post(request_id, do, key)
        assert (again.status_code, again.headers["idempotent-replayed"]) == (first.status_code, "true")
        assert (
            again.content == first.content and again.headers["content-type"] == first.headers["content-type"]
        )
    assert service.things.runs[request_id] == 1
