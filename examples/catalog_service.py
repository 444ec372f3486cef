"""A catalog-style REST service over the commit engine, exactly once through ``Idempotency-Key``.

    python examples/catalog_service.py memory://catalog          # or file:///abs/dir, s3://bucket/prefix

starts it with uvicorn on 127.0.0.1:8181 (``--host``, ``--port``); S3 credentials and endpoint come from
the usual ``AWS_*`` environment (``--option name=value`` passes ``open_adapter`` options). Its API, the
shape of the Iceberg REST catalog's:

* ``GET /v1/config``: ``{"defaults": {}, "overrides": {}, "idempotency-key-lifetime": "PT30M"}``;
* ``POST /v1/namespaces/{namespace}/tables/{table}`` with ``{"request_id": "...", "payload": "..."}``
  and an ``Idempotency-Key`` (UUIDv7) header: commits that one row to the engine table
  ``{namespace}.{table}`` and answers ``200 {"table", "table-version", "version"}`` with ``ETag`` and
  ``Location``; 404 for a table that does not exist, 400 for a body without a ``request_id``, 503
  ``commit_failed`` (with ``Retry-After``) when the engine's storage failed: the commit may or may not
  have landed, and a retry with the same key finds out;
* ``GET /v1/namespaces/{namespace}/tables/{table}``: ``{"table", "version", "rows": [...]}``.

The service author's part is three lines (``build`` below): the store, the idempotent routes, and the
middleware around the app with a reconciler over the engine. ``--failpoints-route`` (tests and the chaos
campaign only) adds ``PUT /_failpoints``, whose body arms engine failpoints in this process
(``storage_adapter.engine.failpoints`` syntax: ``commit.after_publish=crash*1``; empty: disarm all).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
from datetime import timedelta
from typing import Any

import pyarrow as pa
import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from storage_adapter import open_adapter
from storage_adapter.engine import (
    CommitRequest,
    Engine,
    EngineSettings,
    TableExistsError,
    UnknownTableError,
    failpoints,
)
from storage_adapter.errors import StorageError
from storage_adapter.http import (
    HttpSettings,
    IdempotencyMiddleware,
    IdempotentRoute,
    catalog_config,
    header_realm,
    http_result,
    owner_context,
)
from storage_adapter.idempotency import HandlerResult, IdempotencyStore, Policy
from storage_adapter.idempotency.engine_reconciler import EngineReconciler
from storage_adapter.protocol import StorageAdapter

SCHEMA = pa.schema([("request_id", pa.string()), ("payload", pa.string())])
TABLE_PATH = "/v1/namespaces/{namespace}/tables/{table}"


def render(commit: Any) -> tuple[int, bytes, list[tuple[str, str]]]:
    """The response to a commit of one row: the one description the route answers with and the
    reconciler replays (from the engine's Commit or its CommitRecord), so both are byte for byte equal."""
    ((table, table_version),) = commit.tables.items()
    namespace, name = table.split(".", 1)
    body = json.dumps({"table": table, "table-version": table_version, "version": commit.version})
    headers = [
        ("content-type", "application/json"),
        ("etag", f'"{commit.version}"'),
        ("location", f"/v1/namespaces/{namespace}/tables/{name}"),
    ]
    return 200, body.encode(), headers


def describe(commit: Any) -> HandlerResult:
    return http_result(*render(commit))


def problem(status: int, kind: str, detail: str, **headers: str) -> JSONResponse:
    body = {"type": kind, "status": status, "detail": detail}
    return JSONResponse(body, status, headers, media_type="application/problem+json")


class Catalog:
    """The routes, over one engine."""

    def __init__(self, engine: Engine, store: IdempotencyStore) -> None:
        self.engine = engine
        self.store = store

    async def config(self, request: Request) -> Response:
        return JSONResponse({"defaults": {}, "overrides": {}, **catalog_config(self.store)})

    async def commit(self, request: Request) -> Response:
        table = "{namespace}.{table}".format(**request.path_params)
        try:
            body = await request.json()
            row = pa.table(
                {"request_id": [str(body["request_id"])], "payload": [str(body.get("payload", ""))]},
                schema=SCHEMA,
            )
        except (ValueError, KeyError, TypeError) as exc:
            return problem(400, "BadRequestException", f"a body with a request_id is needed: {exc}")
        context = owner_context(request.scope)
        assert context is not None, "the idempotency middleware is not around this route"
        # The commit carries the request's key: a commit that already landed with it is returned instead
        # of a second one, and the reconciler finds it after a crash.
        commit_request = CommitRequest(
            idempotency_key=context.commit_key, key_issued_at=context.key_issued_at
        )
        try:
            commit = await run_in_threadpool(self.engine.commit, {table: row}, commit_request)
        except UnknownTableError:
            return problem(404, "NoSuchTableException", f"table {table} does not exist")
        except StorageError as exc:
            detail = f"the commit may or may not have landed; retry with the same key: {type(exc).__name__}"
            return problem(503, "commit_failed", detail, **{"retry-after": "1"})
        status, content, headers = render(commit)
        return Response(content, status, dict(headers))

    async def read(self, request: Request) -> Response:
        table = "{namespace}.{table}".format(**request.path_params)
        snapshot = await run_in_threadpool(self.engine.snapshot)
        if table not in snapshot.tables:
            return problem(404, "NoSuchTableException", f"table {table} does not exist")
        rows = await run_in_threadpool(self.engine.read, table, snapshot)
        return JSONResponse({"table": table, "version": snapshot.version, "rows": rows.to_pylist()})

    async def arm(self, request: Request) -> Response:
        failpoints.disarm()
        spec = (await request.body()).decode()
        if spec:
            failpoints.arm_from_spec(spec)
        return Response(status_code=204)


def build(
    root: str | StorageAdapter,
    *,
    tables: tuple[str, ...] = ("default.rows",),
    options: dict[str, Any] | None = None,
    lifetime: timedelta = timedelta(minutes=30),
    lease: timedelta = timedelta(seconds=30),
    skew_grace: timedelta = timedelta(seconds=5),
    wait: Policy | None = None,
    engine_settings: EngineSettings | None = None,
    failpoints_route: bool = False,
) -> IdempotencyMiddleware:
    """The service's ASGI app over the storage ``root`` (a URL, opened with ``options``, or an adapter):
    its engine under ``engine/``, its idempotency records under ``idempotency/``, the ``tables`` created
    if missing."""
    adapter = open_adapter(root, **(options or {})) if isinstance(root, str) else root
    engine = Engine.open(adapter.child("engine"), actor=f"catalog-{os.getpid()}", settings=engine_settings)
    existing = engine.snapshot().tables
    for table in tables:
        if table not in existing:
            with contextlib.suppress(TableExistsError):  # another server created it meanwhile
                engine.create_table(table, SCHEMA)
    store = IdempotencyStore(
        adapter.child("idempotency"), lifetime=lifetime, lease=lease, skew_grace=skew_grace
    )
    catalog = Catalog(engine, store)
    routes = [
        Route("/v1/config", catalog.config, methods=["GET"]),
        Route(TABLE_PATH, catalog.commit, methods=["POST"]),
        Route(TABLE_PATH, catalog.read, methods=["GET"]),
    ]
    if failpoints_route:
        routes.append(Route("/_failpoints", catalog.arm, methods=["PUT"]))
    # The service author's three lines: the store (catalog.store, above), the routes, the middleware.
    idempotent = [IdempotentRoute("POST", TABLE_PATH, "commit-table", "{namespace}.{table}")]
    return IdempotencyMiddleware(
        Starlette(routes=routes),
        catalog.store,
        idempotent,
        realm=header_realm("x-tenant", default="default"),
        reconciler=EngineReconciler(engine, describe),
        settings=HttpSettings(wait=wait or Policy()),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="storage root: memory://name, file:///abs/dir or s3://bucket/prefix")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8181)
    parser.add_argument("--tables", default="default.rows", help="comma-separated namespace.table names")
    parser.add_argument("--option", action="append", default=[], metavar="NAME=VALUE", help="adapter option")
    parser.add_argument("--lifetime", type=float, default=1800.0, help="key lifetime, seconds")
    parser.add_argument("--lease", type=float, default=30.0, help="idempotency lease, seconds")
    parser.add_argument("--skew-grace", type=float, default=5.0, help="clock skew tolerated, seconds")
    parser.add_argument("--wait", type=float, default=30.0, help="how long a duplicate waits, seconds")
    parser.add_argument("--retention", type=int, help="EngineSettings.retention (commit records kept)")
    parser.add_argument(
        "--engine-lease", type=float, help="EngineSettings.lease_s (a writer's sidecar lease)"
    )
    parser.add_argument("--failpoints-route", action="store_true", help="PUT /_failpoints (tests only)")
    args = parser.parse_args(argv)
    engine_options = {"retention": args.retention, "lease_s": args.engine_lease}
    engine_settings = EngineSettings(**{k: v for k, v in engine_options.items() if v is not None})
    app = build(
        args.url,
        tables=tuple(t for t in args.tables.split(",") if t),
        options=dict(option.split("=", 1) for option in args.option),
        lifetime=timedelta(seconds=args.lifetime),
        lease=timedelta(seconds=args.lease),
        skew_grace=timedelta(seconds=args.skew_grace),
        wait=Policy(first_wait_s=min(0.2, args.wait), max_wait_s=min(2.0, args.wait), total_wait_s=args.wait),
        engine_settings=engine_settings,
        failpoints_route=args.failpoints_route,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
