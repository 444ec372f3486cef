"""Ceph RGW on one host, no Docker: one monitor, one OSD on ``memstore`` and radosgw (beast) on loopback.

Uses the Debian packages ``radosgw ceph-mon ceph-osd ceph-common`` (``scripts/install-ceph.sh``); nothing
is installed from here. When a binary is missing, ``start()`` and ``version()`` raise
:class:`ServerUnavailable` with :data:`NOT_INSTALLED`.

Every instance is private: its own ``ceph.conf``, fsid, monitor store, run and log directories in a fresh
temporary directory, free loopback ports, daemons run as the current user in the foreground. Nothing
under ``/etc/ceph`` or ``/var/lib/ceph`` is read or written, so several instances can run at once and a
host Ceph cluster, if any, is untouched. Cephx is off (``auth_*_required = none``); every messenger mode
is ``crc`` because ``secure`` needs cephx. The S3 user's keys are generated per start and never printed.

Known deviations of the 16.2.x server the contract depends on are recorded in docs/ceph.md.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from storage_adapter.servers.containers import create_bucket
from storage_adapter.servers.server import (
    S3Endpoint,
    S3Server,
    ServerStartFailed,
    ServerUnavailable,
    free_port,
    launch_server_process,
    stop_session,
    wait_until_bucket_answers,
)

NOT_INSTALLED = "ceph packages not installed: run scripts/install-ceph.sh"
# ceph-mon, ceph-osd and radosgw are the daemons; the rest bootstrap the cluster and the S3 user.
_BINARIES = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "ceph", "monmaptool")
# A daemon gets this long to shut down cleanly before it is killed: radosgw never exits on SIGTERM once
# the monitor is gone, and the state is thrown away anyway, so a long grace buys nothing.
_STOP_GRACE_S = 3.0


def ceph_binaries() -> dict[str, str]:
    """Absolute paths of the Ceph tools this provider runs. Raises ServerUnavailable(NOT_INSTALLED)."""
    found = {name: shutil.which(name) for name in _BINARIES}
    if any(path is None for path in found.values()):
        raise ServerUnavailable(NOT_INSTALLED)
    return {name: str(path) for name, path in found.items()}


def ceph_conf(state: Path, logs: Path, fsid: str, mon_port: int, rgw_port: int) -> str:
    """The private cluster's ``ceph.conf``: every path under ``state`` or ``logs``, addresses on 127.0.0.1."""
    return f"""\
[global]
fsid = {fsid}
mon host = v2:127.0.0.1:{mon_port}
mon initial members = a
public addr = 127.0.0.1
cluster addr = 127.0.0.1
# No cephx: a throwaway loopback cluster needs no keys. `secure` messenger modes require cephx, and daemons
# default the monitor modes to secure-only, so all six modes are set (without the mon ones radosgw fails
# to authenticate with -13).
auth cluster required = none
auth service required = none
auth client required = none
ms cluster mode = crc
ms service mode = crc
ms client mode = crc
ms mon cluster mode = crc
ms mon service mode = crc
ms mon client mode = crc
run dir = {state}/run
admin socket = {state}/run/$name.asok
pid file = {state}/run/$name.pid
crash dir = {state}/crash
log file = {logs}/$name.log
mon cluster log file = {logs}/cluster.log
keyring = {state}/keyring
mon data = {state}/mon-$id
osd data = {state}/osd-$id
# The monitor stops itself below `crit` percent free disk; a test server should not die of a full /tmp.
mon data avail warn = 1
mon data avail crit = 0
mon allow pool size one = true
osd objectstore = memstore
memstore device bytes = {1 << 30}
# One OSD: single replicas, few placement groups, and CRUSH may place every copy on the same host.
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd crush chooseleaf type = 0

[client.rgw]
rgw frontends = beast endpoint=127.0.0.1:{rgw_port}
"""


