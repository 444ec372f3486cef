"""The minimal third-party backend: a per-process dict store, addressed as ``dict://NAME/prefix``.

Built on the public surface only (``storage_adapter.driver``, ``registry``, ``types``, ``streams``,
``errors``, ``keys``): one :class:`DictDriver` implementing every method of the ``Driver`` protocol, and
one :class:`~storage_adapter.registry.Backend`. The adapter above it validates keys, ranges, bodies and
tokens before any call reaches the driver, and derives everything else (``read_if_exists``,
``delete_prefix``, ``iter_list``, the async twin, the fsspec face). ``tests/test_dict_backend_example.py``
runs the whole contract against it.

Every call (every page of a listing) is one step under one lock, so the store is linearizable within
the process. A token is a process-wide counter, quoted like an ETag, drawn by every put and rename: no
two versions share one.

Registration is a function, :func:`register`, not a side effect of importing the module: importing it
(to read it, to type-check it, or to load ``BACKEND`` from an entry point, which registers it itself)
changes nothing process-wide. A process that calls ``register()`` knows the ``dict://`` scheme; for
every process to know it, spawned ones included (the contract's process races reopen adapters in
them), a package declares the entry point ``dict = dict_backend:BACKEND`` in the group
``storage_adapter.backends``, which the registry loads the first time a name or scheme is not found.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Generator, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import NamedTuple
from urllib.parse import SplitResult, unquote

from storage_adapter.driver import OVERWRITE, PutBody, PutKind, PutMode
from storage_adapter.errors import ConfigurationError, InvalidKeyError, NotFoundError
from storage_adapter.keys import join_key, validate_prefix
from storage_adapter.registry import AdapterConfig, Backend, register_backend
from storage_adapter.streams import RangeSource, WholeSource, clip
from storage_adapter.types import Capabilities, ObjectInfo, Support

PAGE = 1000  # objects per page of list_pages, as the built-in backends


class _Version(NamedTuple):
    data: bytes
    token: str
    modified: datetime


_LOCK = threading.Lock()  # held for every call: each is one atomic step
_STORES: dict[str, dict[str, _Version]] = {}  # store name -> path (root prefix joined) -> its version
_TOKENS = itertools.count(1)
_clock = datetime.fromtimestamp(0, UTC)


def _new_version(data: bytes) -> _Version:
    """Under _LOCK: ``data`` with a token no version had before, modified no earlier than the last one
    (the wall clock may step back; this clock never does)."""
    global _clock
    _clock = max(_clock, datetime.now(UTC))
    return _Version(data, f'"{next(_TOKENS)}"', _clock)


class DictDriver:
    """The driver of one adapter: its store's dict, below its root prefix. Keys arrive validated and
    relative to the root; ranges arrive checked."""

    def __init__(self, config: AdapterConfig) -> None:
        self.name, self._store, self._root = config.backend, config.location, config.prefix

    def _path(self, key: str) -> str:
        return join_key(self._root, key)

    def _objects(self) -> dict[str, _Version]:
        """Under _LOCK: the store's dict (looked up on each call: a dropped scratch store is empty)."""
        return _STORES.setdefault(self._store, {})

    def _current(self, key: str) -> _Version:
        """Under _LOCK: the object's version; NotFoundError naming key and backend when it is absent."""
        found = self._objects().get(self._path(key))
        if found is None:
            raise NotFoundError(f"not found: {key!r} on {self.name}", key=key, backend=self.name)
        return found

    def _below(self, prefix: str, after: str = "") -> list[tuple[str, _Version]]:
        """(key, version) of every object under ``prefix`` (whole segments) whose key sorts after
        ``after``, in key order: one step under the lock."""
        base = "/".join(part for part in (self._root, prefix) if part)
        start = base + "/" if base else ""
        cut = len(self._root) + 1 if self._root else 0
        with _LOCK:
            items = self._objects().items()
            found = [(p[cut:], v) for p, v in items if p.startswith(start) and p[cut:] > after]
        return sorted(found)

    # -- reads ------------------------------------------------------------------------------------------
    def get(self, key: str) -> bytes:
        return self.get_versioned(key)[0]

    def get_versioned(self, key: str) -> tuple[bytes, str]:
        with _LOCK:
            found = self._current(key)
        return found.data, found.token

    def head_token(self, key: str) -> str:
        return self.get_versioned(key)[1]

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        data = self.get(key)  # one version: bytes never change once stored
        spans = [clip(start, end, len(data), key, self.name) for start, end in ranges]
        return [data[start:end] for start, end in spans]

    def open_source(self, key: str) -> RangeSource:
        return WholeSource(*self.get_versioned(key))  # the opened version's bytes, kept by the reader

    def get_buffer(self, key: str) -> memoryview:
        return memoryview(self.get(key))  # read-only, no copy

    def list_pages(
        self, prefix: str, start_after: str | None = None
    ) -> Generator[list[ObjectInfo], None, None]:
        after = start_after or ""
        while page := self._below(prefix, after)[:PAGE]:  # each page taken when it is asked for
            yield [ObjectInfo(key, len(v.data), v.token, v.modified) for key, v in page]
            if len(page) < PAGE:
                return
            after = page[-1][0]

    def list_dir(self, prefix: str) -> tuple[list[ObjectInfo], list[str]]:
        objects, prefixes = [], set()
        for key, v in self._below(prefix):
            child, below, _ = key[len(prefix) + 1 if prefix else 0 :].partition("/")
            if below:
                prefixes.add(join_key(prefix, child))
            else:
                objects.append(ObjectInfo(key, len(v.data), v.token, v.modified))
        return objects, sorted(prefixes)

    # -- mutations --------------------------------------------------------------------------------------
    def put(self, key: str, body: PutBody, mode: PutMode = OVERWRITE) -> str | None:
        # A stream is read whole first: if it raises, nothing was stored.
        data = body if isinstance(body, bytes) else b"".join(body)
        with _LOCK:
            objects, path = self._objects(), self._path(key)
            current = objects.get(path)
            if mode.kind is PutKind.CREATE and current is not None:
                return None
            if mode.kind is PutKind.MATCH and (current is None or current.token != mode.token):
                return None
            objects[path] = version = _new_version(data)
        return version.token

    def delete(self, key: str) -> None:
        with _LOCK:
            self._objects().pop(self._path(key), None)  # idempotent: absent is fine

    def delete_many(self, keys: Sequence[str]) -> None:
        with _LOCK:
            objects = self._objects()
            for key in keys:
                objects.pop(self._path(key), None)

    def rename(self, src: str, dst: str) -> None:
        with _LOCK:  # one step: declared atomic_rename=True
            objects, data = self._objects(), self._current(src).data
            del objects[self._path(src)]
            objects[self._path(dst)] = _new_version(data)  # a new version: a new token

    def remove_orphans(self, min_age_s: float) -> int:
        return 0  # a put stores complete bytes or nothing: no leftovers


