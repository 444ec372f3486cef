"""Work on many keys at once, shared by every driver: listing pages, deletes of many keys and requests
run side by side."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from typing import TypeVar

from storage_adapter.errors import BatchDeleteError, StorageError
from storage_adapter.faults import carried

T = TypeVar("T")
R = TypeVar("R")

# Objects per listing page: S3's ListObjectsV2 maximum, so on S3 one page is one request.
LIST_PAGE = 1000
# Keys per multi-object delete: S3's DeleteObjects maximum.
DELETE_BATCH = 1000
# Single-object deletes in flight where a backend has no multi-object delete: enough to hide a request's
# latency (or a directory fsync), few enough not to flood a server or the two cores this runs beside.
DELETE_WORKERS = 8
# Small requests one operation runs side by side (list_dir's prefix confirmations): obstore releases
# the GIL while a request is out, so they overlap; the engine's shared pool is a layer above the core.
REQUEST_WORKERS = 16


def chunked(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` in consecutive lists of ``size`` (the last one shorter), taken lazily."""
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


def delete_each(
    delete: Callable[[str], None], keys: Sequence[str], backend: str, workers: int = DELETE_WORKERS
) -> None:
    """Call ``delete`` on every key, at most ``workers`` at a time. Every key is attempted; then
    BatchDeleteError names each key whose ``delete`` raised a StorageError, or the keys named by a
    BatchDeleteError it raised (a programming error raises as it is). An injected fault plan follows the calls into the workers."""
    if not keys:
        return
    with ThreadPoolExecutor(max_workers=min(workers, len(keys))) as pool:
        futures = [(key, pool.submit(carried(delete), key)) for key in keys]
    failures: dict[str, StorageError] = {}
    for key, future in futures:
        exc = future.exception()
        if isinstance(exc, BatchDeleteError):
            failures.update(exc.errors)  # ``delete`` deleted a group of keys: it named its own failures
        elif isinstance(exc, StorageError):
            failures[key] = exc
        elif exc is not None:
            raise exc
    if failures:
        raise BatchDeleteError.of(failures, backend)


def side_by_side(calls: Sequence[Callable[[], R]], workers: int = REQUEST_WORKERS) -> list[R]:
    """The results of ``calls``, in order, with up to ``workers`` of them in flight (no thread for a
    single call). Every call runs to its end; then the first failure, in call order, is raised. An
    injected fault plan follows the calls into the workers."""
    if len(calls) <= 1:
        return [call() for call in calls]
    with ThreadPoolExecutor(max_workers=min(workers, len(calls))) as pool:
        futures = [pool.submit(carried(call)) for call in calls]
    return [future.result() for future in futures]
