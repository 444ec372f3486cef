"""MinIO and RustFS through testcontainers: the same S3Server interface as ``storage_adapter.servers.seaweedfs``.

Needs a reachable Docker engine (``pip install 'storage-adapter[containers]'`` for testcontainers and
docker). Before anything is pulled or started, the engine is pinged with a short timeout; when it does
not answer, ``start()`` raises :class:`ServerUnavailable` with one line saying why, so a test run skips
or a CI stage fails at once instead of hanging.

Images are pinned to exact tags whose servers honour the two conditional PutObject headers the adapter
relies on (``If-None-Match: *`` for ``write_if_absent``, ``If-Match: <etag>`` for ``write_if_match``);
docs/ci.md records why each tag was chosen. The contract's conditional-write clauses verify the claim on
every run.

Each provider generates fresh credentials, exposes the container's S3 port on a random host port, creates
the bucket, and waits until a put/get round trip through the adapter works. ``stop()`` removes the
container and its anonymous data volume.
"""

from __future__ import annotations

import abc
import os
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from storage_adapter.servers.server import (
    S3Endpoint,
    S3Server,
    ServerStartFailed,
    ServerUnavailable,
    wait_until_bucket_answers,
)

# MinIO: conditional PutObject (If-None-Match, If-Match) since 2024; the first release after
# minio/minio#21550 (merged 2025-08-29), which makes If-Match on a missing key fail instead of creating it.
MINIO_IMAGE = "minio/minio:RELEASE.2025-09-07T16-13-09Z"
# RustFS: conditional PutObject landed for rustfs/rustfs#406 (2025-09) and If-None-Match on a missing key
# was fixed in rustfs/rustfs#1034 (2025-12); a 1.0 release candidate well after both.
RUSTFS_IMAGE = "rustfs/rustfs:1.0.0-rc.5"

S3_CONTAINER_PORT = 9000
DOCKER_PROBE_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class ContainerSpec:
    """Everything the container is started with; plain data, so it is unit-testable without Docker."""

    image: str
    command: tuple[str, ...]
    environment: tuple[tuple[str, str], ...] = field(repr=False)  # holds the credentials
    s3_port: int = S3_CONTAINER_PORT

    def testcontainer_arguments(self) -> dict[str, Any]:
        """Keyword arguments for ``testcontainers.core.container.DockerContainer``."""
        return {
            "image": self.image,
            "command": list(self.command),
            "env": dict(self.environment),
            "ports": [self.s3_port],
        }


