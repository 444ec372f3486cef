"""Ceph RGW (``storage_adapter.servers.ceph``) characterised with raw obstore calls, not the contract suite.

The contract itself runs on Ceph in tests/test_check_servers.py (``check --server ceph``); this module
pins down the primitives the contract relies on: a plain round trip,
create-if-absent, and the known CAS deviation (docs/ceph.md). Tests that need the server skip with the
provider's one-line reason where the packages are not installed (scripts/install-ceph.sh) or it cannot
start; the others run everywhere.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import obstore
import pytest
from obstore.exceptions import AlreadyExistsError, PreconditionError
from obstore.store import S3Store

from storage_adapter.servers import ceph
from storage_adapter.servers.ceph import NOT_INSTALLED, CephRGW, ceph_conf
from storage_adapter.servers.registry import provider
from storage_adapter.servers.server import S3Endpoint, ServerUnavailable

# The nightly servers tier (docs/ci.md): a second real S3 server beside the embedded SeaweedFS.
pytestmark = pytest.mark.servers


@dataclass(frozen=True)
class Running:
    server: CephRGW
    endpoint: S3Endpoint
    store: S3Store


@pytest.fixture(scope="module")
def rgw() -> Iterator[Running]:
    """One Ceph RGW for the module (about 20 s to start); stopped, whatever happens, at module end."""
    server = CephRGW(bucket="characterise")
    try:
        endpoint = server.start()
    except ServerUnavailable as exc:
        pytest.skip(f"Ceph RGW cannot run here: {exc}")
    try:
        store = S3Store(
            endpoint.bucket,
            endpoint=endpoint.endpoint,
            access_key_id=endpoint.access_key_id,
            secret_access_key=endpoint.secret_access_key,
            region=endpoint.region,
            client_options={"allow_http": True},
        )
        yield Running(server, endpoint, store)
    finally:
        server.stop()


def _body(store: S3Store, key: str) -> bytes:
    return bytes(obstore.get(store, key).bytes())


# -- without a server -------------------------------------------------------------------------------------
def test_registered_as_ceph() -> None:
    assert provider("ceph") is CephRGW


def test_missing_packages_is_one_line_reason_naming_the_installer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("storage_adapter.servers.ceph.shutil.which", lambda name: None)
    server = CephRGW()
    with pytest.raises(ServerUnavailable) as raised:
        server.start()
    assert str(raised.value) == NOT_INSTALLED == "ceph packages not installed: run scripts/install-ceph.sh"
    with pytest.raises(ServerUnavailable, match=r"install-ceph\.sh"):
        server.version()


def test_conf_keeps_all_state_private_and_runs_without_cephx(tmp_path: Path) -> None:
    text = ceph_conf(tmp_path / "state", tmp_path / "logs", "fsid-1", 6789, 8080)
    settings = dict(
        (key.strip(), value.strip())
        for line in text.splitlines()
        if "=" in line and not line.startswith("#")
        for key, value in [line.split("=", 1)]
    )
    assert "/etc/ceph" not in text and "/var/lib/ceph" not in text
    for key in ("run dir", "admin socket", "pid file", "crash dir", "keyring", "mon data", "osd data"):
        assert settings[key].startswith(str(tmp_path / "state")), key
    assert settings["log file"].startswith(str(tmp_path / "logs"))
    assert all(settings[f"auth {role} required"] == "none" for role in ("cluster", "service", "client"))
    # Daemons default their monitor connections to `secure`, which needs cephx: all six must be crc.
    modes = [f"ms {mon}{role} mode" for mon in ("", "mon ") for role in ("cluster", "service", "client")]
    assert all(settings[mode] == "crc" for mode in modes)
    assert settings["osd objectstore"] == "memstore"
    assert settings["mon host"] == "v2:127.0.0.1:6789"
    assert settings["rgw frontends"] == "beast endpoint=127.0.0.1:8080"


# -- a failed start ---------------------------------------------------------------------------------------
class _Recording(CephRGW):
    """Keeps every daemon it started, so the test can see them all stopped after a failure."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spawned: list[subprocess.Popen[bytes]] = []

    def _spawn(self, name: str, args: list[str]) -> None:
        super()._spawn(name, args)
        self.spawned.append(self._daemons[-1].process)


