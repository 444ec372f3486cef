"""The body of an answer the idempotency layer itself gives (400 bad key, 422 reuse, 503 in progress, the
terminal 500...): one renderer per service, so its clients parse every error the same way, the app's own
and the middleware's. ``problem_json`` (RFC 9457) is the default; ``iceberg_error`` is the Iceberg REST
catalog's ``IcebergErrorResponse``, which Iceberg's clients parse."""

from __future__ import annotations

import json
from collections.abc import Callable

# (status, problem type, detail) -> (content type, body). The problem type is the layer's subtype
# (``idempotency_key_invalid``...), the detail a sentence for a person.
ErrorRenderer = Callable[[int, str, str], tuple[str, bytes]]


def problem_json(status: int, problem_type: str, detail: str) -> tuple[str, bytes]:
    """``application/problem+json``: ``{"type", "status", "detail"}``."""
    body = {"type": problem_type, "status": status, "detail": detail}
    return "application/problem+json", _compact(body)


def iceberg_error(status: int, problem_type: str, detail: str) -> tuple[str, bytes]:
    """The Iceberg REST ``ErrorModel`` inside its ``error`` field: ``{"error": {"message", "type",
    "code"}}``, as ``application/json``. Iceberg's clients choose the exception by ``code`` and show
    ``type`` and ``message``."""
    body = {"error": {"message": detail, "type": problem_type, "code": status}}
    return "application/json", _compact(body)


def _compact(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()
