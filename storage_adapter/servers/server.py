"""The interface every server provider implements (S3 servers, and Azurite for Azure Blob Storage).

A provider (:class:`Server`) starts its server and yields a :class:`ServerEndpoint`: how to reach it, as
the URL of a container and the adapter options that open it (:class:`S3Endpoint` for S3 servers,
``storage_adapter.servers.azurite.AzureEndpoint`` for Azurite). Whatever the kind, a server the project starts and the
clients pointed at it see none of the user's client settings (``CLIENT_SETTING_PREFIXES``)."""

from __future__ import annotations

import abc
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Generic, TypeVar

# The environment variables through which a user's shell configures storage clients and servers: the whole
# AWS_ family (object_store, botocore, boto3 and s3fs read it, and SeaweedFS takes AWS_ACCESS_KEY_ID /
# AWS_SECRET_ACCESS_KEY as the only identity it admits), the AZURE_ family and Azurite's AZURITE_ (object_store
# reads both) and the adapter's own STORAGE_ADAPTER_ switches. A server the project starts, and every client
# pointed at it, sees none of the user's: its own settings are handed over explicitly (ServerEndpoint), so
# a user with AWS or Azure keys in the shell runs everything as without.
CLIENT_SETTING_PREFIXES = ("AWS_", "AZURE_", "AZURITE_", "STORAGE_ADAPTER_")


def is_client_setting(name: str) -> bool:
    """Whether the environment variable ``name`` configures S3 clients or servers (see
    ``CLIENT_SETTING_PREFIXES``)."""
    return name.upper().startswith(CLIENT_SETTING_PREFIXES)


