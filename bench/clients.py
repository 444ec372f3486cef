"""The clients compared by the benchmark, behind one small interface.

* ``adapter``: storage-adapter's ObjectStorageAdapter (and its async twin, for ``async_get``);
* ``obstore``: raw obstore calls on the same kind of store (the baseline the adapter's overhead is
  measured against; the bench, not the package, is the one place besides ``obstore_backend`` that
  imports obstore, because the baseline *is* obstore);
* ``boto3``: plain boto3 calls (S3 only);
* ``s3fs`` and ``fsspec``: the fsspec peer adapter (:mod:`contract_tests.peers`), i.e. each operation as
  those stacks naturally do it.

An operation a client cannot do is absent from ``ops`` (e.g. raw obstore has no local CAS).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import obstore

from storage_adapter.protocol import AsyncStorageAdapter, StorageAdapter

OPS = ("get", "put", "write_if_absent", "write_if_match", "list")


@dataclass(frozen=True)
class Client:
    """``ops`` maps an operation name to a callable; put, write_if_absent and write_if_match return the
    new token (write_if_absent and write_if_match: None when the condition failed), as the adapter does,
    so every client does the same work."""

    name: str
    ops: dict[str, Callable[..., Any]]

    def supports(self, op: str) -> bool:
        return op in self.ops


def adapter_client(name: str, adapter: StorageAdapter, twin: AsyncStorageAdapter | None = None) -> Client:
    """Our adapter, or the fsspec peer adapter (same API). With ``twin`` (the async adapter of the same
    location), also ``async_get``: its ``read_bytes``, a coroutine function."""
    ops: dict[str, Callable[..., Any]] = {
        "get": adapter.read_bytes,
        "put": adapter.write,
        "write_if_absent": adapter.write_if_absent,
        "write_if_match": adapter.write_if_match,
        "list": adapter.list,
    }
    if twin is not None:
        ops["async_get"] = twin.read_bytes
    return Client(name, ops)


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

    ops: dict[str, Callable[..., Any]] = {
        "get": lambda key: bytes(obstore.get(store, path(key)).bytes()),
        "put": put,
        "write_if_absent": write_if_absent,
        "list": list_prefix,
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

    return Client(
        "boto3",
        {
            "get": lambda key: s3.get_object(Bucket=bucket, Key=path(key))["Body"].read(),
            "put": lambda key, data: str(s3.put_object(Bucket=bucket, Key=path(key), Body=data)["ETag"]),
            "write_if_absent": write_if_absent,
            "write_if_match": write_if_match,
            "list": list_prefix,
        },
    )
