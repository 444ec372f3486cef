"""MinIO and RustFS providers without Docker: their container configuration, the registry, and the path
taken when no Docker engine answers (one clear reason, quickly; a skip in the plugin, never a pass).

Every test here forces "no engine" itself (DOCKER_HOST at a socket that does not exist, or at a listener
that never answers), so they behave the same on a runner that does have Docker.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from contract_tests import cli
from contract_tests.cli import InputError
from contract_tests.targets import Target
from storage_adapter import open_adapter
from storage_adapter.errors import ConfigurationError
from storage_adapter.servers.containers import (
    MINIO_IMAGE,
    RUSTFS_IMAGE,
    S3_CONTAINER_PORT,
    ContainerS3Server,
    MinIO,
    RustFS,
    create_bucket,
    docker_engine_problem,
)
from storage_adapter.servers.registry import PROVIDERS, needs_docker, provider, provider_names
from storage_adapter.servers.seaweedfs import SeaweedFS
from storage_adapter.servers.server import ServerStartFailed, ServerUnavailable, free_port

PINNED = re.compile(r"^[a-z0-9]+(?:[._/-][a-z0-9]+)*:(?P<tag>[A-Za-z0-9][A-Za-z0-9._-]*)$")
FLOATING_TAGS = {"latest", "stable", "edge", "main", "nightly"}


@pytest.fixture
def no_docker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """DOCKER_HOST at a unix socket path that does not exist."""
    host = f"unix://{tmp_path}/no-docker.sock"
    monkeypatch.setenv("DOCKER_HOST", host)
    monkeypatch.delenv("TESTCONTAINERS_HOST_OVERRIDE", raising=False)
    return host


@pytest.fixture
def silent_docker(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """DOCKER_HOST at a TCP listener that accepts connections and never answers (a hung engine)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        host = f"tcp://127.0.0.1:{listener.getsockname()[1]}"
        monkeypatch.setenv("DOCKER_HOST", host)
        yield host


# -- container configuration ------------------------------------------------------------------------------
@pytest.mark.parametrize("image", [MINIO_IMAGE, RUSTFS_IMAGE])
def test_images_are_pinned_to_exact_tags(image: str) -> None:
    match = PINNED.match(image)
    assert match, image
    assert match["tag"] not in FLOATING_TAGS


def test_minio_tag_has_conditional_writes_and_the_missing_key_if_match_fix() -> None:
    """If-None-Match/If-Match on PUT are in every 2024-11+ release; If-Match on a missing key stopped
    creating the object with minio/minio#21550, merged 2025-08-29."""
    tag = MINIO_IMAGE.split(":", 1)[1]
    released = datetime.strptime(tag, "RELEASE.%Y-%m-%dT%H-%M-%SZ")
    assert released >= datetime(2025, 8, 29)


def test_rustfs_tag_is_a_release_candidate_or_later() -> None:
    """Conditional PutObject arrived in the 1.0.0 alphas (rustfs#406, fixed by rustfs#1034); pin 1.0 rc+."""
    tag = RUSTFS_IMAGE.split(":", 1)[1]
    assert re.fullmatch(r"1\.\d+\.\d+(-rc\.\d+)?", tag), tag


def test_minio_container_spec() -> None:
    server = MinIO()
    spec = server.container_spec()
    assert spec.image == MINIO_IMAGE
    assert spec.command == ("server", "/data", "--address", f":{S3_CONTAINER_PORT}")
    env = dict(spec.environment)
    assert env["MINIO_ROOT_USER"] == server.access_key_id
    assert env["MINIO_ROOT_PASSWORD"] == server.secret_access_key
    assert len(server.secret_access_key) >= 8  # MinIO refuses shorter root passwords
    assert spec.testcontainer_arguments() == {
        "image": MINIO_IMAGE,
        "command": ["server", "/data", "--address", ":9000"],
        "env": env,
        "ports": [9000],
    }


