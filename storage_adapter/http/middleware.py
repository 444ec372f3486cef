"""IdempotencyMiddleware: the Iceberg REST ``Idempotency-Key`` over any ASGI application.

A pure ASGI middleware (no framework; it runs under Starlette, FastAPI or any ASGI server) over the
idempotency store. The table of answers, the configuration and the costs are in docs/idempotency.md
("Over HTTP"). In short, for a request to a configured route:

* no key, two keys, or a key not in the key format (UUIDv7 by default): 400, nothing stored, the app
  does not run;
* the same key with another method, path, query or body (or another operation or resource): 422;
* the key finalized: the stored status, body and allow-listed headers, with ``idempotent-replayed: true``;
* the key held by another request: waits on the event loop (no thread held), replays when it finalizes,
  else 503 with ``Retry-After`` (409 when configured);
* a new key: the app runs once, under the key's lease; its response streams to the client as it comes,
  and its outcome is stored (2xx, 3xx and deterministic 4xx; a large body as the record's attachment)
  when its last body chunk arrives, before that chunk goes out: what runs after the response (a
  background task) runs after the client has it, and cannot change the stored answer;
* every outcome is a complete response: an app exception before its response is complete is a 500
  (Starlette's own, or ``idempotency_app_error``), ``NoEffect`` a 503 with ``Retry-After`` that leaves the
  key free; a 5xx is never stored, and the attempt is reconciled before any rerun.

Routes match the path the framework routes (after ``root_path``), so a service mounted under a prefix
keeps its idempotency; a route the middleware passed through has no ``owner_context`` (it raises).
The app reaches its ownership (``commit_key`` for the engine, ``lost``) as ``owner_context(scope)``,
``request.state.idempotency`` under Starlette. The layer's own answers are rendered by
``HttpSettings.errors`` (problem+json, or the Iceberg REST ``ErrorModel``). Store requests, reconciliation and settlement run in a
bounded pool of worker threads (the store's API is blocking); the event loop is never blocked.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from storage_adapter.errors import StorageError
from storage_adapter.http.renderers import ErrorRenderer, problem_json
from storage_adapter.http.stored import (
    INLINE_BODY_BYTES,
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
    NoEffect,
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
from storage_adapter.idempotency.responses import (
    IN_PROGRESS,
    KEY_INVALID,
    NON_DETERMINISTIC_4XX,
    STORE_UNAVAILABLE,
    problem,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
T = TypeVar("T")

HEADER = b"idempotency-key"
LIFETIME_FIELD = "idempotency-key-lifetime"  # the Iceberg REST catalog config's field
STATE_KEY = "idempotency"  # scope["state"][STATE_KEY]: the app's OwnerContext
# The middleware's own answers, besides the store's (storage_adapter.idempotency.responses):
REQUEST_TOO_LARGE = "idempotency_request_too_large"  # 413: the body is fingerprinted, so it is bounded
NO_EFFECT = "idempotency_no_effect"  # 503 + Retry-After: the app raised NoEffect; the key is free again
APP_ERROR = "idempotency_app_error"  # 500: the app raised before a complete response; the retry reconciles
UNAUTHENTICATED = "idempotency_unauthenticated"  # 401: the realm function found no principal
# A 5xx is held back whole up to this size, so an exception after it can still turn it into NoEffect's
# 503; a larger one is streamed (and settled as unsettled at its last chunk).
HELD_ERROR_BYTES = 64 * 1024
# Extensions that let an app send a body other than as http.response.body messages (a file by path,
# trailers after the last chunk): hidden from an idempotent route, so the middleware sees the whole body.
_HIDDEN_EXTENSIONS = frozenset({"http.response.pathsend", "http.response.zerocopy", "http.response.trailers"})
_NO_CONTENT_LENGTH = frozenset({204, 304})
_log = logging.getLogger("storage_adapter.http")
_NAME = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class IdempotentRoute:
    """A route whose requests are idempotent by key: ``method`` and a ``path`` template whose ``{name}``
    segments match one path segment each (``/v1/namespaces/{namespace}/tables/{table}``), matched as
    the framework routes (``route_path``: the path after the scope's ``root_path``, so the same
    templates hold under ``uvicorn --root-path``, a ``Mount`` or a sub-application), the
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
    the store's blocking requests. ``errors``: the body of the layer's own answers (``problem_json``;
    ``iceberg_error`` for an Iceberg REST catalog, whose clients parse its ``ErrorModel``).
    ``max_response_bytes`` defaults to the store's ``max_attachment_bytes`` (64 MiB): a body larger
    than the record holds inline is stored as its attachment."""

    key_format: KeyFormat = UUIDV7_KEYS
    wait: Policy = field(default_factory=Policy)
    in_progress_status: int = 503
    retry_after_s: int = 1
    max_request_bytes: int = 1024 * 1024
    max_response_bytes: int | None = None
    replay_headers: tuple[str, ...] = REPLAY_HEADERS
    store_threads: int = 16
    errors: ErrorRenderer = problem_json

    def __post_init__(self) -> None:
        if self.in_progress_status not in (409, 503):
            raise ValueError(f"in_progress_status must be 409 or 503, got {self.in_progress_status}")
        replay_headers(self.replay_headers)  # refuses set-cookie and the framing headers


Realm = Callable[[Scope], str | None]


def route_path(scope: Scope) -> str:
    """The path a request is routed by, as Starlette routes it: ``path`` after the scope's
    ``root_path`` (set by ``uvicorn --root-path`` and extended by every ``Mount``), when ``path`` starts
    with it at a segment boundary; else ``path`` itself (a server that leaves the root path out)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and (len(path) == len(root) or path[len(root)] == "/"):
        return path[len(root) :]
    return path


