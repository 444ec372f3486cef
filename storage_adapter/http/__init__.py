"""Idempotency-Key over HTTP, at the edge: an ASGI middleware over the idempotency store
(``storage_adapter.idempotency``), which knows nothing of HTTP. See docs/idempotency.md, "Over HTTP"."""

from storage_adapter.http.middleware import (
    APP_ERROR,
    LIFETIME_FIELD,
    NO_EFFECT,
    UNAUTHENTICATED,
    HttpSettings,
    IdempotencyMiddleware,
    IdempotentRoute,
    NotIdempotentError,
    catalog_config,
    fixed_realm,
    header_realm,
    owner_context,
    principal_realm,
    route_path,
)
from storage_adapter.http.renderers import ErrorRenderer, iceberg_error, problem_json
from storage_adapter.http.stored import (
    INLINE_BODY_BYTES,
    REPLAY_HEADERS,
    RESPONSE_NOT_STORED,
    http_result,
    replay_response,
)

__all__ = [
    "APP_ERROR",
    "INLINE_BODY_BYTES",
    "LIFETIME_FIELD",
    "NO_EFFECT",
    "REPLAY_HEADERS",
    "RESPONSE_NOT_STORED",
    "UNAUTHENTICATED",
    "ErrorRenderer",
    "HttpSettings",
    "IdempotencyMiddleware",
    "IdempotentRoute",
    "NotIdempotentError",
    "catalog_config",
    "fixed_realm",
    "header_realm",
    "http_result",
    "iceberg_error",
    "owner_context",
    "principal_realm",
    "problem_json",
    "replay_response",
    "route_path",
]
