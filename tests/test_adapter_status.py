"""Error classification at the obstore boundary: by HTTP status or transport failure, never by message text.

One test per row of the table in docs/errors.md: real servers where the status is reachable (SeaweedFS),
a tiny local HTTP server answering a fixed status for the rest, a refused port for transport failures.
"""

from __future__ import annotations

from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from loopback_http import serving

from storage_adapter import (
    BackendUnavailableError,
    NotFoundError,
    ObjectStorageAdapter,
    PermissionDeniedError,
    StorageError,
    UnsupportedOperationError,
    open_adapter,
)
from storage_adapter.keys import MAX_KEY_BYTES, MAX_SEGMENT_BYTES
from storage_adapter.servers.server import S3Endpoint, free_port

_FAST = {"max_retries": 0, "retry_timeout_s": 2.0, "connect_timeout_s": 1.0, "request_timeout_s": 5.0}


def _s3(url: str, endpoint: str) -> ObjectStorageAdapter:
    options: dict[str, Any] = {"access_key_id": "a", "secret_access_key": "b", "allow_http": True, **_FAST}
    return open_adapter(url, endpoint=endpoint, **options)


def _answer(status: int) -> type[BaseHTTPRequestHandler]:
    class Fixed(BaseHTTPRequestHandler):
        """Answers every request with ``status`` and an S3-shaped error body."""

        def _reply(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = b"<Error><Code>Planted</Code><Message>retries timeout timed out</Message></Error>"
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _reply

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Fixed


@pytest.fixture
def status_server(request: pytest.FixtureRequest) -> Iterator[str]:
    """An HTTP server on 127.0.0.1 answering every request with the parametrized status."""
    with serving(_answer(request.param)) as url:
        yield url


def _calls(adapter: ObjectStorageAdapter) -> dict[str, Any]:
    return {
        "read_bytes": lambda: adapter.read_bytes("k"),
        "write": lambda: adapter.write("k", b"v"),
        "list": lambda: adapter.list("p"),
        "delete": lambda: adapter.delete("k"),
    }


# status -> the class every operation raises (the body always says "retries timeout timed out": text is
# never read). 404 on a write is the missing bucket; 304/412 arrive typed but no plain call expects them.
_ROWS = {
    400: StorageError,
    405: StorageError,
    411: StorageError,
    413: StorageError,
    416: StorageError,
    412: StorageError,
    401: PermissionDeniedError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: BackendUnavailableError,
    408: BackendUnavailableError,
    429: BackendUnavailableError,
    500: BackendUnavailableError,
    502: BackendUnavailableError,
    503: BackendUnavailableError,
    501: UnsupportedOperationError,
}


@pytest.mark.parametrize("status_server", sorted(_ROWS), indirect=True, ids=str)
def test_status_decides_the_error_class(status_server: str, request: pytest.FixtureRequest) -> None:
    status = request.node.callspec.params["status_server"]
    expected = _ROWS[status]
    for name, call in _calls(_s3("s3://bucket/pre", status_server)).items():
        if name == "delete" and status == 404:
            call()  # deletes are idempotent: a missing object is success
            continue
        with pytest.raises(StorageError) as info:
            call()
        err = info.value
        assert type(err) is expected, f"{name} on HTTP {status}: {type(err).__name__}: {err}"
        assert isinstance(err, BackendUnavailableError) == (expected is BackendUnavailableError)
        assert err.backend == "s3" and err.__cause__ is not None


def test_connection_refused_is_transient() -> None:
    adapter = _s3("s3://bucket", f"http://127.0.0.1:{free_port()}")
    for name, call in _calls(adapter).items():
        with pytest.raises(BackendUnavailableError, match="s3"):
            call()
        assert name


def test_missing_bucket_list_is_not_found(embedded_seaweedfs: S3Endpoint) -> None:
    adapter = open_adapter("s3://no-such-bucket", **embedded_seaweedfs.adapter_options(), **_FAST)
    with pytest.raises(NotFoundError):
        adapter.list()
    with pytest.raises(NotFoundError):
        adapter.list_dir("p")


def test_invalid_bucket_name_is_permanent(embedded_seaweedfs: S3Endpoint) -> None:
    adapter = open_adapter("s3://bad_bucket_name", **embedded_seaweedfs.adapter_options(), **_FAST)
    with pytest.raises(StorageError) as info:
        adapter.write("k", b"v")
    assert not isinstance(info.value, BackendUnavailableError), info.value
    assert "400" in str(info.value) and "'k'" in str(info.value)


def test_key_too_long_for_the_server_is_permanent(embedded_seaweedfs: S3Endpoint) -> None:
    # Each part is a valid key (segments within the portable limit); together (prefix/key) they exceed
    # the server's 1024-byte limit: HTTP 400.
    segments = (MAX_KEY_BYTES - 10) // (MAX_SEGMENT_BYTES + 1)
    half = "/".join(["x" * MAX_SEGMENT_BYTES] * segments)
    adapter = open_adapter(embedded_seaweedfs.url(half), **embedded_seaweedfs.adapter_options(), **_FAST)
    with pytest.raises(StorageError) as info:
        adapter.write(half, b"v")
    assert type(info.value) is StorageError, info.value
    assert "400" in str(info.value)


class PanicException(BaseException):
    """Stands in for pyo3's ``pyo3_runtime.PanicException`` (a BaseException), which only a Rust panic
    can create: the boundary recognises it by module and name."""


PanicException.__module__ = "pyo3_runtime"


def test_a_rust_panic_becomes_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import storage_adapter.obstore_driver.driver as boundary

    def panic(*args: object, **kwargs: object) -> None:
        raise PanicException("called `Option::unwrap()` on a `None` value")

    adapter = open_adapter("memory://panic")
    monkeypatch.setattr(boundary.obstore, "get", panic)
    with pytest.raises(StorageError) as info:
        adapter.read_bytes("k")
    assert type(info.value) is StorageError and isinstance(info.value.__cause__, PanicException)
    assert "'k'" in str(info.value) and "memory" in str(info.value)


def test_the_documented_table_is_the_classifier() -> None:
    from pathlib import Path

    from storage_adapter.translation import status_error_class

    table = Path(__file__).parent.parent.joinpath("docs", "errors.md").read_text()
    for status, expected in _ROWS.items():
        assert status_error_class(status) is expected
        # The row that names the status first (the 5xx row also mentions 501, as its exception).
        row = min(
            (line for line in table.splitlines() if line.startswith("| ") and str(status) in line),
            key=lambda line: line.index(str(status)),
        )
        assert f"`{expected.__name__}`" in row, (status, row)


def test_a_rust_panic_while_building_a_store_becomes_a_typed_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening is covered too: a panic in the store's constructor is a StorageError naming the URL."""
    import storage_adapter.obstore_driver.stores as boundary

    def panic(*args: object, **kwargs: object) -> None:
        raise PanicException("request must be valid: InvalidUri")

    monkeypatch.setattr(boundary, "S3Store", panic)
    with pytest.raises(StorageError) as info:
        open_adapter("s3://bucket/p", anonymous=True)
    assert type(info.value) is StorageError and isinstance(info.value.__cause__, PanicException)
    assert "s3://bucket/p" in str(info.value) and info.value.backend == "s3"