def fixed_realm(name: str) -> Callable[[Scope], str]:
    """Every request in one realm (a single-tenant service)."""
    return lambda scope: name


DEFAULT_REALM = fixed_realm("default")


def principal_realm(scope: Scope) -> str | None:
    """The realm of the authenticated principal: ``scope["user"]`` as an authentication middleware sets
    it (Starlette's ``AuthenticationMiddleware``: its ``identity``, else its ``display_name``); None,
    answered 401 ``idempotency_unauthenticated``, when the request has no authenticated user. Keys are
    bound to who the service proved the caller is, never to what the caller says it is."""
    user = scope.get("user")
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    try:
        name = user.identity
    except (AttributeError, NotImplementedError):
        name = getattr(user, "display_name", None)
    return name if isinstance(name, str) and name else None


def header_realm(header: str, default: str) -> Callable[[Scope], str]:
    """The realm named by a request header, ``default`` when it is absent. The client chooses its
    headers: use it only behind a gateway that authenticates the caller and sets this header itself
    (dropping any the client sent); otherwise a client names another tenant's realm and acts in it.
    ``principal_realm`` binds keys to an authenticated principal."""
    wanted = header.lower().encode("latin-1")

    def realm(scope: Scope) -> str:
        values = _headers(scope, wanted)
        return values[0] if values and values[0] else default

    return realm


def catalog_config(store: IdempotencyStore) -> dict[str, str]:
    """The fields a catalog adds to its ``GET /v1/config`` answer: ``idempotency-key-lifetime``, the
    store's record lifetime as an ISO-8601 duration (``PT30M``). Without it, clients assume no support."""
    return {LIFETIME_FIELD: store.lifetime_iso8601}


class NotIdempotentError(LookupError):
    """``owner_context`` of a request the middleware did not make idempotent: the message names the
    method, the route path and the root path the middleware saw, and its routes (a template that does
    not match the path the framework routes is the usual cause)."""


