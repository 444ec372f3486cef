"""The clients compared by the benchmark, behind one small interface.

* ``adapter``: storage-adapter's ObjectStorageAdapter (and its async twin, for ``async_get``);
* ``obstore``: raw obstore calls on the same kind of store (the baseline the adapter's overhead is
  measured against; the bench, not the package, is the one place besides ``storage_adapter.obstore_driver`` that
  imports obstore, because the baseline *is* obstore);
* ``boto3``: plain boto3 calls (S3 only);
* ``s3fs`` and ``fsspec``: the fsspec peer adapter (:mod:`contract_tests.peers`), i.e. each operation as
  those stacks naturally do it;
* ``adapter-buffer``: the adapter's no-copy ``read_buffer`` (gets only; where the adapter has it);
* ``open().read()`` and ``pyarrow.fs``: the floors of a local get, a plain file read and pyarrow's own
  local filesystem (gets only, on files a plain write put there).

An operation a client cannot do is absent from ``ops`` (e.g. raw obstore has no local CAS); one it only
uses to prepare a measurement (the plain write under ``open().read()``) is in ``seeds``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import obstore

from storage_adapter.protocol import AsyncStorageAdapter, StorageAdapter

OPS = ("get", "put", "write_if_absent", "write_if_match", "list", "list_dir")


@dataclass(frozen=True)
class Client:
    """``ops`` maps an operation name to a callable; put, write_if_absent and write_if_match return the
    new token (write_if_absent and write_if_match: None when the condition failed), as the adapter does,
    so every client does the same work. ``list_dir`` returns the child prefixes. ``seeds`` are ops used
    only to prepare the others, never measured."""

    name: str
    ops: dict[str, Callable[..., Any]]
    seeds: frozenset[str] = frozenset()

    def supports(self, op: str) -> bool:
        return op in self.ops and op not in self.seeds


def adapter_client(
    name: str, adapter: StorageAdapter, twin: AsyncStorageAdapter | None = None, list_dir: bool = True
) -> Client:
    """Our adapter, or the fsspec peer adapter (same API). With ``twin`` (the async adapter of the same
    location), also ``async_get``: its ``read_bytes``, a coroutine function. ``list_dir=False`` leaves
    that op out (s3fs caches directory listings: it would time its cache)."""
    ops: dict[str, Callable[..., Any]] = {
        "get": adapter.read_bytes,
        "put": adapter.write,
        "write_if_absent": adapter.write_if_absent,
        "write_if_match": adapter.write_if_match,
        "list": adapter.list,
    }
    if list_dir:
        ops["list_dir"] = lambda prefix: adapter.list_dir(prefix).prefixes
    if twin is not None:
        ops["async_get"] = twin.read_bytes
    return Client(name, ops)


def buffer_client(adapter: StorageAdapter) -> list[Client]:
    """The adapter's no-copy read (``read_buffer``), once the adapter has it; no client before."""
    read_buffer = getattr(adapter, "read_buffer", None)
    if read_buffer is None:
        return []
    return [Client("adapter-buffer", {"get": read_buffer, "put": adapter.write}, frozenset({"put"}))]


def _plain_write(root: Path) -> Callable[[str, bytes], None]:
    def put(key: str, data: bytes) -> None:
        path = root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    return put


def open_read_client(root: Path) -> Client:
    """The floor of a local get: ``open(path, "rb").read()``."""

    def get(key: str) -> bytes:
        with open(root / key, "rb") as file:
            return file.read()

    return Client("open().read()", {"get": get, "put": _plain_write(root)}, frozenset({"put"}))


def pyarrow_client(root: Path) -> list[Client]:
    """pyarrow's LocalFileSystem reading a whole file (``open_input_stream(...).readall()``), where
    pyarrow is installed."""
    try:
        from pyarrow import fs
    except ImportError:
        return []
    local = fs.LocalFileSystem()

    def get(key: str) -> bytes:
        with local.open_input_stream(os.fspath(root / key)) as stream:
            return bytes(stream.readall())

    return [Client("pyarrow.fs", {"get": get, "put": _plain_write(root)}, frozenset({"put"}))]


def obstore_client(store: Any, prefix: str, supports_update: bool) -> Client:
    def path(key: str) -> str:
        return f"{prefix}/{key}"

    def put(key: str, data: bytes) -> str:
        return str(obstore.put(store, path(key), data)["e_tag"])

    def write_if_absent(key: str, data: bytes) -> str | None:
        try:
            return str(obstore.put(store, path(key), data, mode="create")["e_tag"])
        except obstore.exceptions.AlreadyExistsError:
            return None

    def write_if_match(key: str, data: bytes, token: str) -> str | None:
        try:
            return str(obstore.put(store, path(key), data, mode={"e_tag": token})["e_tag"])
        except obstore.exceptions.PreconditionError:
            return None

    def list_prefix(prefix_: str) -> list[Any]:
        return [meta for page in obstore.list(store, path(prefix_)) for meta in page]

    def list_dir(prefix_: str) -> list[str]:
        return list(obstore.list_with_delimiter(store, path(prefix_))["common_prefixes"])

    ops: dict[str, Callable[..., Any]] = {
        "get": lambda key: bytes(obstore.get(store, path(key)).bytes()),
        "put": put,
        "write_if_absent": write_if_absent,
        "list": list_prefix,
        "list_dir": list_dir,
    }
    if supports_update:  # object_store's LocalFileSystem has no conditional update
        ops["write_if_match"] = write_if_match
    return Client("obstore", ops)


def boto3_client(s3: Any, bucket: str, prefix: str) -> Client:
    def path(key: str) -> str:
        return f"{prefix}/{key}"

    def write_if_absent(key: str, data: bytes) -> str | None:
        try:
            return str(s3.put_object(Bucket=bucket, Key=path(key), Body=data, IfNoneMatch="*")["ETag"])
        except s3.exceptions.ClientError as exc:
            if exc.response["Error"]["Code"] == "PreconditionFailed":
                return None
            raise

    def write_if_match(key: str, data: bytes, token: str) -> str | None:
        try:
            return str(s3.put_object(Bucket=bucket, Key=path(key), Body=data, IfMatch=token)["ETag"])
        except s3.exceptions.ClientError as exc:
            if exc.response["Error"]["Code"] == "PreconditionFailed":
                return None
            raise

    def list_prefix(prefix_: str) -> list[Any]:
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=path(prefix_) + "/")
        return [obj for page in pages for obj in page.get("Contents", [])]

    def list_dir(prefix_: str) -> list[str]:
        pages = s3.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=path(prefix_) + "/", Delimiter="/"
        )
        return [p["Prefix"] for page in pages for p in page.get("CommonPrefixes", [])]

    return Client(
        "boto3",
        {
            "get": lambda key: s3.get_object(Bucket=bucket, Key=path(key))["Body"].read(),
            "put": lambda key, data: str(s3.put_object(Bucket=bucket, Key=path(key), Body=data)["ETag"]),
            "write_if_absent": write_if_absent,
            "write_if_match": write_if_match,
            "list": list_prefix,
            "list_dir": list_dir,
        },
    )
