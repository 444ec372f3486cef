"""Exact listings of S3 buckets and Azure containers, over plain HTTP: every name as the store holds it.

obstore parses each listed name into its own path type. On S3 and Azure one name with a control
character, an empty segment (``a//b``) or a ``.``/``..`` segment makes it refuse the whole page, and it
renames others silently (a folder marker ``dir/`` is listed as ``dir``, ``/x`` as ``x``). This module
lists without it: ListObjectsV2 (S3, signed with AWS Signature V4 here) and List Blobs (Azure: SharedKey,
SAS or a bearer token), parsed with the standard library, for a driver that must see every name.

Names are FULL names: a path, prefix and ``start_after`` given to a :class:`RawClient`, and every name it
returns, is the object's whole name in the bucket or container, sent and returned as is. The store's own
``prefix`` (obstore's ``S3Store(prefix=...)``, which obstore joins in front of every path it is given) is
NOT applied: a caller listing below a store's prefix passes ``f"{store.prefix}/{sub}"`` and cuts it off
the names it gets. (The adapter's own stores have no prefix: its root prefix is joined by the driver.)

:func:`raw_client` reads everything from the store object alone: its ``config`` (the settings obstore
keeps, overlaid on the ``AWS_*``/``AZURE_*`` environment as obstore's constructors read it),
``client_options`` (plain HTTP, certificates, timeouts, a proxy), ``retry_config`` and
``credential_provider``. Tokens are those of obstore's own listing of the same store: S3 ETags with their
quotes, Azure ETags unquoted, as the XML has them.

Every failure is one of :mod:`storage_adapter.errors`, classified by HTTP status (never by message),
naming the prefix (or path) and the backend, and never quoting a credential: no key, secret, token,
signature or SAS reaches a message or a repr (the server's error body, which may echo a signed request,
is never quoted: only its short error code is). Every response body is bounded (:data:`MAX_RESPONSE_BYTES`).
"""

from __future__ import annotations

import asyncio
import base64
import email.utils
import hashlib
import hmac
import http.client
import inspect
import os
import random
import re
import ssl
import time
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from storage_adapter.errors import (
    BackendUnavailableError,
    ConfigurationError,
    PermissionDeniedError,
    StorageError,
    UnsupportedOperationError,
)
from storage_adapter.translation import status_error_class

# A listing page of 1000 keys of 1024 bytes each, percent-encoded, is under 10 MiB of XML; a body over
# this is refused rather than held.
MAX_RESPONSE_BYTES = 16 * 1024 * 1024
# S3 lists at most 1000 keys a request; Azure at most 5000.
S3_MAX_PAGE = 1000
AZURE_MAX_PAGE = 5000
AZURE_VERSION = "2021-08-06"
# object_store's defaults where the store's options say nothing.
_RETRIES = 3
_INIT_BACKOFF_S = 0.1
_MAX_BACKOFF_S = 15.0
_BACKOFF_BASE = 2.0
_RETRY_TIMEOUT_S = 180.0
_CONNECT_TIMEOUT_S = 5.0
_REQUEST_TIMEOUT_S = 30.0
# A credential from a provider is asked for again this long before it expires.
_EXPIRY_MARGIN = timedelta(seconds=30)
_EMULATOR_URL = "http://127.0.0.1:10000"
_EMULATOR_ACCOUNT = "devstoreaccount1"
_EMULATOR_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
_TLS = "https"  # the URL scheme of TLS connections
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
# RFC 3986's unreserved characters: what AWS Signature V4 leaves unencoded.
_UNRESERVED = "-_.~"
# The server's error code, as quoted in messages (S3's <Code>, Azure's x-ms-error-code): nothing else of
# an error body is, and nothing longer or stranger than this.
_ERROR_CODE = re.compile(r"[A-Za-z][A-Za-z0-9.]{0,63}")
_DURATION_PART = re.compile(r"(\d+)\s*(ns|us|µs|ms|s|m|h|d|w)\b")
_DURATION_UNITS_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_UNITS_S.update(d=86400.0, w=604800.0)


@dataclass(frozen=True, slots=True)
class RawEntry:
    """One listed object. ``path``: its full name, exactly as stored; ``e_tag``: as obstore's own
    listing of that store gives it (S3: with its quotes; Azure: unquoted ``0x8D...``);
    ``last_modified``: UTC, as exact as the server gives it (S3: milliseconds; Azure: seconds)."""

    path: str
    size: int
    e_tag: str | None
    last_modified: datetime


@dataclass(frozen=True, slots=True)
class RawPage:
    """One listed page: its objects, and (with a delimiter only) its common prefixes, full names with
    the delimiter that ends them."""

    entries: list[RawEntry]
    common_prefixes: list[str]


class RawClient(Protocol):
    """An exact lister (and writer, for tests) of one bucket or container. Every name is a full name (see
    the module's docstring)."""

    def pages(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        delimiter: str | None = None,
        page_size: int = 1000,
    ) -> Iterator[RawPage]:
        """The names starting with ``prefix`` (sent as is; "" for all), after ``start_after`` (S3:
        StartAfter, the server skips; Azure has none: the names not after it are dropped here, and a
        common prefix only when every name under it sorts before it), in key order, lazily: one request
        per page, each made when the page before it is taken, over one kept-alive connection. A page
        is never empty (a server's empty page that continues is skipped); an empty listing yields none.
        ``page_size``: the most names (and prefixes) a request asks for."""
        ...

    def put(self, path: str, data: bytes) -> None:
        """One unconditional PUT of ``data`` as exactly the name ``path``."""
        ...

    def delete(self, path: str) -> None:
        """One DELETE of exactly the name ``path``; a missing one is not an error."""
        ...


