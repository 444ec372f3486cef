"""storage-adapter: one trustworthy object-storage layer over obstore, and the contract that proves it.

The core (this package's top-level modules) needs obstore only. Above it: ``storage_adapter.engine``
(atomic multi-table commits and their recovery) and ``storage_adapter.idempotency``; at the edge
``storage_adapter.spark``. The contract and its tooling live in the ``contract_tests`` package.
"""

from storage_adapter import azure_backend as _azure_backend  # registers azure (az://)
from storage_adapter import builtin_backends as _builtin_backends  # registers memory, local, s3
from storage_adapter.adapter import ObjectStorageAdapter, open_adapter
from storage_adapter.async_adapter import AsyncObjectStorageAdapter, open_async_adapter
from storage_adapter.errors import (
    BackendUnavailableError,
    ConfigurationError,
    InvalidBodyError,
    InvalidKeyError,
    InvalidRangeError,
    NotFoundError,
    ObjectChangedError,
    PermissionDeniedError,
    StorageError,
    UnsupportedOperationError,
)
from storage_adapter.protocol import AsyncStorageAdapter, StorageAdapter
from storage_adapter.registry import Backend, backend_named, register_backend
from storage_adapter.streams import Body, ObjectReader
from storage_adapter.types import (
    Capabilities,
    DirListing,
    ObjectInfo,
    SkippedObject,
    SkipReason,
    Support,
    Versioned,
)

del _azure_backend, _builtin_backends

__all__ = [
    "AsyncObjectStorageAdapter",
    "AsyncStorageAdapter",
    "Backend",
    "BackendUnavailableError",
    "Body",
    "Capabilities",
    "ConfigurationError",
    "DirListing",
    "InvalidBodyError",
    "InvalidKeyError",
    "InvalidRangeError",
    "NotFoundError",
    "ObjectChangedError",
    "ObjectInfo",
    "ObjectReader",
    "ObjectStorageAdapter",
    "PermissionDeniedError",
    "SkipReason",
    "SkippedObject",
    "StorageAdapter",
    "StorageError",
    "Support",
    "UnsupportedOperationError",
    "Versioned",
    "backend_named",
    "open_adapter",
    "open_async_adapter",
    "register_backend",
]
