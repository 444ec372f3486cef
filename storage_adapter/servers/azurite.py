"""Azurite, the Azure Storage emulator, as a real Azure Blob Storage server for tests and CI stages.

Installed from the npm registry, pinned (``AZURITE_VERSION``), into a project-local folder
(:func:`azurite_home`) the first time it is needed (``scripts/bootstrap.sh`` does it ahead of time);
started as ``azurite-blob`` on a free loopback port, in memory (nothing on disk), with telemetry off (it
would otherwise report to Microsoft: no traffic leaves the machine) and ``--skipApiVersionCheck``
(object_store speaks a newer service version than this release knows). Where Node.js or npm is missing,
or the install fails, starting raises :class:`ServerUnavailable` saying so (tests skip with that reason;
``check --server azurite`` exits 3).

Azurite's known deviations from Azure (docs/azure.md), none of which changes an adapter outcome:
:data:`DEVIATIONS`.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from storage_adapter.obstore_driver import EMULATOR_ACCOUNT as ACCOUNT
from storage_adapter.obstore_driver import EMULATOR_ACCOUNT_KEY as ACCOUNT_KEY
from storage_adapter.servers.server import (
    ProcessServer,
    ServerEndpoint,
    ServerStartFailed,
    ServerUnavailable,
    free_port,
    pinned_options,
    retrying_lost_ports,
    wait_until_bucket_answers,
)

# The newest Azurite whose engines accept the Node.js 20 of Debian and Ubuntu LTS machines (3.35.0
# declares node >= 10); pinned, so every machine runs the very same emulator.
AZURITE_VERSION = "3.35.0"
# How Azurite differs from Azure where the contract looks (docs/azure.md), each pinned by tests/test_azure.py
# and named in every report of a check against it (``version``).
DEVIATIONS = (
    "a conditional read (If-Match) of a missing blob is answered 412 where Azure answers 404: the adapter "
    "reads both as 'the version read is gone' (ObjectChangedError), so no outcome differs",
    "a listing's startFrom is ignored for most prefixes: the adapter drops listed keys not after the "
    "requested start itself, so resumed listings hold on both",
)
# In-memory blob data is bounded (MB), so a runaway test cannot take the machine's memory.
_EXTENT_MEMORY_LIMIT_MB = 4096
_NPM_TIMEOUT_S = 600
_LOST_PORT = ("EADDRINUSE",)


def azurite_home() -> Path:
    """Where the pinned Azurite is installed: ``.cache/azurite-<version>`` of the source checkout this
    package sits in, else ``$XDG_CACHE_HOME/storage-adapter/azurite-<version>`` (an installed package)."""
    checkout = Path(__file__).resolve().parents[2]  # storage_adapter/servers/azurite.py
    if (checkout / "pyproject.toml").is_file() and os.access(checkout, os.W_OK):
        return checkout / ".cache" / f"azurite-{AZURITE_VERSION}"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "storage-adapter" / f"azurite-{AZURITE_VERSION}"


def _blob_script(home: Path) -> Path:
    return home / "node_modules" / ".bin" / "azurite-blob"


def _installed(home: Path) -> bool:
    manifest = home / "node_modules" / "azurite" / "package.json"
    try:
        version = json.loads(manifest.read_text()).get("version")
    except (OSError, ValueError):
        return False
    return version == AZURITE_VERSION and _blob_script(home).exists()


def install_azurite(home: Path | None = None) -> Path:
    """Install the pinned Azurite (``npm install azurite@AZURITE_VERSION``) into ``home`` (default
    :func:`azurite_home`) unless it is there; return its ``azurite-blob``. One install at a time (a file
    lock: test workers start servers side by side), into a staging folder renamed into place, so a failed
    or interrupted install leaves nothing half there. Raises ServerUnavailable without Node.js or npm, or
    when the install fails."""
    home = azurite_home() if home is None else home
    if _installed(home):
        return _blob_script(home)
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        raise ServerUnavailable(
            f"Azurite needs Node.js and npm, and {' and '.join(missing)} is not on PATH "
            "(apt-get install nodejs npm)"
        )
    home.parent.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f".{home.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _installed(home):  # another worker may have installed it meanwhile
            _npm_install(home)
    return _blob_script(home)


def _npm_install(home: Path) -> None:
    staging = Path(tempfile.mkdtemp(prefix=f".{home.name}-", dir=home.parent))
    try:
        completed = subprocess.run(
            [
                "npm",
                "install",
                "--prefix",
                str(staging),
                "--no-audit",
                "--no-fund",
                "--no-save",
                f"azurite@{AZURITE_VERSION}",
            ],
            capture_output=True,
            text=True,
            timeout=_NPM_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
        if completed.returncode != 0 or not _installed(staging):
            last = (completed.stderr.strip().splitlines() or ["no output"])[-1]
            raise ServerUnavailable(
                f"npm could not install azurite@{AZURITE_VERSION} into {home} (exit {completed.returncode}: {last})"
            )
        shutil.rmtree(home, ignore_errors=True)
        staging.rename(home)
    except subprocess.TimeoutExpired:
        raise ServerUnavailable(
            f"npm did not install azurite@{AZURITE_VERSION} within {_NPM_TIMEOUT_S} s"
        ) from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@dataclass(frozen=True)
class AzureEndpoint(ServerEndpoint):
    """How to reach a running Azurite: its blob service URL (the account's, ``http://host:port/account``),
    its container and the emulator's account. ``repr`` hides the key."""

    name: str
    endpoint: str
    container: str
    account_name: str = ACCOUNT
    account_key: str = field(default=ACCOUNT_KEY, repr=False)

    def url(self, prefix: str = "") -> str:
        return f"az://{self.container}/{prefix}" if prefix else f"az://{self.container}"

    def adapter_options(self) -> dict[str, object]:
        return pinned_options(
            "az",
            {
                "endpoint": self.endpoint,
                "account_name": self.account_name,
                "account_key": self.account_key,  # also keeps the environment's other credentials out
                "allow_http": True,
            },
        )

    def environment(self) -> dict[str, str]:
        return {
            "AZURE_STORAGE_ACCOUNT_NAME": self.account_name,
            "AZURE_STORAGE_ACCOUNT_KEY": self.account_key,
            "AZURE_STORAGE_ENDPOINT": self.endpoint,
            "AZURE_ALLOW_HTTP": "true",
        }


class Azurite(ProcessServer[AzureEndpoint]):
    """``with Azurite() as endpoint:`` an Azurite blob service with one container, ready to use."""

    name = "azurite"

    def _launch(self) -> AzureEndpoint:
        script = install_azurite()
        return retrying_lost_ports(
            lambda: self._launch_once(script), lambda: self.log_path, self.stop, _LOST_PORT
        )

    def _launch_once(self, script: Path) -> AzureEndpoint:
        port = free_port()
        # Azurite writes its debug and extent files into its working directory, even in memory.
        workdir = self._workdir_made()
        args = [
            str(script),
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--inMemoryPersistence",
            "--extentMemoryLimit",
            str(_EXTENT_MEMORY_LIMIT_MB),
            "--skipApiVersionCheck",
            "--disableTelemetry",
            "--silent",
        ]
        self._spawn(args, cwd=workdir)
        endpoint = AzureEndpoint(
            name=self.name, endpoint=f"http://127.0.0.1:{port}/{ACCOUNT}", container=self.bucket
        )
        deadline = time.monotonic() + self.start_timeout_s
        with self._log_named():
            self._create_container(endpoint, deadline)
            wait_until_bucket_answers(endpoint, max(1.0, deadline - time.monotonic()), self._alive)
        return endpoint

    def _create_container(self, endpoint: AzureEndpoint, deadline: float) -> None:
        """Create the endpoint's container through the ``azure`` backend's own Create Container, retried
        until the server listens or ``deadline`` (monotonic) passes."""
        from storage_adapter.config import parse_url
        from storage_adapter.errors import BackendUnavailableError

        config = parse_url(endpoint.url(), {**endpoint.adapter_options(), "request_timeout_s": 5.0})
        create = config.spec.create_container
        assert create is not None, "the azure backend creates containers"
        last: Exception | None = None
        while time.monotonic() < deadline:
            if not self._alive():
                raise ServerStartFailed(f"{self.name} exited while starting")
            try:
                create(config)
                return
            except BackendUnavailableError as exc:  # not listening yet
                last = exc
                time.sleep(0.2)
        raise ServerStartFailed(f"{self.name} did not create its container in time (last error: {last})")

    def version(self) -> str:
        if shutil.which("node") is None:
            raise ServerUnavailable("Azurite needs Node.js, and node is not on PATH (apt-get install nodejs)")
        node = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=30)
        deviations = "; ".join(DEVIATIONS)
        return (
            f"Azurite {AZURITE_VERSION} (npm, in memory) on Node.js {node.stdout.strip() or 'unknown'}; "
            f"declared deviations from Azure: {deviations}"
        )
