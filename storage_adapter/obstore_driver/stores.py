"""Building obstore stores: the in-memory ones by name, S3 ones from the resolved options (credentials
included), and a user's own store wrapped for an adapter's configuration (identity, secrets, pickling)."""

from __future__ import annotations

import os
import pickle
import re
import threading
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from obstore.store import AzureStore, GCSStore, HTTPStore, LocalStore, MemoryStore, S3Store

from storage_adapter.aws_profile import BotocoreCredentials, StaticKeys, profile_source
from storage_adapter.config import AdapterConfig
from storage_adapter.errors import (
    ConfigurationError,
)

if TYPE_CHECKING:  # only in obstore's type stubs
    from obstore.store import S3Config, S3CredentialProvider

_MEMORY_STORES: dict[str, MemoryStore] = {}
_MEMORY_LOCK = threading.Lock()


def _memory_store(name: str) -> MemoryStore:
    with _MEMORY_LOCK:
        store = _MEMORY_STORES.get(name)
        if store is None:
            store = _MEMORY_STORES[name] = MemoryStore()
        return store


def memory_store(config: AdapterConfig) -> Any:
    """The process-wide in-memory store named by ``config.location``."""
    return _memory_store(config.location)


def _credentials(opts: dict[str, Any], s3_config: dict[str, Any], url: str) -> BotocoreCredentials | None:
    """Put the keys that sign the store into ``s3_config``: the options' own, else a static profile's.
    Returns the credential provider for any other profile (botocore's), or None: object_store's own chain
    (web identity, container, instance metadata) then signs."""
    if opts.get("access_key_id"):
        source: StaticKeys | BotocoreCredentials | None = StaticKeys(
            opts["access_key_id"], opts["secret_access_key"], opts.get("session_token")
        )
    else:
        source = profile_source(opts.get("profile"), url)
    if not isinstance(source, StaticKeys):
        return source
    s3_config.update(access_key_id=source.access_key_id, secret_access_key=source.secret_access_key)
    if source.session_token:
        s3_config["session_token"] = source.session_token
    return None


def _client_options(opts: dict[str, Any]) -> Any:
    """object_store's HTTP client options from the (validated) S3 options; unset ones keep its defaults."""
    client: dict[str, Any] = {
        "allow_http": bool(opts["allow_http"]),
        "allow_invalid_certificates": bool(opts["allow_invalid_certificates"]),
        "connect_timeout": timedelta(seconds=opts["connect_timeout_s"]),
        "timeout": timedelta(seconds=opts["request_timeout_s"]),
    }
    if opts.get("proxy_url"):
        client["proxy_url"] = opts["proxy_url"]
    if opts.get("proxy_excludes"):
        client["proxy_excludes"] = opts["proxy_excludes"]
    if opts.get("pool_max_idle_per_host") is not None:
        client["pool_max_idle_per_host"] = str(opts["pool_max_idle_per_host"])  # obstore takes text
    if opts.get("pool_idle_timeout_s") is not None:
        client["pool_idle_timeout"] = timedelta(seconds=opts["pool_idle_timeout_s"])
    return client


def s3_store(config: AdapterConfig) -> Any:
    """An S3Store for the bucket ``config.location`` with the resolved (and already validated) S3 options.

    Signed by the keys in the options, else by the standard AWS chain (:mod:`storage_adapter.aws_profile`
    resolves its profiles, object_store the rest); unsigned only with ``anonymous``. Every setting
    object_store would otherwise take from the environment is given explicitly, so the options decide.
    """
    opts = dict(config.options)
    s3_config: dict[str, Any] = {
        "region": opts["region"],
        "virtual_hosted_style_request": opts["virtual_hosted_style"],
        "conditional_put": opts["conditional_put"],
        "skip_signature": opts["anonymous"],
    }
    if opts.get("endpoint"):
        # object_store lets AWS_ENDPOINT_URL_S3 from its own environment beat "endpoint"; under its own
        # key the option wins (the variable already fed the option when no endpoint was given).
        s3_config["endpoint"] = s3_config["aws_endpoint_url_s3"] = opts["endpoint"]
    provider = None if opts["anonymous"] else _credentials(opts, s3_config, config.url)
    return S3Store(
        config.location,
        config=cast("S3Config", s3_config),
        client_options=_client_options(opts),
        retry_config={
            "max_retries": opts["max_retries"],
            "retry_timeout": timedelta(seconds=opts["retry_timeout_s"]),
            "backoff": {
                "init_backoff": timedelta(seconds=opts["init_backoff_s"]),
                "max_backoff": timedelta(seconds=opts["max_backoff_s"]),
            },
        },
        credential_provider=cast("S3CredentialProvider | None", provider),
    )