def raw_client(store: Any, *, backend: str) -> RawClient | None:
    """The exact lister of an obstore ``S3Store`` or ``AzureStore``, built from the store object alone;
    None for any other store (memory, local, GCS, HTTP). Its errors name ``backend``.

    Raises ConfigurationError for a store its settings cannot reach (plain HTTP not allowed, no
    bucket). Credentials are resolved on the first request: where none the adapter can see exist (S3: no
    keys, no provider, no botocore chain; Azure: a credential kind other than a key, a SAS or a bearer
    token), that request raises UnsupportedOperationError."""
    kind = type(store)
    if not kind.__module__.startswith("obstore"):
        return None
    if kind.__name__ == "S3Store":
        return _S3Client(store, backend)
    if kind.__name__ == "AzureStore":
        return _AzureClient(store, backend)
    return None


# -- settings ------------------------------------------------------------------------------------------


def _settings(store: Any, env_prefix: str, aliases: Mapping[str, str]) -> dict[str, str]:
    """The store's config as text, over the environment obstore's constructors also read (``AWS_*`` or
    ``AZURE_*``: the store's ``config`` lists only what it was given), keys lowercased without the
    prefix, ``aliases`` mapped to the names obstore keeps."""
    found: dict[str, str] = {}
    for name, value in os.environ.items():
        if name.startswith(env_prefix) and value:
            key = name[len(env_prefix) :].lower()
            found[aliases.get(key, key)] = value
    for name, value in dict(getattr(store, "config", None) or {}).items():
        key = str(name).lower().removeprefix(env_prefix.lower())
        if value is not None:
            found[aliases.get(key, key)] = str(value).lower() if isinstance(value, bool) else str(value)
    return found


def _flag(value: object) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes", "on")


def _seconds(value: object, default: float) -> float:
    """A duration of obstore's options (a timedelta, or humantime text: ``5s``, ``1m 30s 500ms``)."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, int | float):
        return float(value)
    parts = _DURATION_PART.findall(str(value or ""))
    if not parts:
        return default
    return sum(int(amount) * _DURATION_UNITS_S[unit] for amount, unit in parts)


@dataclass(frozen=True)
class _Retry:
    """object_store's retry settings: how many times, backing off how, for how long in all."""

    retries: int = _RETRIES
    init_s: float = _INIT_BACKOFF_S
    max_s: float = _MAX_BACKOFF_S
    base: float = _BACKOFF_BASE
    timeout_s: float = _RETRY_TIMEOUT_S

    @classmethod
    def of(cls, store: Any) -> _Retry:
        config = dict(getattr(store, "retry_config", None) or {})
        backoff = dict(config.get("backoff") or {})
        return cls(
            retries=int(config.get("max_retries", _RETRIES)),
            init_s=_seconds(backoff.get("init_backoff"), _INIT_BACKOFF_S),
            max_s=_seconds(backoff.get("max_backoff"), _MAX_BACKOFF_S),
            base=float(backoff.get("base", _BACKOFF_BASE)),
            timeout_s=_seconds(config.get("retry_timeout"), _RETRY_TIMEOUT_S),
        )

    def pause(self, attempt: int) -> float:
        """The wait before retry ``attempt`` (1-based): jittered exponential backoff."""
        ceiling = min(self.max_s, self.init_s * self.base ** (attempt - 1))
        return random.uniform(ceiling / 2, ceiling)


