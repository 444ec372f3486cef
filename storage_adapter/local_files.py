"""Confined, linearizable access to a local directory tree, across threads and processes on one host.

**Confinement.** Nothing below the root is ever reached through a symlink. Paths are never resolved by
the kernel from a string: each component is opened relative to its parent's descriptor with
``O_NOFOLLOW`` (``openat``-style, see :func:`open_chain`), and every later call on that directory uses
``dir_fd=`` (mkdir, rename, link, unlink, rmdir, stat without following, utime). A directory swapped for
a symlink mid-operation therefore cannot redirect it: the descriptor still names the directory that was
opened. A symlink on a key's path raises :class:`SymlinkRefusedError`; listings skip symlinks.

**Mutations.** Every mutation of a key (``write``, ``write_if_absent``, ``write_if_match``, ``delete``,
``rename``) runs while holding an exclusive ``flock`` on the key's *parent directory*:

* The lock is on the directory inode, so two adapters rooted at different ancestors of the same file
  still serialize, and no lock files exist (nothing to list, nothing to orphan). flock is released by
  the kernel when a process dies, so a crash never leaves a key locked.
* New content is staged in a temporary file named ``<name>#<12 digits>`` in the same directory (a name
  no key can have), then published by ``rename`` (replace) or ``link`` (create): a reader sees the old
  or the new file, never a partial one. A staging file exists only while its writer holds the directory
  lock, or (a streamed body, :meth:`LocalMutator.write_stream`, staged without the directory lock) a
  flock on the staging file itself, which is what lets :meth:`LocalMutator.remove_orphans` tell a crash
  leftover from a write in flight.
* Tokens are ``"<inode>-<mtime µs>-<size>"`` (object_store's local ETag). Inodes are reused and file
  timestamps are coarse (a kernel tick), so two versions could share a token (ABA). Before publishing,
  each staged file's mtime is set to ``max(now, previous version's mtime + 1 µs)``: along a key's
  history mtimes strictly increase, so a token is never repeated while the key exists.
* Readers take no lock: they open whichever file the name points to and take the token from that open
  file, so data and token always belong together (files are never modified after they are published).
  A read opens its file with one ``openat2(2)`` call that refuses every symlink on the whole path
  (:func:`open_below`); only where that call is missing or fails for another reason than absence does
  it walk the directories one descriptor at a time, as mutations do.

Deletes prune directories they leave empty (``rmdir`` only succeeds on an empty directory; never the
root), so local listings show the same prefixes as S3. Directory creation and pruning race by design:
a writer that finds a directory pruned under it (an ``mkdir`` in a removed directory, or a locked
directory no longer linked where it was opened) starts its walk again, so neither surfaces as an error.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import platform
import re
import secrets
import stat
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from functools import partial
from typing import TypeVar

from storage_adapter.faults import FaultKind, due
from storage_adapter.streams import BytesLike

# Every directory below the root is opened with these: never through a symlink, never inherited.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# Regular files: O_NONBLOCK so that opening a FIFO planted in the tree cannot hang (fstat rejects it).
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_STAGE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_STAGING_DIGITS = 12
# The exact shape of a staging file. storage_adapter.keys rejects any segment ending in '#<digits>', so
# no object can have it; ASCII digits only, as written by _stage.
_STAGING_NAME = re.compile(rf".+#[0-9]{{{_STAGING_DIGITS}}}", re.ASCII | re.DOTALL)


# An injected fault (storage_adapter.faults) is raised as the OS raises the real one: a timed-out network
# filesystem, a refused permission, an I/O error.
# (A panic is raised by storage_adapter.faults itself.)
_INJECTED_OS_ERRORS: dict[FaultKind, tuple[type[OSError], int]] = {
    FaultKind.UNAVAILABLE: (TimeoutError, errno.ETIMEDOUT),
    FaultKind.DENIED: (PermissionError, errno.EACCES),
    FaultKind.BROKEN: (OSError, errno.EIO),
}


_T = TypeVar("_T")  # what a directory walker yields


def fault_point(point: str) -> None:
    """Mark the system call ``point`` about to be made (see storage_adapter.faults)."""
    kind = due(point)
    if kind is not None:
        cls, code = _INJECTED_OS_ERRORS[kind]
        raise cls(code, f"injected fault before {point}")


def local_token(st: os.stat_result) -> str:
    """object_store's LocalFileSystem ETag for a file with this stat (verified by the test suite)."""
    return f'"{st.st_ino:x}-{st.st_mtime_ns // 1000:x}-{st.st_size:x}"'