def docker_engine_problem(timeout_s: float = DOCKER_PROBE_TIMEOUT_S) -> str | None:
    """Why no Docker engine can be used here, in one line; ``None`` when one answers a ping.

    Resolves the engine the way testcontainers does (``DOCKER_HOST``, testcontainers properties, the
    current docker context) and gives every request ``timeout_s``, so an absent or silent engine is
    reported within about that long.
    """
    try:
        from docker.errors import DockerException
        from requests.exceptions import RequestException
        from testcontainers.core.docker_client import DockerClient, get_docker_host
    except ImportError as exc:
        return f"testcontainers is not installed ({exc.name}): pip install 'storage-adapter[containers]'"
    where = get_docker_host() or "the default socket (unix:///var/run/docker.sock)"
    try:
        client = DockerClient(timeout=timeout_s)
        client.client.ping()
    except (DockerException, RequestException, OSError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return f"no Docker engine reachable at {where}: {detail}"
    client.client.close()
    return None


class ContainerS3Server(S3Server):
    """A single-node S3 server in a Docker container. Subclasses describe the container."""

    default_image: str
    # Ready within this long after the image is present: covers a slow CI runner, not an image pull.
    ready_timeout_s = 120.0

    def __init__(self, bucket: str = "contract", image: str | None = None) -> None:
        """``image`` defaults to ``STORAGE_ADAPTER_<NAME>_IMAGE`` when set (to check the exact server a
        user deploys), else to the pinned ``default_image``."""
        self.bucket = bucket
        self.image = image or os.environ.get(self.image_variable()) or self.default_image
        self.access_key_id = f"contract-{secrets.token_hex(4)}"
        self.secret_access_key = secrets.token_hex(16)
        self._container: Any = None

    def version(self) -> str:
        """The image reference the container runs (pinned tag, or the ``STORAGE_ADAPTER_<NAME>_IMAGE``)."""
        return str(self.image)

    @classmethod
    def image_variable(cls) -> str:
        return f"STORAGE_ADAPTER_{cls.name.upper()}_IMAGE"

    @abc.abstractmethod
    def container_spec(self) -> ContainerSpec:
        """Image, command line and environment of this server's container."""

    def _launch(self) -> S3Endpoint:
        problem = docker_engine_problem()
        if problem is not None:
            raise ServerUnavailable(f"{self.name} needs Docker: {problem}")
        from testcontainers.core.container import DockerContainer

        spec = self.container_spec()
        self._container = DockerContainer(**spec.testcontainer_arguments())
        try:
            self._container.start()
            host = self._container.get_container_host_ip()
            port = self._container.get_exposed_port(spec.s3_port)
        except Exception as exc:  # docker and testcontainers raise many unrelated types here
            raise ServerStartFailed(f"{self.name} container ({self.image}) failed to start: {exc}") from exc
        endpoint = S3Endpoint(
            name=self.name,
            endpoint=f"http://{host}:{port}",
            bucket=self.bucket,
            access_key_id=self.access_key_id,
            secret_access_key=self.secret_access_key,
        )
        deadline = time.monotonic() + self.ready_timeout_s
        try:
            create_bucket(endpoint, deadline, self._is_running)
            wait_until_bucket_answers(endpoint, max(deadline - time.monotonic(), 5.0), self._is_running)
        except ServerUnavailable as exc:
            raise type(exc)(f"{exc}; container log tail:\n{self._log_tail()}") from exc
        return endpoint

    def stop(self) -> None:
        container, self._container = self._container, None
        if container is not None:
            container.stop()  # removes the container and its anonymous /data volume

    def _is_running(self) -> bool:
        container = self._container
        if container is None:
            return False
        wrapped = container.get_wrapped_container()
        wrapped.reload()
        return wrapped.status in ("created", "running")

    def _log_tail(self, lines: int = 20) -> str:
        stdout, stderr = self._container.get_logs()
        text = (stdout + stderr).decode("utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])


class MinIO(ContainerS3Server):
    """``with MinIO() as endpoint:`` MinIO single-node single-drive, one bucket, ready to use."""

    name = "minio"
    default_image = MINIO_IMAGE

    def container_spec(self) -> ContainerSpec:
        return ContainerSpec(
            image=self.image,
            command=("server", "/data", "--address", f":{S3_CONTAINER_PORT}"),
            environment=(
                ("MINIO_ROOT_USER", self.access_key_id),
                ("MINIO_ROOT_PASSWORD", self.secret_access_key),
                ("MINIO_BROWSER", "off"),  # no web console: nothing else listens
            ),
        )


class RustFS(ContainerS3Server):
    """``with RustFS() as endpoint:`` RustFS single node on one volume, one bucket, ready to use."""

    name = "rustfs"
    default_image = RUSTFS_IMAGE

    def container_spec(self) -> ContainerSpec:
        return ContainerSpec(
            image=self.image,
            command=("/data",),  # the image's entrypoint prefixes the rustfs binary
            environment=(
                ("RUSTFS_ACCESS_KEY", self.access_key_id),
                ("RUSTFS_SECRET_KEY", self.secret_access_key),
                ("RUSTFS_VOLUMES", "/data"),
                ("RUSTFS_ADDRESS", f":{S3_CONTAINER_PORT}"),
                ("RUSTFS_CONSOLE_ENABLE", "false"),
                # The throwaway volume shares the container's disk; the topology check is for production.
                ("RUSTFS_UNSAFE_BYPASS_DISK_CHECK", "true"),
            ),
        )


def create_bucket(endpoint: S3Endpoint, deadline: float, is_alive: object) -> None:
    """Create ``endpoint.bucket``, retrying while the server is still coming up, until ``deadline``.

    An already existing bucket owned by these credentials counts as created.
    """
    try:
        import boto3  # noqa: F401  # checked here: endpoint.boto3_client needs it
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError as exc:
        raise ServerUnavailable(
            f"{endpoint.name}: creating a bucket needs boto3 (pip install boto3)"
        ) from exc
    client = endpoint.boto3_client(Config(connect_timeout=2, read_timeout=5, retries={"max_attempts": 1}))
    last: Exception | None = None
    while time.monotonic() < deadline:
        if callable(is_alive) and not is_alive():
            raise ServerStartFailed(f"{endpoint.name} container exited while starting")
        try:
            client.create_bucket(Bucket=endpoint.bucket)
            return
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "BucketAlreadyOwnedByYou":
                return
            last = exc  # e.g. 503 while the server initialises its drives
        except BotoCoreError as exc:
            last = exc  # connection refused or reset while the server starts
        time.sleep(0.5)
    raise ServerStartFailed(f"{endpoint.name} did not create bucket {endpoint.bucket!r} in time: {last}")