@dataclass(frozen=True)
class _Transport:
    """Where requests go and how: the base URL's parts, TLS, timeouts, a proxy and the retries."""

    tls: bool  # https, else plain http
    host: str  # host[:port], as the Host header says it
    base_path: str  # the URL path every request path is appended to ("" or "/...")
    backend: str
    connect_timeout_s: float
    timeout_s: float
    insecure: bool
    proxy: str | None
    retry: _Retry

    @classmethod
    def of(cls, url: str, store: Any, backend: str, *, allow_http: bool) -> _Transport:
        split = urllib.parse.urlsplit(url)
        if split.scheme not in ("http", "https") or not split.hostname:
            raise ConfigurationError(
                f"{backend}: endpoint {split.scheme}://{split.hostname} is not an HTTP URL", backend=backend
            )
        options = {str(k): v for k, v in dict(getattr(store, "client_options", None) or {}).items()}
        if split.scheme == "http" and not (allow_http or _flag(options.get("allow_http", False))):
            raise ConfigurationError(
                f"{backend}: endpoint http://{split.hostname} is plain HTTP and the store does not allow HTTP "
                "(client option allow_http)",
                backend=backend,
            )
        proxy = str(options.get("proxy_url") or "") or None
        excludes = [h.strip() for h in str(options.get("proxy_excludes") or "").split(",") if h.strip()]
        if proxy and any(
            split.hostname == h or split.hostname.endswith(f".{h.lstrip('.')}") for h in excludes
        ):
            proxy = None
        return cls(
            tls=split.scheme == _TLS,
            host=split.netloc.rpartition("@")[2],
            base_path=split.path.rstrip("/"),
            backend=backend,
            connect_timeout_s=_seconds(options.get("connect_timeout"), _CONNECT_TIMEOUT_S),
            timeout_s=_seconds(options.get("timeout"), _REQUEST_TIMEOUT_S),
            insecure=_flag(options.get("allow_invalid_certificates", False)),
            proxy=proxy,
            retry=_Retry.of(store),
        )

    def connect(self) -> http.client.HTTPConnection:
        """A new (not yet connected) connection to the endpoint, through the proxy if one is set."""
        host = self.host
        tunnel = None
        if self.proxy:
            proxy = urllib.parse.urlsplit(self.proxy)
            tunnel, host = (self.host if self.tls else None), proxy.netloc.rpartition("@")[2]
        if self.tls:
            context = ssl.create_default_context()
            if self.insecure:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            connection: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, timeout=self.connect_timeout_s, context=context
            )
        else:
            connection = http.client.HTTPConnection(host, timeout=self.connect_timeout_s)
        if tunnel:
            connection.set_tunnel(tunnel)
        return connection

    def target(self, path_and_query: str) -> str:
        """The request target: origin form, or absolute form through a plain-HTTP proxy."""
        if self.proxy and not self.tls:
            return f"http://{self.host}{path_and_query}"
        return path_and_query


@dataclass
class _Response:
    status: int
    headers: http.client.HTTPMessage
    body: bytes


