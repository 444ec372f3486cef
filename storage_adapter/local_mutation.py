"""Linearizable mutations of a local directory tree, across threads and processes on one host.

object_store's LocalFileSystem has no conditional update, and a read-compare-replace emulation races.
Here every mutation of a key (``write``, ``write_if_absent``, ``write_if_match``, ``delete``, ``rename``)
runs while holding an exclusive ``flock`` on the key's *parent directory*:

* The lock is on the directory inode, so two adapters rooted at different ancestors of the same file
  still serialize, and no lock files exist (nothing to list, nothing to orphan). flock is released by
  the kernel when a process dies, so a crash never leaves a key locked.
* New content is staged in a temporary file named ``<name>#<digits>`` in the same directory (the shape
  object_store never lists), then published by ``rename`` (replace) or ``link`` (create): a reader sees
  the old or the new file, never a partial one.
* Tokens are object_store's local ETag, ``"<inode>-<mtime µs>-<size>"``. Inodes are reused and file
  timestamps are coarse (a kernel tick), so two versions could share a token (ABA). Before publishing,
  each staged file's mtime is set to ``max(now, previous version's mtime + 1 µs)``: along a key's
  history mtimes strictly increase, so a token is never repeated while the key exists.
* Readers take no lock: they open whichever file the name points to, and object_store derives the
  token from that open file, so data and token always belong together.

Deletes prune directories they leave empty (``rmdir`` only succeeds on an empty directory), so local
listings show the same prefixes as S3. A writer that locked a directory which was pruned meanwhile sees
the inode change and retries. Staged files orphaned by a crash are never listed and are removed by
:meth:`LocalMutator.remove_orphans`.
"""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

_STAGING_MARK = "#"


def local_token(st: os.stat_result) -> str:
    """object_store's LocalFileSystem ETag for a file with this stat (verified by the test suite)."""
    return f'"{st.st_ino:x}-{st.st_mtime_ns // 1000:x}-{st.st_size:x}"'


