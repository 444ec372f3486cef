"""The ``azure`` backend: Azure Blob Storage (``az://container/prefix``), one registered object.

Its URLs, options, capabilities, driver and container creation are stated here, and nowhere else
(docs/azure.md). The URL forms Azure users write are accepted as aliases and always written back as
``az://container/prefix``, with the account as the ``account_name`` option:

* ``az://container/prefix`` (also ``azure://``): the account from the options or ``AZURE_STORAGE_ACCOUNT_NAME``;
* ``abfs[s]://container@account.dfs.core.windows.net/prefix`` (or ``abfs[s]://container/prefix``);
* ``https://account.blob.core.windows.net/container/prefix``.

Azure's conditional requests differ from S3's, and obstore's AzureStore maps them to the same outcomes:
a create (``If-None-Match: *``) that loses is answered 409 BlobAlreadyExists, a compare-and-swap
(``If-Match``) with a stale or absent version 412; both mean "the condition did not hold" (None), never an
error. Listings carry ETags unquoted, every other answer quoted: the driver quotes listed ones, so tokens
compare equal whichever request returned them.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import urllib.error
import urllib.request
from collections.abc import Mapping
from email.utils import formatdate
from types import MappingProxyType
from typing import Any
from urllib.parse import SplitResult, urlsplit

from storage_adapter.builtin_backends import (
    CLIENT_OPTIONS,
    S3_CONDITIONAL_STREAM_LIMIT,
    check_client_options,
    check_endpoint,
)
from storage_adapter.config import AdapterConfig, url_path
from storage_adapter.driver import Driver
from storage_adapter.errors import BackendUnavailableError, ConfigurationError, InvalidKeyError
from storage_adapter.keys import validate_prefix
from storage_adapter.obstore_driver import (
    ObstoreDriver,
    azure_account,
    azure_credentials,
    azure_endpoint,
    azure_store,
    store_writer,
)
from storage_adapter.registry import Backend, Option, register_backend
from storage_adapter.translation import status_error_class
from storage_adapter.types import Capabilities, Support

# The credentials resolve as one group (storage_adapter.config.resolve_options): a key given as an option
# takes no SAS, token or service principal from the environment. Which one signs, when several are set:
# object_store's own order (storage_adapter.obstore_driver.stores.azure_credentials).
_CREDENTIALS = "credentials"
AZURE_OPTIONS: Mapping[str, Option] = MappingProxyType(
    {
        "account_name": Option(str, env=("AZURE_STORAGE_ACCOUNT_NAME",)),
        "account_key": Option(
            str,
            env=("AZURE_STORAGE_ACCOUNT_KEY", "AZURE_STORAGE_ACCESS_KEY", "AZURE_STORAGE_MASTER_KEY"),
            secret=True,
            group=_CREDENTIALS,
        ),
        "sas_token": Option(
            str, env=("AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_SAS_KEY"), secret=True, group=_CREDENTIALS
        ),
        "token": Option(str, env=("AZURE_STORAGE_TOKEN",), secret=True, group=_CREDENTIALS),
        # A service principal (client secret), or workload identity (a federated token file, AKS).
        "client_id": Option(str, env=("AZURE_STORAGE_CLIENT_ID", "AZURE_CLIENT_ID"), group=_CREDENTIALS),
        "client_secret": Option(
            str, env=("AZURE_STORAGE_CLIENT_SECRET", "AZURE_CLIENT_SECRET"), secret=True, group=_CREDENTIALS
        ),
        "tenant_id": Option(
            str,
            env=(
                "AZURE_STORAGE_TENANT_ID",
                "AZURE_STORAGE_AUTHORITY_ID",
                "AZURE_TENANT_ID",
                "AZURE_AUTHORITY_ID",
            ),
            group=_CREDENTIALS,
        ),
        "federated_token_file": Option(str, env=("AZURE_FEDERATED_TOKEN_FILE",), group=_CREDENTIALS),
        "authority_host": Option(
            str, env=("AZURE_STORAGE_AUTHORITY_HOST", "AZURE_AUTHORITY_HOST"), group=_CREDENTIALS
        ),
        # Managed identity (IMDS), the last source of the chain: a user-assigned identity by client_id,
        # object_id or msi_resource_id.
        "object_id": Option(str, env=("AZURE_OBJECT_ID",), group=_CREDENTIALS),
        "msi_resource_id": Option(str, env=("AZURE_MSI_RESOURCE_ID",), group=_CREDENTIALS),
        "msi_endpoint": Option(
            str, env=("AZURE_MSI_ENDPOINT", "AZURE_IDENTITY_ENDPOINT"), group=_CREDENTIALS
        ),
        "use_azure_cli": Option(bool, env=("AZURE_USE_AZURE_CLI",), default=False, group=_CREDENTIALS),
        "anonymous": Option(bool, env=("AZURE_SKIP_SIGNATURE",), default=False),
        # Azurite: its account and published key by default, at emulator_url (plain HTTP).
        "use_emulator": Option(bool, env=("AZURE_STORAGE_USE_EMULATOR",), default=False),
        "emulator_url": Option(str, env=("AZURITE_BLOB_STORAGE_URL",), default="http://127.0.0.1:10000"),
        "endpoint": Option(str, env=("AZURE_STORAGE_ENDPOINT", "AZURE_ENDPOINT")),
        "allow_http": Option(bool, env=("AZURE_ALLOW_HTTP",), default=False),
        **CLIENT_OPTIONS,
    }
)

# Azure's naming rules: an account is 3-24 lower-case letters and digits; a container 3-63 lower-case
# letters, digits and single hyphens, starting and ending with a letter or digit.
_ACCOUNT = re.compile(r"[a-z0-9]{3,24}")
_CONTAINER = re.compile(r"(?!.*--)[a-z0-9][a-z0-9-]{1,61}[a-z0-9]")
# The hosts that name an account: <account>.blob.core.windows.net (https) and <account>.dfs... (abfs).
_ACCOUNT_HOST = re.compile(r"([a-z0-9]{3,24})\.(?:blob|dfs)\.core\.windows\.net")


def _split(parts: SplitResult, url: str) -> tuple[str, str, str | None]:
    """The container, the path below it and the account (None: not in the URL) of an Azure URL."""
    path = url_path(parts, url)
    host = parts.hostname or ""
    if parts.scheme.lower() == "https":
        account = _ACCOUNT_HOST.fullmatch(host)
        if account is None or parts.port is not None:
            raise ConfigurationError(
                f"https URL {url!r} must be https://<account>.blob.core.windows.net/<container>/prefix",
                key=url,
            )
        container, _, rest = path.lstrip("/").partition("/")
        return container, rest, account.group(1)
    if parts.username is not None:  # abfs://container@account.dfs.core.windows.net/prefix
        account = _ACCOUNT_HOST.fullmatch(host)
        if account is None or parts.port is not None:
            raise ConfigurationError(
                f"{parts.scheme} URL {url!r} must be {parts.scheme}://<container>@<account>.dfs.core.windows.net/prefix",
                key=url,
            )
        return parts.username, path, account.group(1)
    return parts.netloc, path, None


def _locate(parts: SplitResult, url: str) -> tuple[str, str]:
    container, path, _ = _split(parts, url)
    if not _CONTAINER.fullmatch(container):
        raise ConfigurationError(
            f"Azure URL {url!r} names a malformed container {container!r}: 3-63 lower-case letters, digits "
            "and single hyphens, starting and ending with a letter or digit",
            key=url,
        )
    try:
        prefix = validate_prefix(path.lstrip("/"), "azure")
    except InvalidKeyError as exc:
        raise ConfigurationError(f"storage URL {url!r} has an invalid prefix: {exc}", key=url) from exc
    return container, prefix


def _url_options(parts: SplitResult, url: str) -> Mapping[str, Any]:
    account = _split(parts, url)[2]
    return {} if account is None else {"account_name": account}


def _check_azure_options(options: Mapping[str, Any], url: str) -> None:
    account = options.get("account_name")
    if account is None and not options["use_emulator"]:
        raise ConfigurationError(
            f"Azure URL {url} needs an account: the account_name option, AZURE_STORAGE_ACCOUNT_NAME, or a "
            "URL that names it (abfs://container@account.dfs.core.windows.net, "
            "https://account.blob.core.windows.net/container)",
            key=url,
        )
    if account is not None and not _ACCOUNT.fullmatch(account):
        raise ConfigurationError(
            f"option account_name={account!r} for {url} must be 3-24 lower-case letters and digits", key=url
        )
    check_endpoint(options.get("endpoint"), url, "Azure")
    check_endpoint(options["emulator_url"], url, "Azure emulator")
    key = options.get("account_key")
    if key:
        try:
            base64.b64decode(key, validate=True)
        except (binascii.Error, ValueError):
            # Never quoted: it is a secret, and the codec's message would quote part of it.
            reason = "is not base64 (as the portal shows it)"
        else:
            reason = ""
        if reason:
            raise ConfigurationError(f"option account_key for {url} {reason}", key=url)
    for needs in ("client_secret", "federated_token_file"):
        if options.get(needs) and not (options.get("client_id") and options.get("tenant_id")):
            raise ConfigurationError(
                f"Azure options for {url}: {needs} needs client_id and tenant_id", key=url
            )
    check_client_options(options, url, "Azure")


def _azure_driver(config: AdapterConfig) -> Driver:
    return ObstoreDriver(config, azure_store, quote_listed_etags=True)


# The service version of the container creation request (Shared Key, SAS and bearer tokens alike).
_API_VERSION = "2023-11-03"


def _create_container(config: AdapterConfig) -> None:
    """Create the container ``config`` addresses (Create Container) with its endpoint and credentials; one
    that already exists counts as created. Signs with an account key (Shared Key), a SAS token or a bearer
    token; the other credentials (service principals, managed identity) need Azure's own tools for it."""
    opts = dict(config.options)
    url = f"{azure_endpoint(opts)}/{config.location}?restype=container"
    credentials = azure_credentials(opts)
    kind = credentials.get("credential_type")
    headers = {
        "x-ms-date": formatdate(usegmt=True),
        "x-ms-version": _API_VERSION,
        "Content-Type": "application/octet-stream",
    }
    if kind == "access_key":
        headers["Authorization"] = _shared_key(opts, credentials["account_key"], url, headers)
    elif kind == "sas_token":
        url = f"{url}&{credentials['sas_key']}"
    elif kind == "bearer_token":
        headers["Authorization"] = f"Bearer {credentials['token']}"
    elif "skip_signature" not in credentials:
        raise ConfigurationError(
            f"creating the container of {config.url} needs an account key, a SAS token or a bearer token "
            f"(these credentials are {kind}): create it with the Azure CLI or the portal",
            key=config.url,
        )
    request = urllib.request.Request(url, data=b"", method="PUT", headers=headers)
    try:
        urllib.request.urlopen(request, timeout=float(opts["request_timeout_s"])).close()
    except urllib.error.HTTPError as exc:
        if exc.code != 409:  # 409 ContainerAlreadyExists: it is there
            raise status_error_class(exc.code)(
                f"cannot create the container of {config.url}: HTTP {exc.code} {exc.reason}",
                key=config.location,
                backend=AZURE.name,
            ) from None
    except (urllib.error.URLError, OSError) as exc:
        raise BackendUnavailableError(
            f"cannot create the container of {config.url}: {exc}", key=config.location, backend=AZURE.name
        ) from None


