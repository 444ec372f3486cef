"""Parse a storage URL plus options into a frozen, comparable, picklable :class:`AdapterConfig`.

The URL's scheme picks a registered :class:`~storage_adapter.registry.Backend` (built in: ``file://``
or a plain absolute path, ``s3://bucket/prefix``, ``memory://name/prefix``); the backend turns the rest
of the URL into a location and a key prefix and declares the options it takes. Options fall back to the
environment variables the backend names (for S3 the usual ``AWS_*``), resolved once at open time, so a
pickled adapter reopens identically on a Spark executor whose environment differs.

Credentials never travel in the URL: userinfo (``user:password@``) is refused for every scheme, and no
message quotes a secret option's value (:mod:`storage_adapter.redaction`).
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit

from storage_adapter.errors import ConfigurationError
from storage_adapter.keys import is_plain_text
from storage_adapter.redaction import MASK, Redactor, SecretText, reject_userinfo
from storage_adapter.registry import AdapterConfig, Option, backend_for_scheme, schemes

# A URL scheme (RFC 3986), lower-cased.
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")

__all__ = ["AdapterConfig", "parse_url", "reject_credentials_in_url", "resolve_options", "url_path"]


def url_path(parts: SplitResult, url: str) -> str:
    """The percent-decoded path of a split storage URL. Raises ConfigurationError when the escapes do not
    decode as UTF-8 (``unquote`` would silently turn them into U+FFFD)."""
    try:
        return unquote(parts.path, errors="strict")
    except UnicodeDecodeError:
        reason = "percent-escapes that are not UTF-8"
    # Raised outside the handler: the codec error adds nothing to the message.
    raise ConfigurationError(f"storage URL {url!r} has {reason}", key=url)


def _coerce(name: str, value: Any, option: Option, url: str) -> Any:
    """``value`` as the option's type. str options take str only, UTF-8 encodable and free of control
    characters; numbers must be finite and non-negative. The message never quotes a secret's value, and
    is raised outside any handler so that no chained exception quotes it either."""
    kind, shown = option.kind, MASK if option.secret else repr(value)
    if kind is bool and isinstance(value, str):
        lowered = value.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off", ""):
            return False
        reason = f"={shown} is not a boolean"
    elif kind is str:
        if not isinstance(value, str):
            reason = f" must be str, got {type(value).__name__}"
        elif not is_plain_text(value):
            reason = " must be UTF-8 text without control characters"
        else:
            return value
    else:
        converted = _convert(kind, value)
        if converted is None:
            reason = f" must be {kind.__name__}, got {type(value).__name__}"
        elif isinstance(converted, (int, float)) and not (math.isfinite(converted) and converted >= 0):
            reason = f"={shown} must be a finite, non-negative number"
        else:
            return converted
    raise ConfigurationError(f"option {name}{reason} for {url}", key=url)


def _convert(kind: type, value: Any) -> Any:
    """``kind(value)``, or None when it does not convert. Only a bool is a bool (and no number); a float
    is no int."""
    if isinstance(value, bool) or kind is bool:
        return value if isinstance(value, bool) and kind is bool else None
    if kind is int and isinstance(value, float):
        return None
    try:
        return kind(value)
    except (TypeError, ValueError, OverflowError):
        return None


def resolve_options(
    supported: Mapping[str, Option], given: Mapping[str, Any], env: Mapping[str, str], url: str
) -> dict[str, Any]:
    """Each supported option resolved by the one precedence rule of every backend:

    1. the option as given by the caller (``open_adapter`` keyword, Spark option; None counts as not given);
    2. the URL (it names the location and key prefix, which no option or variable can change);
    3. the option's first environment variable that is set, unless the caller gave another option of the
       same :attr:`~storage_adapter.registry.Option.group` (a group resolves from one source);
    4. the option's default (options with neither are left out).

    Each value is coerced to its type; a secret one's text is a
    :class:`~storage_adapter.redaction.SecretText` (masked in every repr)."""
    given_groups = {o.group for n, o in supported.items() if o.group and given.get(n) is not None}
    resolved: dict[str, Any] = {}
    for name, option in supported.items():
        if given.get(name) is not None:
            value = given[name]
        elif option.group in given_groups:
            value = option.default
        else:
            value = next((env[var] for var in option.env if env.get(var)), option.default)
        if value is not None:
            value = _coerce(name, value, option, url)
            resolved[name] = SecretText(value) if option.secret and isinstance(value, str) else value
    return resolved


def reject_credentials_in_url(url: str) -> None:
    """Raise ConfigurationError, quoting no credential, when ``url`` carries userinfo: any userinfo, except
    where the URL's backend says its userinfo names the location (``abfs://container@account...``), which
    must then hold no password."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    spec = backend_for_scheme(scheme) if _SCHEME.fullmatch(scheme) else None
    reject_userinfo(url, names_location=spec is not None and spec.userinfo_names_location)


def parse_url(
    url: str, options: Mapping[str, Any], environ: Mapping[str, str] | None = None
) -> AdapterConfig:
    """Resolve ``url`` and ``options`` (falling back to ``environ``) into an :class:`AdapterConfig`.

    Raises :class:`ConfigurationError` naming the URL for credentials in the URL (userinfo, refused
    first and never echoed), an unknown scheme, a malformed URL, an unknown or ill-typed option; the
    message lists what is supported and never quotes a secret option's value.
    """
    env = os.environ if environ is None else environ
    if not isinstance(url, str) or not url:
        raise ConfigurationError(f"storage URL must be a non-empty string, got {type(url).__name__}")
    if url.startswith("/"):
        url = "file://" + url
    reject_credentials_in_url(url)
    if not is_plain_text(url):
        # urlsplit silently drops tabs and newlines (WHATWG), so "file:///d/a\nb" would open /d/ab: a
        # URL with a control character or a lone surrogate names nothing that can be opened as written.
        raise ConfigurationError(
            f"storage URL {url!r} holds a control character or a lone surrogate", key=url
        )
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        reason = str(exc)  # e.g. "Invalid IPv6 URL"; raised below, outside this handler
    else:
        reason = ""
    if reason:
        raise ConfigurationError(f"malformed storage URL {url!r}: {reason}", key=url)
    spec = backend_for_scheme(parts.scheme.lower())
    if spec is None:
        raise ConfigurationError(
            f"unsupported storage URL {url!r}: scheme must be one of "
            + ", ".join(f"{s}://" for s in schemes())
            + " (or an absolute path)",
            key=url,
        )
    if parts.query or parts.fragment:
        raise ConfigurationError(f"storage URL {url!r} must not have a query or fragment", key=url)
    unknown = sorted(set(options) - set(spec.options))
    if unknown:
        allowed = ", ".join(sorted(spec.options)) or "none"
        raise ConfigurationError(
            f"unknown option(s) {', '.join(unknown)} for {spec.name} URL {url!r}; supported: {allowed}",
            key=url,
        )
    location, prefix = spec.locate(parts, url)
    named = dict(spec.url_options(parts, url)) if spec.url_options is not None else {}
    clash = sorted(name for name, value in named.items() if options.get(name) not in (None, value))
    if clash:
        raise ConfigurationError(
            f"option(s) {', '.join(clash)} for {url} differ from what the URL names", key=url
        )
    resolved = resolve_options(spec.options, {**options, **named}, env, url)
    if spec.check_options is not None:
        with Redactor(resolved[name] for name in spec.secret_options if name in resolved):
            spec.check_options(resolved, url)
    return AdapterConfig(spec.name, location, prefix, tuple(sorted(resolved.items())))
