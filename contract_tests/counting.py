"""CountingAdapter: counts storage requests per adapter method, to state costs as exact numbers.

Request counts are deterministic where timings are not, so tests may assert them and docs quote them.
Each counted method is one storage request. The derived operations (``read_text``, ``read_if_exists``,
``delete_prefix``, see storage_adapter.derived) are counted as the requests they make.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from storage_adapter.adapter import ObjectStorageAdapter
from storage_adapter.derived import DerivedOperations

COUNTED = (
    "read_bytes", "read_versioned", "exists", "list", "list_dir",
    "write", "write_if_absent", "write_if_match", "delete", "rename",
)  # fmt: skip


class CountingAdapter(DerivedOperations):
    """Wraps an adapter; every call of a counted method adds one to ``counts[method]``.

    Thread-safe. ``child`` returns a wrapper that shares this one's counter. Pickles as the inner adapter
    (counts are local to a process).
    """

    def __init__(
        self, inner: ObjectStorageAdapter | CountingAdapter, counts: Counter[str] | None = None
    ) -> None:
        self.inner = inner
        self.counts: Counter[str] = Counter() if counts is None else counts
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name not in COUNTED:
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.counts[name] += 1
            return attr(*args, **kwargs)

        return counted

    def child(self, prefix: str) -> CountingAdapter:
        return CountingAdapter(self.inner.child(prefix), self.counts)

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
