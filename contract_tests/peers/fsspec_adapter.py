"""FsspecAdapter: the ObjectStorageAdapter API implemented on fsspec filesystems (memory, local, s3fs).

This is a *peer* for comparison, not a second implementation to use. Every operation is what a careful
user of the stack would naturally write with its public API, nothing more:

* ``write`` is ``pipe_file`` (on local: truncate and write in place, so readers can see a partial file);
* ``write_if_absent`` is ``pipe_file(mode="create")``: fsspec's generic version checks ``exists`` and then
  writes (check-then-act, as fsspec's own comment says); s3fs sends ``If-None-Match: *`` (native). Neither
  returns the new version, so a winner's token comes from an ``info`` after the create (one more request,
  as for ``write``; a writer in between makes it the token of that writer's version);
* ``write_if_match`` reads the current token and writes if it matches (check-then-act everywhere: neither
  fsspec nor s3fs exposes a conditional update);
* ``read_versioned`` is ``info`` then ``cat_file`` (two requests, not one snapshot);
* tokens are the S3 ETag on s3fs, and a hash of the ``info`` dict (size, mtime/created, inode) elsewhere;
* ``exists`` is ``fs.exists`` (true for directories too).

The only thing borrowed from storage-adapter is key validation (:mod:`storage_adapter.keys`): the contract
throws hostile keys such as ``../x``, and a peer must not write outside its root on a real filesystem.
So the key clauses pass by construction; every other clause measures the stack itself.
URLs and options are those of ``open_adapter`` (same parser, same ``AWS_*`` environment).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from typing import Any

from storage_adapter.config import AdapterConfig, parse_url
from storage_adapter.derived import DerivedOperations
from storage_adapter.errors import ConfigurationError, NotFoundError, PermissionDeniedError, StorageError
from storage_adapter.keys import validate_key, validate_prefix
from storage_adapter.registry import FsspecPeer
from storage_adapter.streams import Body, ObjectReader, WholeSource, check_ranges, clip, joined
from storage_adapter.types import Capabilities, DirListing, ObjectInfo, Versioned


def peer_of(config: AdapterConfig) -> FsspecPeer:
    """The fsspec peer the backend of ``config`` declares. Raises ConfigurationError if it has none."""
    peer = config.spec.fsspec_peer
    if peer is None:
        raise ConfigurationError(f"backend {config.backend!r} declares no fsspec peer", key=config.url)
    return peer


def _timestamp(info: dict[str, Any]) -> datetime:
    value = info.get("LastModified", info.get("mtime", info.get("created")))
    if isinstance(value, datetime):
        return value
    return datetime.fromtimestamp(float(value or 0), tz=UTC)


def _token(info: dict[str, Any]) -> str:
    if info.get("ETag"):
        return str(info["ETag"])
    from fsspec.utils import tokenize

    # info() and ls() disagree on the type of "created" on MemoryFileSystem: hash normalized fields.
    return str(tokenize(info["size"], _timestamp(info).timestamp(), info.get("ino")))


def _precondition_failed(exc: OSError) -> bool:
    """s3fs reports a lost ``If-None-Match`` create as a plain OSError caused by a botocore 412."""
    response = getattr(exc.__cause__, "response", None)
    return isinstance(response, dict) and response.get("Error", {}).get("Code") == "PreconditionFailed"


class FsspecAdapter(DerivedOperations):
    """A peer adapter over one fsspec filesystem, with the ObjectStorageAdapter API.

    Raises NotFoundError, PermissionDeniedError or StorageError (naming key and backend) for the
    filesystem's OS errors; keys are validated with the project's rules before any I/O. Pickles (rebuilt
    from its config) and compares equal by config.
    """

    def __init__(self, config: AdapterConfig) -> None:
        self._config = config
        peer = peer_of(config)
        self._fs, self._root = peer.filesystem(config)
        self._caps = peer.capabilities

    @property
    def url(self) -> str:
        return self._config.url

    @property
    def backend(self) -> str:
        return self._caps.backend

    @property
    def capabilities(self) -> Capabilities:
        return self._caps

    def child(self, prefix: str) -> FsspecAdapter:
        return FsspecAdapter(self._config.child(prefix))

    def __reduce__(self) -> tuple[Any, ...]:
        return (FsspecAdapter, (self._config,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FsspecAdapter) and other._config == self._config

    def __hash__(self) -> int:
        return hash(("fsspec", self._config))

    def __repr__(self) -> str:
        return f"FsspecAdapter({self.backend}, {self.url!r})"

    # -- paths and errors ------------------------------------------------------------------------------------
    def _path(self, key: str) -> str:
        return f"{self._root}/{validate_key(key, self.backend)}"

    def _prefix_path(self, prefix: str) -> tuple[str, str]:
        prefix = validate_prefix(prefix, self.backend)
        return prefix, (f"{self._root}/{prefix}" if prefix else self._root)

    def _key_of(self, path: str) -> str:
        root = self._root.lstrip("/")
        return path.lstrip("/")[len(root) + 1 :]

    @contextmanager
    def _translated(self, key: str, action: str) -> Iterator[None]:
        try:
            yield
        except FileNotFoundError as exc:
            raise NotFoundError(
                f"not found: {key!r} on {self.backend}", key=key, backend=self.backend
            ) from exc
        except PermissionError as exc:
            raise PermissionDeniedError(
                f"permission denied: {action} {key!r} on {self.backend}: {exc}", key=key, backend=self.backend
            ) from exc
        except OSError as exc:
            raise StorageError(
                f"{action} {key!r} on {self.backend} failed: {exc}", key=key, backend=self.backend
            ) from exc

    def _info(self, path: str) -> dict[str, Any]:
        info = self._fs.info(path)
        if info.get("type") == "directory":
            raise FileNotFoundError(path)
        return dict(info)

    def _object_info(self, info: dict[str, Any]) -> ObjectInfo:
        return ObjectInfo(
            key=self._key_of(info["name"]),
            size=int(info["size"]),
            token=_token(info),
            last_modified=_timestamp(info),
        )

    # -- reads ---------------------------------------------------------------------------------------------
    def read_bytes(self, key: str) -> bytes:
        path = self._path(key)
        with self._translated(key, "read"):
            return bytes(self._fs.cat_file(path))

    def read_versioned(self, key: str) -> Versioned:
        path = self._path(key)
        with self._translated(key, "read"):
            token = _token(self._info(path))
            return Versioned(data=bytes(self._fs.cat_file(path)), token=token)

    def read_ranges(self, key: str, ranges: Sequence[tuple[int, int]]) -> builtins.list[bytes]:
        """The plainest form: the whole object once (one version), sliced."""
        checked = check_ranges(ranges, validate_key(key, self.backend), self.backend)
        data = self.read_bytes(key)
        return [data[slice(*clip(start, end, len(data), key, self.backend))] for start, end in checked]

    def read_range(self, key: str, start: int, end: int) -> bytes:
        return self.read_ranges(key, [(start, end)])[0]

    def open_reader(self, key: str) -> ObjectReader:
        current = self.read_versioned(key)
        return ObjectReader(WholeSource(current.data, current.token))

    def read_buffer(self, key: str) -> memoryview:
        return memoryview(self.read_bytes(key)).toreadonly()

    def exists(self, key: str) -> bool:
        path = self._path(key)
        with self._translated(key, "exists"):
            return bool(self._fs.exists(path))

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        prefix, path = self._prefix_path(prefix)
        with self._translated(prefix, "list"):
            found = self._fs.find(path, detail=True) if self._fs.exists(path) else {}
        infos = [self._object_info(dict(i)) for i in found.values() if i.get("type") != "directory"]
        # find() on a file returns the file itself; a prefix names whole segments below it.
        below = [i for i in infos if not prefix or i.key.startswith(prefix + "/")]
        return sorted(below, key=lambda i: i.key)

    def list_dir(self, prefix: str = "") -> DirListing:
        prefix, path = self._prefix_path(prefix)
        try:
            with self._translated(prefix, "list_dir"):
                entries = [dict(e) for e in self._fs.ls(path, detail=True)]
        except NotFoundError:
            return DirListing(objects=(), prefixes=())
        objects = [self._object_info(e) for e in entries if e.get("type") != "directory"]
        prefixes = [self._key_of(e["name"]).rstrip("/") for e in entries if e.get("type") == "directory"]
        return DirListing(
            objects=tuple(sorted((o for o in objects if o.key), key=lambda o: o.key)),
            prefixes=tuple(sorted(prefixes)),
        )

    # -- mutations -----------------------------------------------------------------------------------------
    def write(self, key: str, data: Body) -> str:
        path = self._path(key)
        body = joined(data, key, self.backend)
        with self._translated(key, "write"):
            self._fs.pipe_file(path, body)
            return _token(self._info(path))

    def write_if_absent(self, key: str, data: Body) -> str | None:
        path = self._path(key)
        body = joined(data, key, self.backend)
        with self._translated(key, "write_if_absent"):
            try:
                self._fs.pipe_file(path, body, mode="create")
            except FileExistsError:
                return None
            except OSError as exc:
                if _precondition_failed(exc):
                    return None
                raise
            return _token(self._info(path))

    def write_if_match(self, key: str, data: Body, token: str) -> str | None:
        path = self._path(key)
        body = joined(data, key, self.backend)
        with self._translated(key, "write_if_match"):
            try:
                current = _token(self._info(path))
            except FileNotFoundError:
                return None
            if current != token:
                return None
            self._fs.pipe_file(path, body)  # the race window: another writer may have replaced it by now
            return _token(self._info(path))

    def delete(self, key: str) -> None:
        path = self._path(key)
        with self._translated(key, "delete"), suppress(FileNotFoundError):
            self._fs.rm_file(path)

    def rename(self, src: str, dst: str) -> None:
        src_path, dst_path = self._path(src), self._path(dst)
        with self._translated(src, f"rename to {dst!r}"):
            self._info(src_path)  # fsspec's mv of a missing source is not an error on every filesystem
            self._fs.mv(src_path, dst_path)

    def remove_orphans(self, min_age_s: float = 3600.0) -> int:
        """The peer stages nothing (fsspec writes in place), so it leaves no leftovers to reclaim."""
        return 0


def open_peer(url: str, **options: Any) -> FsspecAdapter:
    """Open the fsspec peer for ``url`` (``memory://``, ``file://`` or ``s3://``, as ``open_adapter``).

    Raises ConfigurationError for an unknown scheme or option.
    """
    return FsspecAdapter(parse_url(url, options))
