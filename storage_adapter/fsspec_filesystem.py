"""AdapterFileSystem: an fsspec filesystem over a storage adapter, so pyarrow, pandas and DuckDB read
(and write) through it with the adapter's key rules and guarantees.

An edge module above the adapter: nothing in the core imports it (``ObjectStorageAdapter.to_fsspec``
finds it through fsspec's registry), and it needs fsspec (the ``peers`` extra). Importing it registers the protocols ``sa`` and
``storage-adapter`` with fsspec; an installed package also declares them as ``fsspec.specs`` entry
points, so ``fsspec.filesystem("sa", root="file:///data")`` finds the class without an import.

Paths are keys relative to the adapter's root, with or without the protocol (``sa://tables/t/x.parquet``
and ``tables/t/x.parquet`` are the same object); ``""`` is the root. Every path goes through the
adapter's key rules before any I/O: a bad one (``../x``, ``/x``, a NUL) raises
:class:`~storage_adapter.errors.InvalidKeyError` (a ValueError), so nothing outside the root is ever
reached. A missing object is :class:`~storage_adapter.errors.NotFoundError` (a FileNotFoundError).
Directories are key prefixes holding at least one object, as on every object store: ``mkdir`` and
``makedirs`` create nothing, and a prefix disappears with its last object.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Mapping
from datetime import datetime
from functools import partial
from glob import has_magic
from types import TracebackType
from typing import Any

import fsspec
from fsspec.caching import caches
from fsspec.implementations.local import LocalFileSystem, make_path_posix, trailing_sep
from fsspec.spec import AbstractBufferedFile, AbstractFileSystem
from fsspec.utils import other_paths, stringify_path

from storage_adapter.adapter import FSSPEC_PROTOCOLS, open_adapter
from storage_adapter.errors import (
    InvalidArgumentError,
    InvalidKeyError,
    InvalidRangeError,
    NotFoundError,
    UnsupportedOperationError,
)
from storage_adapter.keys import validate_key, validate_prefix
from storage_adapter.protocol import StorageAdapter
from storage_adapter.streams import READ_CHUNK, ObjectReader
from storage_adapter.types import ObjectInfo

PROTOCOLS = FSSPEC_PROTOCOLS


class AdapterFileSystem(AbstractFileSystem):  # type: ignore[misc]  # fsspec is untyped
    """An fsspec filesystem whose paths are the keys of one :class:`~storage_adapter.protocol.StorageAdapter`.

    Build it from an adapter (``AdapterFileSystem(adapter)``, ``adapter.to_fsspec()``) or from what
    ``open_adapter`` takes (``AdapterFileSystem(root="s3://bucket/prefix", options={...})``: the form
    ``storage_options`` and ``fsspec.filesystem("sa", ...)`` use). Reads: ``cat_file`` with a range is one
    ranged read; ``open(path, "rb")`` is a file over one version of the object (``open_reader``: its
    ranged reads never mix two versions), each read one ranged read unless a ``cache_type`` (fsspec's:
    ``"readahead"`` for many small sequential reads, of ``block_size``) is given here or to ``open``. Writes: ``pipe_file`` and ``open(path, "wb")`` replace the
    object atomically (a ``wb`` file is spooled, to disk past ``block_size``, and written as one stream on
    ``close``: nothing is visible before, and a ``with`` block that raises writes nothing); ``mode="create"``
    / ``"xb"`` is the adapter's ``write_if_absent`` (FileExistsError for the loser).

    Instances are not cached by fsspec (``cachable = False``): its cache keys on the arguments' ``str``,
    which for an adapter is its URL only, not its options. It pickles as its adapter.
    """

    protocol = PROTOCOLS
    root_marker = ""
    cachable = False
    blocksize = READ_CHUNK
    # Each read of an open file is one ranged read: columnar readers (pyarrow, DuckDB) coalesce and buffer
    # their own, and a read-ahead cache would fetch a block past every column chunk they ask for (a
    # one-column projection of a 20 MB file: 178 KB read uncached, 17 MB with 8 MiB of read-ahead).
    cache_type = "none"

    def __init__(
        self,
        adapter: StorageAdapter | None = None,
        *,
        root: str | None = None,
        options: Mapping[str, Any] | None = None,
        block_size: int | None = None,
        cache_type: str | None = None,
        **storage_options: Any,
    ) -> None:
        if (adapter is None) == (root is None):
            raise TypeError("AdapterFileSystem takes an adapter or a root URL (with its options), not both")
        if adapter is None:
            adapter = open_adapter(str(root), **dict(options or {}))
        elif options:
            raise TypeError("options go with a root URL; an adapter is already configured")
        super().__init__(**storage_options)
        self.adapter = adapter
        if block_size is not None:
            self.blocksize = self._block_size(block_size)
        if cache_type is not None:
            self.cache_type = self._cache_type(cache_type)

    def _block_size(self, block_size: object) -> int:
        """``block_size`` if it is an int > 0; InvalidArgumentError otherwise (fsspec's read-ahead cache
        would return truncated bytes for a negative one)."""
        if isinstance(block_size, int) and not isinstance(block_size, bool) and block_size > 0:
            return block_size
        raise InvalidArgumentError(
            f"block_size on {self.adapter.backend} must be an int > 0, not {block_size!r}",
            backend=self.adapter.backend,
        )

    def _cache_type(self, cache_type: object) -> str:
        """``cache_type`` if fsspec has such a cache; InvalidArgumentError otherwise."""
        if isinstance(cache_type, str) and cache_type in caches:
            return cache_type
        raise InvalidArgumentError(
            f"cache_type on {self.adapter.backend} must be one of {sorted(filter(None, caches))}, not {cache_type!r}",
            backend=self.adapter.backend,
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            partial(AdapterFileSystem, block_size=self.blocksize, cache_type=self.cache_type),
            (self.adapter,),
        )

    # fsspec records the constructor's arguments here after ``__init__`` (for its JSON form). They may
    # carry credentials (``options``), so none is kept: the filesystem travels by pickle, as its adapter.
    @property
    def storage_args(self) -> tuple[Any, ...]:
        return ()

    @storage_args.setter
    def storage_args(self, value: tuple[Any, ...]) -> None:
        """Dropped: see above."""

    @property
    def storage_options(self) -> dict[str, Any]:
        return {}

    @storage_options.setter
    def storage_options(self, value: dict[str, Any]) -> None:
        """Dropped: see above."""

    def to_dict(self, *, include_password: bool = True) -> dict[str, Any]:
        raise TypeError(
            f"AdapterFileSystem over {self.adapter.url} has no JSON form (it would carry the adapter's "
            "credentials): pickle it, or rebuild it from its adapter"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AdapterFileSystem) and other.adapter == self.adapter

    def __hash__(self) -> int:
        return hash(("AdapterFileSystem", self.adapter))

    def __repr__(self) -> str:
        return f"AdapterFileSystem({self.adapter!r})"

    # -- paths ----------------------------------------------------------------------------------------
    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        """The key a path names: without ``sa://`` / ``storage-adapter://`` and trailing ``/``. Anything
        else is left for the key rules to judge (a leading ``/`` stays, and is refused)."""
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = stringify_path(path)
        if not isinstance(path, str):
            return path
        for protocol in PROTOCOLS:
            if path.startswith(protocol + "://"):
                path = path[len(protocol) + 3 :]
                break
        return path.rstrip("/")

    def _key(self, path: Any) -> str:
        return validate_key(self._strip_protocol(path), self.adapter.backend)

    def _prefix(self, path: Any) -> str:
        return validate_prefix(self._strip_protocol(path), self.adapter.backend)

    def _missing(self, key: str) -> NotFoundError:
        return NotFoundError(
            f"not found: {key!r} on {self.adapter.backend}", key=key, backend=self.adapter.backend
        )

    # -- metadata -------------------------------------------------------------------------------------
    @staticmethod
    def _file(info: ObjectInfo) -> dict[str, Any]:
        return {
            "name": info.key,
            "size": info.size,
            "type": "file",
            "token": info.token,
            "mtime": info.last_modified,
        }

    @staticmethod
    def _directory(prefix: str) -> dict[str, Any]:
        return {"name": prefix, "size": 0, "type": "directory"}

    def _has_objects_below(self, prefix: str) -> bool:
        """One listing page at most (one LIST on S3): is any object stored below ``prefix``?"""
        pages = self.adapter.list_pages(prefix)
        try:
            return next(iter(pages), None) is not None
        finally:
            getattr(pages, "close", lambda: None)()

    def info(self, path: Any, **kwargs: Any) -> dict[str, Any]:
        """``name``, ``size``, ``type`` and, for an object, ``token`` (its version): an object's from
        ``open_reader`` (one HEAD on S3), else a directory when objects are stored below the prefix (one
        LIST page). The root is always a directory. NotFoundError otherwise."""
        prefix = self._prefix(path)
        if not prefix:
            return self._directory("")
        try:
            with self.adapter.open_reader(prefix) as reader:
                return {"name": prefix, "size": reader.size, "type": "file", "token": reader.token}
        except NotFoundError:
            pass
        if self._has_objects_below(prefix):
            return self._directory(prefix)
        raise self._missing(prefix)

    def isdir(self, path: Any) -> bool:
        """True for the root and for a prefix with objects below it: one LIST page. (fsspec's asks
        ``info``, which tries the path as an object first: a HEAD more, and bulk copies ask this of every
        source and target.) A bad path raises InvalidKeyError."""
        prefix = self._prefix(path)
        return not prefix or self._has_objects_below(prefix)

    def exists(self, path: Any, **kwargs: Any) -> bool:
        """True for an object or a prefix with objects below it. A bad path raises InvalidKeyError (it is
        not merely absent)."""
        prefix = self._prefix(path)
        return not prefix or self.adapter.exists(prefix) or self._has_objects_below(prefix)

    def ls(self, path: Any, detail: bool = True, **kwargs: Any) -> list[Any]:
        """The objects and child directories directly under ``path`` (one ``list_dir``), sorted by name;
        ``[info(path)]`` for an object. NotFoundError when there is nothing (the root lists empty)."""
        prefix = self._prefix(path)
        listing = self.adapter.list_dir(prefix)
        entries = [self._file(o) for o in listing.objects] + [self._directory(p) for p in listing.prefixes]
        if not entries and prefix:
            entries = [self.info(prefix)]  # NotFoundError when it is no object either
        entries.sort(key=lambda e: e["name"])
        return entries if detail else [e["name"] for e in entries]

    def find(
        self,
        path: Any,
        maxdepth: int | None = None,
        withdirs: bool = False,
        detail: bool = False,
        **kwargs: Any,
    ) -> Any:
        """Every object below ``path`` (the object itself when ``path`` is one), from one streamed listing
        (``iter_list``) unless ``maxdepth`` asks for fsspec's walk; ``withdirs`` adds the directories."""
        if maxdepth is not None:
            return super().find(path, maxdepth=maxdepth, withdirs=withdirs, detail=detail, **kwargs)
        prefix = self._prefix(path)
        found: dict[str, dict[str, Any]] = {}
        for info in self.adapter.iter_list(prefix):
            found[info.key] = self._file(info)
            if withdirs:
                parts = info.key.split("/")
                for depth in range(len(prefix.split("/")) if prefix else 1, len(parts)):
                    directory = "/".join(parts[:depth])
                    found.setdefault(directory, self._directory(directory))
        if withdirs and found and prefix:
            found[prefix] = self._directory(prefix)
        if not found and prefix and self.adapter.exists(prefix):
            found[prefix] = self.info(prefix)
        ordered = dict(sorted(found.items()))
        return ordered if detail else list(ordered)

    def modified(self, path: Any) -> datetime:
        """When the object was last written (the listing's time: one ``list_dir`` of its parent)."""
        key = self._key(path)
        parent = key.rpartition("/")[0]
        for info in self.adapter.list_dir(parent).objects:
            if info.key == key:
                return info.last_modified
        raise self._missing(key)

    def created(self, path: Any) -> datetime:
        """``modified``: an object store keeps only the time of the write that made the current version."""
        return self.modified(path)

    # -- reads ----------------------------------------------------------------------------------------
    def cat_file(self, path: Any, start: int | None = None, end: int | None = None, **kwargs: Any) -> bytes:
        """The object's bytes, or ``[start, end)`` of them in one ranged read (``read_range``). fsspec's
        conventions: None is an open end, a negative offset counts from the end (the size comes from the
        reader the range is then read through, so both are of one version), and a range past the end
        reads ``b""``."""
        key = self._key(path)
        for bound in (start, end):
            if bound is not None and (isinstance(bound, bool) or not isinstance(bound, int)):
                raise InvalidRangeError(
                    f"cat_file of {key!r} on {self.adapter.backend}: start and end must be None or ints, "
                    f"not {start!r} and {end!r}",
                    key=key,
                    backend=self.adapter.backend,
                )
        if start is None and end is None:
            return self.adapter.read_bytes(key)
        if (start or 0) < 0 or (end or 0) < 0:
            with self.adapter.open_reader(key) as reader:
                first, last = slice(start, end).indices(reader.size)[:2]
                reader.seek(first)
                return reader.read(max(last - first, 0)) or b""
        first = start or 0
        # An empty range (end at or before start) still reads the object's size: a missing object is
        # NotFoundError, as read_range's.
        last = max(end if end is not None else 2**63 - 1, first)
        try:
            return self.adapter.read_range(key, first, last)
        except InvalidRangeError as exc:
            if exc.size is None:
                raise
            return b""  # starts past the end: fsspec reads nothing there, it is no error

    def _open(
        self,
        path: Any,
        mode: str = "rb",
        block_size: int | None = None,
        autocommit: bool = True,
        cache_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        key = self._key(path)
        if not autocommit:
            raise UnsupportedOperationError(
                f"open {key!r} on {self.adapter.backend}: fsspec transactions are not supported; each "
                "file is written atomically on close",
                key=key,
                backend=self.adapter.backend,
            )
        block_size = self.blocksize if block_size is None else self._block_size(block_size)
        if mode == "rb":
            cache_type = self._cache_type(kwargs.get("cache_type", self.cache_type))
            reader = self.adapter.open_reader(key)
            return AdapterReadFile(self, key, reader, block_size, cache_type, cache_options)
        if mode in ("wb", "xb"):
            return AdapterWriteFile(self.adapter, key, exclusive=mode == "xb", spool=block_size)
        raise UnsupportedOperationError(
            f"open {key!r} on {self.adapter.backend}: mode {mode!r} (objects are read with 'rb' and "
            "written whole with 'wb' or 'xb')",
            key=key,
            backend=self.adapter.backend,
        )

    # -- writes ---------------------------------------------------------------------------------------
    def pipe_file(self, path: Any, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        """Write ``value`` atomically (``write``); with ``mode="create"`` only if absent
        (``write_if_absent``): FileExistsError when an object is there."""
        key = self._key(path)
        if mode == "create":
            if self.adapter.write_if_absent(key, value) is None:
                raise FileExistsError(f"{key!r} exists on {self.adapter.backend}")
        elif mode == "overwrite":
            self.adapter.write(key, value)
        else:
            raise InvalidArgumentError(
                f"pipe_file of {key!r} on {self.adapter.backend}: mode must be 'overwrite' or 'create', "
                f"not {mode!r}",
                key=key,
                backend=self.adapter.backend,
            )

    def pipe(self, path: Any, value: Any = None, **kwargs: Any) -> None:
        """fsspec's ``pipe``, with every key of a ``{path: value}`` mapping checked before the first write
        (a bad key among them writes none)."""
        if isinstance(path, Mapping):
            for each in path:
                self._key(each)
        super().pipe(path, value, **kwargs)

    def cp_file(self, path1: Any, path2: Any, **kwargs: Any) -> None:
        """Copy one version of the object at ``path1`` (a reader: never bytes of two versions) to
        ``path2``, streamed and written atomically (``write``). A ``path1`` that is only a directory (a
        prefix, or the root, as a recursive copy lists them) copies nothing: its objects are copied on
        their own, and ``path2`` may then be the root."""
        source, target = self._prefix(path1), self._prefix(path2)
        if not source:
            return
        try:
            with self.adapter.open_reader(source) as reader:
                self.adapter.write(self._key(target), reader)
        except NotFoundError:
            if not self._has_objects_below(source):
                raise

    def copy(
        self,
        path1: Any,
        path2: Any,
        recursive: bool = False,
        maxdepth: int | None = None,
        on_error: str | None = None,
        **kwargs: Any,
    ) -> None:
        """fsspec's ``copy``, with every source and target path checked first (a bad one copies nothing)
        and its targets placed as ``cp -r`` would at any depth (see ``_bulk``)."""
        self._checked(path1)
        self._checked(path2)
        pairs = self._bulk(self, path1, self, path2, recursive, maxdepth, kwargs)
        if pairs is not None:
            super().copy(*pairs, recursive=recursive, maxdepth=maxdepth, on_error=on_error, **kwargs)

    def get(
        self, rpath: Any, lpath: Any, recursive: bool = False, maxdepth: int | None = None, **kwargs: Any
    ) -> None:
        """fsspec's ``get`` (objects to local files), its targets placed as ``cp -r`` would (``_bulk``)."""
        self._checked(rpath)
        pairs = self._bulk(self, rpath, LocalFileSystem(), lpath, recursive, maxdepth, kwargs)
        if pairs is not None:
            super().get(*pairs, recursive=recursive, maxdepth=maxdepth, **kwargs)

    def put(
        self, lpath: Any, rpath: Any, recursive: bool = False, maxdepth: int | None = None, **kwargs: Any
    ) -> None:
        """fsspec's ``put`` (local files to objects), with the target checked first and its targets placed
        as ``cp -r`` would (``_bulk``)."""
        self._checked(rpath)
        pairs = self._bulk(LocalFileSystem(), lpath, self, rpath, recursive, maxdepth, kwargs)
        if pairs is not None:
            super().put(*pairs, recursive=recursive, maxdepth=maxdepth, **kwargs)

    def _bulk(
        self,
        source_fs: AbstractFileSystem,
        sources: Any,
        target_fs: AbstractFileSystem,
        target: Any,
        recursive: bool,
        maxdepth: int | None,
        kwargs: Mapping[str, Any],
    ) -> tuple[list[str], list[str]] | None:
        """The sources of a bulk copy (``copy``, ``get``, ``put``) and the target of each, as fsspec's own
        methods work them out (copied from ``AbstractFileSystem.copy``; ``cp -r``'s rule: into an existing
        directory ``src`` copies the directory, ``src/`` its contents), or None when there is nothing to
        copy. Two lists are taken as they are.

        fsspec finds the directory that a source ``src`` is copied *from* by cutting its path at the last
        ``/``; its paths start at a root marker ``/``, ours at the first name (``root_marker = ""``). So
        for a directory directly under the root there was no ``/`` to cut at: its files went into the
        target itself, over any of the same name (one level down the cut was right). Our paths are given
        to fsspec's arithmetic (``other_paths``) with the root marker added, and taken back without it:
        that also makes the root a target like any directory."""
        if isinstance(sources, list) and isinstance(target, list):
            return sources, target
        expand_kwargs = {k: v for k, v in kwargs.items() if k != "callback"}  # a get/put argument
        source_is_str = isinstance(sources, str)
        if source_is_str and source_fs is not self:
            sources = make_path_posix(sources)
        if isinstance(target, str) and target_fs is not self:
            target = make_path_posix(target)
        expanded = source_fs.expand_path(sources, recursive=recursive, maxdepth=maxdepth, **expand_kwargs)
        if source_is_str and (not recursive or maxdepth is not None):
            # fsspec's rule: a non-recursive (or depth-limited) copy of a glob copies no directories
            expanded = [p for p in expanded if not (trailing_sep(p) or source_fs.isdir(p))]
            if not expanded:
                return None
        target_is_dir = isinstance(target, str) and (trailing_sep(target) or target_fs.isdir(target))
        exists = source_is_str and (
            (has_magic(sources) and len(expanded) == 1)
            or (not has_magic(sources) and target_is_dir and not trailing_sep(sources))
        )
        if not isinstance(target, str):
            return expanded, other_paths(expanded, target)  # checks that the lengths match
        rooted_sources = ["/" + p for p in expanded] if source_fs is self else expanded
        rooted_target = "/" + self._strip_protocol(target) if target_fs is self else target
        targets = other_paths(rooted_sources, rooted_target, exists=exists, flatten=not source_is_str)
        # A key is validated when it is written: ``_strip_protocol`` keeps a second leading ``/``, refused.
        return expanded, [t[1:] for t in targets] if target_fs is self else targets

    def mv(self, path1: Any, path2: Any, *args: Any, **kwargs: Any) -> None:
        """fsspec's ``mv`` (``copy``, then ``rm`` of the source), with every path checked first; two
        spellings of one key or prefix (``k``, ``sa://k``, ``k/``) move nothing. fsspec compares the
        strings, so it copied such an object onto itself and then deleted it."""
        sources, targets = self._checked(path1), self._checked(path2)
        if isinstance(path1, str) and isinstance(path2, str) and sources == targets:
            return
        super().mv(path1, path2, *args, **kwargs)

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> None:
        """fsspec's ``rm`` (every path ``expand_path`` finds is deleted), with every path checked first: a
        bad one, or the root (which ``delete_prefix`` refuses to empty too), deletes nothing. The paths go
        to ``delete_many`` (one request per batch on S3, not fsspec's one per path; a directory's name is
        deleted as a missing key, which is no error)."""
        if "" in self._checked(path):
            raise InvalidKeyError(
                f"rm of the root of {self.adapter.url} on {self.adapter.backend} is refused: name a prefix",
                key="",
                backend=self.adapter.backend,
            )
        self.adapter.delete_many(self.expand_path(path, recursive=recursive, maxdepth=maxdepth))

    def _checked(self, path: Any) -> list[str]:
        """Each path of ``path`` (one, or a list) as the key or prefix it names (``""``: the root),
        validated before any I/O."""
        return [self._prefix(each) for each in (path if isinstance(path, list) else [path])]

    def rm_file(self, path: Any) -> None:
        """Delete the object (``delete``: deleting a missing one is no error)."""
        self.adapter.delete(self._key(path))

    def _rm(self, path: Any) -> None:
        self.rm_file(path)

    def mkdir(self, path: Any, create_parents: bool = True, **kwargs: Any) -> None:
        """Nothing to create: a directory is a prefix with objects. The path is still validated."""
        self._prefix(path)

    def makedirs(self, path: Any, exist_ok: bool = False) -> None:
        """Nothing to create, as ``mkdir``."""
        self._prefix(path)

    def rmdir(self, path: Any) -> None:
        """Nothing to remove: a prefix goes with its last object."""
        self._prefix(path)


class AdapterReadFile(AbstractBufferedFile):  # type: ignore[misc]  # fsspec is untyped
    """A read-only file over one version of one object: fsspec's file (and cache, if any) over the ranged
    reads of an :class:`~storage_adapter.streams.ObjectReader`."""

    def __init__(
        self,
        fs: AdapterFileSystem,
        key: str,
        reader: ObjectReader,
        block_size: int,
        cache_type: str,
        cache_options: dict[str, Any] | None,
    ) -> None:
        self._reader = reader
        super().__init__(
            fs,
            key,
            mode="rb",
            block_size=block_size,
            cache_type=cache_type,
            cache_options=cache_options,
            size=reader.size,
        )
        self.details["token"] = reader.token

    def _fetch_range(self, start: int, end: int) -> bytes:
        self._reader.seek(start)
        return self._reader.read(end - start) or b""

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._reader.close()


class AdapterWriteFile(io.RawIOBase):
    """A write-only file that becomes the object, whole and at once, when closed: spooled in memory up
    to ``spool`` bytes and on disk past that, then written as one stream (``write``; ``write_if_absent``
    when ``exclusive``: FileExistsError if an object is there). ``discard()``, or leaving a ``with`` block
    by an exception, writes nothing."""

    def __init__(self, adapter: StorageAdapter, key: str, *, exclusive: bool, spool: int) -> None:
        super().__init__()
        self._adapter, self._key, self._exclusive = adapter, key, exclusive
        self._spool = tempfile.SpooledTemporaryFile(max_size=spool)  # noqa: SIM115 (closed by close/discard)

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._checkClosed()
        return self._spool.write(data)

    def tell(self) -> int:
        self._checkClosed()
        return self._spool.tell()

    def discard(self) -> None:
        """Close without writing anything."""
        self._spool.close()
        super().close()

    def close(self) -> None:
        if self.closed:
            return
        try:
            self._spool.seek(0)
            if not self._exclusive:
                self._adapter.write(self._key, self._spool)
            elif self._adapter.write_if_absent(self._key, self._spool) is None:
                raise FileExistsError(f"{self._key!r} exists on {self._adapter.backend}")
        finally:
            self.discard()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if kind is None:
            self.close()
        else:
            self.discard()


for _protocol in PROTOCOLS:
    fsspec.register_implementation(_protocol, AdapterFileSystem, clobber=True)
