"""Keeps an owner's lease alive while its handler runs: a daemon thread heartbeating every interval.

Heartbeats are best effort: a failed one (store unavailable) is retried at the next tick and never
reaches the handler. When the store says the reservation is gone (taken over, purged, finalized), or the
record can no longer be read (CorruptRecordError: it stays in place, and no heartbeat can prove ownership
of it), the keeper stops and ``lost`` becomes True so a handler can check before its irreversible step.
"""

from __future__ import annotations

import threading

from storage_adapter.idempotency.errors import CorruptRecordError, StoreUnavailableError
from storage_adapter.idempotency.store import IdempotencyStore, Owned, Updated


class LeaseKeeper:
    """Context manager; ``owned`` is the latest handle (its token advances with every heartbeat)."""

    def __init__(self, store: IdempotencyStore, owned: Owned, interval_s: float) -> None:
        self.store = store
        self.owned = owned
        self.interval_s = interval_s
        self.heartbeats = 0
        self._lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease {owned.record.key}", daemon=True)

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # Stop before the owner finalizes: the two would otherwise race on the record's token.
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                outcome = self.store.heartbeat(self.owned)
            except StoreUnavailableError:
                continue
            except CorruptRecordError:
                self._lost.set()
                return
            if not isinstance(outcome, Updated):
                self._lost.set()
                return
            self.owned = outcome.owned
            self.heartbeats += 1
