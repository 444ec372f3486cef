"""Contract factories (``module:function``, taking ``(url, **options)``) that open an adapter over a
user-supplied obstore store, built here with obstore itself as a user would, then wrapped with
``open_adapter(store=..., capabilities=...)``. The capabilities are declared, not probed: the contract
checks the declaration.

``memory://NAME``: a fresh ``MemoryStore``; ``file:///DIR``: a ``LocalStore`` of that directory (served
by the adapter's own local driver there); ``s3://BUCKET/PREFIX`` plus the S3 options of an endpoint: an
``S3Store`` of that bucket with obstore's own prefix; ``az://CONTAINER/PREFIX`` plus the Azure options of
Azurite: an ``AzureStore`` of that container with obstore's own prefix. ``async_*``: the same store under the async twin,
behind the contract's sync bridge.
"""

from __future__ import annotations

import dataclasses
from typing import Any
from urllib.parse import urlsplit

from obstore.store import AzureStore, LocalStore, MemoryStore, S3Store

from contract_tests.async_bridge import SyncBridge
from storage_adapter import ObjectStorageAdapter, open_adapter, open_async_adapter
from storage_adapter.azure_backend import AZURE
from storage_adapter.builtin_backends import LOCAL, MEMORY, S3

MEMORY_CAPABILITIES = dataclasses.replace(MEMORY.capabilities, backend="wrapped-memory")
S3_CAPABILITIES = dataclasses.replace(S3.capabilities, backend="wrapped-s3")
LOCAL_CAPABILITIES = dataclasses.replace(LOCAL.capabilities, backend="wrapped-local")
AZURE_CAPABILITIES = dataclasses.replace(AZURE.capabilities, backend="wrapped-azure")


def user_store(url: str, **options: Any) -> tuple[Any, Any]:
    """The obstore store a user would build for ``url``, and what they would declare for it."""
    parts = urlsplit(url)
    if parts.scheme == "memory":
        return MemoryStore(), MEMORY_CAPABILITIES
    if parts.scheme == "file":
        return LocalStore(parts.path, mkdir=True), LOCAL_CAPABILITIES
    if parts.scheme == "az":
        azure = AzureStore(
            parts.netloc,
            prefix=parts.path.strip("/") or None,
            config={
                "endpoint": options["endpoint"],
                "account_name": options["account_name"],
                "account_key": options["account_key"],
            },
            client_options={"allow_http": bool(options.get("allow_http"))},
        )
        return azure, AZURE_CAPABILITIES
    config = {
        "endpoint": options["endpoint"],
        "access_key_id": options["access_key_id"],
        "secret_access_key": options["secret_access_key"],
        "region": options.get("region", "us-east-1"),
        "conditional_put": "etag",
    }
    store = S3Store(
        parts.netloc,
        prefix=parts.path.strip("/") or None,
        config=config,  # type: ignore[arg-type]
        client_options={"allow_http": bool(options.get("allow_http"))},
    )
    return store, S3_CAPABILITIES


def open_wrapped(url: str, **options: Any) -> ObjectStorageAdapter:
    store, capabilities = user_store(url, **options)
    return open_adapter(store=store, capabilities=capabilities)


def open_async_wrapped(url: str, **options: Any) -> SyncBridge:
    store, capabilities = user_store(url, **options)
    return SyncBridge(open_async_adapter(store=store, capabilities=capabilities))