@dataclass
class _Daemon:
    """A started Ceph daemon: its process (leader of its own session) and the log it writes."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path


class CephRGW(S3Server):
    """``with CephRGW() as endpoint:`` a single-host Ceph RGW with one bucket, ready to use.

    After a successful start, ``ready_s`` is how long it took and ``daemon_rss()`` reports memory.
    ``stop()`` removes the state and the logs; after a failed start the logs are kept and the error names
    the log of the daemon or step that failed.
    """

    name = "ceph"

    def __init__(self, bucket: str = "contract", start_timeout_s: float = 120.0) -> None:
        self.bucket = bucket
        self.start_timeout_s = start_timeout_s
        self.ready_s: float | None = None
        self.log_dir: Path | None = None
        self._state: Path | None = None
        self._daemons: list[_Daemon] = []

    def version(self) -> str:
        """The first line of ``radosgw --version``, e.g. ``ceph version 16.2.15 (…) pacific (stable)``."""
        completed = subprocess.run(
            [ceph_binaries()["radosgw"], "--version"], capture_output=True, text=True, timeout=30
        )
        return (completed.stdout.strip().splitlines() or ["unknown"])[0]

    def daemon_rss(self) -> dict[str, int]:
        """Resident memory in bytes of each running daemon (``ceph-mon``, ``ceph-osd``, ``radosgw``)."""
        rss = {}
        for daemon in self._daemons:
            try:
                status = Path(f"/proc/{daemon.process.pid}/status").read_text()
            except OSError:
                continue  # exited, or no procfs
            kib = next((line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")), None)
            if kib is not None:
                rss[daemon.name] = int(kib) * 1024
        return rss

    def _launch(self) -> S3Endpoint:
        binaries = ceph_binaries()
        started = time.monotonic()
        self.ready_s = None
        deadline = started + self.start_timeout_s
        self._state = Path(tempfile.mkdtemp(prefix="ceph-rgw-"))
        # Logs live beside the state, not in it, so a failed start can still be inspected after stop().
        self.log_dir = Path(tempfile.mkdtemp(prefix="ceph-rgw-logs-"))
        for sub in ("run", "crash"):
            (self._state / sub).mkdir()
        (self._state / "keyring").touch()  # read even without cephx; empty is fine
        fsid, mon_port, rgw_port = str(uuid.uuid4()), free_port(), free_port()
        conf = self._state / "ceph.conf"
        conf.write_text(ceph_conf(self._state, self.log_dir, fsid, mon_port, rgw_port))
        ceph = [binaries["ceph"], "--conf", str(conf), "--connect-timeout", "10"]

        monmap = str(self._state / "monmap")
        self._run(
            "monmaptool",
            [
                binaries["monmaptool"],
                "--create",
                "--add",
                "a",
                f"v2:127.0.0.1:{mon_port}",
                "--fsid",
                fsid,
                monmap,
            ],
            deadline,
        )
        self._run(
            "mon-mkfs",
            [binaries["ceph-mon"], "-c", str(conf), "--mkfs", "-i", "a", "--monmap", monmap],
            deadline,
        )
        self._spawn("ceph-mon", [binaries["ceph-mon"], "-c", str(conf), "-i", "a", "-f"])

        osd_uuid = str(uuid.uuid4())
        osd_id = self._run("osd-new", [*ceph, "osd", "new", osd_uuid], deadline).strip()
        (self._state / f"osd-{osd_id}").mkdir()  # memstore's mkfs writes its metadata there
        self._run(
            "osd-mkfs",
            [binaries["ceph-osd"], "-c", str(conf), "-i", osd_id, "--mkfs", "--osd-uuid", osd_uuid],
            deadline,
        )
        self._spawn("ceph-osd", [binaries["ceph-osd"], "-c", str(conf), "-i", osd_id, "-f"])

        # The user is created before radosgw starts: radosgw-admin then creates the default realm, zone and
        # pools alone, instead of racing radosgw's own first-start initialisation of the same objects.
        access_key_id = f"CEPH{secrets.token_hex(8).upper()}"
        secret_access_key = secrets.token_urlsafe(30)
        self._run(
            "user-create",
            [
                binaries["radosgw-admin"],
                "-c",
                str(conf),
                "user",
                "create",
                "--uid=storage-adapter",
                "--display-name=storage-adapter",
                f"--access-key={access_key_id}",
                f"--secret-key={secret_access_key}",
            ],
            deadline,
            quiet=True,
        )
        self._spawn("radosgw", [binaries["radosgw"], "-c", str(conf), "-n", "client.rgw", "-f"])

        endpoint = S3Endpoint(
            name=self.name,
            endpoint=f"http://127.0.0.1:{rgw_port}",
            bucket=self.bucket,
            access_key_id=access_key_id,
            secret_access_key=secret_access_key,
        )
        try:
            create_bucket(endpoint, deadline, self._all_running)
            wait_until_bucket_answers(endpoint, max(deadline - time.monotonic(), 5.0), self._all_running)
        except ServerUnavailable as exc:
            if str(self.log_dir) in str(exc):  # already names its log (a daemon exited)
                raise
            raise type(exc)(f"{exc}; see {self.log_dir}/client.rgw.log") from exc
        self.ready_s = time.monotonic() - started
        return endpoint

    def _run(self, step: str, args: list[str], deadline: float, quiet: bool = False) -> str:
        """Run one bootstrap command to completion within ``deadline``; return its stdout.

        Its stderr goes to ``<step>.log`` in the log directory, named in the error when it fails. With
        ``quiet`` stdout is discarded unread, for commands that print secrets.
        """
        assert self.log_dir is not None
        log = self.log_dir / f"{step}.log"
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ServerStartFailed(f"ceph did not start within {self.start_timeout_s:.0f}s (before {step})")
        with log.open("wb") as err:
            try:
                completed = subprocess.run(
                    args,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL if quiet else subprocess.PIPE,
                    stderr=err,
                    cwd=self._state,
                    timeout=remaining,
                )
            except subprocess.TimeoutExpired:
                raise ServerStartFailed(
                    f"ceph: {step} did not finish within {self.start_timeout_s:.0f}s of start; see {log}"
                ) from None
        if completed.returncode != 0:
            raise ServerStartFailed(f"ceph: {step} failed with status {completed.returncode}; see {log}")
        return "" if quiet else completed.stdout.decode(errors="replace")

    def _spawn(self, name: str, args: list[str]) -> None:
        """Start a daemon in the foreground (``-f``) in its own session; its console output is logged."""
        assert self.log_dir is not None
        log = self.log_dir / f"{name}.out"
        with log.open("wb") as out:
            process = launch_server_process(args, out, cwd=self._state)
        self._daemons.append(_Daemon(name, process, log))

    def _all_running(self) -> bool:
        """True while every daemon runs; otherwise raises ServerUnavailable naming the first that exited.

        Raising (rather than returning False) keeps the daemon and its log in the one-line reason.
        """
        for daemon in self._daemons:
            status = daemon.process.poll()
            if status is not None:
                raise ServerStartFailed(
                    f"ceph: {daemon.name} exited with status {status} while starting; see {daemon.log} "
                    f"and {self.log_dir}"
                )
        return True

    def stop(self) -> None:
        """Stop the daemons (radosgw, OSD, then monitor, each killed after a short grace), remove the state,
        and remove the logs unless the start failed. Safe to call twice."""
        daemons, self._daemons = self._daemons, []
        for daemon in reversed(daemons):  # clients before the cluster they shut down through
            stop_session(daemon.process, _STOP_GRACE_S)
        if self._state is not None:
            shutil.rmtree(self._state, ignore_errors=True)
            self._state = None
        if self.log_dir is not None and self.ready_s is not None:
            shutil.rmtree(self.log_dir, ignore_errors=True)
            self.log_dir = None