def test_failed_start_leaves_nothing_running_and_names_its_log() -> None:
    try:
        ceph.ceph_binaries()
    except ServerUnavailable as exc:
        pytest.skip(str(exc))
    # Bootstrapping (the S3 user's pools alone) takes several seconds, so 3 s always runs out mid-way.
    server = _Recording(start_timeout_s=3.0)
    with pytest.raises(ServerUnavailable) as raised:
        server.start()
    try:
        reason = str(raised.value)
        assert "\n" not in reason
        assert server.log_dir is not None and str(server.log_dir) in reason
        assert server.spawned, "the monitor should have been started before the deadline"
        assert all(process.poll() is not None for process in server.spawned)
        assert server.log_dir.is_dir()  # kept for inspection after a failed start
    finally:
        if server.log_dir is not None:
            shutil.rmtree(server.log_dir, ignore_errors=True)


# -- the running server -----------------------------------------------------------------------------------
def test_reports_version_startup_time_and_memory(rgw: Running) -> None:
    version = rgw.server.version()
    assert version.startswith("ceph version "), version
    assert rgw.server.ready_s is not None and rgw.server.ready_s < rgw.server.start_timeout_s
    rss = rgw.server.daemon_rss()
    assert set(rss) == {"ceph-mon", "ceph-osd", "radosgw"}
    print(
        f"\n{version}; ready in {rgw.server.ready_s:.1f}s; RSS "
        + ", ".join(f"{name} {size / 2**20:.0f} MiB" for name, size in rss.items())
        + f"; total {sum(rss.values()) / 2**20:.0f} MiB"
    )


def test_put_get_round_trip(rgw: Running) -> None:
    result = obstore.put(rgw.store, "round-trip", b"hello ceph")
    assert _body(rgw.store, "round-trip") == b"hello ceph"
    assert obstore.head(rgw.store, "round-trip")["e_tag"] == result["e_tag"]


def test_if_none_match_second_create_loses(rgw: Running) -> None:
    obstore.put(rgw.store, "create-once", b"first", mode="create")
    with pytest.raises(AlreadyExistsError):
        obstore.put(rgw.store, "create-once", b"second", mode="create")
    assert _body(rgw.store, "create-once") == b"first"


def _pacific(rgw: Running) -> None:
    """Skip unless the server is 16.2.x, the release whose CAS deviation these tests pin down."""
    version = rgw.server.version()
    if not version.startswith("ceph version 16.2."):
        pytest.skip(f"the quoted If-Match deviation is recorded for 16.2.x, this is {version}")


def test_known_deviation_cas_with_the_current_quoted_etag_is_rejected(rgw: Running) -> None:
    """Ceph 16.2.x compares If-Match against the ETag without its quotes, so obstore's CAS (which sends
    the quoted ETag it was given, as S3 specifies) is answered 412 although the token is current."""
    _pacific(rgw)
    current = obstore.put(rgw.store, "cas", b"v1")["e_tag"]
    assert current is not None and current.startswith('"')
    assert obstore.head(rgw.store, "cas")["e_tag"] == current
    with pytest.raises(PreconditionError, match="412"):
        obstore.put(rgw.store, "cas", b"v2", mode={"e_tag": current})
    assert _body(rgw.store, "cas") == b"v1"


def test_cas_with_the_current_unquoted_etag_succeeds(rgw: Running) -> None:
    """The same CAS through a raw signed request with the quotes stripped is accepted (and a stale
    unquoted ETag is still rejected), which is what a compatibility mode would send."""
    _pacific(rgw)
    pytest.importorskip("boto3", reason="raw signed If-Match requests need boto3")
    from botocore.exceptions import ClientError

    client = rgw.endpoint.boto3_client()
    bucket = rgw.endpoint.bucket
    current = obstore.put(rgw.store, "cas-unquoted", b"v1")["e_tag"]
    assert current is not None
    with pytest.raises(ClientError) as quoted:
        client.put_object(Bucket=bucket, Key="cas-unquoted", Body=b"quoted", IfMatch=current)
    assert quoted.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    written = client.put_object(Bucket=bucket, Key="cas-unquoted", Body=b"v2", IfMatch=current.strip('"'))
    assert written["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert _body(rgw.store, "cas-unquoted") == b"v2"
    with pytest.raises(ClientError) as stale:
        client.put_object(Bucket=bucket, Key="cas-unquoted", Body=b"v3", IfMatch=current.strip('"'))
    assert stale.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert _body(rgw.store, "cas-unquoted") == b"v2"
