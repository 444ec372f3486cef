"""HTTP responses as idempotency outcomes: what the middleware stores of a response, and how a stored one
is replayed. The engine's reconciler describes a landed commit with the same ``http_result``, so a
reconciled answer is byte for byte the response the request would have had."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable

from storage_adapter.idempotency import (
    HandlerResult,
    IdempotencyRecord,
    IdempotencyStore,
    ReplayUnavailableError,
)
from storage_adapter.idempotency.records import canonical_json

# The headers a replay carries by default: what a client acts on besides the body.
REPLAY_HEADERS = ("content-type", "location", "etag")
# Never stored or replayed, whatever is configured: a cookie is the first client's alone, and the framing
# headers belong to one connection (the replay computes its own content-length).
NEVER_REPLAYED = frozenset({"set-cookie", "content-length", "transfer-encoding", "connection", "keep-alive"})
# The error subtype of a finalized record whose response body was over the size the middleware stores: the
# request was applied once, and every duplicate is told its response cannot be reproduced.
RESPONSE_NOT_STORED = "idempotency_response_not_stored"
# A body whose stored form (JSON text, or base64) is up to this size is kept in the record itself; a
# larger one is the record's attachment, an object of its own written before the record is finalized (one
# PUT more, one GET more per replay), so the record stays small and every response up to the store's
# max_attachment_bytes replays. The stored form, not the body, is measured: JSON escapes a control byte
# as six.
INLINE_BODY_BYTES = 8 * 1024
# Replayed with the body whatever is configured: they say how its bytes are to be read (a body gzipped by
# a middleware inside this one is stored gzipped).
ALWAYS_REPLAYED = frozenset({"content-encoding"})


def replay_headers(names: Iterable[str]) -> frozenset[str]:
    """The allow-list of replayed header names, lowercased. Raises ValueError for a name that is never
    replayed (``set-cookie`` and the framing headers)."""
    allowed = frozenset(name.lower() for name in names)
    refused = sorted(allowed & NEVER_REPLAYED)
    if refused:
        raise ValueError(f"headers {refused} are never stored or replayed")
    return allowed


def kept_headers(headers: Iterable[tuple[str, str]], allowed: frozenset[str]) -> tuple[tuple[str, str], ...]:
    """The pairs of ``headers`` whose lowercased name is in ``allowed`` or ``ALWAYS_REPLAYED``, names
    lowercased, order kept."""
    kept = allowed | ALWAYS_REPLAYED
    return tuple((name.lower(), value) for name, value in headers if name.lower() in kept)


def http_result(
    status: int,
    body: bytes,
    headers: Iterable[tuple[str, str]] = (),
    allowed: frozenset[str] = frozenset(REPLAY_HEADERS),
    inline_bytes: int = INLINE_BODY_BYTES,
) -> HandlerResult:
    """The outcome to store for an HTTP response: its status, its body and its ``allowed`` headers. A body
    whose stored form (text when it is UTF-8, else base64) is up to ``inline_bytes`` is in the summary; a
    larger one is the result's attachment (the summary says its size). A reconciler describes a landed
    effect with it."""
    kept = kept_headers(headers, allowed)
    if len(body) <= inline_bytes:  # a stored form is never shorter than the body
        try:
            summary = {"body": body.decode("utf-8")}
        except UnicodeDecodeError:
            summary = {"body_base64": base64.b64encode(body).decode("ascii")}
        if len(canonical_json(summary)) <= inline_bytes:
            return HandlerResult(status, summary, kept)
    return HandlerResult(status, {"body_attachment": len(body)}, kept, attachment=body)


def not_stored(
    status: int, size: int, headers: Iterable[tuple[str, str]], allowed: frozenset[str]
) -> HandlerResult:
    """The outcome to store for a response whose body of ``size`` bytes is over the stored limit."""
    return HandlerResult(
        status, {"body_bytes": size}, kept_headers(headers, allowed), error_subtype=RESPONSE_NOT_STORED
    )


def replay_response(record: IdempotencyRecord, store: IdempotencyStore) -> HandlerResult:
    """The replayer of the HTTP middleware: the stored status, headers and body (``bytes``, as the
    summary of the result; an attachment read from ``store`` and checked against its size and digest).
    Raises ReplayUnavailableError for a response that was not stored (over the limit) and for a record
    that holds no HTTP response (not written by the middleware or a reconciler using ``http_result``):
    the duplicate gets 500 ``idempotency_replay_failed``, never a second run. A missing or damaged
    attachment raises the store's CorruptRecordError (500 ``idempotency_record_corrupt``)."""
    status, summary = record.http_status, record.summary
    if record.error_subtype == RESPONSE_NOT_STORED:
        size = summary.get("body_bytes") if isinstance(summary, dict) else None
        raise ReplayUnavailableError(
            f"the request of key {record.key!r} was applied once; its response ({status}, {size} bytes) "
            "was over the size the server stores for replay",
            key=record.key,
        )
    body: bytes | None = None
    if isinstance(summary, dict) and len(summary) == 1:
        if isinstance(summary.get("body_attachment"), int):
            body = store.attachment(record)
            if body is not None and len(body) != summary["body_attachment"]:
                body = None
        elif isinstance(summary.get("body"), str):
            body = summary["body"].encode("utf-8")
        elif isinstance(summary.get("body_base64"), str):
            try:
                body = base64.b64decode(summary["body_base64"], validate=True)
            except binascii.Error:
                body = None
    if status is None or body is None:
        raise ReplayUnavailableError(f"record of key {record.key!r} holds no HTTP response", key=record.key)
    return HandlerResult(status, body, record.headers, record.error_subtype)
