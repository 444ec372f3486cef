"""A catalog-style REST service over the commit engine, exactly once through ``Idempotency-Key``.

    python examples/catalog_service.py memory://catalog          # or file:///abs/dir, s3://bucket/prefix

starts it with uvicorn on 127.0.0.1:8181 (``--host``, ``--port``); S3 credentials and endpoint come from
the usual ``AWS_*`` environment (``--option name=value`` passes ``open_adapter`` options). Every request
carries ``Authorization: Bearer <token>``; ``--token TOKEN=PRINCIPAL`` (repeated) says which tokens
exist and whom they prove (without one, a random token is made and printed). Idempotency keys belong to
the principal the token proves, never to a header the client chooses: a client cannot act in another
principal's realm. ``--prefix /catalog`` serves the API under a path prefix (a Starlette ``Mount``), as
catalogs commonly are; ``--metadata-bytes N`` makes each commit answer carry N bytes of table metadata,
as Iceberg's commit answers do (the full table metadata, tens to hundreds of KB). Errors are Iceberg's
``{"error": {"message", "type", "code"}}``, the middleware's own included. Its API, the shape of the
Iceberg REST catalog's:

* ``GET /v1/config``: ``{"defaults": {}, "overrides": {}, "idempotency-key-lifetime": "PT30M"}``;
* ``POST /v1/namespaces/{namespace}/tables/{table}`` with ``{"request_id": "...", "payload": "..."}``
  and an ``Idempotency-Key`` (UUIDv7) header: commits that one row to the engine table
  ``{namespace}.{table}`` and answers ``200 {"table", "table-version", "version"}`` with ``ETag`` and
  ``Location``; 404 for a table that does not exist, 400 for a body without a ``request_id``, 503
  ``commit_failed`` (with ``Retry-After``) when the engine's storage failed: the commit may or may not
  have landed, and a retry with the same key finds out; 503 ``idempotency_no_effect`` (with
  ``Retry-After``, the key free again) when the engine fenced the commit (``CommitFencedError``: this
  process was stopped past its engine lease and a heal rolled its commit back), which had no effect;
* ``GET /v1/namespaces/{namespace}/tables/{table}``: ``{"table", "version", "rows": [...]}``.

The service author's part is three lines (``build`` below): the store, the idempotent routes, and the
middleware around the app with a reconciler over the engine. ``--failpoints-route`` (tests and the chaos
campaign only) adds ``PUT /_failpoints``, whose body arms engine failpoints in this process
(``storage_adapter.engine.failpoints`` syntax: ``commit.after_publish=crash*1``; empty: disarm all).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import secrets
import sys
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pyarrow as pa
import uvicorn
from starlette.applications import Starlette
from starlette.authentication import (
    AuthCredentials,
    AuthenticationBackend,
    AuthenticationError,
    SimpleUser,
)
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from storage_adapter import open_adapter
from storage_adapter.engine import (
    CommitFencedError,
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
    http_result,
    iceberg_error,
    owner_context,
    principal_realm,
)
from storage_adapter.idempotency import HandlerResult, IdempotencyStore, NoEffect, Policy
from storage_adapter.idempotency.engine_reconciler import EngineReconciler
from storage_adapter.protocol import StorageAdapter

SCHEMA = pa.schema([("request_id", pa.string()), ("payload", pa.string())])
TABLE_PATH = "/v1/namespaces/{namespace}/tables/{table}"


def problem(status: int, kind: str, detail: str, **headers: str) -> Response:
    """An Iceberg REST error (``IcebergErrorResponse``), the form the middleware's own answers take."""
    content_type, body = iceberg_error(status, kind, detail)
    return Response(body, status, headers, media_type=content_type)


class BearerTokens(AuthenticationBackend):
    """Every request proves a principal with ``Authorization: Bearer <token>``; a missing or unknown
    token is a 401."""

    def __init__(self, principals: Mapping[str, str]) -> None:
        self.principals = dict(principals)

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, SimpleUser]:
        scheme, _, token = conn.headers.get("authorization", "").partition(" ")
        principal = self.principals.get(token) if scheme.lower() == "bearer" else None
        if principal is None:
            raise AuthenticationError("a valid bearer token is needed")
        return AuthCredentials(["catalog"]), SimpleUser(principal)


def unauthorized(conn: HTTPConnection, exc: Exception) -> Response:
    return problem(401, "NotAuthorizedException", str(exc), **{"www-authenticate": "Bearer"})


