"""Building obstore stores: the in-memory ones by name, S3 and Azure ones from the resolved options
(credentials included), and a user's own store wrapped for an adapter's configuration (identity, secrets,
pickling)."""

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
    from obstore.store import AzureConfig, S3Config, S3CredentialProvider

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
        retry_config=_retry_config(opts),
        credential_provider=cast("S3CredentialProvider | None", provider),
    )


def _retry_config(opts: dict[str, Any]) -> Any:
    """object_store's retry settings from the (validated) client options."""
    return {
        "max_retries": opts["max_retries"],
        "retry_timeout": timedelta(seconds=opts["retry_timeout_s"]),
        "backoff": {
            "init_backoff": timedelta(seconds=opts["init_backoff_s"]),
            "max_backoff": timedelta(seconds=opts["max_backoff_s"]),
        },
    }


# Azurite's account and its key, published by Microsoft for the emulator (not a secret anywhere else:
# no Azure account accepts it): the credentials of ``use_emulator`` when none are given.
EMULATOR_ACCOUNT = "devstoreaccount1"
EMULATOR_ACCOUNT_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def azure_account(opts: dict[str, Any]) -> str:
    """The account of resolved Azure options: ``account_name``, else (with ``use_emulator``) Azurite's."""
    return str(opts.get("account_name") or EMULATOR_ACCOUNT)


def azure_endpoint(opts: dict[str, Any]) -> str:
    """The blob service URL of resolved Azure options: the ``endpoint`` option, else the emulator's
    (``emulator_url``/account) with ``use_emulator``, else ``https://<account>.blob.core.windows.net``."""
    if opts.get("endpoint"):
        return str(opts["endpoint"])
    if opts["use_emulator"]:
        return f"{str(opts['emulator_url']).rstrip('/')}/{azure_account(opts)}"
    return f"https://{azure_account(opts)}.blob.core.windows.net"


def azure_credentials(opts: dict[str, Any]) -> dict[str, Any]:
    """The settings that sign an AzureStore's requests, with ``credential_type`` naming the one source
    used, picked in object_store's own order (bearer token, account key, workload identity, client
    secret, SAS, Azure CLI, managed identity): object_store reads the AZURE_* environment itself and, in
    its ``auto`` mode, a token there would beat a key given as an option."""
    if opts["anonymous"]:
        return {"skip_signature": True}
    given = {
        name: opts[name]
        for name in (
            "client_id",
            "tenant_id",
            "authority_host",
            "object_id",
            "msi_resource_id",
            "msi_endpoint",
        )
        if opts.get(name)
    }
    if opts.get("token"):
        return {"credential_type": "bearer_token", "token": opts["token"]}
    if opts.get("account_key"):
        return {"credential_type": "access_key", "account_key": opts["account_key"]}
    if opts.get("federated_token_file") and given.get("client_id") and given.get("tenant_id"):
        return {
            "credential_type": "workload_identity",
            "federated_token_file": opts["federated_token_file"],
            **given,
        }
    if opts.get("client_secret"):
        return {"credential_type": "client_secret", "client_secret": opts["client_secret"], **given}
    if opts.get("sas_token"):
        return {"credential_type": "sas_token", "sas_key": str(opts["sas_token"]).removeprefix("?")}
    if opts["use_azure_cli"]:
        return {"credential_type": "azure_cli", "use_azure_cli": True}
    if opts["use_emulator"]:
        return {"credential_type": "access_key", "account_key": EMULATOR_ACCOUNT_KEY}
    return {"credential_type": "managed_identity", **given}


def azure_store(config: AdapterConfig) -> Any:
    """An AzureStore for the container ``config.location`` with the resolved (and already validated)
    Azure options. Every setting object_store would otherwise take from the AZURE_* environment (the
    endpoint, the emulator switch, which credential signs) is given explicitly, so the options decide."""
    opts = dict(config.options)
    azure_config: dict[str, Any] = {
        "account_name": azure_account(opts),
        "endpoint": azure_endpoint(opts),
        # The emulator's URL and key are settled above: object_store's switch would read them from its
        # own environment (AZURITE_BLOB_STORAGE_URL).
        "use_emulator": False,
        # Else AZURE_SKIP_SIGNATURE in the environment would send every request unsigned (seen: 403).
        "skip_signature": False,
        **azure_credentials(opts),
    }
    return AzureStore(
        config.location,
        config=cast("AzureConfig", azure_config),
        client_options=_client_options({**opts, "allow_http": _allows_http(opts)}),
        retry_config=_retry_config(opts),
    )


def _allows_http(opts: dict[str, Any]) -> bool:
    """Plain HTTP where the options allow it, and to the emulator, which speaks nothing else."""
    return bool(opts["allow_http"]) or (bool(opts["use_emulator"]) and not opts.get("endpoint"))


# -- a user's own obstore store (open_adapter(store=..., capabilities=...)) -----------------------------
_STORE_TYPES = (MemoryStore, LocalStore, S3Store, GCSStore, AzureStore, HTTPStore)
# The fields of a store's config that hold credentials (S3 keys and tokens, Azure keys and SAS, GCS
# service account keys): masked in everything the adapter reports.
_SECRET_FIELD = re.compile(r"secret|token|password|sas|service_account|key$", re.IGNORECASE)
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
