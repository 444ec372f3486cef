"""`storage-adapter check` against a SeaweedFS that enforces identities: missing credentials, a wrong
secret and a bucket the credentials may not write each give one clear line and exit 2, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest
from loopback_http import serving

from storage_adapter.servers.seaweedfs import S3Identity, SeaweedFS
from storage_adapter.servers.server import S3Endpoint

ADMIN = S3Identity("ADMINKEY", "admin-secret-value")
READER = S3Identity("READKEY", "reader-secret-value", actions=("Read:contract", "List:contract"))


@pytest.fixture(scope="module")
def guarded() -> Iterator[S3Endpoint]:
    with SeaweedFS(identities=(ADMIN, READER)) as endpoint:
        yield endpoint


def check(endpoint: S3Endpoint, **credentials: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ENDPOINT_URL=endpoint.endpoint, AWS_ALLOW_HTTP="true", AWS_REGION="us-east-1", **credentials
    )
    return subprocess.run(
        [sys.executable, "-m", "contract_tests", "check", f"guarded={endpoint.url('check')}", "--no-peers"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def one_clear_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    output = (result.stdout + result.stderr).strip()
    assert "Traceback" not in output
    errors = [line for line in output.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, output
    return errors[0]


def test_the_owner_passes_the_preflight(guarded: S3Endpoint) -> None:
    """Control: with the admin identity the same server is writable (the denials below are real)."""
    from storage_adapter import open_adapter

    adapter = open_adapter(guarded.url("control"), **guarded.adapter_options())
    adapter.write("k", b"v")
    assert adapter.read_bytes("k") == b"v"
    adapter.delete("k")


class _NoInstanceCredentials(BaseHTTPRequestHandler):
    """The instance metadata service of a machine that has no role: every request refused."""

    def _refuse(self) -> None:
        self.send_response(403)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_PUT = _refuse

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_missing_credentials(guarded: S3Endpoint) -> None:
    """No source of the chain configured: the last one, instance metadata, is asked (here a stand-in
    that refuses, so the outcome does not depend on what this machine's network does with 169.254.169.254)
    and the check names the missing credentials; nothing is sent unsigned."""
    with serving(_NoInstanceCredentials) as metadata:
        line = one_clear_line(check(guarded, AWS_METADATA_ENDPOINT=metadata))
    assert "PermissionDeniedError" in line and "no credentials" in line and "guarded" in line


def test_wrong_secret(guarded: S3Endpoint) -> None:
    line = one_clear_line(
        check(guarded, AWS_ACCESS_KEY_ID="ADMINKEY", AWS_SECRET_ACCESS_KEY="not-the-secret")
    )
    assert "PermissionDeniedError" in line and "admin-secret-value" not in line


def test_bucket_without_write_permission(guarded: S3Endpoint) -> None:
    line = one_clear_line(
        check(guarded, AWS_ACCESS_KEY_ID="READKEY", AWS_SECRET_ACCESS_KEY="reader-secret-value")
    )
    assert "PermissionDeniedError" in line and "permissions" in line
    assert "reader-secret-value" not in line


def test_a_failed_start_leaves_no_server_running() -> None:
    """Credentials the server does not know make readiness fail: start() raises naming the log, and
    stops what it started even without a `with` block."""
    from storage_adapter.servers.server import ServerUnavailable

    server = SeaweedFS(identities=(READER,), start_timeout_s=5)  # READER may not write: never ready
    with pytest.raises(ServerUnavailable, match="server log"):
        server.start()
    assert server._process is None and server._workdir is None
