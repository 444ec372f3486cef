"""The S3 credential chain (issue 20, item 4): with no keys given, requests are signed with what the
standard AWS sources provide (a named profile here, against a SeaweedFS that denies anonymous requests);
unsigned requests go out only when ``anonymous=True`` asks for them."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs

import pytest
from loopback_http import serving

from storage_adapter import ConfigurationError, StorageError, open_adapter
from storage_adapter.aws_profile import BotocoreCredentials
from storage_adapter.errors import PermissionDeniedError
from storage_adapter.servers.seaweedfs import S3Identity, SeaweedFS
from storage_adapter.servers.server import S3Endpoint

OWNER = S3Identity("PROFILEKEY", "profile-secret-value")


@pytest.fixture(scope="module")
def guarded() -> Iterator[S3Endpoint]:
    with SeaweedFS(identities=(OWNER,)) as endpoint:
        yield endpoint


@pytest.fixture
def aws_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An environment whose only AWS settings are shared files in ``tmp_path`` (empty until written)."""
    import os

    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    return tmp_path


def endpoint_only(endpoint: S3Endpoint) -> dict[str, object]:
    return {"endpoint": endpoint.endpoint, "allow_http": True, "max_retries": 0}


def round_trip(endpoint: S3Endpoint, prefix: str, **options: object) -> None:
    adapter = open_adapter(endpoint.url(prefix), **endpoint_only(endpoint), **options)
    adapter.write("k", b"signed")
    assert adapter.read_bytes("k") == b"signed"
    adapter.delete("k")