def without_client_settings(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default ``os.environ``) with every client setting removed: the environment a started
    server process gets."""
    env = os.environ if environ is None else environ
    return {name: value for name, value in env.items() if not is_client_setting(name)}


@contextlib.contextmanager
def scoped_environment(values: Mapping[str, str | None]) -> Iterator[None]:
    """Apply ``values`` to ``os.environ`` for the block (None unsets the variable); restore every variable
    named there (or its absence) after, so nothing set here outlives the block."""
    saved = {name: os.environ.get(name) for name in values}
    try:
        _apply(values)
        yield
    finally:
        _apply(saved)


def _apply(values: Mapping[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def launch_server_process(
    args: Sequence[str], log: IO[Any] | int, cwd: str | os.PathLike[str] | None = None
) -> subprocess.Popen[bytes]:
    """Start a server's process in a session of its own (``stop_session`` stops it), output to ``log``,
    with the caller's environment minus every client setting: a server reads the user's AWS_* as its own
    configuration (SeaweedFS then admits only the user's keys and refuses its own endpoint's)."""
    return subprocess.Popen(
        args,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        env=without_client_settings(),
        start_new_session=True,
    )


class ServerUnavailable(RuntimeError):
    """The server cannot run here (binary or Docker engine missing) or failed to start.

    The message says why and, when a process was started, names its log file.
    """


class ServerStartFailed(ServerUnavailable):
    """The server could run here and was started, but did not come up (it exited, or never answered).
    Unlike a missing binary or Docker engine this is a failure, never a reason to skip."""


class ServerEndpoint(abc.ABC):
    """How to reach a running server: ``name``, its ``endpoint`` URL, the storage URL of its container (or
    of a prefix in it) and the ``open_adapter`` options that reach it, whatever the caller's environment."""

    name: str
    endpoint: str

    @abc.abstractmethod
    def url(self, prefix: str = "") -> str:
        """The storage URL of the server's container (bucket), or of ``prefix`` in it."""

    @abc.abstractmethod
    def adapter_options(self) -> dict[str, object]:
        """``open_adapter`` options for this server, complete: every option of its backend the
        environment could supply is given, as the server's own value or the option's default, so no
        client setting of the caller's changes what the adapter does."""

    @abc.abstractmethod
    def environment(self) -> dict[str, str]:
        """The client settings (environment variables) that point clients and ``open_adapter`` here."""

    def process_environment(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The whole environment of a child process that talks to this server: ``environ`` (default
        ``os.environ``) with the caller's client settings replaced by this server's."""
        return {**without_client_settings(environ), **self.environment()}

    def scoped(self) -> contextlib.AbstractContextManager[None]:
        """For the block, this process's client settings are this server's and nothing else (the
        caller's ``AWS_*`` / ``AZURE_*`` / ``STORAGE_ADAPTER_*`` are unset, and restored after): peers,
        Spark's Python workers and spawned processes started inside it reach this server only."""
        cleared: dict[str, str | None] = {name: None for name in os.environ if is_client_setting(name)}
        return scoped_environment({**cleared, **self.environment()})


def pinned_options(scheme: str, own: Mapping[str, object]) -> dict[str, object]:
    """``own`` options of a started server, completed with the default of every option of the backend of
    ``scheme`` that has an environment variable and a default: the environment then supplies nothing."""
    from storage_adapter.registry import backend_for_scheme

    backend = backend_for_scheme(scheme)
    assert backend is not None, f"the {scheme} backend is built in"
    pinned = {name: o.default for name, o in backend.options.items() if o.env and o.default is not None}
    return {**pinned, **own}


@dataclass(frozen=True)
class S3Endpoint(ServerEndpoint):
    """How to reach a running S3 server: everything ``open_adapter`` needs. ``repr`` hides the secret."""

    name: str
    endpoint: str
    bucket: str
    access_key_id: str
    secret_access_key: str = field(repr=False)
    region: str = "us-east-1"

    def url(self, prefix: str = "") -> str:
        return f"s3://{self.bucket}/{prefix}" if prefix else f"s3://{self.bucket}"

    def adapter_options(self) -> dict[str, object]:
        """``open_adapter`` options for this server, complete: every S3 option the environment could
        supply is given, as the server's own value or the option's default, so no ``AWS_*`` or
        ``STORAGE_ADAPTER_*`` variable of the caller's changes what the adapter does. (The keys given here
        also keep a session token or profile of the environment out: credentials resolve as one group.)"""
        own: dict[str, object] = {
            "endpoint": self.endpoint,
            "access_key_id": self.access_key_id,
            "secret_access_key": self.secret_access_key,
            "region": self.region,
            "allow_http": self.endpoint.startswith("http://"),
        }
        return pinned_options("s3", own)

    def environment(self) -> dict[str, str]:
        """The ``AWS_*`` variables that point boto3, s3fs and ``open_adapter`` at this server (and the
        adapter's own for what the server needs)."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_REGION": self.region,
            "AWS_ALLOW_HTTP": "true" if self.endpoint.startswith("http://") else "false",
        }

    def boto3_client(self, config: Any = None) -> Any:
        """A boto3 S3 client for this server (``config``: a ``botocore.config.Config``), built with none
        of the caller's client settings: botocore reads ``AWS_PROFILE``, ``AWS_CONFIG_FILE`` and the like
        while building a client, and a profile that does not exist fails even with keys given."""
        import boto3

        with self.scoped():
            return boto3.client(
                "s3",
                endpoint_url=self.endpoint,
                aws_access_key_id=self.access_key_id,
                aws_secret_access_key=self.secret_access_key,
                region_name=self.region,
                config=config,
            )


E = TypeVar("E", bound=ServerEndpoint)


class Server(abc.ABC, Generic[E]):
    """A server provider: ``with Provider() as endpoint: ...`` starts it, yields the endpoint (an ``E``),
    stops it."""

    name: str

    def __init__(self, bucket: str = "contract") -> None:
        self.bucket = bucket

    def start(self) -> E:
        """Start the server, create the bucket (container) and wait until it answers. Raise
        ServerUnavailable.

        A failed start leaves nothing running: whatever was launched is stopped before the error
        propagates, so callers that do not use ``with`` need not clean up either.
        """
        try:
            return self._launch()
        except BaseException:
            self.stop()
            raise

    @abc.abstractmethod
    def _launch(self) -> E:
        """The provider's start-up (see ``start``); it may leave things running when it raises."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop the server and remove what it wrote. Safe to call twice."""

    @abc.abstractmethod
    def version(self) -> str:
        """Which server build this is, for reports (one line). Raises ServerUnavailable like ``start``."""

    def __enter__(self) -> E:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class S3Server(Server[S3Endpoint]):
    """A provider of an S3 server: its endpoint is an :class:`S3Endpoint`."""


class ProcessServer(Server[E]):
    """A provider whose server is one local process it launches (:meth:`_spawn`): in a session of its
    own, its output in ``log_path`` (kept after ``stop``, so a failed start can be inspected), its files
    in a working directory of its own (removed by ``stop``)."""

    def __init__(self, bucket: str = "contract", start_timeout_s: float = 60.0) -> None:
        super().__init__(bucket)
        self.start_timeout_s = start_timeout_s
        self._process: subprocess.Popen[bytes] | None = None
        self._workdir: str | None = None
        self.log_path: Path | None = None

    def _spawn(self, args: Sequence[str], cwd: str | None = None) -> None:
        """Launch the server process (``launch_server_process``), logging to a fresh ``log_path``."""
        log_fd, log_name = tempfile.mkstemp(prefix=f"{self.name}-", suffix=".log")
        self.log_path = Path(log_name)
        try:
            self._process = launch_server_process(args, log_fd, cwd=cwd)
        finally:
            os.close(log_fd)

    def _workdir_made(self) -> str:
        """A fresh working directory for the server's files (``stop`` removes it)."""
        self._workdir = tempfile.mkdtemp(prefix=f"{self.name}-")
        return self._workdir

    def _alive(self) -> bool:
        """Whether the launched process still runs."""
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The running server's process id (None when stopped): for a benchmark to read its CPU time."""
        return None if self._process is None else self._process.pid

    @contextlib.contextmanager
    def _log_named(self) -> Iterator[None]:
        """A ServerUnavailable raised inside names the server's log, of the same type."""
        try:
            yield
        except ServerUnavailable as exc:
            raise type(exc)(f"{exc}; see the server log {self.log_path}") from exc

    def stop(self) -> None:
        process, self._process = self._process, None
        stop_session(process)
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None


# A port found free may be taken by another process before the server binds it (two test workers start
# servers at once): a start that died of that is retried with fresh ports, this many times in all.
START_ATTEMPTS = 3


def retrying_lost_ports(
    launch_once: Callable[[], E],
    log: Callable[[], Path | None],
    stop: Callable[[], None],
    lost: Sequence[str],
) -> E:
    """``launch_once()``, again with fresh ports after a start that failed because a port was taken
    (its ``log`` says one of ``lost``), ``stop()`` in between; START_ATTEMPTS in all. Every attempt but
    the last retries only on a lost port; the last one's outcome is the answer."""
    for _ in range(START_ATTEMPTS - 1):
        try:
            return launch_once()
        except ServerStartFailed:
            path = log()
            text = path.read_text(errors="replace") if path is not None else ""
            if not any(report in text for report in lost):
                raise
            stop()
    return launch_once()


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


def wait_until_bucket_answers(endpoint: ServerEndpoint, deadline_s: float, is_alive: object) -> None:
    """Poll the bucket through the adapter itself until a put/get round trip works or the deadline passes."""
    from storage_adapter import open_adapter
    from storage_adapter.errors import StorageError

    adapter = open_adapter(endpoint.url(), **{**endpoint.adapter_options(), "max_retries": 0})
    deadline = time.monotonic() + deadline_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        if callable(is_alive) and not is_alive():
            raise ServerStartFailed(f"{endpoint.name} exited while starting")
        try:
            adapter.write(".ready-probe", b"ok")
            adapter.delete(".ready-probe")
            return
        except StorageError as exc:
            last = exc
            time.sleep(0.3)
    raise ServerStartFailed(f"{endpoint.name} did not answer within {deadline_s:.0f}s (last error: {last})")
