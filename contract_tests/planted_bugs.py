"""Deliberately broken adapters: the bugs the contract suite and the linearizability checker must catch.

Each wraps a real adapter (``open_adapter(url, **options)``) and breaks exactly one operation, widening
its race window with a sleep so a synchronized burst of workers hits the window every run:

* :func:`open_racy_cas` - ``write_if_match`` as an unserialized read, compare, sleep, unconditional write:
  two callers holding the same token both succeed (a lost update).
* :func:`open_torn_write` - ``write`` stores a prefix of the body, sleeps, then stores the whole body:
  a concurrent reader sees bytes nobody wrote.
* :func:`open_check_then_act_create` - ``write_if_absent`` as ``exists()``, sleep, ``write()``:
  several callers win the same create.

Two misdeclare a capability (the register model of the linearizability checker has no rename and no
processes, so they are not in ``PLANTED_BUGS`` either): the contract checks declarations, never believes
them.

* :func:`open_copying_rename` - ``rename`` as read, sleep, write, delete, while the inner adapter's
  capabilities still declare ``atomic_rename`` (a CAS on the source inside the window is lost).
* :func:`open_misdeclared_per_process` - capabilities declare ``shared_across_processes=False`` over a
  shared store, so the process clauses would skip.

Two more break the referee's bounds rather than its checker (so they are not in ``PLANTED_BUGS``, whose
bugs the linearizability checker must catch): every clause must still end with a verdict in bounded time.

* :func:`open_rejecting_cas` - ``write_if_match`` always answers None, as a server that rejects If-Match
  with the current ETag (Ceph RGW 16.2 with quoted ETags): a CAS race can never progress.
* :func:`open_hanging_cas` - ``write_if_match`` never returns (a request the server never answers).

Everything else is delegated; ``child(prefix)`` returns the same broken kind; the wrappers pickle (so
processes and Spark tasks reopen the same bug), compare equal by (kind, inner adapter, window), and
report the inner adapter's ``capabilities``. The factories accept one extra option, ``bug_window_s``
(default 0.05), the sleep inside the race window. Usable as a contract target:
``--storage-factory contract_tests.planted_bugs:open_racy_cas``.
"""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

from storage_adapter import open_adapter
from storage_adapter.errors import NotFoundError
from storage_adapter.keys import validate_key
from storage_adapter.types import Capabilities

DEFAULT_WINDOW_S = 0.05


class PlantedBugAdapter:
    """Base of the broken adapters: delegates every attribute to ``inner``."""

    def __init__(self, inner: Any, window_s: float = DEFAULT_WINDOW_S) -> None:
        self.inner = inner
        self.window_s = window_s

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def child(self, prefix: str) -> PlantedBugAdapter:
        return type(self)(self.inner.child(prefix), self.window_s)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.inner, self.window_s))

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.inner == self.inner and other.window_s == self.window_s

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.inner, self.window_s))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r}, window_s={self.window_s})"


class RacyCasAdapter(PlantedBugAdapter):
    """BUG: compare-and-swap by read, compare, then an unconditional write (nothing serializes them)."""

    def write_if_match(self, key: str, data: bytes | str, token: str) -> str | None:
        try:
            current = self.inner.read_versioned(key)
        except NotFoundError:
            return None
        if current.token != token:
            return None
        time.sleep(self.window_s)
        return self.inner.write(key, data)  # type: ignore[no-any-return]


class TornWriteAdapter(PlantedBugAdapter):
    """BUG: a write that is visible half-done: first a prefix of the body, then the whole body."""

    def write(self, key: str, data: bytes | str) -> str:
        body = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        self.inner.write(key, body[: len(body) // 2])
        time.sleep(self.window_s)
        return self.inner.write(key, body)  # type: ignore[no-any-return]


class CheckThenActCreateAdapter(PlantedBugAdapter):
    """BUG: create-if-absent as a check followed by an unconditional write."""

    def write_if_absent(self, key: str, data: bytes | str) -> str | None:
        if self.inner.exists(key):
            return None
        time.sleep(self.window_s)
        return self.inner.write(key, data)  # type: ignore[no-any-return]


class CopyingRenameAdapter(PlantedBugAdapter):
    """BUG: rename as a copy then a delete (not atomic), under capabilities that declare it atomic."""

    def rename(self, src: str, dst: str) -> None:
        if validate_key(src) == validate_key(dst):
            self.inner.rename(src, dst)
            return
        data = self.inner.read_bytes(src)
        time.sleep(self.window_s)
        self.inner.write(dst, data)
        self.inner.delete(src)


class MisdeclaredPerProcessAdapter(PlantedBugAdapter):
    """BUG: declares a per-process store (``shared_across_processes=False``) over a shared one."""

    @property
    def capabilities(self) -> Capabilities:
        declared: Capabilities = self.inner.capabilities
        return replace(declared, shared_across_processes=False)


class RejectingCasAdapter(PlantedBugAdapter):
    """BUG: compare-and-swap rejects every token, the current one included."""

    def write_if_match(self, key: str, data: bytes | str, token: str) -> str | None:
        return None


class HangingCasAdapter(PlantedBugAdapter):
    """BUG: compare-and-swap blocks forever (a call the server never answers)."""

    def write_if_match(self, key: str, data: bytes | str, token: str) -> str | None:
        threading.Event().wait()
        raise AssertionError("unreachable: the wait above never ends")


def _open(kind: type[PlantedBugAdapter], url: str, options: dict[str, Any]) -> PlantedBugAdapter:
    window_s = float(options.pop("bug_window_s", DEFAULT_WINDOW_S))
    return kind(open_adapter(url, **options), window_s)


def open_racy_cas(url: str, **options: Any) -> PlantedBugAdapter:
    """An adapter for ``url`` whose ``write_if_match`` loses updates under concurrency."""
    return _open(RacyCasAdapter, url, options)


def open_torn_write(url: str, **options: Any) -> PlantedBugAdapter:
    """An adapter for ``url`` whose ``write`` is visible half-done."""
    return _open(TornWriteAdapter, url, options)


def open_check_then_act_create(url: str, **options: Any) -> PlantedBugAdapter:
    """An adapter for ``url`` whose ``write_if_absent`` lets several concurrent callers win."""
    return _open(CheckThenActCreateAdapter, url, options)


def open_copying_rename(url: str, **options: Any) -> PlantedBugAdapter:
    """An adapter for ``url`` whose ``rename`` copies then deletes although declared atomic."""
    return _open(CopyingRenameAdapter, url, options)


def open_misdeclared_per_process(url: str, **options: Any) -> PlantedBugAdapter:
    """An adapter for ``url`` that declares its (shared) store per-process."""
    return _open(MisdeclaredPerProcessAdapter, url, options)


def open_rejecting_cas(url: str, **options: Any) -> PlantedBugAdapter:
    """An adapter for ``url`` whose ``write_if_match`` never succeeds."""
    return _open(RejectingCasAdapter, url, options)


def open_hanging_cas(url: str, **options: Any) -> PlantedBugAdapter:
    """An adapter for ``url`` whose ``write_if_match`` never returns."""
    return _open(HangingCasAdapter, url, options)


PLANTED_BUGS = {
    "racy_cas": open_racy_cas,
    "torn_write": open_torn_write,
    "check_then_act_create": open_check_then_act_create,
}