def test_rustfs_container_spec() -> None:
    server = RustFS()
    spec = server.container_spec()
    assert spec.image == RUSTFS_IMAGE
    assert spec.command == ("/data",)  # the image's entrypoint runs `rustfs /data`
    env = dict(spec.environment)
    assert env["RUSTFS_ACCESS_KEY"] == server.access_key_id
    assert env["RUSTFS_SECRET_KEY"] == server.secret_access_key
    assert env["RUSTFS_VOLUMES"] == "/data"
    assert env["RUSTFS_ADDRESS"] == f":{S3_CONTAINER_PORT}"
    assert spec.testcontainer_arguments()["ports"] == [S3_CONTAINER_PORT]


def test_each_server_gets_its_own_credentials_and_repr_hides_them() -> None:
    first, second = MinIO(), MinIO()
    assert first.secret_access_key != second.secret_access_key
    assert first.secret_access_key not in repr(first.container_spec())


def test_image_override_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORAGE_ADAPTER_RUSTFS_IMAGE", "registry.example/rustfs:9.9.9")
    assert RustFS.image_variable() == "STORAGE_ADAPTER_RUSTFS_IMAGE"
    assert RustFS().container_spec().image == "registry.example/rustfs:9.9.9"
    assert RustFS(image="rustfs/rustfs:1.0.0").image == "rustfs/rustfs:1.0.0"
    assert MinIO().image == MINIO_IMAGE


# -- registry ---------------------------------------------------------------------------------------------
def test_registry_names_every_provider() -> None:
    assert provider_names() == ("seaweedfs", "minio", "rustfs", "ceph", "moto", "azurite")
    assert provider("seaweedfs") is SeaweedFS
    assert provider("minio") is MinIO
    assert provider("rustfs") is RustFS
    assert all(cls.name == name for name, cls in PROVIDERS.items())
    assert [n for n in provider_names() if needs_docker(n)] == ["minio", "rustfs"]
    assert all(issubclass(provider(n), ContainerS3Server) for n in ("minio", "rustfs"))


def test_registry_rejects_unknown_names_listing_the_choices() -> None:
    with pytest.raises(ConfigurationError, match=r"'no-such-server'.*seaweedfs, minio, rustfs, ceph"):
        provider("no-such-server")


# -- no Docker engine -------------------------------------------------------------------------------------
@pytest.mark.parametrize("server_class", [MinIO, RustFS])
def test_start_without_docker_raises_one_clear_reason(no_docker: str, server_class: type) -> None:
    with pytest.raises(ServerUnavailable) as raised, server_class():
        pytest.fail("must not start without Docker")
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"{server_class.name} needs Docker: no Docker engine reachable at {no_docker}")


@pytest.mark.timeout(60)
def test_a_silent_engine_is_reported_within_the_probe_timeout(silent_docker: str) -> None:
    """An engine that accepts the connection and never answers must not hang the caller."""
    problem = docker_engine_problem(timeout_s=0.5)
    assert problem is not None
    assert problem.startswith(f"no Docker engine reachable at {silent_docker}")


def test_plugin_skips_container_targets_without_docker_never_passes(no_docker: str, tmp_path: Path) -> None:
    """``pytest --pyargs contract_tests --storage-embedded minio``: every clause skips with the reason."""
    env = {**_clean_environment(), "DOCKER_HOST": no_docker}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--pyargs",
            "contract_tests",
            "--storage-embedded",
            "minio,rustfs",
            "-p",
            "no:cacheprovider",
            "-q",
            "-rs",
            "-k",
            "round_trip_bytes or cas_fresh_token_wins",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert re.search(r"^4 skipped, \d+ deselected in ", output, re.MULTILINE), output
    assert "passed" not in output
    for name in ("minio", "rustfs"):
        assert f"{name} needs Docker: no Docker engine reachable at {no_docker}" in output


def _clean_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "PYTEST_"))}


