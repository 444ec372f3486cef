"""moto as a peer server of the check (``--server moto``), and the check's own bucket creation and server
identification for user URLs, tested against it (pure Python: runs everywhere moto[server] is installed)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from rich.console import Console

from contract_tests import cli
from contract_tests.targets import Target
from storage_adapter import open_adapter
from storage_adapter.servers.moto import Moto
from storage_adapter.servers.registry import provider
from storage_adapter.servers.server import S3Endpoint

# The nightly servers tier (docs/ci.md): a second real S3 server beside the embedded SeaweedFS.
pytestmark = pytest.mark.servers


@pytest.fixture(scope="module")
def moto() -> Iterator[S3Endpoint]:
    with Moto(bucket="check") as endpoint:
        yield endpoint


def test_moto_is_a_registered_provider_with_a_real_version() -> None:
    assert provider("moto") is Moto
    assert Moto().version().startswith("moto 5.")


def test_moto_serves_conditional_writes(moto: S3Endpoint) -> None:
    adapter = open_adapter(moto.url(f"t-{uuid.uuid4().hex[:8]}"), **moto.adapter_options())
    token = adapter.write("k", b"v1")
    assert adapter.write_if_match("k", b"v2", token) is not None
    assert adapter.write_if_match("k", b"v3", token) is None
    assert adapter.write_if_absent("k", b"v4") is None
    created = adapter.write_if_absent("k2", b"v5")
    assert created == adapter.read_versioned("k2").token  # the create's ETag, usable in If-Match
    assert adapter.write_if_match("k2", b"v6", created) is not None


def test_create_bucket_and_server_version_for_a_user_url(
    moto: S3Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the bucket had to pre-exist, and versions.server said "user-supplied"."""
    for name, value in moto.environment().items():
        monkeypatch.setenv(name, value)
    bucket = f"fresh-{uuid.uuid4().hex[:8]}"
    target = Target("mine", f"s3://{bucket}/p")
    cli._create_buckets([target], Console(quiet=True))
    adapter = open_adapter(target.address)
    adapter.write("k", b"v")
    assert adapter.read_bytes("k") == b"v"
    ((name, version),) = cli._user_server_version([target])
    assert name == "server" and "user-supplied" in version and moto.endpoint in version
    assert not version.startswith("user-supplied")
