"""The S3 wire of a contract target: raw SigV4-signed requests to the server its adapter talks to.

Most clauses judge the adapter through its API. A few judge the server itself, on requests the adapter
never sends but whose answers the contract's reasoning depends on (a conditional request with an ETag
where a server may compare it literally, or ignore it): :mod:`contract_tests.wire_clauses`. They need the
bytes on the wire, so :func:`open_wire` resolves what the adapter resolves for the same URL and options
(:func:`storage_adapter.config.parse_url`: endpoint, bucket, key prefix, region, addressing style,
credentials, TLS and proxy settings, request timeout) and :meth:`S3Wire.send` signs each request with
botocore's ``S3SigV4Auth`` and sends it with ``urllib``, answering whatever status the server answers.

Credentials never appear in anything this module shows: they live in a field excluded from ``repr``,
and messages name the method, the key and the reason only.
"""

from __future__ import annotations

import re
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

from storage_adapter.builtin_backends import S3
from storage_adapter.config import parse_url
from storage_adapter.errors import BackendUnavailableError

# The error code of an S3 error body (<Error><Code>NotImplemented</Code>...).
_ERROR_CODE = re.compile(rb"<Code>([^<]*)</Code>")


class WireUnavailable(Exception):
    """The target has no S3 wire these requests can use (not an S3 target, botocore not installed, no
    credentials found); the message says which, in one line."""


@dataclass(frozen=True)
class WireResponse:
    """What the server answered: the HTTP status, the ``ETag`` header as sent (quotes included; None
    without one) and the body (an object's bytes, or an S3 error document)."""

    status: int
    etag: str | None
    body: bytes

    @property
    def error_code(self) -> str | None:
        """The ``<Code>`` of an S3 error body (``PreconditionFailed``, ``NotImplemented``), or None."""
        if self.status < 300:
            return None
        found = _ERROR_CODE.search(self.body)
        return found.group(1).decode("utf-8", "replace") if found else None

    def line(self) -> str:
        """The status with its error code, for evidence: ``412 PreconditionFailed``, ``204``."""
        code = self.error_code
        return f"{self.status} {code}" if code else str(self.status)


