"""An adapter whose readers add up the bytes they read: what a ranged reader (pyarrow, DuckDB) fetches."""

from __future__ import annotations

from typing import Any

from storage_adapter.protocol import StorageAdapter
from storage_adapter.streams import ObjectReader


class CountedSource:
    """A RangeSource over an adapter's reader that records the size of every read it makes."""

    def __init__(self, reader: ObjectReader, read: list[int]) -> None:
        self._reader, self._read = reader, read
        self.size, self.token = reader.size, reader.token

    def read_into(self, offset: int, buffer: memoryview) -> int:
        self._reader.seek(offset)
        got = self._reader.readinto(buffer) or 0
        self._read.append(got)
        return got

    def close(self) -> None:
        self._reader.close()


class CountedReads:
    """``inner``, with the size of every read made through its ``open_reader`` appended to ``read``."""

    def __init__(self, inner: StorageAdapter) -> None:
        self.inner = inner
        self.read: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def open_reader(self, key: str) -> ObjectReader:
        return ObjectReader(CountedSource(self.inner.open_reader(key), self.read))
