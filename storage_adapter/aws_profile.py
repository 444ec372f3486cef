"""AWS shared-file profiles: the one source of the standard AWS credential chain object_store lacks.

With no keys given, an S3 store is signed with what the standard chain finds, in this order:

1. keys in the options or ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``;
2. the profile named by the ``profile`` option or ``AWS_PROFILE`` (``AWS_DEFAULT_PROFILE``): it must
   exist, or opening fails;
3. web identity (``AWS_WEB_IDENTITY_TOKEN_FILE`` with ``AWS_ROLE_ARN``);
4. the ``default`` profile, when the shared files have one;
5. ECS container credentials, then EC2 instance metadata.

object_store resolves 1, 3 and 5 itself; this module resolves the profiles (2 and 4) from
``AWS_SHARED_CREDENTIALS_FILE`` (``~/.aws/credentials``) and ``AWS_CONFIG_FILE`` (``~/.aws/config``),
read when a store is built. A profile of static keys needs nothing beyond the standard library; any other
profile (an assumed role, SSO, ``credential_process``, web identity) is resolved by botocore
(``pip install storage-adapter[aws]``), which also refreshes what expires.

No message quotes a value read from these files: they hold secrets.
"""

from __future__ import annotations

import configparser
import importlib.util
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from storage_adapter.errors import ConfigurationError, PermissionDeniedError
from storage_adapter.keys import is_plain_text

# Settings that make a profile more than static keys: botocore must resolve it.
_RESOLVED_BY_BOTOCORE = (
    "role_arn",
    "credential_process",
    "credential_source",
    "source_profile",
    "sso_session",
    "sso_start_url",
    "web_identity_token_file",
)
# How long obstore may reuse what botocore returned before asking again: botocore itself refreshes
# temporary credentials well before they expire, so asking often costs a dictionary read.
_REUSE = timedelta(minutes=5)


@dataclass(frozen=True)
class StaticKeys:
    """A profile's static keys. ``repr`` shows the access key id only."""

    access_key_id: str
    secret_access_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)


class BotocoreCredentials:
    """An obstore S3 credential provider over botocore's resolution of one profile (assumed roles, SSO,
    ``credential_process``, web identity) or, with ``profile`` None, of web identity from the environment:
    each call returns botocore's current credentials, to be reused for a few minutes."""

    def __init__(self, profile: str | None, url: str) -> None:
        self._source = "AWS web identity" if profile is None else f"AWS profile {profile!r}"
        self._url = url
        try:
            import botocore.session
        except ImportError:
            botocore_missing = True
        else:
            botocore_missing = False
        if botocore_missing:
            raise ConfigurationError(
                f"{self._source} for {url} is not static keys: resolving it needs botocore "
                "(pip install storage-adapter[aws])",
                key=url,
            )
        failure = ""
        try:
            self._credentials = botocore.session.Session(profile=profile).get_credentials()
        except Exception as exc:  # botocore's errors have no common root; only the type is shown
            failure = type(exc).__name__
        if failure or self._credentials is None:
            # Raised outside the handler: botocore's message may quote the profile's settings.
            raise ConfigurationError(
                f"{self._source} for {url} gave no credentials{f' ({failure})' if failure else ''}",
                key=url,
            )

    def __call__(self) -> dict[str, Any]:
        failure = ""
        try:
            # Temporary credentials (web identity, assumed roles) are fetched here, on first use.
            frozen = self._credentials.get_frozen_credentials()
        except Exception as exc:  # as above: the type only, never botocore's message
            failure = type(exc).__name__
        if failure:
            raise PermissionDeniedError(
                f"{self._source} for {self._url} gave no credentials ({failure})", key=self._url
            )
        return {
            "access_key_id": frozen.access_key,
            "secret_access_key": frozen.secret_key,
            "token": frozen.token or None,  # an empty token must not become an empty header
            "expires_at": datetime.now(UTC) + _REUSE,
        }


def _sections(environ: Mapping[str, str], url: str) -> tuple[dict[str, dict[str, str]], str]:
    """Every profile of the shared files (credentials-file settings win), and the files' names."""
    files = (
        (Path(environ.get("AWS_CONFIG_FILE") or "~/.aws/config").expanduser(), True),
        (Path(environ.get("AWS_SHARED_CREDENTIALS_FILE") or "~/.aws/credentials").expanduser(), False),
    )
    profiles: dict[str, dict[str, str]] = {}
    for path, is_config in files:
        parser = configparser.RawConfigParser(default_section="\x00none")
        try:
            parser.read(path, encoding="utf-8")
        except (configparser.Error, UnicodeDecodeError):
            unreadable = str(path)
        else:
            unreadable = ""
        if unreadable:
            # Raised outside the handler: configparser's message quotes the offending line.
            raise ConfigurationError(f"AWS shared file {unreadable} for {url} is not valid INI", key=url)
        for section in parser.sections():
            name = section.removeprefix("profile ").strip() if is_config else section.strip()
            profiles.setdefault(name, {}).update(parser.items(section))
    return profiles, " and ".join(str(path) for path, _ in files)


def _web_identity(env: Mapping[str, str], url: str) -> BotocoreCredentials | None:
    """Web identity: botocore's when installed (it honours ``AWS_ENDPOINT_URL_STS`` and regional STS
    endpoints, and refreshes the role's credentials), else object_store's (global
    ``https://sts.{region}.amazonaws.com`` only). An STS endpoint set without botocore is refused rather
    than silently ignored."""
    if importlib.util.find_spec("botocore") is not None:
        return BotocoreCredentials(None, url)
    if env.get("AWS_ENDPOINT_URL_STS"):
        raise ConfigurationError(
            f"AWS_ENDPOINT_URL_STS is set for {url}, but only botocore honours it for web identity "
            "(pip install storage-adapter[aws])",
            key=url,
        )
    return None


def profile_source(
    named: str | None, url: str, environ: Mapping[str, str] | None = None
) -> StaticKeys | BotocoreCredentials | None:
    """What signs a store opened without keys, from the shared files: the ``named`` profile (it must
    exist), else the ``default`` profile unless web identity is configured (it comes first); None when
    object_store's own chain (web identity, container, instance metadata) is to resolve it. Raises
    ConfigurationError naming the profile and ``url``, never a value."""
    env = os.environ if environ is None else environ
    if named is None and env.get("AWS_WEB_IDENTITY_TOKEN_FILE"):
        return _web_identity(env, url)
    profiles, files = _sections(env, url)
    name = named or "default"
    settings = profiles.get(name)
    if settings is None:
        if named is None:
            return None
        raise ConfigurationError(f"AWS profile {named!r} for {url} is not in {files}", key=url)
    if any(setting in settings for setting in _RESOLVED_BY_BOTOCORE):
        return BotocoreCredentials(name, url)
    key_id, secret = settings.get("aws_access_key_id"), settings.get("aws_secret_access_key")
    token = settings.get("aws_session_token") or None
    if not key_id or not secret:
        raise ConfigurationError(
            f"AWS profile {name!r} for {url} needs aws_access_key_id and aws_secret_access_key", key=url
        )
    if not all(is_plain_text(value) for value in (key_id, secret, token or "")):
        # object_store would panic on a header value with a control character.
        raise ConfigurationError(
            f"AWS profile {name!r} for {url} has keys with control characters or non-UTF-8 text", key=url
        )
    return StaticKeys(key_id, secret, token)