@dataclass(frozen=True)
class _PassedThrough:
    """What the middleware saw of a request it passed through, for ``owner_context``'s error."""

    method: str
    path: str
    root_path: str
    routes: tuple[IdempotentRoute, ...]


def owner_context(scope: Scope) -> OwnerContext:
    """The app's ownership of the request's key: pass ``commit_key`` and ``key_issued_at`` to the
    engine, check ``lost`` before an irreversible step. Raises NotIdempotentError when the request is not
    idempotent (no middleware around the app, or no route of it matched): a route that needs a key never
    runs without one silently."""
    state = scope.get("state")
    found = state.get(STATE_KEY) if isinstance(state, dict) else None
    if isinstance(found, OwnerContext):
        return found
    if isinstance(found, _PassedThrough):
        routes = ", ".join(f"{route.method} {route.path}" for route in found.routes) or "none"
        raise NotIdempotentError(
            f"the idempotency middleware passed {found.method} {found.path!r} (root path "
            f"{found.root_path!r}) through: none of its routes matches it ({routes})"
        )
    raise NotIdempotentError("no IdempotencyMiddleware handled this request")


def _owned_scope(scope: Scope, ownership: Ownership) -> Scope:
    """The request's own scope under ``ownership`` (what the app writes into it stays visible around the
    middleware): its context in the per-request ``state``, and no extension that would send the body
    around the middleware."""
    scope.setdefault("state", {})[STATE_KEY] = ownership.context
    extensions = scope.get("extensions")
    if isinstance(extensions, dict) and _HIDDEN_EXTENSIONS & extensions.keys():
        scope["extensions"] = {k: v for k, v in extensions.items() if k not in _HIDDEN_EXTENSIONS}
    return scope