def _shared_key(opts: Mapping[str, Any], key: str, url: str, headers: Mapping[str, str]) -> str:
    """The Shared Key ``Authorization`` of a PUT with an empty body to ``url`` (Azure's string to sign:
    the verb, twelve standard headers, the x-ms- headers in order, the account and path, the query)."""
    parts = urlsplit(url)
    account = azure_account(dict(opts))
    query = "".join(
        f"\n{name}:{value}" for name, _, value in sorted(q.partition("=") for q in parts.query.split("&"))
    )
    canonical_headers = "".join(
        f"{name}:{value}\n" for name, value in sorted(headers.items()) if name.startswith("x-ms-")
    )
    # Content-Length is empty for a length of 0 (service versions since 2015-02-21).
    standard = ["", "", "", "", headers["Content-Type"], "", "", "", "", "", ""]
    to_sign = "\n".join(["PUT", *standard]) + "\n" + canonical_headers + f"/{account}{parts.path}" + query
    digest = hmac.new(base64.b64decode(key), to_sign.encode(), hashlib.sha256).digest()
    return f"SharedKey {account}:{base64.b64encode(digest).decode()}"


AZURE = register_backend(
    Backend(
        name="azure",
        scheme="az",
        aliases=("azure", "abfs", "abfss", "https"),
        capabilities=Capabilities(
            backend="azure",
            write_if_absent=Support.NATIVE,  # Put Blob with If-None-Match: * (a lost race: 409)
            write_if_match=Support.NATIVE,  # Put Blob with If-Match (a stale or absent version: 412)
            atomic_rename=False,  # Copy Blob + Delete Blob
            shared_across_processes=True,
            equal_content_equal_token=False,
            durable=True,
            token_semantics='the blob\'s ETag ("0x8D..."), new on every write, equal bodies included; listed '
            "ETags come unquoted and are quoted, so tokens compare equal whichever request returned them",
            single_delete="Delete Blob, sent by object_store as a Blob Batch (POST ?comp=batch) of one",
            batch_delete="Blob Batch requests (POST ?comp=batch) of at most 256 Delete Blob each; a batch "
            "that names a key missing is finished with single deletes",
            reclaims_orphans=False,  # uncommitted blocks of an aborted upload: Azure drops them in 7 days
            # Put Block List carries no condition in object_store: a conditional stream is buffered into
            # one conditional Put Blob, up to this size.
            streamed_conditional_write=Support.NATIVE,
            streamed_conditional_limit=S3_CONDITIONAL_STREAM_LIMIT,
        ),
        locate=_locate,
        url_options=_url_options,
        userinfo_names_location=True,
        driver=_azure_driver,
        foreign_writer=lambda config: store_writer(azure_store(config), config, "azure"),
        options=AZURE_OPTIONS,
        check_options=_check_azure_options,
        create_container=_create_container,
    )
)
