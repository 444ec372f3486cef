"""Idempotency-Key over HTTP, at the edge: an ASGI middleware over the idempotency store
(``storage_adapter.idempotency``), which knows nothing of HTTP. See docs/idempotency.md, "Over HTTP"."""

from storage_adapter.http.middleware import (
    LIFETIME_FIELD,
    HttpSettings,
    IdempotencyMiddleware,
    IdempotentRoute,
    catalog_config,
    fixed_realm,
    header_realm,
    owner_context,
)
from storage_adapter.http.stored import REPLAY_HEADERS, RESPONSE_NOT_STORED, http_result, replay_response

__all__ = [
    "LIFETIME_FIELD",
    "REPLAY_HEADERS",
    "RESPONSE_NOT_STORED",
    "HttpSettings",
    "IdempotencyMiddleware",
    "IdempotentRoute",
    "catalog_config",
    "fixed_realm",
    "header_realm",
    "http_result",
    "owner_context",
    "replay_response",
]