class _Session:
    """One kept-alive connection (reopened after a failure) and the retries of each request over it."""

    def __init__(self, transport: _Transport) -> None:
        self._transport = transport
        self._connection: http.client.HTTPConnection | None = None

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def __enter__(self) -> _Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self,
        method: str,
        path_and_query: str,
        headers: Callable[[], dict[str, str]],
        body: bytes,
        *,
        what: str,
        key: str,
    ) -> _Response:
        """The server's answer to one request, retried on a transport failure or a transient status
        (408, 429, 5xx but 501) as the store's retry settings say; ``headers`` signs each attempt anew.
        The answer may still be an error status: the caller classifies it. ``what``/``key`` name the
        request in errors."""
        retry = self._transport.retry
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            failure: BaseException | None = None
            try:
                response = self._once(method, path_and_query, headers(), body, what=what, key=key)
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                failure = exc
            else:
                transient = status_error_class(response.status) is BackendUnavailableError
                if not transient or response.status == 409:
                    return response
            spent = time.monotonic() - started
            if attempt > retry.retries or spent >= retry.timeout_s:
                if failure is None:
                    return response
                raise BackendUnavailableError(
                    f"{what} {key!r} on {self._transport.backend}: {self._transport.host} could not be "
                    f"reached ({type(failure).__name__}, {attempt} attempt(s))",
                    key=key,
                    backend=self._transport.backend,
                ) from failure
            time.sleep(retry.pause(attempt))

    def _once(
        self, method: str, path_and_query: str, headers: dict[str, str], body: bytes, *, what: str, key: str
    ) -> _Response:
        if self._connection is None:
            self._connection = self._transport.connect()
            self._connection.connect()
            if self._connection.sock is not None:
                self._connection.sock.settimeout(self._transport.timeout_s)
        connection = self._connection
        connection.request(method, self._transport.target(path_and_query), body=body or None, headers=headers)
        response = connection.getresponse()
        declared = response.getheader("Content-Length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_RESPONSE_BYTES:
            self.close()
            raise self._too_large(what, key)
        data = response.read(MAX_RESPONSE_BYTES + 1)
        if len(data) > MAX_RESPONSE_BYTES:
            self.close()
            raise self._too_large(what, key)
        if response.will_close:
            self.close()
        return _Response(response.status, response.headers, data)

    def _too_large(self, what: str, key: str) -> StorageError:
        return StorageError(
            f"{what} {key!r} on {self._transport.backend}: the server's answer is over "
            f"{MAX_RESPONSE_BYTES} bytes, refused",
            key=key,
            backend=self._transport.backend,
        )


class ServerAnswer(Exception):
    """The answer a server gave to a raw request (its status and error code, never its body): the cause
    chained to the error raised for it, as a library's own error is for obstore's requests."""


def _failure(response: _Response, code: str | None, *, what: str, key: str, backend: str) -> StorageError:
    """The error for an error status, by the status alone; the server's error code (only) is quoted."""
    kind = status_error_class(response.status)
    answer = f"HTTP {response.status}" + (f" {code}" if code and _ERROR_CODE.fullmatch(code) else "")
    error = kind(f"{what} {key!r} on {backend}: {answer}", key=key, backend=backend)
    error.__cause__ = ServerAnswer(answer)
    return error


def _xml(response: _Response, *, what: str, key: str, backend: str) -> ET.Element:
    """The parsed body. A document type declaration (entity definitions) is refused: no listing has one."""
    if b"<!DOCTYPE" in response.body or b"<!ENTITY" in response.body:
        raise StorageError(
            f"{what} {key!r} on {backend}: the answer declares a DOCTYPE, refused", key=key, backend=backend
        )
    try:
        return ET.fromstring(response.body)
    except ET.ParseError as exc:
        raise StorageError(
            f"{what} {key!r} on {backend}: the answer is not valid XML ({exc})", key=key, backend=backend
        ) from None


def _local(tag: str) -> str:
    """An element's name without its XML namespace."""
    return tag.rpartition("}")[2]


def _child(element: ET.Element, name: str) -> ET.Element | None:
    return next((c for c in element if _local(c.tag) == name), None)


def _text(element: ET.Element, name: str) -> str | None:
    child = _child(element, name)
    return None if child is None else (child.text or "")


def _error_code(response: _Response) -> str | None:
    """The ``<Code>`` of an XML error body (S3, Azure), or Azure's ``x-ms-error-code`` header."""
    header = response.headers.get("x-ms-error-code")
    if header:
        return str(header)
    match = re.search(rb"<Code>([^<]{1,64})</Code>", response.body[:4096])
    return match.group(1).decode("ascii", "replace") if match else None


def _quoted(text: str, safe: str = "") -> str:
    """Percent-encoding of everything but the unreserved characters (and ``safe``), as AWS signs."""
    return urllib.parse.quote(text, safe=_UNRESERVED + safe)


def _query(params: list[tuple[str, str]]) -> str:
    return "&".join(f"{_quoted(k)}={_quoted(v)}" for k, v in sorted(params))


def _credential_result(provider: Callable[[], Any], *, key: str, backend: str) -> dict[str, Any]:
    """What a (sync or async) obstore credential provider returns. Its own failure is a
    PermissionDeniedError naming its type only (a provider's message may quote what it read); ours
    pass unchanged."""
    failure = ""
    try:
        result = provider()
        if inspect.isawaitable(result):
            result = asyncio.run(_awaited(result))
        return dict(result)
    except StorageError:
        raise
    except Exception as exc:
        failure = type(exc).__name__
    raise PermissionDeniedError(
        f"list {key!r} on {backend}: the store's credential provider gave no credentials ({failure})",
        key=key,
        backend=backend,
    )


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _fresh(expires_at: object) -> bool:
    if not isinstance(expires_at, datetime):
        return True
    when = expires_at if expires_at.tzinfo else expires_at.replace(tzinfo=UTC)
    return datetime.now(UTC) < when - _EXPIRY_MARGIN


# -- what both clients share ---------------------------------------------------------------------------------


class _Client:
    """What the S3 and the Azure client share: a PUT and a DELETE of one exact name, and the listing
    loop (one request per page over one session, each page parsed, empty continuing pages skipped).
    Each client says how a name becomes a request path, how a page is asked for and read, and how a
    request is sent (signed)."""

    _backend: str
    _transport: _Transport
    _max_page: int
    _put_headers: dict[str, str]

    def _object_path(self, name: str) -> str:
        raise NotImplementedError

    def _list_query(
        self, prefix: str, delimiter: str | None, page_size: int, cursor: str | None, start_after: str | None
    ) -> list[tuple[str, str]]:
        raise NotImplementedError

    def _page(self, root: ET.Element, prefix: str, start_after: str | None) -> tuple[RawPage, str | None]:
        raise NotImplementedError

    def _send(
        self,
        session: _Session,
        method: str,
        path: str,
        query: list[tuple[str, str]],
        body: bytes,
        extra: dict[str, str],
        *,
        what: str,
        key: str,
    ) -> _Response:
        raise NotImplementedError

    def _checked(self, response: _Response, *, what: str, key: str, missing_ok: bool = False) -> _Response:
        if response.status >= 300 and not (missing_ok and response.status == 404):
            raise _failure(response, _error_code(response), what=what, key=key, backend=self._backend)
        return response

    def put(self, path: str, data: bytes) -> None:
        with _Session(self._transport) as session:
            response = self._send(
                session,
                "PUT",
                self._object_path(path),
                [],
                bytes(data),
                self._put_headers,
                what="put",
                key=path,
            )
        self._checked(response, what="put", key=path)

    def delete(self, path: str) -> None:
        with _Session(self._transport) as session:
            response = self._send(
                session, "DELETE", self._object_path(path), [], b"", {}, what="delete", key=path
            )
        self._checked(response, what="delete", key=path, missing_ok=True)

    def pages(
        self,
        prefix: str,
        *,
        start_after: str | None = None,
        delimiter: str | None = None,
        page_size: int = 1000,
    ) -> Iterator[RawPage]:
        _check_page_size(page_size, self._max_page, prefix, self._backend)
        return self._pages(prefix, start_after, delimiter, page_size)

    def _pages(
        self, prefix: str, start_after: str | None, delimiter: str | None, page_size: int
    ) -> Iterator[RawPage]:
        cursor: str | None = None
        with _Session(self._transport) as session:
            while True:
                query = self._list_query(prefix, delimiter, page_size, cursor, start_after)
                response = self._send(session, "GET", "", query, b"", {}, what="list", key=prefix)
                self._checked(response, what="list", key=prefix)
                root = _xml(response, what="list", key=prefix, backend=self._backend)
                page, cursor = self._page(root, prefix, start_after)
                if page.entries or page.common_prefixes:
                    yield page
                if not cursor:
                    return


# -- S3 --------------------------------------------------------------------------------------------------

_S3_ALIASES = {
    "endpoint_url": "endpoint",
    "token": "session_token",
    "default_region": "default_region",
    "virtual_hosted_style_request": "virtual_hosted_style_request",
}


@dataclass(frozen=True)
class _S3Keys:
    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)
    expires_at: datetime | None = None