@dataclass(frozen=True)
class S3Wire:
    """Signed raw requests to the objects under one S3 prefix. ``bucket_url`` is the bucket's HTTP(S)
    address (path-style ``endpoint/bucket``, or the endpoint itself in virtual-hosted style, as object_store
    takes it); ``prefix`` the adapter's key prefix; ``credentials`` botocore's, or None for unsigned
    (``anonymous``) requests. ``repr`` shows no credential."""

    url: str
    bucket_url: str
    prefix: str
    region: str
    timeout_s: float
    verify_tls: bool = True
    proxy_url: str | None = None
    proxy_excludes: str | None = None
    credentials: Any = field(default=None, repr=False, compare=False)

    def key(self, key: str) -> str:
        """``key`` (relative to the adapter's root) as the server names it: below the prefix."""
        return f"{self.prefix}/{key}" if self.prefix else key

    def send(
        self, method: str, key: str, headers: Mapping[str, str] | None = None, body: bytes = b""
    ) -> WireResponse:
        """One signed ``method`` request for ``key`` with ``headers`` and ``body``: the server's answer,
        whatever its status. Raises BackendUnavailableError when no answer came (connection refused or
        reset, no answer within ``timeout_s``): the outcome of a mutation is then unknown."""
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest

        url = f"{self.bucket_url}/{quote(self.key(key), safe='/~')}"
        sent = (
            {"Content-Type": "application/octet-stream", **(headers or {})} if body else dict(headers or {})
        )
        request = AWSRequest(method=method, url=url, data=body, headers=sent)
        if self.credentials is not None:
            S3SigV4Auth(self.credentials, "s3", self.region).add_auth(request)
        prepared = request.prepare()
        raw = urllib.request.Request(url, data=body or None, headers=dict(prepared.headers), method=method)
        try:
            with self._opener().open(raw, timeout=self.timeout_s) as answer:
                return WireResponse(answer.status, answer.headers.get("ETag"), answer.read())
        except urllib.error.HTTPError as answer:
            with answer:
                return WireResponse(answer.code, answer.headers.get("ETag"), answer.read())
        except (urllib.error.URLError, OSError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            timed_out = isinstance(reason, (TimeoutError, socket.timeout))
            why = f"no answer within {self.timeout_s:g} s" if timed_out else f"no answer: {reason}"
            raise BackendUnavailableError(
                f"{method} {self.key(key)} to {self.url}: {why}", key=key, backend="s3"
            ) from None

    def _opener(self) -> urllib.request.OpenerDirector:
        """urllib with the adapter's TLS and proxy settings. Without a ``proxy_url`` urllib takes the
        environment's proxies (``HTTPS_PROXY``, ``NO_PROXY``), as the adapter's HTTP client does."""
        handlers: list[urllib.request.BaseHandler] = []
        if not self.verify_tls:
            context = ssl.create_default_context()
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
            handlers.append(urllib.request.HTTPSHandler(context=context))
        if self.proxy_url is not None:
            host = urlsplit(self.bucket_url).hostname or ""
            # proxy_excludes read by urllib's own NO_PROXY rule (the function has no typeshed stub).
            bypass = self.proxy_excludes and urllib.request.proxy_bypass_environment(  # type: ignore[attr-defined]
                host, {"no": self.proxy_excludes}
            )
            through = {} if bypass else {"http": self.proxy_url, "https": self.proxy_url}
            handlers.append(urllib.request.ProxyHandler(through))
        return urllib.request.build_opener(*handlers)


def open_wire(url: str, options: Mapping[str, Any]) -> S3Wire:
    """The S3 wire of an adapter opened at ``url`` with ``options``, resolved as ``open_adapter`` resolves
    them (:func:`~storage_adapter.config.parse_url`: the options, then the environment). Raises
    WireUnavailable for a URL of another backend than S3, without botocore, or when no credentials are
    found for a signed target; ConfigurationError as ``open_adapter`` would."""
    config = parse_url(url, options)
    if config.spec is not S3:
        raise WireUnavailable(f"not an S3 target ({config.spec.name}): no S3 wire to judge")
    try:
        import botocore.credentials
        import botocore.session
    except ImportError:
        raise WireUnavailable("raw S3 requests need botocore (pip install 'storage-adapter[aws]')") from None
    opts = dict(config.options)
    if opts["anonymous"]:
        credentials = None
    elif opts.get("access_key_id"):
        credentials = botocore.credentials.Credentials(
            opts["access_key_id"], opts["secret_access_key"], opts.get("session_token")
        )
    else:  # the standard chain, as the adapter's: the named profile, web identity, container, instance
        credentials = botocore.session.Session(profile=opts.get("profile")).get_credentials()
        if credentials is None:
            raise WireUnavailable(f"no AWS credentials found for {config.url}")
    endpoint, virtual = opts.get("endpoint"), bool(opts["virtual_hosted_style"])
    bucket, region = config.location, opts["region"]
    if endpoint:  # in virtual-hosted style the endpoint already names the bucket (object_store's rule)
        bucket_url = endpoint.rstrip("/") if virtual else f"{endpoint.rstrip('/')}/{bucket}"
    else:
        host = f"{bucket}.s3.{region}" if virtual else f"s3.{region}"
        bucket_url = f"https://{host}.amazonaws.com" + ("" if virtual else f"/{bucket}")
    return S3Wire(
        url=config.url,
        bucket_url=bucket_url,
        prefix=config.prefix,
        region=region,
        timeout_s=float(opts["request_timeout_s"]),
        verify_tls=not opts["allow_invalid_certificates"],
        proxy_url=opts.get("proxy_url"),
        proxy_excludes=opts.get("proxy_excludes"),
        credentials=credentials,
    )


__all__ = ["S3Wire", "WireResponse", "WireUnavailable", "open_wire"]
