"""Per-call deadlines for store requests, so a slow or hung backend fails the caller fast.

Python cannot cancel a blocked call: a request that misses its deadline keeps running on a daemon thread
and its effect (if any) lands later. That is safe for the idempotency store because every mutation is
conditional and fenced: a late reservation is an in-progress record whose lease goes stale and is
reconciled; a late finalize or heartbeat only succeeds if the record is still exactly what it read. The
one unconditional write, an outcome's attachment, has a name of its reservation and its content: a late
PUT writes the bytes a record naming it describes, or an orphan the purge removes; and it is deleted only
once no record can name it again, so a late DELETE never hits one a record needs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from storage_adapter.errors import BackendUnavailableError
from storage_adapter.idempotency.errors import StoreUnavailableError

T = TypeVar("T")


def call_with_deadline(call: Callable[[], T], seconds: float | None, what: str) -> T:
    """Run ``call`` and return its result, or raise StoreUnavailableError if it takes longer than
    ``seconds`` (None: no deadline) or raises BackendUnavailableError. Other exceptions propagate."""
    if seconds is None:
        return translate_unavailable(call, what)
    box: dict[str, object] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = translate_unavailable(call, what)
        except BaseException as exc:  # handed to the waiting caller, re-raised there
            box["error"] = exc
        done.set()

    threading.Thread(target=run, name=f"idempotency-store: {what}", daemon=True).start()
    if not done.wait(seconds):
        raise StoreUnavailableError(f"idempotency store did not answer {what} within {seconds:g} s", key=what)
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


def translate_unavailable(call: Callable[[], T], what: str) -> T:
    """Run ``call``; a BackendUnavailableError becomes StoreUnavailableError (the handler's 503)."""
    try:
        return call()
    except BackendUnavailableError as exc:
        raise StoreUnavailableError(
            f"idempotency store unavailable during {what}: {exc}", key=exc.key
        ) from exc
