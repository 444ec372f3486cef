"""How obstore's exceptions read, declared to the error boundary (:mod:`storage_adapter.translation`).

obstore raises its own exception classes (``obstore.exceptions``) for what a status or an OS error means
elsewhere, and carries the server's HTTP status and the transport failure only in its message's
structured part. This module says how to read both, once, and registers that with the boundary at
import, so every driver over obstore (and nothing else) relies on it. It also emulates obstore's errors
for injected faults (:mod:`storage_adapter.faults`).
"""

from __future__ import annotations

import re

from obstore.exceptions import (
    BaseError,
    GenericError,
    InvalidPathError,
    NotSupportedError,
    UnauthenticatedError,
)
from obstore.exceptions import PermissionDeniedError as ObstorePermissionDenied

from storage_adapter.errors import (
    InvalidKeyError,
    PermissionDeniedError,
    StorageError,
    UnsupportedOperationError,
)
from storage_adapter.faults import FaultKind, due
from storage_adapter.translation import ErrorReader, register_reader

# obstore 0.12 exposes no status attribute: an error's text ends with object_store's error in Rust's
# pretty Debug form, after this marker. Inside it every string (server body, URL) is escaped onto one
# line, so a field that spans a line break is object_store's own structure, never server or user text.
_DEBUG_MARKER = "\n\nDebug source:\n"
# RequestError::Status / ::Response { status, .. }: the server answered with this HTTP status.
_STATUS_FIELD = re.compile(r"^ *(?:inner: )?(?:Status|Response) \{\n *status: (\d{3}),$", re.MULTILINE)
# HttpError { kind, .. }: the request never got an answer (connect, request, timeout, interrupted, ...).
_TRANSPORT_FIELD = re.compile(r"^ *(?:\w+: )?HttpError \{\n *kind: (\w+),$", re.MULTILINE)


def _kind(exc: BaseException) -> type[StorageError] | None:
    if isinstance(exc, (ObstorePermissionDenied, UnauthenticatedError)):
        return PermissionDeniedError
    if isinstance(exc, InvalidPathError):
        return InvalidKeyError
    if isinstance(exc, NotSupportedError):
        return UnsupportedOperationError
    return None


def _status(exc: BaseException) -> int | None:
    """The HTTP status in object_store's structured error, if the server answered."""
    match = _STATUS_FIELD.search(str(exc).rpartition(_DEBUG_MARKER)[2])
    return int(match.group(1)) if match else None


def _transport(exc: BaseException) -> str | None:
    """object_store's ``HttpErrorKind`` when the request failed below HTTP (no status came back)."""
    match = _TRANSPORT_FIELD.search(str(exc).rpartition(_DEBUG_MARKER)[2])
    return match.group(1) if match else None


register_reader(ErrorReader((BaseError,), _kind, _status, _transport))


def fault_point(point: str) -> None:
    """Mark the obstore request ``point`` about to be made (storage_adapter.faults): an injected fault is
    raised as obstore raises the real one, so the driver's own handling and the translation see it."""
    kind = due(point)
    if kind is None:
        return
    status = {FaultKind.UNAVAILABLE: 503, FaultKind.DENIED: 403}.get(kind, 400)
    message = f"injected fault before {point}{_DEBUG_MARKER}Status {{\n    status: {status},\n}}"
    raise (ObstorePermissionDenied if kind is FaultKind.DENIED else GenericError)(message)