# -- bucket creation, against a real S3 server ------------------------------------------------------------
def test_create_bucket_makes_a_usable_bucket_and_is_idempotent(embedded_seaweedfs: Any) -> None:
    """The providers' bucket step (boto3) against the embedded SeaweedFS: a new bucket the adapter can
    use, and a second call on the same bucket succeeds."""
    bucket = f"created-{uuid.uuid4().hex[:8]}"
    endpoint = dataclasses.replace(embedded_seaweedfs, bucket=bucket)
    deadline = time.monotonic() + 60
    create_bucket(endpoint, deadline, lambda: True)
    create_bucket(endpoint, deadline, lambda: True)
    adapter = open_adapter(endpoint.url(), **endpoint.adapter_options())
    assert adapter.write_if_absent("probe", b"ok") is not None
    assert adapter.read_bytes("probe") == b"ok"
    adapter.delete("probe")


def test_check_create_bucket_asks_the_registered_backend(
    embedded_seaweedfs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``check --create-bucket`` creates the bucket of an s3:// target through its registered backend
    (``Backend.create_container``, with the options and environment the adapter resolves), twice without
    harm, and leaves a target without containers (memory) alone; a bucket it cannot create is bad input
    naming the target."""
    for name, value in embedded_seaweedfs.environment().items():
        monkeypatch.setenv(name, value)
    bucket = f"fresh-{uuid.uuid4().hex[:8]}"
    targets = [Target("mine", f"s3://{bucket}/p"), Target("mem", "memory://no-container")]
    cli._create_buckets(targets, Console(quiet=True))
    cli._create_buckets(targets, Console(quiet=True))
    adapter = open_adapter(targets[0].address)
    adapter.write("k", b"v")
    assert adapter.read_bytes("k") == b"v"
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    with pytest.raises(InputError, match=f"^bad: cannot create the bucket of s3://{bucket}/p: "):
        cli._create_buckets([Target("bad", f"s3://{bucket}/p")], Console(quiet=True))


# -- a server that was started and did not come up fails, never skips ------------------------------------
def test_a_seaweedfs_that_lost_a_port_race_is_started_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A port found free and taken before weed binds it (two test workers starting servers at once) made
    a whole worker's SeaweedFS clauses skip. Reproduced here by handing weed a port this test holds: the
    first start dies of "address already in use", the second, with fresh ports, serves."""
    import storage_adapter.servers.seaweedfs as seaweedfs

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    held_port = held.getsockname()[1]
    handed = iter([held_port])
    real = seaweedfs.free_port
    monkeypatch.setattr(seaweedfs, "free_port", lambda: next(handed, None) or real())
    logs: list[Path] = []
    launch_once = seaweedfs.SeaweedFS._launch_once

    def recorded(self: Any) -> Any:
        try:
            return launch_once(self)
        finally:
            logs.append(self.log_path)

    monkeypatch.setattr(seaweedfs.SeaweedFS, "_launch_once", recorded)
    try:
        with SeaweedFS() as endpoint:
            adapter = open_adapter(endpoint.url("race"), **endpoint.adapter_options())
            assert adapter.write_if_absent("k", b"v") is not None
    finally:
        held.close()
    assert len(logs) == 2 and f"port {held_port} " in logs[0].read_text(errors="replace")


def test_the_plugin_fails_a_server_that_was_started_and_did_not_come_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server that cannot run here skips its tests with the reason; one that started and crashed fails
    each of them (a skipped server looks green)."""
    import storage_adapter.servers.registry
    from contract_tests.plugin import ServerPool

    class Crashing:
        def __enter__(self) -> None:
            raise ServerStartFailed("seaweedfs exited while starting; see the server log /tmp/x.log")

        def __exit__(self, *exc: object) -> None:
            return None

    monkeypatch.setattr(storage_adapter.servers.registry, "provider", lambda name: Crashing)
    with contextlib.ExitStack() as stack:
        pool = ServerPool(stack)
        for _ in range(2):  # the first asker and every later one
            with pytest.raises(pytest.fail.Exception, match="seaweedfs was started and did not come up: "):
                pool.endpoint("seaweedfs")