def is_staging_name(name: str) -> bool:
    """True for the name of a staging file, ``<name>#<12 ASCII digits>``."""
    return _STAGING_NAME.fullmatch(name) is not None


class SymlinkRefusedError(PermissionError):
    """A symlink (or a special file) sits on a key's path below the root: it is never followed, replaced
    or removed. A PermissionError, so the adapter reports it as PermissionDeniedError."""

    def __init__(self, path: str, what: str = "symlink") -> None:
        super().__init__(errno.EPERM, f"{what} below the root is never followed or replaced", path)


def _refuse_odd(st: os.stat_result, path: str) -> os.stat_result:
    """``st`` if it is a regular file or a directory; a symlink or special file is refused."""
    if stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode):
        return st
    raise SymlinkRefusedError(path, "symlink" if stat.S_ISLNK(st.st_mode) else "special file")


class _Pruned(Exception):
    """A directory on the walk was removed meanwhile (empty-directory pruning): walk again."""


def _date_after(target: int, previous: os.stat_result | None) -> None:
    """Set the open file ``target``'s mtime to max(now, ``previous`` version's mtime + 1 µs): along a
    key's history mtimes (hence tokens, at µs resolution) strictly increase even when an inode is reused."""
    mtime_us = time.time_ns() // 1000
    if previous is not None:
        mtime_us = max(mtime_us, previous.st_mtime_ns // 1000 + 1)
    fault_point("utime")
    os.utime(target, ns=(mtime_us * 1000, mtime_us * 1000))


class DirChain:
    """Open descriptors of the root and of each directory on a path below it, opened without following
    symlinks. ``fds[i]`` is the directory reached by ``names[:i]``; ``fd`` is the deepest. ``created``
    holds the depths ``i`` whose directory ``names[i]`` this walk created (its entry lives in ``fds[i]``)."""

    __slots__ = ("created", "fds", "names", "path")

    def __init__(self, fds: list[int], names: Sequence[str]) -> None:
        self.fds, self.names = fds, names
        self.created: list[int] = []
        self.path = "/".join(names)

    @property
    def fd(self) -> int:
        return self.fds[-1]

    def entry(self, name: str) -> str:
        """``name``'s path relative to the root, for messages."""
        return f"{self.path}/{name}" if self.path else name

    def linked(self, depth: int) -> bool:
        """Whether ``fds[depth]`` is still the directory named ``names[depth - 1]`` in its parent (not
        pruned, not swapped for anything else). The root always is."""
        if depth == 0:
            return True
        try:
            named = os.stat(self.names[depth - 1], dir_fd=self.fds[depth - 1], follow_symlinks=False)
        except FileNotFoundError:
            return False
        opened = os.fstat(self.fds[depth])
        return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []

    def __enter__(self) -> DirChain:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_chain(root: str, names: Sequence[str], create: bool) -> DirChain | None:
    """Open ``root`` then each of ``names`` below it, creating missing ones if ``create``.

    Returns None when a directory, the root included, is missing (and not ``create``) or a file is in the
    way (and not ``create``); raises SymlinkRefusedError at a symlink. With ``create``, a directory pruned by a
    concurrent delete while being walked is simply created again.
    """
    while True:
        chain = DirChain([], names)
        try:
            top = _open_root(root, create)
            if top is None:
                return None
            chain.fds.append(top)
            for depth, name in enumerate(names):
                opened = _open_dir(chain.fd, name, "/".join(names[: depth + 1]), create)
                if opened is None:
                    chain.close()
                    return None
                fd, made = opened
                chain.fds.append(fd)
                if made:
                    chain.created.append(depth)
            return chain
        except BaseException as exc:
            chain.close()
            if not isinstance(exc, _Pruned):
                raise


def _open_root(root: str, create: bool) -> int | None:
    """The root's descriptor; None if it is missing and not ``create``: a root removed under the adapter
    (pruned by an adapter rooted above it, which deleted the last object below it) is an empty root,
    like any missing directory, and the next write creates it again."""
    # The root is the user's choice (resolved once at open): the only path the kernel resolves for us.
    try:
        fault_point("open")
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        if not create:
            return None
        os.makedirs(root, exist_ok=True)
        raise _Pruned from None


def _open_dir(parent: int, name: str, path: str, create: bool) -> tuple[int, bool] | None:
    """The directory ``name`` in ``parent`` and whether this call created it (only if missing and
    ``create``); None if absent."""
    made = False
    while True:
        try:
            fault_point("open")
            return os.open(name, _DIR_FLAGS, dir_fd=parent), made
        except FileNotFoundError:
            if not create:
                return None
        except OSError as exc:
            if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise
            st = stat_entry(parent, name, path)  # refuses a symlink
            if st is None or stat.S_ISDIR(st.st_mode):
                continue  # the entry changed since the open: look again
            if not create:
                return None  # a file in the way: no key lives below it
            raise
        try:
            fault_point("mkdir")
            os.mkdir(name, 0o777, dir_fd=parent)
            made = True
        except FileExistsError:
            continue  # created concurrently: open it
        except FileNotFoundError:
            raise _Pruned from None  # parent itself was pruned after we opened it


def open_subdir(parent: int, name: str) -> int | None:
    """The real directory ``name`` in ``parent`` for a listing: None if it is gone, a symlink or not a
    directory (the entry changed since it was listed)."""
    try:
        fault_point("open")
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return None
        raise


def walk(top: int, path: str) -> Iterator[tuple[int, str, list[os.DirEntry[str]]]]:
    """``(fd, path, entries)`` for ``top`` and every real directory below it, top-down, never following a
    symlink. Directories that vanish while walked are skipped. The caller owns ``top``."""
    fault_point("scandir")
    with os.scandir(top) as scan:
        entries = list(scan)
    yield top, path, entries
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            yield from _below(top, path, entry.name, walk)


def walk_in_key_order(
    top: int, path: str, after: str | None = None
) -> Iterator[tuple[int, str, os.DirEntry[str]]]:
    """``(fd, path, entry)`` for every entry that is not a directory, in ``top`` and every real directory
    below it, in key order: a directory's entries sorted by name, a subdirectory's name followed by ``/``
    as its keys are (``a.txt`` < ``a/x`` < ``a0``). Lazy: it holds one directory's entries per level,
    never the whole tree. Never follows a symlink; directories that vanish while walked are skipped. The
    caller owns ``top``. With ``after``, only entries whose key (``path/name``) sorts after it: a
    subdirectory whose keys all sort before it is skipped unopened."""
    fault_point("scandir")
    with os.scandir(top) as scan:
        entries = sorted(scan, key=lambda e: e.name + "/" if e.is_dir(follow_symlinks=False) else e.name)
    for entry in entries:
        key = f"{path}/{entry.name}" if path else entry.name
        if entry.is_dir(follow_symlinks=False):
            # Every key below starts with key + "/": all sort before ``after`` iff it is past that
            # string without extending it.
            if after is None or after < key + "/" or after.startswith(key + "/"):
                yield from _below(top, path, entry.name, partial(walk_in_key_order, after=after))
        elif after is None or key > after:
            yield top, path, entry


def _below(top: int, path: str, name: str, walker: Callable[[int, str], Iterator[_T]]) -> Iterator[_T]:
    """``walker`` over the real subdirectory ``name`` of ``top`` (at ``path``), its descriptor closed
    after; nothing when it vanished or is not a real directory (open_subdir's rules)."""
    fd = open_subdir(top, name)
    if fd is None:
        return
    try:
        yield from walker(fd, f"{path}/{name}" if path else name)
    finally:
        os.close(fd)


def stat_entry(parent: int, name: str, path: str) -> os.stat_result | None:
    """The stat of the file or directory ``name`` in ``parent`` (not following), None if absent; a symlink
    or special file is refused."""
    try:
        fault_point("stat")
        st = os.stat(name, dir_fd=parent, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return _refuse_odd(st, path)


# openat2(2) (Linux 5.6+) resolves a whole path in one call; RESOLVE_NO_SYMLINKS makes it refuse every
# symlink on the way (ELOOP), which is what the walk enforces one component at a time. Python has no
# binding, so it is called through libc's syscall(2); 437 on every architecture of the generic table.
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "arm64": 437, "riscv64": 437, "ppc64le": 437, "s390x": 437}
_RESOLVE_NO_SYMLINKS = 0x04
# Descriptors that only stat: no read permission needed, a FIFO is not opened (fstat refuses it).
_STAT_FLAGS = getattr(os, "O_PATH", os.O_RDONLY | os.O_NONBLOCK) | os.O_NOFOLLOW | os.O_CLOEXEC


class _OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


# One open_how per flag set, alive as long as the module (the calls pass their addresses).
_HOWS = {flags: _OpenHow(flags, 0, _RESOLVE_NO_SYMLINKS) for flags in (_READ_FLAGS, _STAT_FLAGS)}


def _openat2() -> Callable[[bytes, int], int] | None:
    """``call(absolute path, flags)``: openat2 refusing every symlink, returning the descriptor or
    ``-errno``. None where there is none (not Linux, an unknown architecture, a kernel before 5.6, a
    seccomp filter refusing it): one probe, on ``/``, decides."""
    number = _SYS_OPENAT2.get(platform.machine()) if os.uname().sysname == "Linux" else None
    if number is None:
        return None
    syscall = ctypes.CDLL(None, use_errno=True).syscall
    syscall.restype = ctypes.c_long
    syscall.argtypes = (ctypes.c_long, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t)
    addresses = {flags: ctypes.addressof(how) for flags, how in _HOWS.items()}
    size = ctypes.sizeof(_OpenHow)
    at_cwd = -100  # AT_FDCWD: the path is absolute anyway

    def call(path: bytes, flags: int) -> int:
        fd = int(syscall(number, at_cwd, path, addresses[flags], size))
        return fd if fd >= 0 else -ctypes.get_errno()

    probe = call(b"/", _STAT_FLAGS)
    if probe < 0:
        return None
    os.close(probe)
    return call


_OPENAT2 = _openat2()


# A streamed write asks the kernel to start writing back every WRITEBACK_BYTES it has staged, as RocksDB's
# bytes_per_sync does: Linux's sync_file_range(SYNC_FILE_RANGE_WRITE) queues the pages and returns at once,
# so the producer goes on while they are written, and the fsync before the publish waits for the last
# piece only. Measured here (7 MiB staged in 64 KiB pieces): that fsync 11-13 ms -> 7.5 ms. Python has no
# binding; elsewhere (not Linux, or a libc without it) nothing is asked and the fsync does all the work.
WRITEBACK_BYTES = 1024 * 1024
_SYNC_FILE_RANGE_WRITE = 2


def _writeback_starter() -> Callable[[int, int, int, int], int] | None:
    """libc's ``sync_file_range(fd, offset, nbytes, flags)``; None where there is none."""
    if os.uname().sysname != "Linux":
        return None
    try:
        call = ctypes.CDLL(None, use_errno=True).sync_file_range
    except AttributeError:
        return None
    call.restype = ctypes.c_int
    call.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    return call


_START_WRITEBACK = _writeback_starter()


def open_below(root: str, path: str, flags: int) -> int:
    """A descriptor, opened with ``flags`` (``_READ_FLAGS`` or ``_STAT_FLAGS``), of the entry at the store
    path ``path`` below ``root``, reached through no symlink. Raises FileNotFoundError when nothing is
    there, SymlinkRefusedError when a symlink is on the path below the root.

    One openat2 call when the whole path, the root's own included, is free of symlinks (the root was
    resolved when the adapter opened). Any other failure than absence (a symlink anywhere, the root's
    path included, which the user may change; a name too long for one call; no openat2 here) is decided
    by the walk, which follows the root's path and no symlink below it: both agree wherever both answer.
    """
    if _OPENAT2 is not None:
        fault_point("open")
        fd = _OPENAT2(os.fsencode(f"{root}/{path}"), flags)
        if fd >= 0:
            return fd
        if fd == -errno.ENOENT:
            raise FileNotFoundError(errno.ENOENT, "no such object", path)
    directory, name = split_path(path)
    chain = open_chain(root, directory, create=False)
    if chain is None:
        raise FileNotFoundError(errno.ENOENT, "no such object", path)
    with chain:
        try:
            fault_point("open")
            return os.open(name, flags, dir_fd=chain.fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise SymlinkRefusedError(path) from None
            raise


def stat_object(root: str, path: str) -> os.stat_result:
    """The stat of the object at ``path`` below ``root``. Raises FileNotFoundError when absent or a
    directory (a prefix), SymlinkRefusedError for a symlink or special file on its path."""
    fd = open_below(root, path, _STAT_FLAGS)
    try:
        st = _refuse_odd(os.fstat(fd), path)
    finally:
        os.close(fd)
    if stat.S_ISDIR(st.st_mode):
        raise FileNotFoundError(errno.ENOENT, "a prefix, not an object", path)
    return st


def open_object(root: str, path: str) -> tuple[int, os.stat_result]:
    """The object at ``path`` below ``root`` opened for reading: its descriptor (the caller closes it) and
    the stat of exactly that file. Files are never modified once published, so every read of the
    descriptor sees that one version, whatever replaces the name meanwhile. Raises FileNotFoundError
    when absent (or a directory), SymlinkRefusedError for a symlink or special file on its path."""
    fd = open_below(root, path, _READ_FLAGS)
    try:
        st = _refuse_odd(os.fstat(fd), path)
        if stat.S_ISDIR(st.st_mode):
            raise FileNotFoundError(errno.ENOENT, "a prefix, not an object", path)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_into(fd: int, offset: int, view: memoryview) -> int:
    """Fill ``view`` with the file's bytes from ``offset`` (``pread``: the descriptor's position is
    untouched, so readers may share it); return how many, fewer only at the end of the file."""
    filled = 0
    while filled < len(view):
        fault_point("read")
        got = os.preadv(fd, [view[filled:]], offset + filled)
        if not got:
            break
        filled += got
    return filled


def read_object(root: str, path: str) -> tuple[bytes, os.stat_result]:
    """The bytes of the object at ``path`` below ``root`` and the stat of exactly that file (see
    :func:`open_object`).

    One copy: ``os.read`` allocates the result and the kernel fills it.
    """
    fd, st = open_object(root, path)
    try:
        fault_point("read")
        data = os.read(fd, st.st_size)
        if len(data) < st.st_size:
            # One read returns at most ~2 GiB on Linux: gather the rest (a second copy, for such sizes only).
            parts, got = [data], len(data)
            while got < st.st_size:
                chunk = os.read(fd, st.st_size - got)
                if not chunk:  # truncated in place by someone else: never loop forever
                    raise OSError(errno.EIO, "object truncated while being read", path)
                parts.append(chunk)
                got += len(chunk)
            data = b"".join(parts)
        return data, st
    finally:
        os.close(fd)


def dir_names(path: str) -> list[str]:
    """The components of a directory's store path (none for the root itself)."""
    return path.split("/") if path else []


def split_path(path: str) -> tuple[list[str], str]:
    """A key's store path as its directory's components and its name in that directory."""
    directory, _, name = path.rpartition("/")
    return dir_names(directory), name


class _Absent(Exception):
    """A directory to be locked without creating it does not exist."""


class LocalMutator:
    """Serialized, confined mutations below ``root`` (an absolute, resolved directory). Paths are validated
    store paths relative to it (see storage_adapter.keys): ``/``-separated, no ``.`` or ``..``.

    ``durable`` (the default): a mutation returns only once it survives power loss. The staged file is
    fsynced before it is published (so the name never points at unwritten data), and the directories
    whose entries changed are fsynced after the publish, the unlink or the rename (so the new name, or the
    removal, is on disk) — including the parents of directories the mutation created. With
    ``durable=False`` (scratch data) a crash of the machine may lose acknowledged mutations, never tear
    one: atomicity does not depend on the syncs.
    """

    def __init__(self, root: str, durable: bool = True) -> None:
        self.root = root
        self.durable = durable

    def _sync(self, fd: int) -> None:
        if self.durable:
            fault_point("fsync")
            os.fsync(fd)

    def _sync_entries(self, chain: DirChain) -> None:
        """Make ``chain``'s changed directory entries durable: the deepest directory, then the parent of
        every directory this walk created."""
        if self.durable:
            fault_point("fsync")
            os.fsync(chain.fd)
            for depth in reversed(chain.created):
                fault_point("fsync")
                os.fsync(chain.fds[depth])

    @contextmanager
    def _locked(self, *wanted: tuple[Sequence[str], bool]) -> Iterator[list[DirChain]]:
        """Hold an exclusive flock on each directory ``(names, create)``: yields their chains in the order
        asked. Raises _Absent when one is missing and not to be created (before creating any later one)."""
        while True:
            try:
                chains = self._lock(wanted)
                break
            except _Pruned:
                continue
        try:
            yield chains
        finally:
            for chain in chains:
                chain.close()  # closing a descriptor releases its flock

    def _lock(self, wanted: Sequence[tuple[Sequence[str], bool]]) -> list[DirChain]:
        """Open and lock, once per directory inode and in inode order (no deadlock between renames, even
        for adapters rooted at different ancestors). Raises _Pruned when a directory was pruned (maybe
        re-created) while we waited for its lock: the caller walks again."""
        with ExitStack() as opened:
            chains = []
            for names, create in wanted:
                chain = open_chain(self.root, names, create)
                if chain is None:
                    raise _Absent
                chains.append(opened.enter_context(chain))
            by_inode = {(st.st_dev, st.st_ino): chain.fd for chain in chains for st in [os.fstat(chain.fd)]}
            for inode in sorted(by_inode):
                fault_point("flock")
                fcntl.flock(by_inode[inode], fcntl.LOCK_EX)
            if all(chain.linked(len(chain.names)) for chain in chains):
                opened.pop_all()
                return chains
        raise _Pruned

    @staticmethod
    def _current(chain: DirChain, name: str) -> os.stat_result | None:
        """The stat of the object ``name`` in the locked ``chain``, None if absent."""
        st = stat_entry(chain.fd, name, chain.entry(name))
        if st is not None and stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(
                errno.EISDIR, "is a directory (a prefix of other keys)", chain.entry(name)
            )
        return st

    def _stage(
        self, chain: DirChain, name: str, data: bytes, previous: os.stat_result | None
    ) -> tuple[str, str]:
        """Write ``data`` to a fresh staging file beside ``name`` (synced when durable); return (staging
        name, its token)."""
        staging = f"{name}#{secrets.randbelow(10**_STAGING_DIGITS):0{_STAGING_DIGITS}d}"
        fault_point("open")
        fd = os.open(staging, _STAGE_FLAGS, 0o644, dir_fd=chain.fd)
        try:
            view = memoryview(data)
            while view:
                fault_point("write")
                view = view[os.write(fd, view) :]
            _date_after(fd, previous)
            token = local_token(os.fstat(fd))
            self._sync(fd)  # the data is on disk before any name points at it
        except BaseException:
            os.close(fd)
            os.unlink(staging, dir_fd=chain.fd)
            raise
        os.close(fd)
        return staging, token

    def _replace(self, chain: DirChain, staging: str, name: str) -> None:
        try:
            fault_point("rename")
            os.rename(staging, name, src_dir_fd=chain.fd, dst_dir_fd=chain.fd)
        except BaseException:
            with suppress(OSError):  # a publish that failed leaves no staging file behind
                os.unlink(staging, dir_fd=chain.fd)
            raise
        self._sync_entries(chain)

    @contextmanager
    def _undone_on_failure(self, directory: Sequence[str]) -> Iterator[None]:
        """Prune the directories a failed write created (after its locks are released): a failed
        operation leaves no trace, not even an empty directory."""
        try:
            yield
        except BaseException:
            with suppress(OSError):
                # From the deepest directory that exists: the failure may have come before the last mkdir.
                for depth in range(len(directory), 0, -1):
                    self._prune(directory[:depth])
            raise

    def write(self, path: str, data: bytes) -> str:
        directory, name = split_path(path)
        with self._undone_on_failure(directory), self._locked((directory, True)) as (chain,):
            staging, token = self._stage(chain, name, data, self._current(chain, name))
            self._replace(chain, staging, name)
            return token

    def write_if_absent(self, path: str, data: bytes) -> str | None:
        """Create ``path`` only if absent: the new token (the one a stat of ``path`` gives afterwards), or
        None when an object is there."""
        directory, name = split_path(path)
        with self._undone_on_failure(directory), self._locked((directory, True)) as (chain,):
            if self._current(chain, name) is not None:
                return None
            staging, token = self._stage(chain, name, data, None)
            try:
                # link fails if the name exists: one winner even against writers that take no lock.
                fault_point("link")
                os.link(staging, name, src_dir_fd=chain.fd, dst_dir_fd=chain.fd, follow_symlinks=False)
            except FileExistsError:
                return None
            finally:
                fault_point("unlink")
                os.unlink(staging, dir_fd=chain.fd)
            self._sync_entries(chain)
            # The staged file's token is the object's: link and unlink change only the inode's ctime,
            # which the token leaves out.
            return token

    def write_stream(
        self, path: str, chunks: Iterable[BytesLike], *, create: bool = False, token: str | None = None
    ) -> str | None:
        """Write the streamed body ``chunks`` to ``path``: replace it (the default), create it only if
        absent (``create``, as write_if_absent) or replace it only if its token is ``token`` (as
        write_if_match). Returns the new token, or None when the condition does not hold at publish time.

        The body is staged without holding the directory lock, so a slow stream never holds up the
        directory's other writers (nor deadlocks a stream that writes beside itself): the staging file is
        created under the lock with an exclusive flock of its own, which marks it as in flight for
        remove_orphans until this writer closes it (or dies). Only the publish (the condition, the mtime
        that keeps tokens increasing, rename or link) runs under the lock, as for every other mutation.
        If the stream raises, the staging file is removed and nothing is visible.
        """
        directory, name = split_path(path)
        with self._undone_on_failure(directory):
            staging, fd = self._open_staging(directory, name)
            published = False
            try:
                written = flushed = 0
                for chunk in chunks:
                    view = memoryview(chunk)
                    while view:
                        fault_point("write")
                        done = os.write(fd, view)
                        view, written = view[done:], written + done
                    if self.durable and _START_WRITEBACK is not None and written - flushed >= WRITEBACK_BYTES:
                        # The kernel starts writing these bytes now (the call does not wait): the fsync
                        # below then waits for the stream's last piece, not for all of it. Its outcome
                        # is not checked here: that fsync reports any failure to write them.
                        _START_WRITEBACK(fd, flushed, written - flushed, _SYNC_FILE_RANGE_WRITE)
                        flushed = written
                # Dated now, before the sync, so that one fsync makes both the data and the token's mtime
                # durable; dated again (and synced again) only if the version found at the publish was
                # dated as late or later (published meanwhile, or by a clock ahead): tokens must increase.
                _date_after(fd, None)
                self._sync(fd)  # data and mtime on disk before taking the lock
                staged = os.fstat(fd)
                with self._locked((directory, True)) as (chain,):
                    current = self._current(chain, name)
                    if (create and current is not None) or (
                        token is not None and (current is None or local_token(current) != token)
                    ):
                        return None
                    if current is not None and staged.st_mtime_ns // 1000 <= current.st_mtime_ns // 1000:
                        _date_after(fd, current)
                        self._sync(fd)  # the new mtime: the token a durable reader will see
                        staged = os.fstat(fd)
                    new_token = local_token(staged)
                    if create:
                        # link fails if the name exists: one winner even against writers that take no lock.
                        try:
                            fault_point("link")
                            os.link(
                                staging, name, src_dir_fd=chain.fd, dst_dir_fd=chain.fd, follow_symlinks=False
                            )
                        except FileExistsError:
                            return None
                        fault_point("unlink")
                        os.unlink(staging, dir_fd=chain.fd)
                    else:
                        fault_point("rename")
                        os.rename(staging, name, src_dir_fd=chain.fd, dst_dir_fd=chain.fd)
                    published = True
                    self._sync_entries(chain)
                    return new_token
            finally:
                os.close(fd)  # releases the staging file's flock
                if not published:
                    self._discard(directory, staging)
                    self._prune(directory)  # a lost condition leaves no directory it created

    def _open_staging(self, directory: Sequence[str], name: str) -> tuple[str, int]:
        """Create a staging file beside ``name`` under the directory lock and flock it before the lock is
        released: from its first instant it is in flight for remove_orphans. Returns (name, descriptor)."""
        with self._locked((directory, True)) as (chain,):
            staging = f"{name}#{secrets.randbelow(10**_STAGING_DIGITS):0{_STAGING_DIGITS}d}"
            fault_point("open")
            fd = os.open(staging, _STAGE_FLAGS, 0o644, dir_fd=chain.fd)
            fcntl.flock(fd, fcntl.LOCK_EX)
            if chain.created:
                self._sync_entries(chain)  # the directories made here: the publish walk will not see them new
            return staging, fd

    def _discard(self, directory: Sequence[str], staging: str) -> None:
        """Remove this writer's own staging file (no lock needed: no one else writes or removes a name
        flocked by a live writer)."""
        chain = open_chain(self.root, directory, create=False)
        if chain is None:
            return
        with chain, suppress(FileNotFoundError):
            fault_point("unlink")
            os.unlink(staging, dir_fd=chain.fd)

    def write_if_match(self, path: str, data: bytes, token: str) -> str | None:
        directory, name = split_path(path)
        try:
            with self._locked((directory, False)) as (chain,):
                current = self._current(chain, name)
                if current is None or local_token(current) != token:
                    return None
                staging, new_token = self._stage(chain, name, data, current)
                self._replace(chain, staging, name)
                return new_token
        except _Absent:
            return None

    def delete(self, path: str) -> None:
        directory, name = split_path(path)
        try:
            with self._locked((directory, False)) as (chain,):
                st = stat_entry(chain.fd, name, chain.entry(name))
                if st is None or stat.S_ISDIR(st.st_mode):
                    return  # no object, or only a prefix of other keys: none to delete (as on S3)
                fault_point("unlink")
                os.unlink(name, dir_fd=chain.fd)
                self._sync(chain.fd)
        except _Absent:
            return
        self._prune(directory)

    def rename(self, src: str, dst: str) -> None:
        """Atomically move ``src`` over ``dst``. Raises FileNotFoundError if ``src`` is absent.

        ``dst``'s directory is created after ``src``'s is found, and pruned again if ``src`` turns out to
        be absent, so a failed rename leaves nothing behind.
        """
        (src_dir, src_name), (dst_dir, dst_name) = split_path(src), split_path(dst)
        moved = False
        try:
            with self._locked((src_dir, False), (dst_dir, True)) as (src_chain, dst_chain):
                if self._current(src_chain, src_name) is None:
                    raise FileNotFoundError(errno.ENOENT, "no such object", src)
                fault_point("open")
                fd = os.open(src_name, _READ_FLAGS, dir_fd=src_chain.fd)
                try:
                    _date_after(fd, self._current(dst_chain, dst_name))  # dst's token chain, as in _stage
                finally:
                    os.close(fd)
                fault_point("rename")
                os.rename(src_name, dst_name, src_dir_fd=src_chain.fd, dst_dir_fd=dst_chain.fd)
                self._sync_entries(dst_chain)  # the new name first: a crash between leaves both, never none
                self._sync(src_chain.fd)
                moved = True
        except _Absent:
            raise FileNotFoundError(errno.ENOENT, "no such object", src) from None
        finally:
            self._prune(src_dir if moved else dst_dir)

    def _prune(self, names: Sequence[str]) -> None:
        """Remove the directory ``names`` and its ancestors while they are empty; never the root.

        Runs after the caller released its locks and takes one directory lock at a time, child first:
        never nested, so it cannot deadlock with a rename holding two. A writer that locked a directory
        removed here sees it unlinked and walks again (see _lock). Stops at anything unexpected (a
        symlink, a non-empty or vanished directory): pruning is housekeeping, never a failure.
        """
        try:
            chain = open_chain(self.root, names, create=False)
        except SymlinkRefusedError:
            return
        if chain is None:
            return
        with chain:
            for depth in range(len(names), 0, -1):
                fcntl.flock(chain.fds[depth], fcntl.LOCK_EX)
                try:
                    if not chain.linked(depth):
                        return
                    fault_point("rmdir")
                    os.rmdir(names[depth - 1], dir_fd=chain.fds[depth - 1])
                except OSError as exc:
                    if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT, errno.ENOTDIR):
                        return
                    raise
                finally:
                    fcntl.flock(chain.fds[depth], fcntl.LOCK_UN)

    def remove_orphans(self, prefix: str, min_age_s: float) -> int:
        """Remove staging files (``name#<12 digits>``) older than ``min_age_s`` below the directory
        ``prefix``, and prune the directories crash leftovers leave empty; return how many files.

        Writers stage and publish while holding the directory lock, so a staging file seen under that lock
        was abandoned by a crashed writer: a write in flight is never touched, whatever ``min_age_s``.
        A writer killed in a directory it created leaves the directory behind: it is pruned (as a delete
        prunes, see _prune) once its staging files are reclaimed, or when found empty and older than
        ``min_age_s`` (a younger one may be where a writer is about to stage).
        """
        chain = open_chain(self.root, dir_names(prefix), create=False)
        if chain is None:
            return 0
        cutoff = time.time() - min_age_s
        removed = 0
        emptied = []
        with chain:
            for fd, path, entries in walk(chain.fd, ""):
                staged = [
                    e.name for e in entries if is_staging_name(e.name) and e.is_file(follow_symlinks=False)
                ]
                if staged:
                    removed += _remove_abandoned(fd, staged, cutoff)
                if len(staged) == len(entries) and (staged or os.fstat(fd).st_mtime < cutoff):
                    emptied.append(path)
        for path in reversed(emptied):  # deepest first: each prune also takes the parents it empties
            self._prune(dir_names("/".join(filter(None, (prefix, path)))))
        return removed


def _remove_abandoned(directory: int, names: list[str], cutoff: float) -> int:
    """Unlink the staging files ``names`` in ``directory`` last modified before ``cutoff``, under the
    directory's lock (so none belongs to a live writer)."""
    removed = 0
    fcntl.flock(directory, fcntl.LOCK_EX)
    try:
        for name in names:
            try:
                fault_point("stat")
                st = os.stat(name, dir_fd=directory, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode) and st.st_mtime < cutoff:
                if _streaming(directory, name):  # in flight: its writer holds the file's own flock
                    continue
                fault_point("unlink")
                os.unlink(name, dir_fd=directory)
                removed += 1
    finally:
        fcntl.flock(directory, fcntl.LOCK_UN)
    return removed


def _streaming(directory: int, name: str) -> bool:
    """Whether the staging file ``name`` belongs to a live streamed write (LocalMutator.write_stream
    stages without the directory lock, holding the file's own flock until it publishes or gives up)."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=directory)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