class Catalog:
    """The routes, over one engine."""

    def __init__(self, engine: Engine, store: IdempotencyStore, metadata_bytes: int = 0) -> None:
        self.engine = engine
        self.store = store
        self.metadata_bytes = metadata_bytes

    def render(self, commit: Any) -> tuple[int, bytes, list[tuple[str, str]]]:
        """The response to a commit of one row: the one description the route answers with and the
        reconciler replays (from the engine's Commit or its CommitRecord), so both are byte for byte
        equal. Its table metadata is ``metadata_bytes`` long and a function of the commit alone."""
        ((table, table_version),) = commit.tables.items()
        namespace, name = table.split(".", 1)
        answer: dict[str, Any] = {"table": table, "table-version": table_version, "version": commit.version}
        if self.metadata_bytes:
            seed = hashlib.sha256(f"{table}@{commit.version}".encode()).hexdigest()
            properties = {"padding": (seed * (self.metadata_bytes // len(seed) + 1))[: self.metadata_bytes]}
            answer["metadata"] = {
                "format-version": 2,
                "current-snapshot-id": commit.version,
                "properties": properties,
            }
        headers = [
            ("content-type", "application/json"),
            ("etag", f'"{commit.version}"'),
            ("location", f"/v1/namespaces/{namespace}/tables/{name}"),
        ]
        return 200, json.dumps(answer).encode(), headers

    def describe(self, commit: Any) -> HandlerResult:
        return http_result(*self.render(commit))

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
        context = owner_context(request.scope)  # raises when the middleware is not around this route
        # The commit carries the request's key: a commit that already landed with it is returned instead
        # of a second one, and the reconciler finds it after a crash.
        commit_request = CommitRequest(
            idempotency_key=context.commit_key, key_issued_at=context.key_issued_at
        )
        try:
            commit = await run_in_threadpool(self.engine.commit, {table: row}, commit_request)
        except UnknownTableError:
            return problem(404, "NoSuchTableException", f"table {table} does not exist")
        except CommitFencedError as exc:
            # A healer judged this writer dead (its sidecar lease lapsed while this process was stopped or
            # starved) and fenced its commit: nothing of it is visible and it holds no key, so the request
            # provably had no effect. NoEffect frees the key (503 with Retry-After); the retry commits it
            # once, or replays the commit a successor made with the key.
            raise NoEffect(f"the commit was fenced by a heal and had no effect: {exc}") from exc
        except StorageError as exc:
            detail = f"the commit may or may not have landed; retry with the same key: {type(exc).__name__}"
            return problem(503, "commit_failed", detail, **{"retry-after": "1"})
        status, content, headers = self.render(commit)
        if (
            commit.replayed
        ):  # a successor that took the key over committed it first: the same answer, a replay
            headers.append(("idempotent-replayed", "true"))
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
    principals: Mapping[str, str],
    prefix: str = "",
    tables: tuple[str, ...] = ("default.rows",),
    options: dict[str, Any] | None = None,
    lifetime: timedelta = timedelta(minutes=30),
    lease: timedelta = timedelta(seconds=30),
    skew_grace: timedelta = timedelta(seconds=5),
    wait: Policy | None = None,
    engine_settings: EngineSettings | None = None,
    metadata_bytes: int = 0,
    failpoints_route: bool = False,
) -> Starlette:
    """The service's ASGI app over the storage ``root`` (a URL, opened with ``options``, or an adapter):
    its engine under ``engine/``, its idempotency records under ``idempotency/``, the ``tables`` created
    if missing; ``principals`` maps each bearer token to the principal it proves; the API is served under
    ``prefix`` ("" for the root)."""
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
    catalog = Catalog(engine, store, metadata_bytes)
    routes = [
        Route("/v1/config", catalog.config, methods=["GET"]),
        Route(TABLE_PATH, catalog.commit, methods=["POST"]),
        Route(TABLE_PATH, catalog.read, methods=["GET"]),
    ]
    if failpoints_route:
        routes.append(Route("/_failpoints", catalog.arm, methods=["PUT"]))
    # The service author's three lines: the store (catalog.store, above), the routes, the middleware,
    # inside the authentication that proves the principal each key belongs to.
    idempotent = [IdempotentRoute("POST", TABLE_PATH, "commit-table", "{namespace}.{table}")]
    middleware = [
        Middleware(AuthenticationMiddleware, backend=BearerTokens(principals), on_error=unauthorized),
        Middleware(
            IdempotencyMiddleware,
            store=catalog.store,
            routes=idempotent,
            realm=principal_realm,
            reconciler=EngineReconciler(engine, catalog.describe),
            settings=HttpSettings(wait=wait or Policy(), errors=iceberg_error),
        ),
    ]
    app = Starlette(routes=routes, middleware=middleware)
    return Starlette(routes=[Mount(prefix, app=app)]) if prefix else app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="storage root: memory://name, file:///abs/dir or s3://bucket/prefix")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8181)
    parser.add_argument("--prefix", default="", help="serve the API under this path prefix (/catalog)")
    parser.add_argument(
        "--token",
        action="append",
        default=[],
        metavar="TOKEN=PRINCIPAL",
        help="a bearer token and whom it proves",
    )
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
    parser.add_argument("--metadata-bytes", type=int, default=0, help="table metadata in each commit answer")
    parser.add_argument("--failpoints-route", action="store_true", help="PUT /_failpoints (tests only)")
    args = parser.parse_args(argv)
    principals = dict(token.split("=", 1) for token in args.token)
    if not principals:
        token = secrets.token_urlsafe(24)
        principals = {token: "default"}
        print(f"no --token given: use 'Authorization: Bearer {token}' (principal 'default')", file=sys.stderr)
    engine_options = {"retention": args.retention, "lease_s": args.engine_lease}
    engine_settings = EngineSettings(**{k: v for k, v in engine_options.items() if v is not None})
    app = build(
        args.url,
        principals=principals,
        prefix=args.prefix.rstrip("/"),
        tables=tuple(t for t in args.tables.split(",") if t),
        options=dict(option.split("=", 1) for option in args.option),
        lifetime=timedelta(seconds=args.lifetime),
        lease=timedelta(seconds=args.lease),
        skew_grace=timedelta(seconds=args.skew_grace),
        wait=Policy(first_wait_s=min(0.2, args.wait), max_wait_s=min(2.0, args.wait), total_wait_s=args.wait),
        engine_settings=engine_settings,
        metadata_bytes=args.metadata_bytes,
        failpoints_route=args.failpoints_route,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