class _S3Client(_Client):
    """ListObjectsV2, PutObject and DeleteObject of one bucket, signed with AWS Signature V4."""

    _max_page = S3_MAX_PAGE
    _put_headers: dict[str, str] = {}

    def __init__(self, store: Any, backend: str) -> None:
        self._backend = backend
        settings = _settings(store, "AWS_", _S3_ALIASES)
        self._bucket = settings.get("bucket") or settings.get("bucket_name") or ""
        if not self._bucket:
            raise ConfigurationError(f"{backend}: the S3 store names no bucket")
        self._region = settings.get("region") or settings.get("default_region") or "us-east-1"
        virtual = _flag(settings.get("virtual_hosted_style_request", "false"))
        endpoint = settings.get("endpoint_url_s3") or settings.get("endpoint")
        if endpoint:
            # object_store's rule: a virtual-hosted endpoint already names the bucket.
            url = endpoint if virtual else f"{endpoint.rstrip('/')}/{self._quoted_bucket()}"
        elif virtual:
            url = f"https://{self._bucket}.s3.{self._region}.amazonaws.com"
        else:
            url = f"https://s3.{self._region}.amazonaws.com/{self._quoted_bucket()}"
        self._transport = _Transport.of(
            url, store, backend, allow_http=_flag(settings.get("allow_http", "false"))
        )
        self._unsigned = _flag(settings.get("skip_signature", "false"))
        self._requester_pays = _flag(settings.get("request_payer", "false"))
        static_id, static_secret = settings.get("access_key_id"), settings.get("secret_access_key")
        self._static = (
            _S3Keys(static_id, static_secret, settings.get("session_token") or None)
            if static_id and static_secret
            else None
        )
        self._provider: Callable[[], Any] | None = getattr(store, "credential_provider", None)
        self._cached: _S3Keys | None = None
        self._botocore: Any = None

    def __repr__(self) -> str:
        return f"<raw S3 lister of {self._bucket} at {self._transport.host} ({self._backend})>"

    def _quoted_bucket(self) -> str:
        return _quoted(self._bucket)

    # credentials

    def _keys(self, key: str) -> _S3Keys | None:
        """The keys that sign the next request (None: unsigned), as object_store picks them: the store's
        credential provider (asked again when what it gave expires), else static keys, else botocore's
        default chain."""
        if self._unsigned:
            return None
        if self._provider is not None:
            if self._cached is None or not _fresh(self._cached.expires_at):
                got = _credential_result(self._provider, key=key, backend=self._backend)
                self._cached = _S3Keys(
                    str(got["access_key_id"]),
                    str(got["secret_access_key"]),
                    str(got["token"]) if got.get("token") else None,
                    got.get("expires_at"),
                )
            return self._cached
        if self._static is not None:
            return self._static
        return self._chain(key)

    def _chain(self, key: str) -> _S3Keys:
        if self._botocore is None:
            try:
                import botocore.session
            except ImportError:
                raise self._no_credentials(key, "botocore is not installed") from None
            failure = ""
            try:
                self._botocore = botocore.session.Session().get_credentials()
            except Exception as exc:  # botocore's errors have no common root; only the type is shown
                failure = type(exc).__name__
            if failure or self._botocore is None:
                raise self._no_credentials(
                    key, f"botocore's chain found none{f' ({failure})' if failure else ''}"
                )
        failure = ""
        try:
            frozen = self._botocore.get_frozen_credentials()  # refreshes what expires
        except Exception as exc:  # as above: the type only, never botocore's message
            failure = type(exc).__name__
        if failure:
            raise PermissionDeniedError(
                f"list {key!r} on {self._backend}: botocore's chain gave no credentials ({failure})",
                key=key,
                backend=self._backend,
            )
        return _S3Keys(frozen.access_key, frozen.secret_key, frozen.token or None)

    def _no_credentials(self, key: str, why: str) -> UnsupportedOperationError:
        return UnsupportedOperationError(
            f"exact listing of {key!r} on {self._backend} needs S3 credentials the adapter can see (keys, "
            f"a credential provider or botocore's chain), and {why}: object_store's own chain (container, "
            "instance metadata) is not reachable from here",
            key=key,
            backend=self._backend,
        )

    # requests

    def _signed(
        self, method: str, path: str, query: list[tuple[str, str]], payload_hash: str, key: str
    ) -> Callable[[], dict[str, str]]:
        """The headers of one attempt, signed (AWS Signature V4) at the time of the attempt."""
        canonical_uri = self._transport.base_path + path  # already encoded once, as S3 signs
        canonical_query = _query(query)

        def headers() -> dict[str, str]:
            now = datetime.now(UTC)
            amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
            signed = {
                "host": self._transport.host,
                "x-amz-content-sha256": payload_hash,
                "x-amz-date": amz_date,
            }
            if self._requester_pays:
                signed["x-amz-request-payer"] = "requester"
            keys = self._keys(key)
            if keys is None:
                return signed
            if keys.session_token:
                signed["x-amz-security-token"] = keys.session_token
            names = ";".join(sorted(signed))
            canonical = "\n".join(
                [
                    method,
                    canonical_uri or "/",
                    canonical_query,
                    "".join(f"{name}:{signed[name].strip()}\n" for name in sorted(signed)),
                    names,
                    payload_hash,
                ]
            )
            scope = f"{day}/{self._region}/s3/aws4_request"
            to_sign = "\n".join(
                ["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
            )
            signing_key = f"AWS4{keys.secret_access_key}".encode()
            for part in (day, self._region, "s3", "aws4_request"):
                signing_key = hmac.new(signing_key, part.encode(), hashlib.sha256).digest()
            signature = hmac.new(signing_key, to_sign.encode(), hashlib.sha256).hexdigest()
            signed["authorization"] = (
                f"AWS4-HMAC-SHA256 Credential={keys.access_key_id}/{scope}, SignedHeaders={names}, "
                f"Signature={signature}"
            )
            return signed

        return headers

    def _send(
        self,
        session: _Session,
        method: str,
        path: str,
        query: list[tuple[str, str]],
        body: bytes,
        extra: dict[str, str],
        *,
        what: str,
        key: str,
    ) -> _Response:
        payload_hash = hashlib.sha256(body).hexdigest() if body else _EMPTY_SHA256
        headers = self._signed(method, path, query, payload_hash, key)  # S3 needs no extra header
        target = (self._transport.base_path + path or "/") + (f"?{_query(query)}" if query else "")
        return session.request(method, target, headers, body, what=what, key=key)

    def _object_path(self, name: str) -> str:
        # Every byte but the unreserved ones and "/" percent-encoded: "." and ".." segments and "//" go
        # to the server as they are, which S3 keeps as part of the key.
        return "/" + _quoted(name, "/")

    def _list_query(
        self, prefix: str, delimiter: str | None, page_size: int, cursor: str | None, start_after: str | None
    ) -> list[tuple[str, str]]:
        query = [("list-type", "2"), ("encoding-type", "url"), ("max-keys", str(page_size))]
        if prefix:
            query.append(("prefix", prefix))
        if delimiter:
            query.append(("delimiter", delimiter))
        if cursor is not None:
            query.append(("continuation-token", cursor))
        elif start_after is not None:
            query.append(("start-after", start_after))  # the server skips to it
        return query

    def _page(self, root: ET.Element, prefix: str, start_after: str | None) -> tuple[RawPage, str | None]:
        """One ListBucketResult: its page, and the continuation token when it is truncated (the server
        has skipped to ``start_after``)."""
        encoded = (_text(root, "EncodingType") or "").lower() == "url"
        # S3 encodes a name with encoding-type=url as a form does (a space as "+", a "+" as %2B).
        decode: Callable[[str], str] = _form_decoded if encoded else str
        entries: list[RawEntry] = []
        prefixes: list[str] = []
        for element in root:
            tag = _local(element.tag)
            if tag == "Contents":
                entries.append(
                    RawEntry(
                        path=decode(_text(element, "Key") or ""),
                        size=int(_text(element, "Size") or 0),
                        e_tag=_text(element, "ETag"),
                        last_modified=_iso_time(_text(element, "LastModified") or ""),
                    )
                )
            elif tag == "CommonPrefixes":
                prefixes.append(decode(_text(element, "Prefix") or ""))
        truncated = (_text(root, "IsTruncated") or "").strip().lower() == "true"
        token = _text(root, "NextContinuationToken") if truncated else None
        if truncated and not token:
            raise StorageError(
                f"list {prefix!r} on {self._backend}: the page is truncated and carries no continuation "
                "token",
                key=prefix,
                backend=self._backend,
            )
        return RawPage(entries, prefixes), token


def _form_decoded(text: str) -> str:
    return urllib.parse.unquote_plus(text, errors="strict")


def _iso_time(text: str) -> datetime:
    """S3's ``2024-01-02T03:04:05.678Z``, in UTC (a fraction beyond microseconds is cut off)."""
    text = text.strip()
    match = re.fullmatch(r"(.*?\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:?\d\d)?", text)
    if match is None:
        raise ValueError(f"not an ISO 8601 time: {text!r}")
    whole, fraction, zone = match.groups()
    fraction = f".{(fraction + '000000')[:6]}" if fraction else ""
    parsed = datetime.fromisoformat(f"{whole}{fraction}{'+00:00' if zone in (None, 'Z') else zone}")
    return parsed.astimezone(UTC)


def _check_page_size(page_size: int, most: int, prefix: str, backend: str) -> None:
    if not isinstance(page_size, int) or isinstance(page_size, bool) or not 1 <= page_size <= most:
        raise ConfigurationError(
            f"list {prefix!r} on {backend}: page_size must be an int from 1 to {most}",
            key=prefix,
            backend=backend,
        )


# -- Azure -----------------------------------------------------------------------------------------------

_AZURE_ALIASES = {
    "storage_account_name": "account_name",
    "storage_account_key": "account_key",
    "storage_access_key": "account_key",
    "storage_master_key": "account_key",
    "access_key": "account_key",
    "master_key": "account_key",
    "storage_sas_key": "sas_key",
    "storage_sas_token": "sas_key",
    "sas_token": "sas_key",
    "storage_token": "token",
    "bearer_token": "token",
    "storage_endpoint": "endpoint",
    "storage_use_emulator": "use_emulator",
    "container": "container_name",
}


@dataclass(frozen=True)
class _AzureAuth:
    kind: str  # "shared_key", "sas", "bearer" or "none"
    secret: str = field(default="", repr=False)  # the account key, the SAS query or the token
    expires_at: datetime | None = None


class _AzureClient(_Client):
    """List Blobs, Put Blob and Delete Blob of one container: SharedKey, SAS or a bearer token."""

    _max_page = AZURE_MAX_PAGE
    _put_headers = {"x-ms-blob-type": "BlockBlob"}

    def __init__(self, store: Any, backend: str) -> None:
        self._backend = backend
        settings = _settings(store, "AZURE_", _AZURE_ALIASES)
        self._container = settings.get("container_name") or ""
        if not self._container:
            raise ConfigurationError(f"{backend}: the Azure store names no container")
        emulator = _flag(settings.get("use_emulator", "false"))
        self._account = settings.get("account_name") or (_EMULATOR_ACCOUNT if emulator else "")
        endpoint = settings.get("endpoint")
        if not endpoint and emulator:
            base = os.environ.get("AZURITE_BLOB_STORAGE_URL") or _EMULATOR_URL
            endpoint = f"{base.rstrip('/')}/{self._account}"
        if not endpoint:
            if not self._account:
                raise ConfigurationError(f"{backend}: the Azure store names no account")
            domain = (
                "blob.fabric.microsoft.com"
                if _flag(settings.get("use_fabric_endpoint", ""))
                else "blob.core.windows.net"
            )
            endpoint = f"https://{self._account}.{domain}"
        url = f"{endpoint.rstrip('/')}/{urllib.parse.quote(self._container, safe='')}"
        self._transport = _Transport.of(url, store, backend, allow_http=emulator)
        self._settings_auth = self._from_settings(settings, emulator)
        self._provider: Callable[[], Any] | None = getattr(store, "credential_provider", None)
        self._cached: _AzureAuth | None = None

    def __repr__(self) -> str:
        return f"<raw Azure lister of {self._container} at {self._transport.host} ({self._backend})>"

    @staticmethod
    def _from_settings(settings: Mapping[str, str], emulator: bool) -> _AzureAuth | str:
        """The credential the settings give, in object_store's order, or the name of one this module
        cannot use."""
        if _flag(settings.get("skip_signature", "false")):
            return _AzureAuth("none")
        chosen = settings.get("credential_type")
        if chosen in (None, "bearer_token") and settings.get("token"):
            return _AzureAuth("bearer", settings["token"])
        if chosen in (None, "access_key") and settings.get("account_key"):
            return _AzureAuth("shared_key", settings["account_key"])
        if chosen in (None, "sas_token") and settings.get("sas_key"):
            return _AzureAuth("sas", settings["sas_key"].removeprefix("?"))
        if chosen is None and emulator:
            return _AzureAuth("shared_key", _EMULATOR_KEY)
        return chosen or "the default chain (managed identity, Azure CLI, workload identity)"

    def _auth(self, key: str) -> _AzureAuth:
        if self._provider is not None:  # object_store's order: a provider beats the settings
            if self._cached is None or not _fresh(self._cached.expires_at):
                got = _credential_result(self._provider, key=key, backend=self._backend)
                expires = got.get("expires_at")
                if got.get("token"):
                    self._cached = _AzureAuth("bearer", str(got["token"]), expires)
                elif got.get("access_key"):
                    self._cached = _AzureAuth("shared_key", str(got["access_key"]), expires)
                elif isinstance(got.get("sas_token"), str):
                    self._cached = _AzureAuth("sas", str(got["sas_token"]).removeprefix("?"), expires)
                elif got.get("sas_token"):
                    pairs = urllib.parse.urlencode(list(got["sas_token"]), quote_via=urllib.parse.quote)
                    self._cached = _AzureAuth("sas", pairs, expires)
                else:
                    raise self._unsupported(key, "a credential provider answering neither key, SAS nor token")
            return self._cached
        if isinstance(self._settings_auth, str):
            raise self._unsupported(key, f"credential {self._settings_auth}")
        return self._settings_auth

    def _unsupported(self, key: str, what: str) -> UnsupportedOperationError:
        return UnsupportedOperationError(
            f"exact listing of {key!r} on {self._backend} needs Azure credentials the adapter can see (an "
            f"account key, a SAS or a bearer token); the store is signed by {what}",
            key=key,
            backend=self._backend,
        )

    def _send(
        self,
        session: _Session,
        method: str,
        path: str,
        query: list[tuple[str, str]],
        body: bytes,
        extra: dict[str, str],
        *,
        what: str,
        key: str,
    ) -> _Response:
        auth = self._auth(key)
        encoded_path = self._transport.base_path + path
        params = urllib.parse.urlencode(query, quote_via=urllib.parse.quote) if query else ""
        if auth.kind == "sas":
            params = f"{params}&{auth.secret}" if params else auth.secret
        target = encoded_path + (f"?{params}" if params else "")

        def headers() -> dict[str, str]:
            fresh = self._auth(key)
            sent = {
                "x-ms-date": email.utils.formatdate(usegmt=True),
                "x-ms-version": AZURE_VERSION,
                **extra,
            }
            if body:
                sent["Content-Length"] = str(len(body))
            if fresh.kind == "bearer":
                sent["Authorization"] = f"Bearer {fresh.secret}"
            elif fresh.kind == "shared_key":
                sent["Authorization"] = self._shared_key(
                    fresh.secret, method, encoded_path, query, sent, body
                )
            return sent

        return session.request(method, target, headers, body, what=what, key=key)

    def _shared_key(
        self,
        account_key: str,
        method: str,
        encoded_path: str,
        query: list[tuple[str, str]],
        headers: Mapping[str, str],
        body: bytes,
    ) -> str:
        """The SharedKey authorization of one request (Azure Storage's string to sign, version 2015+)."""
        lowered = {k.lower(): v for k, v in headers.items()}
        canonical_headers = "".join(
            f"{name}:{lowered[name].strip()}\n" for name in sorted(lowered) if name.startswith("x-ms-")
        )
        grouped: dict[str, list[str]] = {}
        for name, value in query:
            grouped.setdefault(name.lower(), []).append(value)
        resource = f"/{self._account}{encoded_path}" + "".join(
            f"\n{name}:{','.join(sorted(values))}" for name, values in sorted(grouped.items())
        )
        to_sign = "\n".join(
            [
                method,
                lowered.get("content-encoding", ""),
                lowered.get("content-language", ""),
                str(len(body)) if body else "",
                lowered.get("content-md5", ""),
                lowered.get("content-type", ""),
                "",  # Date: x-ms-date is sent
                lowered.get("if-modified-since", ""),
                lowered.get("if-match", ""),
                lowered.get("if-none-match", ""),
                lowered.get("if-unmodified-since", ""),
                lowered.get("range", ""),
                canonical_headers + resource,
            ]
        )
        try:
            secret = base64.b64decode(account_key, validate=True)
        except ValueError:
            raise ConfigurationError(
                f"{self._backend}: the Azure account key is not base64", backend=self._backend
            ) from None
        signature = base64.b64encode(hmac.new(secret, to_sign.encode(), hashlib.sha256).digest()).decode()
        return f"SharedKey {self._account}:{signature}"

    def _object_path(self, name: str) -> str:
        return "/" + urllib.parse.quote(name, safe="/")

    def _list_query(
        self, prefix: str, delimiter: str | None, page_size: int, cursor: str | None, start_after: str | None
    ) -> list[tuple[str, str]]:
        query = [("restype", "container"), ("comp", "list"), ("maxresults", str(page_size))]
        if prefix:
            query.append(("prefix", prefix))
        if delimiter:
            query.append(("delimiter", delimiter))
        if cursor:
            query.append(("marker", cursor))
        return query

    def _page(self, root: ET.Element, prefix: str, start_after: str | None) -> tuple[RawPage, str | None]:
        """One EnumerationResults: its page from after ``start_after`` (Azure has no StartAfter), and
        the marker of the next one."""
        entries: list[RawEntry] = []
        prefixes: list[str] = []
        blobs = _child(root, "Blobs")
        for element in blobs if blobs is not None else ():
            tag = _local(element.tag)
            if tag == "Blob":
                properties = _child(element, "Properties")
                if properties is None:
                    properties = ET.Element("Properties")
                modified = _text(properties, "Last-Modified")
                entries.append(
                    RawEntry(
                        path=_blob_name(element),
                        size=int(_text(properties, "Content-Length") or 0),
                        e_tag=_text(properties, "Etag"),
                        last_modified=email.utils.parsedate_to_datetime(modified).astimezone(UTC)
                        if modified
                        else datetime.fromtimestamp(0, UTC),
                    )
                )
            elif tag == "BlobPrefix":
                prefixes.append(_blob_name(element))
        page = RawPage(entries, prefixes)
        return page if start_after is None else _after(page, start_after), _text(root, "NextMarker") or None


def _blob_name(element: ET.Element) -> str:
    """A Blob's or BlobPrefix's Name: percent-decoded where Azure encoded it (``Encoded="true"``: names
    with characters XML cannot carry)."""
    name = _child(element, "Name")
    if name is None:
        return ""
    text = name.text or ""
    if (name.get("Encoded") or "").lower() == "true":
        return urllib.parse.unquote(text, errors="strict")
    return text


def _after(page: RawPage, start_after: str) -> RawPage:
    """The page's names after ``start_after`` (Azure lists in key order and has no StartAfter): an entry
    after it, and a common prefix unless every name under it sorts before ``start_after`` (one that
    ``start_after`` lies inside may hold names after it, so it is kept)."""
    return RawPage(
        [entry for entry in page.entries if entry.path > start_after],
        [p for p in page.common_prefixes if p > start_after or start_after.startswith(p)],
    )
