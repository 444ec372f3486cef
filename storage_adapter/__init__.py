"""storage-adapter: one trustworthy object-storage layer over obstore, and the contract that proves it."""

from storage_adapter.adapter import CAPABILITIES, ObjectStorageAdapter, open_adapter
from storage_adapter.errors import (
    BackendUnavailableError,
    ConfigurationError,
    InvalidKeyError,
    NotFoundError,
    PermissionDeniedError,
    StorageError,
    UnsupportedOperationError,
)
from storage_adapter.types import Capabilities, DirListing, ObjectInfo, Support, Versioned

__all__ = [
    "CAPABILITIES",
    "BackendUnavailableError",
    "Capabilities",
    "ConfigurationError",
    "DirListing",
    "InvalidKeyError",
    "NotFoundError",
    "ObjectInfo",
    "ObjectStorageAdapter",
    "PermissionDeniedError",
    "StorageError",
    "Support",
    "UnsupportedOperationError",
    "Versioned",
    "open_adapter",
]
