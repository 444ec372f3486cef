"""Parse a storage URL plus options into a frozen, comparable, picklable :class:`AdapterConfig`.

Supported URLs:

* ``file:///abs/root`` or a plain absolute path: a local directory (created if missing);
* ``s3://bucket`` or ``s3://bucket/prefix``: S3 or any S3-compatible server;
* ``memory://name`` or ``memory://name/prefix``: an in-process store, shared by name within a process.

S3 settings come from options or the usual environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``/``AWS_DEFAULT_REGION``,
``AWS_ALLOW_HTTP``), resolved once at open time so a pickled adapter reopens identically on a Spark
executor whose environment differs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from storage_adapter.errors import ConfigurationError, InvalidKeyError
from storage_adapter.keys import join_key, validate_prefix

SCHEMES = ("file", "s3", "memory")

# option name -> (type, environment variable or None)
_S3_OPTIONS: dict[str, tuple[type, str | None]] = {
    "endpoint": (str, "AWS_ENDPOINT_URL"),
    "access_key_id": (str, "AWS_ACCESS_KEY_ID"),
    "secret_access_key": (str, "AWS_SECRET_ACCESS_KEY"),
    "session_token": (str, "AWS_SESSION_TOKEN"),
    "region": (str, "AWS_REGION"),
    "allow_http": (bool, "AWS_ALLOW_HTTP"),
    "connect_timeout_s": (float, None),
    "request_timeout_s": (float, None),
    "max_retries": (int, None),
    "retry_timeout_s": (float, None),
}
_SECRET_OPTIONS = frozenset({"secret_access_key", "session_token"})
_SUPPORTED_OPTIONS: dict[str, dict[str, tuple[type, str | None]]] = {
    "local": {},
    "memory": {},
    "s3": _S3_OPTIONS,
}
# Bounded by default: an unreachable endpoint must fail in seconds, not after object_store's 3 minutes.
S3_DEFAULTS: dict[str, Any] = {
    "region": "us-east-1",
    "allow_http": False,
    "connect_timeout_s": 5.0,
    "request_timeout_s": 60.0,
    "max_retries": 3,
    "retry_timeout_s": 15.0,
}


@dataclass(frozen=True)
class AdapterConfig:
    """A resolved adapter configuration. Equal configs address the same objects.

    ``backend`` is ``local``, ``s3`` or ``memory``; ``location`` is the opened directory (created if
    missing), the bucket or the memory store's name; ``prefix`` is the key prefix inside it (set by
    ``child``: a child creates nothing until it writes). ``options`` holds resolved settings; secrets
    never appear in repr.
    """

    backend: str
    location: str
    prefix: str
    options: tuple[tuple[str, Any], ...] = field(default=())

    @property
    def url(self) -> str:
        scheme = {"local": "file", "s3": "s3", "memory": "memory"}[self.backend]
        location = self.location.rstrip("/") if self.backend == "local" else self.location
        return f"{scheme}://{location}" + (f"/{self.prefix}" if self.prefix else "")

    def option(self, name: str) -> Any:
        return dict(self.options).get(name)

    def public_options(self) -> dict[str, Any]:
        """Options with secrets masked: safe for repr, logs, reports and error messages."""
        return {k: ("***" if k in _SECRET_OPTIONS and v else v) for k, v in self.options}

    def child(self, prefix: str) -> AdapterConfig:
        """The config of an adapter rooted at ``prefix`` below this one."""
        sub = validate_prefix(prefix, self.backend)
        return AdapterConfig(self.backend, self.location, join_key(self.prefix, sub), self.options)

    def __repr__(self) -> str:
        return f"AdapterConfig(url={self.url!r}, options={self.public_options()!r})"


def _coerce(name: str, value: Any, kind: type, url: str) -> Any:
    if kind is bool and isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off", ""):
            return False
        raise ConfigurationError(f"option {name}={value!r} for {url} is not a boolean", key=url)
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ConfigurationError(
            f"option {name} for {url} must be {kind.__name__}, got {type(value).__name__}", key=url
        ) from None


def parse_url(url: str, options: dict[str, Any], environ: dict[str, str] | None = None) -> AdapterConfig:
    """Resolve ``url`` and ``options`` (falling back to ``environ``) into an :class:`AdapterConfig`.

    Raises :class:`ConfigurationError` naming the URL for an unknown scheme, a malformed URL, an
    unknown or ill-typed option; the message lists what is supported.
    """
    env = os.environ if environ is None else environ
    if not isinstance(url, str) or not url:
        raise ConfigurationError(f"storage URL must be a non-empty string, got {url!r}")
    if url.startswith("/"):
        url = "file://" + url
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ConfigurationError(
            f"unsupported storage URL {url!r}: scheme must be one of "
            + ", ".join(f"{s}://" for s in SCHEMES)
            + " (or an absolute path)",
            key=url,
        )
    if parts.query or parts.fragment:
        raise ConfigurationError(f"storage URL {url!r} must not have a query or fragment", key=url)
    backend = "local" if scheme == "file" else scheme
    supported = _SUPPORTED_OPTIONS[backend]
    unknown = sorted(set(options) - set(supported))
    if unknown:
        allowed = ", ".join(sorted(supported)) or "none"
        raise ConfigurationError(
            f"unknown option(s) {', '.join(unknown)} for {backend} URL {url!r}; supported: {allowed}",
            key=url,
        )
    path = unquote(parts.path)
    if backend == "local":
        if parts.netloc not in ("", "localhost"):
            raise ConfigurationError(f"file URL {url!r} must be file:///absolute/path", key=url)
        if not path.startswith("/"):
            raise ConfigurationError(f"file URL {url!r} must name an absolute path", key=url)
        root = os.path.normpath(path)
        return AdapterConfig("local", root, "", ())
    if not parts.netloc:
        what = "bucket" if backend == "s3" else "store name"
        raise ConfigurationError(f"{scheme} URL {url!r} needs a {what}: {scheme}://NAME/prefix", key=url)
    try:
        prefix = validate_prefix(path.lstrip("/"), backend)
    except InvalidKeyError as exc:
        raise ConfigurationError(f"storage URL {url!r} has an invalid prefix: {exc}", key=url) from exc
    resolved: dict[str, Any] = {}
    for name, (kind, env_name) in supported.items():
        if name in options:
            value = options[name]
        elif env_name is not None and env.get(env_name):
            value = env[env_name]
        elif name == "region" and env.get("AWS_DEFAULT_REGION"):
            value = env["AWS_DEFAULT_REGION"]
        elif name in S3_DEFAULTS:
            value = S3_DEFAULTS[name]
        else:
            continue
        resolved[name] = _coerce(name, value, kind, url)
    endpoint = resolved.get("endpoint")
    if endpoint is not None and not str(endpoint).startswith(("http://", "https://")):
        raise ConfigurationError(f"S3 endpoint {endpoint!r} for {url} must start with http:// or https://")
    return AdapterConfig(backend, parts.netloc, prefix, tuple(sorted(resolved.items())))