def _date_after(target: int | str, previous: os.stat_result | None) -> None:
    """Set ``target``'s mtime to max(now, ``previous`` version's mtime + 1 µs): along a key's history
    mtimes (hence tokens, at µs resolution) strictly increase even when an inode is reused."""
    mtime_us = time.time_ns() // 1000
    if previous is not None:
        mtime_us = max(mtime_us, previous.st_mtime_ns // 1000 + 1)
    os.utime(target, ns=(mtime_us * 1000, mtime_us * 1000))


class _DirectoryGone(Exception):
    """The directory was pruned between open and lock; the caller retries."""


class LocalMutator:
    """Serialized mutations below ``root``. Keys are validated relative paths (see storage_adapter.keys)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def _path(self, key: str) -> str:
        return os.path.join(self.root, key)

    @contextmanager
    def _locked_dir(self, directory: str, create: bool) -> Iterator[bool]:
        """Hold an exclusive flock on ``directory``. Yields False if it does not exist and not ``create``."""
        while True:
            try:
                if create:
                    os.makedirs(directory, exist_ok=True)
                fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:
                if create:
                    continue  # an ancestor was pruned while we created or opened it
                yield False
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    # A delete may have pruned (and someone re-created) the directory while we waited.
                    if os.stat(directory).st_ino != os.fstat(fd).st_ino:
                        raise _DirectoryGone
                except (FileNotFoundError, _DirectoryGone):
                    continue
                yield True
                return
            finally:
                os.close(fd)

    @contextmanager
    def _locked(self, *keys: str, create: bool) -> Iterator[bool]:
        """Lock the parent directories of ``keys`` in a global order (no deadlock between renames)."""
        directories = sorted({os.path.dirname(self._path(k)) for k in keys})
        with ExitStack() as stack:
            present = all([stack.enter_context(self._locked_dir(d, create)) for d in directories])
            yield present

    @staticmethod
    def _stat(path: str) -> os.stat_result | None:
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not os.path.isfile(path):
            raise IsADirectoryError(errno.EISDIR, "is a directory (a prefix of other keys)", path)
        return st

    def _stage(self, path: str, data: bytes, previous: os.stat_result | None) -> tuple[str, str]:
        """Write ``data`` to a fresh staging file beside ``path``; return (staging path, its token)."""
        staging = f"{path}{_STAGING_MARK}{secrets.randbelow(10**12):012d}"
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            _date_after(fd, previous)
            token = local_token(os.fstat(fd))
        except BaseException:
            os.close(fd)
            os.unlink(staging)
            raise
        os.close(fd)
        return staging, token

    def write(self, key: str, data: bytes) -> str:
        path = self._path(key)
        with self._locked(key, create=True):
            staging, token = self._stage(path, data, self._stat(path))
            os.rename(staging, path)
            return token

    def write_if_absent(self, key: str, data: bytes) -> str | None:
        path = self._path(key)
        with self._locked(key, create=True):
            if self._stat(path) is not None:
                return None
            staging, token = self._stage(path, data, None)
            try:
                os.link(staging, path)  # fails if the name exists: one winner even without the lock
            except FileExistsError:
                return None
            finally:
                os.unlink(staging)
            return token

    def write_if_match(self, key: str, data: bytes, token: str) -> str | None:
        path = self._path(key)
        with self._locked(key, create=False) as present:
            if not present:
                return None
            current = self._stat(path)
            if current is None or local_token(current) != token:
                return None
            staging, new_token = self._stage(path, data, current)
            os.rename(staging, path)
            return new_token

    def delete(self, key: str) -> None:
        path = self._path(key)
        with self._locked(key, create=False) as present:
            if not present or self._stat(path) is None:
                return
            os.unlink(path)
        self._prune(os.path.dirname(path))

    def rename(self, src: str, dst: str) -> None:
        """Atomically move ``src`` over ``dst``. Raises FileNotFoundError if ``src`` is absent.

        Creates ``dst``'s directory only once ``src`` is known to exist, so a failed rename leaves
        nothing behind.
        """
        src_path, dst_path = self._path(src), self._path(dst)
        while True:
            if self._stat(src_path) is None:
                raise FileNotFoundError(errno.ENOENT, "no such object", src_path)
            os.makedirs(os.path.dirname(dst_path), exist_ok=True)
            with self._locked(src, dst, create=False) as present:
                if self._stat(src_path) is None:
                    raise FileNotFoundError(errno.ENOENT, "no such object", src_path)
                if not present:
                    continue  # dst's directory was pruned after we created it: create it again
                _date_after(src_path, self._stat(dst_path))  # dst's token chain, as in _stage
                os.rename(src_path, dst_path)
                break
        self._prune(os.path.dirname(src_path))

    def _prune(self, directory: str) -> None:
        """Remove ``directory`` and its ancestors below root while they are empty.

        Runs after the caller released its locks and takes one directory lock at a time, child first:
        never nested, so it cannot deadlock with a rename holding two locks. A writer that locked a
        directory removed here sees its inode vanish and re-creates it (see _locked_dir).
        """
        root = os.path.normpath(self.root)
        current = os.path.normpath(directory)
        while current.startswith(root + os.sep):
            with self._locked_dir(current, create=False) as present:
                if not present:
                    return
                try:
                    os.rmdir(current)
                except OSError as exc:
                    if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                        return
                    raise
            current = os.path.dirname(current)

    def remove_orphans(self, min_age_s: float) -> int:
        """Remove staging files (``name#<digits>``) older than ``min_age_s`` left by crashed writers."""
        cutoff = time.time() - min_age_s
        removed = 0
        for directory, _dirs, files in os.walk(self.root):
            for name in files:
                stem, mark, digits = name.rpartition(_STAGING_MARK)
                if not (mark and stem and digits.isdigit()):
                    continue
                path = os.path.join(directory, name)
                try:
                    if os.lstat(path).st_mtime < cutoff:
                        os.unlink(path)
                        removed += 1
                except FileNotFoundError:
                    continue
        return removed
