"""moto as an S3 server: ``moto_server`` (pure Python, ``pip install 'moto[server]'``) on a free loopback
port, a peer server of the conformance matrix that needs neither Docker nor a binary download.

moto keeps everything in the server process's memory, accepts any credentials, and implements
conditional writes (``If-None-Match: *``, ``If-Match``) as a check followed by a write inside one
request handler: under heavy thread switching in the server those races can show (docs/check.md).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
import time

from storage_adapter.servers.containers import create_bucket
from storage_adapter.servers.server import (
    ProcessServer,
    S3Endpoint,
    S3Server,
    ServerUnavailable,
    free_port,
    wait_until_bucket_answers,
)

NOT_INSTALLED = "moto is not installed: pip install 'moto[server]'"


def moto_version() -> str:
    """The installed moto's version. Raises ServerUnavailable(NOT_INSTALLED)."""
    try:
        return importlib.metadata.version("moto")
    except importlib.metadata.PackageNotFoundError:
        raise ServerUnavailable(NOT_INSTALLED) from None


class Moto(ProcessServer[S3Endpoint], S3Server):
    """``with Moto() as endpoint:`` a ``moto_server`` with one bucket, stopped (and its state gone) at exit."""

    name = "moto"

    def _launch(self) -> S3Endpoint:
        moto_version()
        if importlib.util.find_spec("flask") is None:  # moto_server needs moto's [server] extra
            raise ServerUnavailable(NOT_INSTALLED)
        port = free_port()
        # The interpreter running the check runs the server too: moto is importable there by construction.
        self._spawn([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)])
        endpoint = S3Endpoint(
            name=self.name,
            endpoint=f"http://127.0.0.1:{port}",
            bucket=self.bucket,
            access_key_id="moto-any",
            secret_access_key="moto-any-secret",
        )
        deadline = time.monotonic() + self.start_timeout_s
        with self._log_named():
            create_bucket(endpoint, deadline, self._alive)
            wait_until_bucket_answers(endpoint, max(1.0, deadline - time.monotonic()), self._alive)
        return endpoint

    def version(self) -> str:
        return f"moto {moto_version()} (moto_server, in-memory)"