def test_a_named_profile_signs_requests(
    guarded: S3Endpoint, aws_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (aws_home / "credentials").write_text(
        f"[ci]\naws_access_key_id = {OWNER.access_key_id}\naws_secret_access_key = {OWNER.secret_access_key}\n"
    )
    monkeypatch.setenv("AWS_PROFILE", "ci")
    round_trip(guarded, "profile")


def test_a_profile_in_the_config_file_with_a_credential_process_signs_requests(
    guarded: S3Endpoint, aws_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A profile that is not static keys (here credential_process) is resolved by botocore."""
    answer = {"Version": 1, "AccessKeyId": OWNER.access_key_id, "SecretAccessKey": OWNER.secret_access_key}
    script = aws_home / "process.py"
    script.write_text(f"print({json.dumps(json.dumps(answer))})\n")
    (aws_home / "config").write_text(f"[profile proc]\ncredential_process = {sys.executable} {script}\n")
    round_trip(guarded, "process", profile="proc")


def test_the_default_profile_is_part_of_the_chain(guarded: S3Endpoint, aws_home: Path) -> None:
    (aws_home / "credentials").write_text(
        f"[default]\naws_access_key_id = {OWNER.access_key_id}\n"
        f"aws_secret_access_key = {OWNER.secret_access_key}\n"
    )
    round_trip(guarded, "default")


def test_unsigned_requests_only_when_asked(guarded: S3Endpoint, aws_home: Path) -> None:
    (aws_home / "credentials").write_text(
        f"[default]\naws_access_key_id = {OWNER.access_key_id}\n"
        f"aws_secret_access_key = {OWNER.secret_access_key}\n"
    )
    anonymous = open_adapter(guarded.url("anon"), **endpoint_only(guarded), anonymous=True)
    with pytest.raises(PermissionDeniedError):
        anonymous.write("k", b"unsigned")  # the server denies anonymous writes: this one went unsigned


def test_a_named_profile_that_does_not_exist_is_a_configuration_error(aws_home: Path) -> None:
    with pytest.raises(ConfigurationError, match="profile 'missing'") as info:
        open_adapter("s3://bucket", endpoint="http://127.0.0.1:9", allow_http=True, profile="missing")
    assert "s3://bucket" in str(info.value)


def store_of(adapter: object) -> object:
    return adapter._driver._store  # type: ignore[attr-defined]


def test_without_keys_or_profile_object_store_resolves_the_rest_of_the_chain(aws_home: Path) -> None:
    """Container and instance metadata are object_store's, read from the environment when the first
    request needs credentials: the store is built signed, with neither keys nor a provider of ours."""
    store = store_of(open_adapter("s3://bucket"))
    config = store.config  # type: ignore[attr-defined]
    assert config["skip_signature"] == "false" and "access_key_id" not in config  # obstore reports text
    assert store.credential_provider is None  # type: ignore[attr-defined]


def test_web_identity_comes_before_the_default_profile(
    aws_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (aws_home / "credentials").write_text("[default]\naws_access_key_id = A\naws_secret_access_key = B\n")
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(aws_home / "token"))
    monkeypatch.setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/test")
    store = store_of(open_adapter("s3://bucket"))
    assert "access_key_id" not in store.config  # type: ignore[attr-defined]
    assert isinstance(store.credential_provider, BotocoreCredentials)  # type: ignore[attr-defined]


def test_without_botocore_web_identity_is_object_stores_and_an_sts_endpoint_is_refused(
    aws_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "botocore" else real_find_spec(name, *a)
    )
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(aws_home / "token"))
    monkeypatch.setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/test")
    assert store_of(open_adapter("s3://bucket")).credential_provider is None  # type: ignore[attr-defined]
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:9")
    with pytest.raises(ConfigurationError, match="AWS_ENDPOINT_URL_STS"):
        open_adapter("s3://bucket")


def test_anonymous_from_the_environment_is_an_explicit_ask(
    aws_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SKIP_SIGNATURE", "true")
    assert store_of(open_adapter("s3://bucket")).config["skip_signature"] == "true"  # type: ignore[attr-defined]
    monkeypatch.delenv("AWS_SKIP_SIGNATURE")
    assert store_of(open_adapter("s3://bucket")).config["skip_signature"] == "false"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("credentials", "fragment"),
    [
        ("[ci]\naws_access_key_id = A\n", "needs aws_access_key_id and aws_secret_access_key"),
        ("[ci]\naws_access_key_id = A\naws_secret_access_key = Pl4nted\x01x\n", "control characters"),
        ("[ci\naws_secret_access_key = Pl4nted-in-a-broken-file\n", "is not valid INI"),
    ],
)
def test_a_broken_profile_is_a_configuration_error_that_quotes_no_value(
    aws_home: Path, credentials: str, fragment: str
) -> None:
    (aws_home / "credentials").write_text(credentials)
    with pytest.raises(ConfigurationError, match=fragment) as info:
        open_adapter("s3://bucket", profile="ci")
    assert "Pl4nted" not in str(info.value) and info.value.__context__ is None


class _StandInSts(BaseHTTPRequestHandler):
    """AssumeRoleWithWebIdentity on loopback: answers OWNER's keys to the token in ``TOKEN``, 403 otherwise.
    Records each call's token, so a test sees the chain really went through STS."""

    calls: list[str] = []

    def do_POST(self) -> None:
        form = parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
        token = form.get("WebIdentityToken", [""])[0]
        type(self).calls.append(token)
        if form.get("Action") != ["AssumeRoleWithWebIdentity"] or token != WEB_TOKEN:
            self.send_response(403)
            self.end_headers()
            return
        expires = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = (
            '<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
            "<AssumeRoleWithWebIdentityResult><Credentials>"
            f"<AccessKeyId>{OWNER.access_key_id}</AccessKeyId>"
            f"<SecretAccessKey>{OWNER.secret_access_key}</SecretAccessKey>"
            # No session token: the guarded SeaweedFS would look one up in its own STS, and it knows
            # only static identities. What is shown is the chain: token to STS, its keys sign.
            "<SessionToken></SessionToken>"
            f"<Expiration>{expires}</Expiration>"
            "</Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


WEB_TOKEN = "stand-in-oidc-token"


def test_web_identity_signs_requests(
    guarded: S3Endpoint, aws_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only web-identity settings in the environment (as on EKS or in GitHub OIDC jobs): the token is
    exchanged at STS (here a stand-in, named by ``AWS_ENDPOINT_URL_STS``) and the requests are signed
    with the keys it returns, against a server that denies every other identity."""
    (aws_home / "token").write_text(WEB_TOKEN)
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(aws_home / "token"))
    monkeypatch.setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/storage")
    _StandInSts.calls.clear()
    with serving(_StandInSts) as sts:
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sts)
        round_trip(guarded, "web-identity")
    assert _StandInSts.calls and set(_StandInSts.calls) == {WEB_TOKEN}


def test_a_web_identity_sts_refusal_is_a_typed_error_quoting_no_token(
    guarded: S3Endpoint, aws_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (aws_home / "token").write_text("Pl4nted-wrong-token")
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(aws_home / "token"))
    monkeypatch.setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/storage")
    with serving(_StandInSts) as sts:
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sts)
        with pytest.raises(StorageError) as info:
            round_trip(guarded, "web-identity-refused")
    assert "Pl4nted" not in str(info.value)


def test_the_s3_specific_endpoint_variable_wins_and_an_option_beats_both(
    aws_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:2")
    assert store_of(open_adapter("s3://bucket", anonymous=True)).config["endpoint"] == "http://127.0.0.1:2"  # type: ignore[attr-defined]
    explicit = open_adapter("s3://bucket", anonymous=True, endpoint="http://127.0.0.1:3")
    assert store_of(explicit).config["endpoint"] == "http://127.0.0.1:3"  # type: ignore[attr-defined]


class _NoSuchKey(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_an_endpoint_option_is_where_requests_go_whatever_the_environment_says(
    aws_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """object_store reads ``AWS_ENDPOINT_URL_S3`` itself and let it beat the endpoint it was given: the
    option must decide (here the variable names a closed port, the option a server answering 404)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    with serving(_NoSuchKey) as server:
        adapter = open_adapter("s3://bucket", endpoint=server, allow_http=True, anonymous=True, max_retries=0)
        assert adapter.read_if_exists("k") is None


def test_requests_go_through_the_proxy_option(aws_home: Path) -> None:
    """``proxy_url`` reaches object_store's client: the endpoint is a closed port, so the read can only
    be answered by the forward proxy (a stand-in answering 404 to every request it relays)."""
    with serving(_NoSuchKey) as proxy:
        adapter = open_adapter(
            "s3://bucket",
            endpoint="http://127.0.0.1:9",
            proxy_url=proxy,
            allow_http=True,
            anonymous=True,
            max_retries=0,
            pool_max_idle_per_host=4,
            pool_idle_timeout_s=30.0,
        )
        assert adapter.read_if_exists("k") is None