# -- a user's own obstore store (open_adapter(store=..., capabilities=...)) -----------------------------
_STORE_TYPES = (MemoryStore, LocalStore, S3Store, GCSStore, AzureStore, HTTPStore)
# The fields of a store's config that hold credentials (S3 keys and tokens, Azure keys and SAS, GCS
# service account keys): masked in everything the adapter reports.
_SECRET_FIELD = re.compile(r"secret|token|password|sas|service_account|^access_key$", re.IGNORECASE)
# Wrapped stores obstore cannot pickle, by identity: a pickled adapter over one reopens the very store in
# this process. Held from the first pickling on, for the process's life.
_REATTACHABLE: dict[str, Any] = {}


def is_obstore_store(candidate: object) -> bool:
    """Whether ``candidate`` is one of obstore's stores."""
    return isinstance(candidate, _STORE_TYPES)


def store_identity(store: Any) -> str:
    """A name for the store object itself: its kind, this process and the object (one store wrapped
    twice is one identity; a store and its pickled copy in another process keep the original's)."""
    return f"{type(store).__name__.lower()}-{os.getpid()}-{id(store):x}"


def store_secrets(store: Any) -> tuple[str, ...]:
    """The credential values in ``store``'s config (nothing for stores without one)."""
    config = getattr(store, "config", None) or {}
    return tuple(str(v) for k, v in config.items() if _SECRET_FIELD.search(k) and isinstance(v, str) and v)


class WrappedStore:
    """A user's obstore store inside an adapter's config: equal (and hashing) by the store's identity,
    so an adapter and its pickled copy compare equal.

    Pickling: through obstore's own pickling where it has one (S3, GCS, Azure, HTTP, local stores: the
    copy addresses the same bucket or directory). A store obstore cannot pickle (a MemoryStore, a store
    with a Python credential provider) is pickled by reference: the copy is the very same store in this
    process; in another process a MemoryStore copy is a new, empty store there (memory stores are
    per-process, as ``memory://`` ones), and any other store raises ConfigurationError when unpickled.
    """

    __slots__ = ("identity", "store")

    def __init__(self, store: Any, identity: str) -> None:
        self.store, self.identity = store, identity

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WrappedStore) and other.identity == self.identity

    def __hash__(self) -> int:
        return hash(self.identity)

    def __repr__(self) -> str:
        return f"WrappedStore({self.identity})"

    def __reduce__(self) -> tuple[Any, ...]:
        try:
            pickled = pickle.dumps(self.store)  # obstore's own pickling, where it has one
        except (TypeError, AttributeError, pickle.PicklingError):
            # obstore refuses (MemoryStore), or what the store holds does not pickle (a local function
            # as credential provider)
            with _MEMORY_LOCK:
                _REATTACHABLE.setdefault(self.identity, self.store)
            return (_reattached, (self.identity, isinstance(self.store, MemoryStore)))
        return (_unpickled, (pickled, self.identity))


def _unpickled(pickled: bytes, identity: str) -> WrappedStore:
    return WrappedStore(pickle.loads(pickled), identity)


def _reattached(identity: str, per_process: bool) -> WrappedStore:
    with _MEMORY_LOCK:
        store = _REATTACHABLE.get(identity)
        if store is None and per_process:
            store = _REATTACHABLE[identity] = MemoryStore()
    if store is None:
        raise ConfigurationError(
            f"the wrapped obstore store {identity} cannot be reopened in this process: obstore cannot "
            "pickle it; wrap the store in each process (or open the adapter from a URL)",
            key=identity,
        )
    return WrappedStore(store, identity)


def local_directory(store: object) -> str | None:
    """The directory a user's ``LocalStore`` serves (its prefix; the filesystem root without one), None
    for any other store."""
    if not isinstance(store, LocalStore):
        return None
    return str(store.prefix) if store.prefix is not None else os.sep
