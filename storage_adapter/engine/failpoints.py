"""Named failpoints: inject faults and crashes at exact steps of the commit and recovery protocol.

Disabled failpoints cost one truthiness test of an empty dict (``if _ARMED``), so call sites stay in
production code. Arm them in-process with :func:`armed` (a context manager) or :func:`arm`, or in a
subprocess through the environment variable ``STORAGE_ADAPTER_FAILPOINTS``, read at import::

    STORAGE_ADAPTER_FAILPOINTS="commit.before_publish=exit;recovery.audit_write=error*2"

Actions: ``error`` raises :class:`InjectedFault` (a StorageError, like a failed request); ``crash``
raises :class:`SimulatedCrash` (a BaseException nothing in the engine catches: the in-process stand-in
for process death); ``exit`` kills the process with SIGKILL (no cleanup at all). ``*N`` fires N times
then disarms; ``@K`` skips the first K hits (to crash between the table writes of a multi-table commit).
In-process, a callable may be armed instead of an action: it runs at the point (to interleave another
actor deterministically).

``*N`` counts per process. When ``STORAGE_ADAPTER_FAILPOINTS_DIR`` names a directory, it counts across
every process sharing it instead (each firing claims a marker file with O_EXCL): this is how a Spark task
attempt fails once in total, although every retry runs in a fresh worker process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from storage_adapter.errors import StorageError

ENV_VAR = "STORAGE_ADAPTER_FAILPOINTS"
SHARED_COUNT_DIR_VAR = "STORAGE_ADAPTER_FAILPOINTS_DIR"

# Every failpoint the engine hits, in protocol order. Tests iterate this to crash between every step.
COMMIT_POINTS = (
    "commit.before_sidecar",  # manifest read and validated, nothing written yet (fragments aside)
    "commit.after_sidecar",  # Phase A's sidecar written, no head advanced
    "commit.after_key_claim",  # Phase A's key claim won, no head advanced
    "commit.after_table_version",  # fires after each table version write (Phase B), use @K for the K+1-th
    "commit.before_publish",  # Phase B done
    "commit.after_publish",  # Phase C done: durable, sidecar still present
    "commit.after_key_publish",  # the key's ledger entry says published; sidecar still present
    "commit.after_sidecar_delete",  # Phase D done
    "publish.before_cas",  # any publish (writer or roll-forward): history record and table map written, no CAS
)
STORAGE_POINTS = (
    "recovery.sidecar_write",  # the Phase A PUT
    "recovery.sidecar_delete",  # the Phase D DELETE
    "recovery.sidecar_list",  # the heal's LIST of __recovery/
    "recovery.sidecar_read",  # between listing a sidecar and reading it
    "recovery.audit_write",  # the audit PUT
)
RECOVERY_POINTS = (
    "recovery.after_classify",  # decision taken, nothing done
    "recovery.after_fence",  # a writer presumed dead fenced (its fence record published), nothing else done
    "recovery.after_roll_forward_publish",  # roll-forward manifest published, audit not yet written
    "recovery.after_restore",  # fires after each roll-back restore version write
    "recovery.after_audit",  # audit written, sidecar not yet deleted
)
LOAD_POINTS = (
    "spark_load.after_fragment",  # a bulk-load task wrote a fragment and has not reported it yet
)
ALL_POINTS = COMMIT_POINTS + STORAGE_POINTS + RECOVERY_POINTS + LOAD_POINTS


class InjectedFault(StorageError):
    """A storage request failed because a failpoint said so."""


class SimulatedCrash(BaseException):  # models process death: not an error to handle
    """The process "died" at a failpoint. Deliberately not an Exception: no handler in the engine catches it,
    so no cleanup runs that a real crash would skip."""


@dataclass
class _Arming:
    action: str | Callable[[str], None]
    remaining: int | None  # None: fires until disarmed
    skip: int
    times: int | None = None  # the armed budget, for counting across processes


_ARMED: dict[str, _Arming] = {}
_LOCK = threading.Lock()


def failpoint(name: str) -> None:
    """Hit the failpoint ``name``: nothing happens unless it is armed."""
    if _ARMED:
        _fire(name)


def _fire(name: str) -> None:
    with _LOCK:
        arming = _ARMED.get(name)
        if arming is None:
            return
        if arming.skip > 0:
            arming.skip -= 1
            return
        if arming.remaining is not None:
            if not _claim_shared_firing(name, arming):
                return
            arming.remaining -= 1
            if arming.remaining <= 0:
                del _ARMED[name]
        action = arming.action
    if callable(action):
        action(name)
    elif action == "error":
        raise InjectedFault(f"injected fault at failpoint {name!r}", key=name)
    elif action == "crash":
        raise SimulatedCrash(name)
    elif action == "exit":
        os.kill(os.getpid(), signal.SIGKILL)


def _claim_shared_firing(name: str, arming: _Arming) -> bool:
    """With a shared count directory, claim one of the ``times`` firings across processes (else: True)."""
    directory = os.environ.get(SHARED_COUNT_DIR_VAR)
    if not directory:
        return True
    for index in range(arming.times or 0):
        try:
            os.close(
                os.open(os.path.join(directory, f"{name}.{index}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            )
            return True
        except FileExistsError:
            continue
    return False


def is_armed(name: str) -> bool:
    """Whether ``name`` is armed in this process (lets a step keep its failpoint's exact meaning)."""
    return name in _ARMED


def arm(name: str, action: str | Callable[[str], None], times: int | None = None, skip: int = 0) -> None:
    """Arm ``name``. ``action`` is ``error``, ``crash``, ``exit`` or a callable taking the name."""
    if name not in ALL_POINTS:
        raise ValueError(f"unknown failpoint {name!r}; known: {', '.join(ALL_POINTS)}")
    if not callable(action) and action not in ("error", "crash", "exit"):
        raise ValueError(f"unknown failpoint action {action!r} for {name!r}")
    with _LOCK:
        _ARMED[name] = _Arming(action, times, skip, times)


def disarm(name: str | None = None) -> None:
    """Disarm ``name``, or every failpoint."""
    with _LOCK:
        if name is None:
            _ARMED.clear()
        else:
            _ARMED.pop(name, None)


@contextlib.contextmanager
def armed(
    name: str, action: str | Callable[[str], None], times: int | None = None, skip: int = 0
) -> Iterator[None]:
    """``with armed("commit.before_publish", "crash"): ...`` arms for the block, disarms after."""
    arm(name, action, times, skip)
    try:
        yield
    finally:
        disarm(name)


def arm_from_spec(spec: str) -> None:
    """Arm from ``name=action[*times][@skip];...`` (the environment variable's format)."""
    for item in filter(None, (part.strip() for part in spec.split(";"))):
        name, _, rest = item.partition("=")
        skip = 0
        if "@" in rest:
            rest, _, skip_text = rest.partition("@")
            skip = int(skip_text)
        times = None
        if "*" in rest:
            rest, _, times_text = rest.partition("*")
            times = int(times_text)
        arm(name.strip(), rest.strip(), times, skip)


if os.environ.get(ENV_VAR):
    arm_from_spec(os.environ[ENV_VAR])
