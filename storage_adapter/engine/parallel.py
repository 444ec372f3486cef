"""Bounded concurrency for independent requests: the one way the engine overlaps round trips.

One pool of ``REQUESTS_IN_FLIGHT`` threads per process, shared by every engine: starting threads per call
cost more than the requests of a small commit or read saved (a 100-table commit on memory spent a third of
its time starting pools). A call made from a pool thread runs its items inline, so work never waits on a
pool its own thread is part of; a forked child gets a fresh pool (the parent's threads do not survive).
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from itertools import islice
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

REQUESTS_IN_FLIGHT = 64  # a 100-table commit's data and version PUTs go in 2 waves each; threads are cheap

_local = threading.local()
_pool_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def _mark_worker() -> None:
    _local.worker = True


def _forget_pool() -> None:
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget_pool)


def in_pool_thread() -> bool:
    """Whether the calling thread is one of the pool's (its calls must not wait on the pool)."""
    return getattr(_local, "worker", False)


def executor() -> ThreadPoolExecutor:
    """The process's shared pool (created on first use)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                REQUESTS_IN_FLIGHT, thread_name_prefix="engine-io", initializer=_mark_worker
            )
        return _pool


def settle(futures: Sequence[Future[Any]]) -> None:
    """Cancel the futures not started yet and wait for those running: after a failure, nothing of the
    call is still in flight when the error propagates."""
    for future in futures:
        future.cancel()
    wait(futures)


def map_bounded(call: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``[call(item) for item in items]`` on the shared pool, results in input order. The first failure
    raises once the calls in flight have finished; calls not started by then never start. One item, or a
    call from a pool thread, runs on the calling thread."""
    if len(items) <= 1 or in_pool_thread():
        return [call(item) for item in items]
    # A sliding window, not every item at once: 10,000 queued futures made the submitting thread fight the
    # workers for the queue's lock (a 10,000-fragment read spent most of its time in submit).
    pool, pending, results = executor(), iter(items), []
    window: deque[Future[R]] = deque(pool.submit(call, item) for item in islice(pending, REQUESTS_IN_FLIGHT))
    try:
        while window:
            results.append(window.popleft().result())
            for item in islice(pending, 1):
                window.append(pool.submit(call, item))
        return results
    finally:
        settle(window)


class Started:
    """Calls started on the shared pool while the caller does other work (:func:`start`). ``results``
    waits for them all: their results in order, or the first failure once every call has finished.
    ``settle`` waits without raising (the caller is already failing). Either way nothing of them is in
    flight afterwards."""

    def __init__(self, futures: Sequence[Future[Any]]) -> None:
        self._futures = futures

    def results(self) -> list[Any]:
        wait(self._futures)
        return [future.result() for future in self._futures]

    def settle(self) -> None:
        wait(self._futures)


def start(calls: Sequence[Callable[[], Any]]) -> Started:
    """Start ``calls`` on the shared pool and return at once, so the caller's own request overlaps them.
    From a pool thread (whose calls must not wait on the pool) they run here, before returning. At most
    ``REQUESTS_IN_FLIGHT`` calls (a commit's few PUTs): more would queue behind each other anyway."""
    if in_pool_thread():
        done: list[Future[Any]] = []
        for call in calls:
            future: Future[Any] = Future()
            try:
                future.set_result(call())
            except Exception as exc:
                future.set_exception(exc)
            done.append(future)
        return Started(done)
    pool = executor()
    return Started([pool.submit(call) for call in calls])
