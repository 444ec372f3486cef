"""IdempotencyMiddleware: the Iceberg REST ``Idempotency-Key`` over any ASGI application.

A pure ASGI middleware (no framework; it runs under Starlette, FastAPI or any ASGI server) over the
idempotency store. The table of answers, the configuration and the costs are in docs/idempotency.md
("Over HTTP"). In short, for a request to a configured route:

* no key, or not in the key format (UUIDv7 by default): 400, nothing stored, the app does not run;
* the same key with another method, path, query or body (or another operation or resource): 422;
* the key finalized: the stored status, body and allow-listed headers, with ``idempotent-replayed: true``;
* the key held by another request: waits on the event loop (no thread held), replays when it finalizes,
  else 503 with ``Retry-After`` (409 when configured);
* a new key: the app runs once, under the key's lease; its response streams to the client as it comes,
  and is stored (2xx and deterministic 4xx) up to ``max_response_bytes`` before the last chunk is sent;
  a larger body is answered to this client and replayed as 500 ``idempotency_replay_failed``; a 5xx is
  never stored, and the attempt is reconciled before any rerun, as after an exception from the app.

The app reaches its ownership (``commit_key`` for the engine, ``lost``) as ``owner_context(scope)``,
``request.state.idempotency`` under Starlette. Store requests, reconciliation and settlement run in a
bounded pool of worker threads (the store's API is blocking); the event loop is never blocked.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from storage_adapter.errors import StorageError
from storage_adapter.http.stored import (
    REPLAY_HEADERS,
    http_result,
    not_stored,
    replay_headers,
    replay_response,
)
from storage_adapter.idempotency import (
    UUIDV7_KEYS,
    Backoff,
    HandlerResult,
    IdempotencyRecord,
    IdempotencyStore,
    IdempotentRequest,
    InvalidIdempotencyKeyError,
    KeyFormat,
    Owned,
    OwnerContext,
    Ownership,
    Policy,
    Reconciler,
    Response,
    claim_once,
    in_progress,
    payload_fingerprint,
    replay,
    store_failure,
)
from storage_adapter.idempotency.responses import IN_PROGRESS, KEY_INVALID, STORE_UNAVAILABLE, problem

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
T = TypeVar("T")

HEADER = b"idempotency-key"
LIFETIME_FIELD = "idempotency-key-lifetime"  # the Iceberg REST catalog config's field
STATE_KEY = "idempotency"  # scope["state"][STATE_KEY]: the app's OwnerContext
REQUEST_TOO_LARGE = "idempotency_request_too_large"  # 413: the body is fingerprinted, so it is bounded
_NAME = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class IdempotentRoute:
    """A route whose requests are idempotent by key: ``method`` and a ``path`` template whose ``{name}``
    segments match one path segment each (``/v1/namespaces/{namespace}/tables/{table}``), the
    ``operation`` the store and the reconciler know it by, and the ``resource`` it changes, a template
    over the same names (``{namespace}.{table}``)."""

    method: str
    path: str
    operation: str
    resource: str
    pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = _NAME.findall(self.path)
        unknown = set(_NAME.findall(self.resource)) - set(names)
        if unknown:
            raise ValueError(f"resource {self.resource!r} names {sorted(unknown)}, not in path {self.path!r}")
        parts = _NAME.split(self.path)  # literal, name, literal, name, ..., literal
        regex = "".join(
            re.escape(part) if i % 2 == 0 else f"(?P<{part}>[^/]+)" for i, part in enumerate(parts)
        )
        object.__setattr__(self, "method", self.method.upper())
        object.__setattr__(self, "pattern", re.compile(regex))

    def resource_of(self, method: str, path: str) -> str | None:
        """The resource a request to ``method path`` changes, or None when this route is not it."""
        if method != self.method:
            return None
        found = self.pattern.fullmatch(path)
        return None if found is None else self.resource.format(**found.groupdict())


@dataclass(frozen=True)
class HttpSettings:
    """How the middleware answers. ``key_format``: the accepted keys (UUIDv7, as the Iceberg REST spec
    asks; the store's own format must accept them too: its default, any UUID, does). ``wait``: how long
    a duplicate waits for another owner (polling the store, doubling from ``first_wait_s`` up to
    ``max_wait_s``, giving up once ``total_wait_s`` would pass) and the owner's settle attempts and
    heartbeats. ``in_progress_status``: 503 (Iceberg's clients retry it with ``Retry-After``) or 409 (the
    IETF draft). ``retry_after_s``: the ``Retry-After`` of every 503 and of that answer.
    ``max_request_bytes``: the largest body fingerprinted (413 above). ``max_response_bytes``: the
    largest response body stored for replay (None: the store's ``max_summary_bytes``; a body whose
    stored form is over the store's limit is not stored either). ``replay_headers``: the response
    headers stored and replayed (never ``set-cookie``). ``store_threads``: the worker threads that run
    the store's blocking requests."""

    key_format: KeyFormat = UUIDV7_KEYS
    wait: Policy = field(default_factory=Policy)
    in_progress_status: int = 503
    retry_after_s: int = 1
    max_request_bytes: int = 1024 * 1024
    max_response_bytes: int | None = None
    replay_headers: tuple[str, ...] = REPLAY_HEADERS
    store_threads: int = 16

    def __post_init__(self) -> None:
        if self.in_progress_status not in (409, 503):
            raise ValueError(f"in_progress_status must be 409 or 503, got {self.in_progress_status}")
        replay_headers(self.replay_headers)  # refuses set-cookie and the framing headers


def fixed_realm(name: str) -> Callable[[Scope], str]:
    """Every request in one realm (a single-tenant service)."""
    return lambda scope: name


DEFAULT_REALM = fixed_realm("default")


def header_realm(header: str, default: str) -> Callable[[Scope], str]:
    """The realm named by a request header (a tenant), ``default`` when it is absent. A principal set by
    an authentication middleware is read the same way, from the scope, by a function of your own."""
    wanted = header.lower().encode("latin-1")

    def realm(scope: Scope) -> str:
        value = _header(scope, wanted)
        return value if value else default

    return realm


def catalog_config(store: IdempotencyStore) -> dict[str, str]:
    """The fields a catalog adds to its ``GET /v1/config`` answer: ``idempotency-key-lifetime``, the
    store's record lifetime as an ISO-8601 duration (``PT30M``). Without it, clients assume no support."""
    return {LIFETIME_FIELD: store.lifetime_iso8601}


def owner_context(scope: Scope) -> OwnerContext | None:
    """The app's ownership of the request's key (None outside an idempotent route): pass ``commit_key``
    and ``key_issued_at`` to the engine, check ``lost`` before an irreversible step."""
    state = scope.get("state")
    return state.get(STATE_KEY) if isinstance(state, dict) else None


class IdempotencyMiddleware:
    """Idempotency-Key semantics for the ``routes`` of ``app``; every other request passes through.

    ``realm`` names the tenant or principal a key belongs to (keys of two realms never meet).
    ``reconciler`` answers, before any rerun, whether an attempt that died, raised or answered 5xx had
    its effect (``EngineReconciler`` over the engine the app commits to, describing a commit with
    ``http_result`` exactly as the app answers); without one such a retry gets the terminal 500
    ``idempotency_reconcile_failed``, never a second run.
    """

    def __init__(
        self,
        app: ASGIApp,
        store: IdempotencyStore,
        routes: Sequence[IdempotentRoute],
        *,
        realm: Callable[[Scope], str] = DEFAULT_REALM,
        reconciler: Reconciler | None = None,
        settings: HttpSettings = HttpSettings(),
    ) -> None:
        self.app = app
        self.store = store
        self.routes = tuple(routes)
        self.realm = realm
        self.reconciler = reconciler
        self.settings = settings
        self.replay_headers = replay_headers(settings.replay_headers)
        self.max_response_bytes = (
            store.max_summary_bytes if settings.max_response_bytes is None else settings.max_response_bytes
        )
        self._pool = ThreadPoolExecutor(settings.store_threads, thread_name_prefix="idempotency-http")

    @property
    def lifetime_iso8601(self) -> str:
        return self.store.lifetime_iso8601

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        for route in self.routes:
            resource = route.resource_of(method, path)
            if resource is not None:
                await self._idempotent(route, resource, scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _idempotent(
        self, route: IdempotentRoute, resource: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        try:
            key = self.settings.key_format.validate(_header(scope, HEADER))
        except InvalidIdempotencyKeyError as exc:
            await self._answer(send, problem(400, KEY_INVALID, str(exc)))
            return
        body = await _read_body(receive, self.settings.max_request_bytes)
        if body is None:
            return  # the client left before its body was complete: nothing to answer
        if isinstance(body, Response):
            await self._answer(send, body)
            return
        payload = {
            "method": scope["method"],
            "path": scope["path"],
            "query": scope.get("query_string", b"").decode("latin-1"),
            "body": hashlib.sha256(body).hexdigest(),
        }
        request = IdempotentRequest(self.realm(scope), key, route.operation, resource, payload)
        try:
            claim = await self._claim(request, key)
        except InvalidIdempotencyKeyError as exc:  # the store's own key format is narrower
            await self._answer(send, problem(400, KEY_INVALID, str(exc)))
            return
        except StorageError as exc:
            await self._answer(send, store_failure(exc))
            return
        if isinstance(claim, Response):
            await self._answer(send, claim)
        elif isinstance(claim, IdempotencyRecord):
            await self._answer(send, replay(claim, replay_response))
        else:
            ownership = Ownership(
                self.store, claim, request, self.reconciler, replay_response, self.settings.wait
            )
            await self._own(ownership, scope, body, receive, send)

    async def _claim(self, request: IdempotentRequest, key: str) -> Owned | IdempotencyRecord | Response:
        """claim_once until it answers, sleeping on the event loop between looks (no thread held)."""
        fingerprint = payload_fingerprint(request.payload)
        backoff = Backoff(self.settings.wait)
        while True:
            claim = await self._in_thread(claim_once, self.store, request, key, fingerprint)
            if claim is not None:
                return claim
            delay = backoff.next()
            if delay is None:
                return in_progress(key)
            await asyncio.sleep(delay)

    async def _own(
        self, ownership: Ownership, scope: Scope, body: bytes, receive: Receive, send: Send
    ) -> None:
        capture = _Capture(send, self.max_response_bytes)
        state = {**scope.get("state", {}), STATE_KEY: ownership.context}
        try:
            answer = await self._in_thread(ownership.start)
            if answer is not None:
                await self._answer(send, answer)
                return
            await self.app({**scope, "state": state}, _replay_body(body, receive), capture.send)
            result = self._result(capture)
        except BaseException as exc:
            # An exception is not proof that nothing happened: the attempt is left unsettled, so a retry
            # reconciles (NoEffect says otherwise). Shielded: a cancelled request still releases its key.
            await asyncio.shield(self._in_thread(ownership.abandon, exc))
            raise
        await self._in_thread(partial(ownership.finish, result, maybe_applied=result.status >= 500))
        await capture.release()

    def _result(self, capture: _Capture) -> HandlerResult:
        """The outcome to store for the app's response: the whole body when it fits, else the record that
        says it was not stored."""
        if capture.status is None or not capture.complete:
            raise RuntimeError("the application returned without completing its response")
        if capture.size <= self.max_response_bytes:
            result = http_result(capture.status, bytes(capture.body), capture.headers, self.replay_headers)
            if self.store.outcome_size(result.summary, result.headers) <= self.store.max_summary_bytes:
                return result
        return not_stored(capture.status, capture.size, capture.headers, self.replay_headers)

    async def _in_thread(self, call: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, partial(call, *args))

    async def _answer(self, send: Send, response: Response) -> None:
        """Send a response of the idempotency layer: a replay (stored body and headers), or a problem."""
        status, headers = response.status, list(response.headers)
        if isinstance(response.summary, bytes):
            body = response.summary
        else:
            body = json.dumps(response.summary, separators=(",", ":")).encode()
        if response.problem_type == IN_PROGRESS:
            status = self.settings.in_progress_status
            headers.append(("retry-after", str(self.settings.retry_after_s)))
        elif response.problem_type == STORE_UNAVAILABLE:
            headers.append(("retry-after", str(self.settings.retry_after_s)))
        if response.replayed:
            headers.append(("idempotent-replayed", "true"))
        headers.append(("content-length", str(len(body))))
        raw = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers]
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": body, "more_body": False})


class _Capture:
    """Passes the app's response through to the client as it comes, keeping a copy of its body (none once
    it is past ``limit``: only its size then), and holds the last body message back until the outcome is
    stored: a client that has the whole response has an outcome a retry replays."""

    def __init__(self, send: Send, limit: int) -> None:
        self.send_on = send
        self.limit = limit
        self.status: int | None = None
        self.headers: list[tuple[str, str]] = []
        self.body = bytearray()
        self.size = 0
        self.complete = False
        self.held: Message | None = None

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.status = message["status"]
            self.headers = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in message.get("headers", [])]
        elif kind == "http.response.body":
            chunk = message.get("body", b"")
            self.size += len(chunk)
            if self.size <= self.limit:
                self.body += chunk
            else:
                self.body.clear()  # past the limit it is not stored: memory stays bounded
            if not message.get("more_body", False):
                self.complete = True
                self.held = message
                return
        await self.send_on(message)

    async def release(self) -> None:
        if self.held is not None:
            await self.send_on(self.held)


async def _read_body(receive: Receive, limit: int) -> bytes | Response | None:
    """The whole request body, the 413 answer when it is over ``limit``, or None when the client
    disconnected first."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if len(body) > limit:
            return problem(413, REQUEST_TOO_LARGE, f"the request body is over {limit} bytes")
        if not message.get("more_body", False):
            return bytes(body)


def _replay_body(body: bytes, receive: Receive) -> Receive:
    """The app's ``receive``: the body already read, in one message, then the client's own messages
    (its disconnect)."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None
