"""Typed errors at the boundary: unreachable endpoints, missing buckets, wrong data and tokens."""

from __future__ import annotations

import pytest

from storage_adapter import (
    BackendUnavailableError,
    NotFoundError,
    PermissionDeniedError,
    StorageError,
    open_adapter,
)
from storage_adapter.servers.server import free_port


def test_unreachable_endpoint_is_backend_unavailable_and_names_key_and_backend() -> None:
    adapter = open_adapter(
        "s3://bucket",
        endpoint=f"http://127.0.0.1:{free_port()}",
        access_key_id="a",
        secret_access_key="b",
        allow_http=True,
        max_retries=0,
        connect_timeout_s=1.0,
    )
    for call in (lambda: adapter.read_bytes("some/key"), lambda: adapter.write("some/key", b"x")):
        with pytest.raises(BackendUnavailableError) as info:
            call()
        assert "some/key" in str(info.value) and "s3" in str(info.value)
        assert info.value.__cause__ is not None  # the backend exception is chained, not leaked


def test_missing_bucket_reads_not_found_and_writes_are_refused(embedded_seaweedfs: object) -> None:
    endpoint = embedded_seaweedfs
    adapter = open_adapter("s3://no-such-bucket", **endpoint.adapter_options())  # type: ignore[attr-defined]
    with pytest.raises(NotFoundError):
        adapter.read_bytes("k")
    with pytest.raises((PermissionDeniedError, StorageError)) as info:
        adapter.write("k", b"v")
    assert "'k'" in str(info.value)


def test_write_rejects_non_bytes_and_cas_rejects_non_tokens() -> None:
    adapter = open_adapter("memory://errors")
    with pytest.raises(TypeError, match="must be bytes, str, a binary file object or an iterable of bytes"):
        adapter.write("k", 42)  # type: ignore[arg-type]
    adapter.write("k", b"v")
    with pytest.raises(TypeError, match="token"):
        adapter.write_if_match("k", b"v2", None)  # type: ignore[arg-type]
    assert adapter.read_bytes("k") == b"v"


def test_delete_prefix_refuses_the_root() -> None:
    adapter = open_adapter("memory://errors-root")
    adapter.write("k", b"v")
    with pytest.raises(StorageError, match="non-empty prefix"):
        adapter.delete_prefix("")
    assert adapter.exists("k")


def test_every_error_class_survives_pickling_with_its_fields() -> None:
    """Errors cross processes (a pool re-raises its worker's): BatchDeleteError and its two kinds used to
    fail to unpickle (their ``errors`` argument was lost), so the pool broke instead of re-raising."""
    import pickle

    from storage_adapter.errors import BackendUnavailableError, BatchDeleteError, PermissionDeniedError

    failures: list[dict[str, StorageError]] = [
        {"a": NotFoundError("gone", key="a", backend="b"), "c": BackendUnavailableError("down", key="c")},
        {"a": BackendUnavailableError("down", key="a", backend="b")},
        {"a": PermissionDeniedError("no", key="a", backend="b")},
    ]
    for errors in failures:
        error = BatchDeleteError.of(errors, "local")
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error) and str(copy) == str(error)
        assert (copy.key, copy.backend, list(copy.errors)) == (error.key, error.backend, list(error.errors))
