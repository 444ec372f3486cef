"""CountingAdapter: counts storage requests per adapter method, to state costs as exact numbers.

Request counts are deterministic where timings are not, so tests may assert them and docs quote them.
Each adapter method is one storage request on every backend except ``delete_prefix`` (a listing plus one
delete per object, counted as such because it is implemented on top of ``list`` and ``delete``).
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from storage_adapter.adapter import ObjectStorageAdapter

COUNTED = (
    "read_bytes", "read_text", "read_if_exists", "read_versioned", "exists", "list", "list_dir",
    "write", "write_if_absent", "write_if_match", "delete", "rename",
)  # fmt: skip


class CountingAdapter:
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

    def delete_prefix(self, prefix: str) -> int:
        # Implemented here on top of counted calls so its real request count shows.
        infos = self.list(prefix)
        for info in infos:
            self.delete(info.key)
        return len(infos)

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
