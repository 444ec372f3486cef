"""The local backend: a directory tree, read, listed and mutated without ever following a symlink.

obstore's LocalStore resolves paths with the kernel and follows symlinks, so it could read or list outside
the root; this backend does its own I/O on directory descriptors walked from the root with
``O_NOFOLLOW`` (see :mod:`storage_adapter.local_files`, which also serializes every mutation). The
policy, per operation, is in docs/local.md:

* a key or prefix whose path meets a symlink below the root is refused: PermissionDeniedError naming the
  key and the symlink, nothing read, written or removed;
* listings report every entry by its name: a regular file as an object, which the adapter's listing
  rule (storage_adapter.listing) skips when its name is no key (not UTF-8, control characters, ...);
  symlinks and special files as skipped entries; staging files ``name#<12 digits>`` (this backend's own
  writes in flight) not at all. One odd name on disk never breaks a listing;
* a directory is a prefix, not an object: reading it is NotFoundError.
"""

from __future__ import annotations

import builtins
import errno
import os
import stat
from collections.abc import Generator, Sequence
from contextlib import closing, suppress
from datetime import UTC, datetime, timedelta

from storage_adapter.batch import LIST_PAGE, chunked, delete_each
from storage_adapter.config import AdapterConfig
from storage_adapter.driver import OVERWRITE, PutBody, PutKind, PutMode
from storage_adapter.errors import StorageError, UnsupportedOperationError
from storage_adapter.keys import join_key
from storage_adapter.listing import Listed, is_listed_prefix, sort_listed
from storage_adapter.local_files import (
    DirChain,
    LocalMutator,
    dir_names,
    fault_point,
    is_staging_name,
    local_token,
    open_chain,
    open_object,
    open_subdir,
    read_into,
    read_object,
    stat_object,
    walk_in_key_order,
)
from storage_adapter.streams import clip
from storage_adapter.translation import Translation
from storage_adapter.types import ObjectInfo, SkippedObject, SkipReason

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class LocalDriver:
    """The driver the adapter calls for ``file://`` roots: same methods as ObstoreDriver.

    Keys are validated by the adapter; ``config.prefix`` (a child adapter's) is joined below the root, and
    its directories are walked like any other, never through a symlink.
    """

    def __init__(self, config: AdapterConfig, *, name: str | None = None) -> None:
        """The driver of the ``file://`` configuration ``config``; its messages name the backend ``name``
        (default: the config's), as for a user's LocalStore served by it."""
        self.name = name or config.backend
        self._prefix = config.prefix
        try:
            # The root is the user's: resolved once here; nothing below it is ever resolved again.
            root = os.path.realpath(config.location)
            os.makedirs(root, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot open {config.url} ({self.name}): {exc.strerror}") from exc
        self._root = root
        self._mutator = LocalMutator(root, durable=bool(config.option("durable")))

    def path(self, key: str) -> str:
        """The store path of ``key``: relative to the root, the adapter's prefix joined."""
        return join_key(self._prefix, key)

    def translated(self, key: str, action: str) -> Translation:
        """A context manager translating the OS's exceptions raised inside it, naming key and backend."""
        return Translation(self.name, key, action)

    def _listed(self, prefix: str) -> DirChain | None:
        """The open directory of the listing ``prefix`` (``""``: the adapter's own), None if absent."""
        return open_chain(self._root, dir_names(self.path(prefix) if prefix else self._prefix), create=False)

    # -- reads ---------------------------------------------------------------------------------------
    def get(self, key: str) -> bytes:
        return self.get_versioned(key)[0]

    def get_versioned(self, key: str) -> tuple[bytes, str]:
        """The bytes and the token of exactly those bytes (both from one open file), read in the calling
        thread (one openat2, fstat, read and close where no symlink is on the path)."""
        with self.translated(key, "read"):
            data, st = read_object(self._root, self.path(key))
            return data, local_token(st)

    def _open(self, key: str) -> tuple[int, os.stat_result]:
        """The object ``key`` opened for reading (the caller closes the descriptor), with its stat."""
        return open_object(self._root, self.path(key))

    def get_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> builtins.list[bytes]:
        """Every range from one open file: one version, whatever replaces the name meanwhile."""
        with self.translated(key, "read_range"):
            fd, st = self._open(key)
            try:
                clipped = [clip(start, end, st.st_size, key, self.name) for start, end in ranges]
                return [_pread(fd, start, end - start) for start, end in clipped]
            finally:
                os.close(fd)

    def open_source(self, key: str) -> _LocalSource:
        with self.translated(key, "open_reader"):
            fd, st = self._open(key)
        return _LocalSource(fd, st, self.translated(key, "read"))

    def get_buffer(self, key: str) -> memoryview:
        """Read straight into a buffer of the object's size: no copy into ``bytes``."""
        with self.translated(key, "read"):
            fd, st = self._open(key)
            try:
                buffer = bytearray(st.st_size)
                if read_into(fd, 0, memoryview(buffer)) < st.st_size:
                    raise OSError(errno.EIO, "object truncated while being read", self.path(key))
                return memoryview(buffer).toreadonly()
            finally:
                os.close(fd)

    def head_token(self, key: str) -> str:
        with self.translated(key, "head"):
            return local_token(stat_object(self._root, self.path(key)))

    def list_pages(
        self, prefix: str, start_after: str | None = None
    ) -> Generator[builtins.list[Listed], None, None]:
        """Pages of LIST_PAGE objects from a lazy walk in key order, from the first key after
        ``start_after`` (directories wholly before it are not even opened): the directories stay open
        (one descriptor per level) until the pages are taken or the generator is closed."""
        with self.translated(prefix, "list"):
            chain = self._listed(prefix)
            if chain is None:
                return
            with chain:
                yield from chunked(self._objects(chain.fd, prefix, start_after), LIST_PAGE)

    def list_dir(self, prefix: str) -> tuple[builtins.list[Listed], builtins.list[str]]:
        with self.translated(prefix, "list_dir"):
            chain = self._listed(prefix)
            if chain is None:
                return [], []
            with chain:
                fault_point("scandir")
                with os.scandir(chain.fd) as scan:
                    entries = list(scan)
                objects = [info for entry in entries if (info := self._info(chain.fd, prefix, entry))]
                prefixes = [
                    key
                    for entry in entries
                    if entry.is_dir(follow_symlinks=False)
                    and is_listed_prefix(key := f"{prefix}/{entry.name}" if prefix else entry.name)
                    and self._holds_objects(chain.fd, entry.name, key)
                ]
            return objects, prefixes

    def _objects(
        self, top: int, prefix: str, start_after: str | None = None
    ) -> Generator[Listed, None, None]:
        """Every entry below the open directory ``top`` (whose keys start with ``prefix``), lazily, in
        key order; only those after ``start_after`` if given."""
        for fd, path, entry in walk_in_key_order(top, prefix, start_after):
            info = self._info(fd, path, entry)
            if info is not None:
                yield info

    def _holds_objects(self, parent: int, name: str, key: str) -> bool:
        """Whether the directory ``name`` in ``parent`` holds an object, at any depth (S3 shows a prefix
        only then; a directory holding only staging files or symlinks is no prefix)."""
        fd = open_subdir(parent, name)
        if fd is None:
            return False
        try:
            with closing(self._objects(fd, key)) as entries:
                return any(sort_listed([entry])[0] for entry in entries)
        finally:
            os.close(fd)

    @staticmethod
    def _info(directory: int, path: str, entry: os.DirEntry[str]) -> Listed | None:
        """The entry ``entry`` of ``directory`` (keys starting with ``path``) as listed: a regular file as
        an object by its name (valid key or not), a symlink or special file as skipped; None for a
        directory, a staging file, or an entry gone since it was listed."""
        key = f"{path}/{entry.name}" if path else entry.name
        if entry.is_dir(follow_symlinks=False) or is_staging_name(entry.name):
            return None
        try:
            fault_point("stat")
            st = os.stat(entry.name, dir_fd=directory, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(st.st_mode):
            kind = "symlink" if stat.S_ISLNK(st.st_mode) else "special file"
            return SkippedObject(key, None, SkipReason.NOT_A_FILE, f"a {kind} is never followed or read")
        return ObjectInfo(
            key=key,
            size=st.st_size,
            token=local_token(st),
            last_modified=_EPOCH + timedelta(microseconds=st.st_mtime_ns // 1000),
        )

    # -- mutations: serialized and confined by LocalMutator --------------------------------------------
    def put(self, key: str, body: PutBody, mode: PutMode = OVERWRITE) -> str | None:
        path = self.path(key)
        with self.translated(key, mode.action):
            if isinstance(body, bytes):
                if mode.kind is PutKind.CREATE:
                    return self._mutator.write_if_absent(path, body)
                if mode.token is not None:
                    return self._mutator.write_if_match(path, body, mode.token)
                return self._mutator.write(path, body)
            return self._mutator.write_stream(
                path, body, create=mode.kind is PutKind.CREATE, token=mode.token
            )

    def delete(self, key: str) -> None:
        with self.translated(key, "delete"):
            self._mutator.delete(self.path(key))

    def delete_many(self, keys: Sequence[str]) -> None:
        """No multi-object delete on a file system: each key's own ``delete``, the keys of one directory
        in turn (they would only queue on its lock, and pruning then happens in one order), up to
        DELETE_WORKERS directories at a time."""
        by_directory: dict[str, builtins.list[str]] = {}
        for key in keys:
            by_directory.setdefault(key.rpartition("/")[0], []).append(key)
        delete_each(
            lambda directory: delete_each(self.delete, by_directory[directory], self.name, workers=1),
            builtins.list(by_directory),
            self.name,
        )

    def rename(self, src: str, dst: str) -> None:
        with self.translated(src, f"rename to {dst!r}"):
            self._mutator.rename(self.path(src), self.path(dst))

    def remove_orphans(self, min_age_s: float) -> int:
        with self.translated("", "remove_orphans"):
            return self._mutator.remove_orphans(self._prefix, min_age_s)


def _pread(fd: int, offset: int, size: int) -> bytes:
    """``size`` bytes from ``offset`` (fewer at the end of the file), in one copy when one pread does."""
    fault_point("read")
    data = os.pread(fd, size, offset)
    if len(data) == size or not data:
        return data
    # One read returns at most ~2 GiB on Linux: fill a buffer instead (a second copy, for such sizes only).
    buffer = bytearray(size)
    return bytes(buffer[: read_into(fd, offset, memoryview(buffer))])


class _LocalSource:
    """A reader's source on local: the opened file itself, so every read sees the version opened (files
    are never modified once published; a replace renames another file over the name)."""

    def __init__(self, fd: int, st: os.stat_result, translated: Translation) -> None:
        self._fd = fd
        self.size = st.st_size
        self.token = local_token(st)
        self._translated = translated

    def read_into(self, offset: int, buffer: memoryview) -> int:
        with self._translated:
            return read_into(self._fd, offset, buffer)

    def close(self) -> None:
        os.close(self._fd)


class LocalForeignWriter:
    """A :class:`~storage_adapter.driver.ForeignWriter` below a ``file://`` root: plain file system calls,
    as a shell or another program would make them (no lock, no staging, no fsync). A name is taken as
    ``os.fsencode`` takes it (a lone surrogate is the undecodable byte it stands for). A file system has
    no folder markers (its nearest thing, an empty directory, is no entry of any listing) and no name
    with an empty or ``.`` segment: such names are refused."""

    def __init__(self, config: AdapterConfig) -> None:
        self._base = os.path.join(os.path.realpath(config.location), *dir_names(config.prefix))

    def _path(self, name: str) -> bytes:
        if os.path.isabs(name) or ".." in name.split("/"):
            raise UnsupportedOperationError(
                f"{name!r} would leave the root on local", key=name, backend="local"
            )
        return os.fsencode(os.path.join(self._base, name))

    def put(self, name: str, data: bytes) -> None:
        path = self._path(name)
        if any(segment in ("", ".") for segment in name.split("/")):
            raise UnsupportedOperationError(f"a file system cannot hold {name!r}", key=name, backend="local")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as file:
            file.write(data)

    def remove(self, name: str) -> None:
        with suppress(OSError):
            os.unlink(self._path(name))

    def held(self) -> dict[str, int]:
        found: dict[str, int] = {}
        base = os.fsencode(self._base)
        for directory, _, files in os.walk(base):
            for file in files:
                path = os.path.join(directory, file)
                st = os.lstat(path)
                if not is_staging_name(os.fsdecode(file)):
                    found[os.fsdecode(os.path.relpath(path, base))] = st.st_size
        return found
