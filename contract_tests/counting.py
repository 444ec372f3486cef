"""CountingAdapter: counts storage requests per adapter method, to state costs as exact numbers.

Request counts are deterministic where timings are not, so tests may assert them and docs quote them.
Each counted method is one storage request, except two that stand for several: each page
``list_pages`` yields is one request (one ListObjectsV2 on S3), and ``delete_many`` counts one request per
batch of DELETE_BATCH keys (one DeleteObjects on S3; local unlinks each key, see
``capabilities.batch_delete``), and ``read_ranges`` one per range (one ranged GET each on S3).
``open_reader`` counts its opening (one HEAD on S3); each read of the reader is one more request, not
counted here. A streamed ``write`` counts one (a multipart upload on S3 is several). The derived operations (``read_text``, ``read_if_exists``, ``iter_list``,
``delete_prefix``, see storage_adapter.derived) are counted as the requests they make.
"""

from __future__ import annotations

import builtins
import math
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

from storage_adapter.batch import DELETE_BATCH
from storage_adapter.derived import DerivedOperations
from storage_adapter.protocol import StorageAdapter
from storage_adapter.types import ObjectInfo, SkippedObject

P = TypeVar("P", ObjectInfo, ObjectInfo | SkippedObject)  # what a counted page holds

COUNTED = (
    "read_bytes",
    "read_versioned",
    "read_range",
    "read_buffer",
    "open_reader",
    "exists",
    "list",
    "list_dir",
    "write",
    "write_if_absent",
    "write_if_match",
    "delete",
    "rename",
)


class CountingAdapter(DerivedOperations):
    """Wraps an adapter; every call of a counted method adds one to ``counts[method]``.

    Thread-safe. ``child`` returns a wrapper that shares this one's counter. Pickles as the inner adapter
    (counts are local to a process). ``latency_s`` adds that long a sleep to every request counted: a
    model of a network round trip over a fast backend (memory), so what overlapping requests saves can
    be measured without the CPU of a real server on the same machine.
    """

    def __init__(
        self,
        inner: StorageAdapter,
        counts: Counter[str] | None = None,
        latency_s: float = 0.0,
    ) -> None:
        self.inner = inner
        self.counts: Counter[str] = Counter() if counts is None else counts
        self.latency_s = latency_s
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in COUNTED:
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._count(name)
            return attr(*args, **kwargs)

        return counted

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counts[name] += n
        if self.latency_s:
            time.sleep(self.latency_s * n)

    def list_pages(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> Iterator[builtins.list[ObjectInfo]]:
        pages = self.inner.list_pages(prefix, start_after=start_after)
        return self._counted_pages(pages)

    def entry_pages(
        self, prefix: str = "", *, start_after: str | None = None
    ) -> Iterator[builtins.list[ObjectInfo | SkippedObject]]:
        """The inner adapter's (its skipped entries with them), each page counted as a ``list_pages``."""
        return self._counted_pages(self.inner.entry_pages(prefix, start_after=start_after))

    def _counted_pages(self, pages: Iterator[builtins.list[P]]) -> Iterator[builtins.list[P]]:
        for page in pages:
            self._count("list_pages")
            yield page

    def read_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> builtins.list[bytes]:
        parts = self.inner.read_ranges(key, ranges)
        self._count("read_ranges", len(parts))
        return parts

    def delete_many(self, keys: Iterable[str]) -> int:
        deleted = self.inner.delete_many(keys)
        self._count("delete_many", math.ceil(deleted / DELETE_BATCH))
        return deleted

    def child(self, prefix: str) -> CountingAdapter:
        return CountingAdapter(self.inner.child(prefix), self.counts, self.latency_s)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()

    def __reduce__(self) -> tuple[Any, ...]:
        return (CountingAdapter, (self.inner,))

    def __repr__(self) -> str:
        return f"CountingAdapter({self.inner!r}, total={self.total})"