class IdempotencyMiddleware:
    """Idempotency-Key semantics for the ``routes`` of ``app``; every other request passes through.

    ``realm`` names the tenant or principal a key belongs to (keys of two realms never meet; None: the
    request is answered 401 without running the app).
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
        realm: Realm = DEFAULT_REALM,
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
            store.max_attachment_bytes if settings.max_response_bytes is None else settings.max_response_bytes
        )
        self._pool = ThreadPoolExecutor(settings.store_threads, thread_name_prefix="idempotency-http")

    @property
    def lifetime_iso8601(self) -> str:
        return self.store.lifetime_iso8601

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], route_path(scope)
        for route in self.routes:
            resource = route.resource_of(method, path)
            if resource is not None:
                await self._idempotent(route, resource, path, scope, receive, send)
                return
        # The scope itself, marked in its per-request state as Starlette's request.state is: what the app
        # writes into it (scope["route"], request.state) stays visible to the middleware around this one.
        scope.setdefault("state", {})[STATE_KEY] = _PassedThrough(
            method, path, scope.get("root_path", ""), self.routes
        )
        await self.app(scope, receive, send)

    async def _idempotent(
        self, route: IdempotentRoute, resource: str, path: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        realm = self.realm(scope)
        if realm is None:
            await self._answer(send, problem(401, UNAUTHENTICATED, "this request carries no principal"))
            return
        keys = _headers(scope, HEADER)
        if len(keys) > 1:
            detail = f"{len(keys)} Idempotency-Key headers on one request: send exactly one"
            await self._answer(send, problem(400, KEY_INVALID, detail))
            return
        try:
            key = self.settings.key_format.validate(keys[0] if keys else None)
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
            "path": path,
            "query": scope.get("query_string", b"").decode("latin-1"),
            "body": hashlib.sha256(body).hexdigest(),
        }
        request = IdempotentRequest(realm, key, route.operation, resource, payload)
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
            await self._answer(send, await self._in_thread(replay, claim, self._replayer))
        else:
            ownership = Ownership(
                self.store, claim, request, self.reconciler, self._replayer, self.settings.wait
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
        """Run the app once under ``ownership`` and settle on what the client receives (the table of
        outcomes is in docs/idempotency.md, "The answers" and "Every status class has a rule")."""
        capture = _Capture(send, self.max_response_bytes, partial(self._settle, ownership))
        try:
            answer = await self._in_thread(ownership.start)
        except BaseException as exc:
            await asyncio.shield(self._in_thread(ownership.abandon, exc))
            raise
        if answer is not None:
            await self._answer(send, answer)
            return
        try:
            await self.app(_owned_scope(scope, ownership), _replay_body(body, receive), capture.send)
        except Exception as exc:
            await self._after_failure(ownership, capture, exc)
            return
        except BaseException as exc:
            if not capture.settled:  # shielded: a cancelled request still releases its key
                await asyncio.shield(self._in_thread(ownership.abandon, exc))
            raise
        if capture.settled:
            return
        if capture.holds_whole_response:
            await self._settle(ownership, capture)  # a 5xx: cancelled as unsettled, then sent
            await capture.release()
            return
        failure = RuntimeError("the application returned without completing its response")
        await self._after_failure(ownership, capture, failure)

    async def _after_failure(self, ownership: Ownership, capture: _Capture, exc: Exception) -> None:
        """The app raised ``exc`` (or returned without a complete response). The client always gets a
        complete answer unless part of a response already went out."""
        if capture.settled:
            # The client has its complete answer and the outcome is stored: a background task that
            # failed afterwards changes neither.
            _log.error("the application raised after its response was complete", exc_info=exc)
            return
        await asyncio.shield(self._in_thread(ownership.abandon, exc))
        if capture.forwarded:
            raise exc  # a response cut in the middle: the server closes the connection, the only honest end
        if isinstance(exc, NoEffect):
            detail = f"the request had no effect and may be retried with the same key: {exc}"
            await self._answer(send=capture.send_on, response=problem(503, NO_EFFECT, detail))
            return
        _log.error("the application raised before its response was complete", exc_info=exc)
        if capture.holds_whole_response:
            await capture.release()  # the framework's own complete error response (Starlette's 500)
            return
        detail = (
            f"the application failed ({type(exc).__name__}); the request may have had its effect: "
            "retry with the same key to learn its outcome"
        )
        await self._answer(capture.send_on, problem(500, APP_ERROR, detail))

    async def _settle(self, ownership: Ownership, capture: _Capture) -> None:
        """Store the outcome of the app's complete response (a 5xx: cancel as unsettled), before its last
        chunk goes out. Shielded: a client that leaves does not leave the key in progress."""
        result = self._result(capture)
        # Not stored and not one of the refusals that say nothing happened (401, 403, 408, 429): a 5xx,
        # or a status no HTTP answer should have; the retry reconciles before any rerun.
        maybe_applied = result.status not in NON_DETERMINISTIC_4XX
        settle = partial(ownership.finish, result, maybe_applied=maybe_applied)
        await asyncio.shield(self._in_thread(settle))

    def _result(self, capture: _Capture) -> HandlerResult:
        """The outcome to store for the app's response: the whole body when it is within
        ``max_response_bytes`` (in the record when small, else as the record's attachment), else the
        record that says it was not stored."""
        assert capture.status is not None
        if capture.size <= self.max_response_bytes:
            body, status, headers = bytes(capture.body), capture.status, capture.headers
            for inline_bytes in (INLINE_BODY_BYTES, 0):  # the body in the record, else its attachment
                result = http_result(status, body, headers, self.replay_headers, inline_bytes)
                if self.store.outcome_size(result.summary, result.headers) <= self.store.max_summary_bytes:
                    return result
        return not_stored(capture.status, capture.size, capture.headers, self.replay_headers)

    def _replayer(self, record: IdempotencyRecord) -> HandlerResult:
        return replay_response(record, self.store)

    async def _in_thread(self, call: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, partial(call, *args))

    async def _answer(self, send: Send, response: Response) -> None:
        """Send a response of the idempotency layer: a replay (stored body and headers), or one of its
        own answers, rendered by ``HttpSettings.errors``."""
        status, headers = response.status, list(response.headers)
        if response.problem_type == IN_PROGRESS:
            status = self.settings.in_progress_status
        if isinstance(response.summary, bytes):
            body = response.summary
        else:  # the layer's own answer: a problem {"type", "status", "detail"}, its code the status sent
            content_type, body = self.settings.errors(status, response.problem_type or "", _detail(response))
            headers = [(n, v) for n, v in headers if n.lower() != "content-type"]
            headers.append(("content-type", content_type))
        if response.problem_type in (IN_PROGRESS, STORE_UNAVAILABLE, NO_EFFECT):
            headers.append(("retry-after", str(self.settings.retry_after_s)))
        if response.replayed:
            headers.append(("idempotent-replayed", "true"))
        if status not in _NO_CONTENT_LENGTH:  # RFC 9110: a 204 or 304 carries none
            headers.append(("content-length", str(len(body))))
        raw = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers]
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": body, "more_body": False})


class _Capture:
    """The app's ``send``: passes its response through to the client as it comes, keeping a copy of the
    body (none once it is past ``limit``: only its size then), and settles the outcome when the last body
    chunk arrives, before passing it on: a client that has the whole response has an outcome every retry
    replays, and what runs after (a background task) runs after the client has it. The start line goes out
    with the first body chunk, so a failure before any byte of the body (a streamed body whose generator
    raises first) is still answered with a complete response.

    A 5xx is held back whole (up to ``HELD_ERROR_BYTES``) until the app returns: an exception after it
    may still say ``NoEffect`` (Starlette answers 500 for any exception, then raises it)."""

    def __init__(self, send: Send, limit: int, settle: Callable[[_Capture], Awaitable[None]]) -> None:
        self.send_on = send
        self.limit = limit
        self.settle = settle
        self.status: int | None = None
        self.headers: list[tuple[str, str]] = []
        self.body = bytearray()
        self.size = 0
        self.held: list[Message] = []
        self.holding = False
        self.start: Message | None = None  # a 2xx-4xx start, until its first body chunk
        self.complete = False
        self.settled = False
        self.forwarded = False  # a message went to the client

    @property
    def holds_whole_response(self) -> bool:
        return self.holding and self.complete

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            self.status = message["status"]
            self.headers = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in message.get("headers", [])]
            self.holding = self.status >= 500
            if not self.holding:
                self.start = message  # sent with the first body chunk: a failure before it is answered whole
                return
        elif kind == "http.response.body":
            chunk = message.get("body", b"")
            self.size += len(chunk)
            if self.size <= self.limit:
                self.body += chunk
            else:
                self.body.clear()  # past the limit it is not stored: memory stays bounded
            self.complete = not message.get("more_body", False)
            if self.holding and self.size > HELD_ERROR_BYTES:
                await self.release()  # too large to hold: streamed, and settled at its last chunk
            if self.complete and not self.holding:
                await self.settle(self)
                self.settled = True
        if self.holding:
            self.held.append(message)
        else:
            await self._forward(message)

    async def release(self) -> None:
        """Send what is held (a 5xx) and stop holding."""
        self.holding = False
        held, self.held = self.held, []
        for message in held:
            await self._forward(message)

    async def _forward(self, message: Message) -> None:
        self.forwarded = True
        if self.start is not None:
            start, self.start = self.start, None
            await self.send_on(start)
        await self.send_on(message)


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


def _headers(scope: Scope, name: bytes) -> list[str]:
    """Every value of the request header ``name`` (lowercase bytes), in order."""
    return [value.decode("latin-1") for key, value in scope.get("headers", []) if key.lower() == name]


def _detail(response: Response) -> str:
    summary = response.summary
    return str(summary.get("detail", "")) if isinstance(summary, dict) else ""