def _locate(parts: SplitResult, url: str) -> tuple[str, str]:
    """``dict://NAME/prefix`` -> (NAME, prefix)."""
    if not parts.netloc:
        raise ConfigurationError(f"dict URL {url!r} needs a store name: dict://NAME/prefix", key=url)
    try:
        return parts.netloc, validate_prefix(unquote(parts.path, errors="strict").lstrip("/"), "dict")
    except (InvalidKeyError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"dict URL {url!r} has an invalid prefix: {exc}", key=url) from None


@contextmanager
def scratch() -> Iterator[str]:
    """The URL of a private, throwaway store (tests, ``storage-adapter check``), dropped afterwards."""
    name = f"scratch-{uuid.uuid4().hex[:12]}"
    try:
        yield f"dict://{name}"
    finally:
        with _LOCK:
            _STORES.pop(name, None)


BACKEND = Backend(
    name="dict",
    scheme="dict",
    capabilities=Capabilities(
        backend="dict",
        write_if_absent=Support.NATIVE,  # decided under the lock
        write_if_match=Support.NATIVE,
        atomic_rename=True,  # one step under the lock
        shared_across_processes=False,  # each process has its own dicts
        equal_content_equal_token=False,
        token_semantics="a process-wide counter drawn by every put and rename: never repeats in the process",
        durable=False,  # gone with the process
        single_delete="removal from the process's dict, under its lock",
        batch_delete="removal of every key from the process's dict, under one hold of its lock",
        reclaims_orphans=False,
        streamed_conditional_write=Support.NATIVE,  # a stream is buffered, then decided under the lock
    ),
    locate=_locate,
    driver=DictDriver,
    scratch=scratch,
)


def register() -> Backend:
    """Register ``BACKEND`` in this process (again: no-op); return it."""
    return register_backend(BACKEND)
