"""The error boundary: every driver's I/O runs inside a :class:`Translation`, which turns what its
libraries raise into :mod:`storage_adapter.errors`, naming the key and the backend.

Classification is by exception type, HTTP status and transport failure, never by message wording
(docs/errors.md has the table). What the standard library raises (``OSError`` and its subclasses, urllib's
errors, connection failures and timeouts) is known here; a library whose exceptions carry their own kinds
and statuses declares how to read them with :func:`register_reader` (obstore's driver does, at import),
so the classification rules stay in this one module whichever library a driver uses.

A Rust panic inside an extension module (pyo3's ``PanicException``, a BaseException) becomes a
StorageError too; other BaseExceptions (KeyboardInterrupt, SystemExit) and programming errors pass
through unchanged.
"""

from __future__ import annotations

import urllib.error
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from storage_adapter.errors import (
    BackendUnavailableError,
    InvalidKeyError,
    NotFoundError,
    PermissionDeniedError,
    StorageError,
    UnsupportedOperationError,
)


@dataclass(frozen=True)
class ErrorReader:
    """How to read one library's exceptions: the classes it raises (``raises``), the error class an
    exception's own type stands for (``kind``: missing, denied, an invalid key, unsupported; None when its
    type says nothing), the HTTP status a server answered (``status``) and the transport failure when
    no answer came (``transport``: its kind, "" when unnamed, None when an answer came)."""

    raises: tuple[type[BaseException], ...]
    kind: Callable[[BaseException], type[StorageError] | None]
    status: Callable[[BaseException], int | None]
    transport: Callable[[BaseException], str | None]


def _os_kind(exc: BaseException) -> type[StorageError] | None:
    if isinstance(exc, FileNotFoundError):
        return NotFoundError
    if isinstance(exc, PermissionError):
        return PermissionDeniedError
    if isinstance(exc, NotImplementedError):
        return UnsupportedOperationError
    return None


def _os_status(exc: BaseException) -> int | None:
    return exc.code if isinstance(exc, urllib.error.HTTPError) else None


def _os_transport(exc: BaseException) -> str | None:
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    return "" if isinstance(reason, (ConnectionError, TimeoutError)) else None


# The standard library's (local I/O, urllib's signed requests, connection failures): always known.
_READERS: list[ErrorReader] = [
    ErrorReader((OSError, NotImplementedError), _os_kind, _os_status, _os_transport)
]


def register_reader(reader: ErrorReader) -> None:
    """Declare how a library's exceptions read; the boundary translates them from then on."""
    _READERS.append(reader)


def _reader(exc: BaseException) -> ErrorReader | None:
    return next((r for r in reversed(_READERS) if isinstance(exc, r.raises)), None)


def is_panic(exc: BaseException) -> bool:
    """A Rust panic inside an extension module: pyo3 raises it as ``pyo3_runtime.PanicException``, a
    BaseException (one class per extension module, importable from none), so it is recognised by its
    qualified name."""
    return any(c.__module__ == "pyo3_runtime" and c.__name__ == "PanicException" for c in type(exc).__mro__)


def translatable(exc: BaseException) -> bool:
    """Whether the boundary translates ``exc``: a known library's exception or a panic."""
    return _reader(exc) is not None or is_panic(exc)


def http_status(exc: BaseException) -> int | None:
    """The HTTP status the server answered; None when the request got no answer (or the error did not
    come from an HTTP request)."""
    reader = _reader(exc)
    return reader.status(exc) if reader else None


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none)."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def status_error_class(status: int) -> type[StorageError]:
    """The error class for an HTTP status: the table in docs/errors.md.

    Transient (retry may succeed): 408, 409 (S3 answers a conflicting concurrent request so and says
    retry), 429 and 5xx except 501. 501 Not Implemented is the server's permanent refusal. Every other
    4xx (and 3xx) is a permanent refusal of this request: a plain, non-transient StorageError.
    """
    if status in (401, 403):
        return PermissionDeniedError
    if status == 404:
        return NotFoundError
    if status == 501:
        return UnsupportedOperationError
    if status in (408, 409, 429) or status >= 500:
        return BackendUnavailableError
    return StorageError


# A permanent refusal of the request itself (other 4xx, 501), as opposed to missing, denied or transient.
REFUSALS = (StorageError, UnsupportedOperationError)

_PHRASES: dict[type[StorageError], str] = {
    PermissionDeniedError: "permission denied",
    InvalidKeyError: "invalid key",
    UnsupportedOperationError: "unsupported",
    BackendUnavailableError: "backend unavailable",
    StorageError: "failed",
}


def classify(exc: BaseException) -> tuple[type[StorageError], str]:
    """The error class of ``exc``, and what decided it (for the message)."""
    if is_panic(exc):
        return StorageError, "a native extension panicked"
    reader = _reader(exc)
    if reader is None:
        return StorageError, ""
    status = reader.status(exc)
    kind = reader.kind(exc)
    if kind is NotFoundError or status == 404:
        return NotFoundError, ""
    if kind is not None:
        return kind, ""
    if status is not None:
        return status_error_class(status), f"HTTP {status}"
    transport = reader.transport(exc)
    if transport is not None:
        return BackendUnavailableError, f"transport {transport}" if transport else ""
    return StorageError, ""


class Translation:
    """Translates exceptions leaving its block into our hierarchy, naming key and backend. Every driver
    wraps its I/O in one, so classification lives in one place.

    A class rather than a generator-based context manager: it wraps every request, and costs a fraction.
    """

    __slots__ = ("action", "backend", "key")

    def __init__(self, backend: str, key: str, action: str) -> None:
        self.backend, self.key, self.action = backend, key, action

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> Literal[False]:
        if exc is None or isinstance(exc, StorageError):
            return False  # success, or already ours
        if translatable(exc):
            raise self.translate(exc) from exc
        return False  # a programming error or an interrupt: it must surface as it is

    def translate(self, exc: BaseException) -> StorageError:
        key, backend = self.key, self.backend
        cls, reason = classify(exc)
        if cls is NotFoundError:
            return NotFoundError(f"not found: {key!r} on {backend}", key=key, backend=backend)
        detail = f" ({reason})" if reason else ""
        message = f"{_PHRASES[cls]}{detail}: {self.action} {key!r} on {backend}: {first_line(exc)}"
        return cls(message, key=key, backend=backend)
