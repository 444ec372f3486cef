"""The one boundary with obstore: only this package imports it.

- :mod:`.errors` declares to the error boundary (:mod:`storage_adapter.translation`) how obstore's
  exceptions read (their classes, the server's status, transport failures), and emulates them for
  injected faults;
- :mod:`.stores` builds the stores: in-memory ones by name, S3 and Azure ones from the resolved options
  and their credentials, and a user's own store wrapped for an adapter (identity, secrets, pickling);
- :mod:`.driver` drives them: :class:`ObstoreDriver` and its non-blocking twin
  :class:`ObstoreAsyncDriver`; S3 and Azure listings through :mod:`.raw_listing`, the raw client that
  sees every name as stored;
- :mod:`.foreign` writes below a root by exact names, as other tools do (``Backend.foreign_writer``).
"""

from storage_adapter.obstore_driver.driver import ObstoreAsyncDriver, ObstoreDriver, wrapped_driver
from storage_adapter.obstore_driver.foreign import store_writer
from storage_adapter.obstore_driver.stores import (
    EMULATOR_ACCOUNT,
    EMULATOR_ACCOUNT_KEY,
    WrappedStore,
    azure_account,
    azure_credentials,
    azure_endpoint,
    azure_store,
    is_obstore_store,
    local_directory,
    memory_store,
    s3_store,
    store_identity,
    store_secrets,
)

__all__ = [
    "EMULATOR_ACCOUNT",
    "EMULATOR_ACCOUNT_KEY",
    "ObstoreAsyncDriver",
    "ObstoreDriver",
    "WrappedStore",
    "azure_account",
    "azure_credentials",
    "azure_endpoint",
    "azure_store",
    "is_obstore_store",
    "local_directory",
    "memory_store",
    "s3_store",
    "store_identity",
    "store_secrets",
    "store_writer",
    "wrapped_driver",
]
