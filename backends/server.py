"""The interface every S3 server provider implements."""

from __future__ import annotations

import abc
import contextlib
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from types import TracebackType


class ServerUnavailable(RuntimeError):
    """The server cannot run here (binary or Docker engine missing) or failed to start.

    The message says why and, when a process was started, names its log file.
    """


@dataclass(frozen=True)
class S3Endpoint:
    """How to reach a running S3 server: everything ``open_adapter`` needs. ``repr`` hides the secret."""

    name: str
    endpoint: str
    bucket: str
    access_key_id: str
    secret_access_key: str = field(repr=False)
    region: str = "us-east-1"
    # The server reports a directory emptied by deletes as a common prefix (SeaweedFS): the adapter's
    # list_dir must confirm prefixes there (the S3 option confirm_prefixes).
    confirm_prefixes: bool = False

    def url(self, prefix: str = "") -> str:
        return f"s3://{self.bucket}/{prefix}" if prefix else f"s3://{self.bucket}"

    def adapter_options(self) -> dict[str, object]:
        return {
            "endpoint": self.endpoint,
            "access_key_id": self.access_key_id,
            "secret_access_key": self.secret_access_key,
            "region": self.region,
            "allow_http": self.endpoint.startswith("http://"),
            "confirm_prefixes": self.confirm_prefixes,
        }

    def environment(self) -> dict[str, str]:
        """The ``AWS_*`` variables that point boto3, s3fs and ``open_adapter`` at this server (and the
        adapter's own for what the server needs)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_REGION": self.region,
            "AWS_ALLOW_HTTP": "true" if self.endpoint.startswith("http://") else "false",
            "STORAGE_ADAPTER_S3_CONFIRM_PREFIXES": "true" if self.confirm_prefixes else "false",
        }


class S3Server(abc.ABC):
    """A server provider: ``with Provider() as endpoint: ...`` starts it, yields the endpoint, stops it."""

    name: str

    def __init__(self, bucket: str = "contract") -> None:
        self.bucket = bucket

    def start(self) -> S3Endpoint:
        """Start the server, create the bucket and wait until it answers. Raise ServerUnavailable.

        A failed start leaves nothing running: whatever was launched is stopped before the error
        propagates, so callers that do not use ``with`` need not clean up either.
        """
        try:
            return self._launch()
        except BaseException:
            self.stop()
            raise

    @abc.abstractmethod
    def _launch(self) -> S3Endpoint:
        """The provider's start-up (see ``start``); it may leave things running when it raises."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop the server and remove what it wrote. Safe to call twice."""

    @abc.abstractmethod
    def version(self) -> str:
        """Which server build this is, for reports (one line). Raises ServerUnavailable like ``start``."""

    def __enter__(self) -> S3Endpoint:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def stop_session(process: subprocess.Popen[bytes] | None, grace_s: float = 10.0) -> None:
    """Stop a server started in its own session: SIGTERM the session, SIGKILL it after ``grace_s``,
    reap the leader. A process that already exited (or None) is only reaped."""
    if process is None:
        return
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until_bucket_answers(endpoint: S3Endpoint, deadline_s: float, is_alive: object) -> None:
    """Poll the bucket through the adapter itself until a put/get round trip works or the deadline passes."""
    from storage_adapter import open_adapter
    from storage_adapter.errors import StorageError

    adapter = open_adapter(endpoint.url(), **endpoint.adapter_options(), max_retries=0)
    deadline = time.monotonic() + deadline_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        if callable(is_alive) and not is_alive():
            raise ServerUnavailable(f"{endpoint.name} exited while starting")
        try:
            adapter.write(".ready-probe", b"ok")
            adapter.delete(".ready-probe")
            return
        except StorageError as exc:
            last = exc
            time.sleep(0.3)
    raise ServerUnavailable(f"{endpoint.name} did not answer within {deadline_s:.0f}s (last error: {last})")
