"""Keeps an owner's lease alive from the moment it owns a record (reconciliation included) until it settles
it, and says at every moment whether ownership can still be proven.

A daemon thread heartbeats (a fenced CAS) every interval. ``lost`` becomes True, and stays True, when:

* the store answers that the reservation is gone (taken over, purged, finalized, cancelled), or the
  record can no longer be read (CorruptRecordError: it stays in place);
* a heartbeat fails with any error other than "unavailable" (PermissionDeniedError, a broken or
  panicking backend, anything): such a failure is not retried, ownership is no longer provable;
* no heartbeat has succeeded for so long that the last proven lease, minus a safety ``margin``, has run
  out by the store's clock. This covers an owner cut off from the store whose heartbeats keep failing
  as unavailable (retried every quarter interval) or hang past their deadline: it learns it may have
  been replaced *before* a successor can take the record over (successors wait for the lease plus the
  store's skew grace).

``confirm()`` proves ownership now, by a heartbeat CAS from the calling thread (serialized with the
thread's): the owner calls it after reconciling and before it runs the handler.
"""

from __future__ import annotations

import threading
from datetime import timedelta

from storage_adapter.idempotency.errors import StoreUnavailableError
from storage_adapter.idempotency.store import IdempotencyStore, Owned, Transition, Updated


class LeaseKeeper:
    """Context manager; ``owned`` is the latest handle (its token advances with every heartbeat).
    ``loss`` is the store's answer that ended ownership (LostOwnership, Finalized, Cancelled, NotFound),
    ``error`` the heartbeat error that did, if any."""

    def __init__(
        self, store: IdempotencyStore, owned: Owned, interval_s: float, margin_s: float | None = None
    ) -> None:
        self.store = store
        self.owned = owned
        self.interval_s = interval_s
        lease_s = store.lease.total_seconds()
        self.margin = timedelta(seconds=lease_s / 4 if margin_s is None else margin_s)
        self.heartbeats = 0
        self.loss: Transition | None = None
        self.error: BaseException | None = None
        self._proven_until = owned.record.lease_expires_at - self.margin
        self._lost = threading.Event()
        self._definite = threading.Event()  # the store said so, or a heartbeat failed for good
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"lease {owned.record.key}", daemon=True)

    @property
    def lost(self) -> bool:
        """True once ownership can no longer be proven (sticky until a successful ``confirm``)."""
        if not self._lost.is_set() and self.store.clock() >= self._proven_until:
            self._lost.set()
        return self._lost.is_set()

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop heartbeating (before the owner finalizes or cancels: the two would race on the token)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def confirm(self) -> bool:
        """Prove ownership now with a fenced heartbeat CAS. True: owned, with a fresh lease (``lost`` is
        reset). False: the store says the reservation is gone (``loss``), or a heartbeat already failed for
        good. Raises what the heartbeat raises (StoreUnavailableError, any other StorageError)."""
        if self._definite.is_set():
            return False
        if self._beat():
            self._lost.clear()
            return True
        return False

    def _beat(self) -> bool:
        with self._lock:
            outcome = self.store.heartbeat(self.owned)
            if not isinstance(outcome, Updated):
                self.loss = outcome
                self._give_up()
                return False
            self.owned = outcome.owned
            self._proven_until = outcome.owned.record.lease_expires_at - self.margin
            self.heartbeats += 1
            return True

    def _give_up(self) -> None:
        self._definite.set()
        self._lost.set()

    def _run(self) -> None:
        wait = self.interval_s
        while not self._stop.wait(wait):
            wait = self.interval_s
            try:
                if not self._beat():
                    return
            except StoreUnavailableError:
                wait = self.interval_s / 4  # retried sooner; ``lost`` turns True when the lease runs out
            except BaseException as exc:  # any other failure ends provable ownership
                self.error = exc
                self._give_up()
                return
