"""The ``azure`` backend (``az://``, issue 33) and Azurite, its test server: URL forms, options from the
environment, the credential chain, secrets never shown, the error boundary on Azure's conditional answers,
listed tokens, the prefix kept to, Azurite's declared deviation, and ``check --server azurite``.

The whole contract runs on Azurite, sync and async, in tests/test_contract_embedded.py and
tests/test_contract_async.py (Azurite is the embedded targets' fourth, pyproject.toml).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import obstore
import pytest
from obstore.exceptions import PreconditionError
from obstore.store import AzureStore

from storage_adapter import open_adapter
from storage_adapter.config import parse_url
from storage_adapter.errors import (
    ConfigurationError,
    NotFoundError,
    ObjectChangedError,
    PermissionDeniedError,
)
from storage_adapter.obstore_driver import EMULATOR_ACCOUNT_KEY, azure_credentials, store_secrets
from storage_adapter.servers.azurite import DEVIATIONS, AzureEndpoint, Azurite, install_azurite
from storage_adapter.servers.server import ServerUnavailable

REPO = Path(__file__).resolve().parent.parent
KEY = "c2VjcmV0LWtleS1vZi10aGUtdGVzdHMtMDEyMzQ1Njc4OQ=="  # base64, and no Azure account's


@pytest.fixture
def azurite(embedded_azurite: AzureEndpoint) -> AzureEndpoint:
    return embedded_azurite


def _raw(endpoint: AzureEndpoint) -> AzureStore:
    """obstore's own AzureStore of the endpoint's container, as a user would build it."""
    return AzureStore(
        endpoint.container,
        config={
            "endpoint": endpoint.endpoint,
            "account_name": endpoint.account_name,
            "account_key": endpoint.account_key,
        },
        client_options={"allow_http": True},
    )


# -- URLs ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("url", "options", "container", "prefix", "account"),
    [
        ("az://data/tables/t", {"account_name": "acct1"}, "data", "tables/t", "acct1"),
        ("azure://data", {"account_name": "acct1"}, "data", "", "acct1"),
        ("abfs://data@acct2.dfs.core.windows.net/x/y", {}, "data", "x/y", "acct2"),
        ("abfss://data@acct2.dfs.core.windows.net", {}, "data", "", "acct2"),
        ("abfs://data/x", {"account_name": "acct1"}, "data", "x", "acct1"),
        ("https://acct3.blob.core.windows.net/data/x/y", {}, "data", "x/y", "acct3"),
    ],
)
def test_every_url_form_becomes_one_az_url_with_the_account_as_an_option(
    url: str, options: dict[str, Any], container: str, prefix: str, account: str
) -> None:
    config = parse_url(url, options, environ={})
    assert (config.backend, config.location, config.prefix) == ("azure", container, prefix)
    assert config.option("account_name") == account
    assert config.url == f"az://{container}" + (f"/{prefix}" if prefix else "")


@pytest.mark.parametrize(
    ("url", "options", "says"),
    [
        ("az://data", {}, "needs an account"),
        ("az://Data", {"account_name": "acct1"}, "malformed container"),
        ("az://a--b", {"account_name": "acct1"}, "malformed container"),
        ("az://data", {"account_name": "Acct_1"}, "3-24 lower-case letters and digits"),
        ("https://example.com/data", {}, "https://<account>.blob.core.windows.net"),
        ("abfs://data@example.com/x", {}, "<container>@<account>.dfs.core.windows.net"),
        (
            "https://acct3.blob.core.windows.net/data",
            {"account_name": "other"},
            "differ from what the URL names",
        ),
        ("az://data", {"account_name": "acct1", "endpoint": "ftp://host"}, "must start with http"),
        ("az://data", {"account_name": "acct1", "client_secret": "s" * 20}, "needs client_id and tenant_id"),
    ],
)
def test_malformed_urls_and_options_are_configuration_errors(
    url: str, options: dict[str, Any], says: str
) -> None:
    with pytest.raises(ConfigurationError, match=says.replace("(", r"\(").replace("?", r"\?")):
        parse_url(url, options, environ={})


def test_a_userinfo_with_a_password_is_refused_and_never_echoed() -> None:
    with pytest.raises(ConfigurationError) as caught:
        parse_url("abfs://data:hunter2secret@acct2.dfs.core.windows.net/x", {}, environ={})
    assert "hunter2secret" not in str(caught.value) and "carries credentials" in str(caught.value)


def test_a_malformed_account_key_is_refused_without_quoting_it() -> None:
    with pytest.raises(ConfigurationError, match=r"account_key .* is not base64") as caught:
        parse_url("az://data", {"account_name": "acct1", "account_key": "not*base64*at*all"}, environ={})
    assert "not*base64" not in str(caught.value)


# -- options, environment, credentials -----------------------------------------------------------------------
def test_options_come_from_the_azure_storage_environment_and_secrets_are_masked() -> None:
    env = {
        "AZURE_STORAGE_ACCOUNT_NAME": "acct1",
        "AZURE_STORAGE_ACCOUNT_KEY": KEY,
        "AZURE_STORAGE_ENDPOINT": "http://127.0.0.1:1/acct1",
        "AZURE_ALLOW_HTTP": "true",
    }
    config = parse_url("az://data", {}, environ=env)
    assert config.option("account_key") == KEY and config.option("allow_http") is True
    assert KEY not in repr(config) and KEY not in repr(config.options) and "***" in repr(config)


def test_credentials_resolve_as_one_group() -> None:
    """A key given as an option takes no SAS, token or service principal from the shell."""
    env = {"AZURE_STORAGE_SAS_TOKEN": "sv=2023&sig=abc", "AZURE_STORAGE_TOKEN": "bearer-from-shell"}
    config = parse_url("az://data", {"account_name": "acct1", "account_key": KEY}, environ=env)
    assert config.option("sas_token") is None and config.option("token") is None


@pytest.mark.parametrize(
    ("given", "kind"),
    [
        ({"token": "t" * 20, "account_key": KEY}, "bearer_token"),
        ({"account_key": KEY, "sas_token": "?sv=1&sig=2"}, "access_key"),
        (
            {"client_id": "c", "tenant_id": "t", "federated_token_file": "/f", "client_secret": "s" * 20},
            "workload_identity",
        ),
        ({"client_id": "c", "tenant_id": "t", "client_secret": "s" * 20}, "client_secret"),
        ({"sas_token": "?sv=1&sig=2"}, "sas_token"),
        ({"use_azure_cli": True}, "azure_cli"),
        ({"use_emulator": True}, "access_key"),
        ({}, "managed_identity"),
        ({"client_id": "c"}, "managed_identity"),
    ],
)
def test_the_credential_chain_is_object_stores_order_and_named_explicitly(
    given: dict[str, Any], kind: str
) -> None:
    config = parse_url("az://data", {"account_name": "acct1", **given}, environ={})
    credentials = azure_credentials(dict(config.options))
    assert credentials["credential_type"] == kind
    if kind == "sas_token":
        assert credentials["sas_key"] == "sv=1&sig=2"
    if given == {"use_emulator": True}:
        assert credentials["account_key"] == EMULATOR_ACCOUNT_KEY


def test_anonymous_sends_unsigned_requests() -> None:
    config = parse_url(
        "az://data", {"account_name": "acct1", "anonymous": True, "account_key": KEY}, environ={}
    )
    assert azure_credentials(dict(config.options)) == {"skip_signature": True}


def test_a_token_in_the_environment_does_not_beat_a_key_given_as_an_option(
    azurite: AzureEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """object_store reads the AZURE_* environment itself, and in its ``auto`` mode a bearer token there
    signs instead of the key the options give (seen: 403); the adapter names the credential type."""
    monkeypatch.setenv("AZURE_STORAGE_TOKEN", "bearer-token-of-the-shell")
    adapter = open_adapter(azurite.url("env-token"), **{**azurite.adapter_options(), "max_retries": 0})
    adapter.write("k", b"v")
    assert adapter.read_bytes("k") == b"v"


def test_a_wrapped_azure_stores_account_key_is_a_secret() -> None:
    store = AzureStore("data", account_name="acct1", account_key=KEY)
    assert KEY in store_secrets(store)


# -- the error boundary and tokens, on Azurite ---------------------------------------------------------------
def test_conditional_outcomes_are_values_and_tokens_compare_equal_whichever_request_returned_them(
    azurite: AzureEndpoint,
) -> None:
    adapter = open_adapter(azurite.url("conditions"), **azurite.adapter_options())
    first = adapter.write_if_absent("k", b"one")
    assert first is not None and first.startswith('"0x')
    assert adapter.write_if_absent("k", b"two") is None  # 409 BlobAlreadyExists: lost the race
    second = adapter.write_if_match("k", b"two", first)
    assert second is not None and second != first
    assert adapter.write_if_match("k", b"three", first) is None  # 412: a stale token
    assert adapter.write_if_match("absent", b"x", first) is None  # 412 on a missing blob too
    assert [i.token for i in adapter.list("")] == [second]  # listed unquoted, quoted here
    assert adapter.read_versioned("k").token == second
    again = adapter.write("k", b"two")  # equal bodies, new ETag: equal_content_equal_token is False
    assert again != second and not adapter.capabilities.equal_content_equal_token


def test_a_wrong_key_is_permission_denied_naming_key_and_backend_never_the_key(
    azurite: AzureEndpoint,
) -> None:
    options = {**azurite.adapter_options(), "account_key": KEY, "max_retries": 0}
    adapter = open_adapter(azurite.url("denied"), **options)
    with pytest.raises(PermissionDeniedError) as caught:
        adapter.write("k", b"v")
    assert caught.value.key == "k" and caught.value.backend == "azure"
    assert KEY not in str(caught.value) and KEY not in repr(caught.value.__cause__)


def test_a_missing_container_is_not_found(azurite: AzureEndpoint) -> None:
    adapter = open_adapter("az://no-such-container", **azurite.adapter_options())
    with pytest.raises(NotFoundError):
        adapter.read_bytes("k")


def test_create_container_creates_it_and_takes_an_existing_one_as_created(azurite: AzureEndpoint) -> None:
    config = parse_url("az://made-here", azurite.adapter_options())
    assert config.spec.create_container is not None
    config.spec.create_container(config)
    config.spec.create_container(config)
    open_adapter("az://made-here", **azurite.adapter_options()).write("k", b"v")


def test_nothing_outside_the_prefix_is_touched(azurite: AzureEndpoint) -> None:
    raw = _raw(azurite)
    outside = ["fence.txt", "fenced/x", "fence0", "other/fence/x"]  # neighbours of the prefix "fence"
    for path in outside:
        obstore.put(raw, path, path.encode())
    adapter = open_adapter(azurite.url("fence"), **azurite.adapter_options())
    adapter.write("a/b", b"1")
    adapter.write_if_absent("c", b"2")
    adapter.rename("c", "d")
    adapter.delete_many(["a/b", "missing"])
    adapter.delete("d")
    assert adapter.list("") == []
    for path in outside:
        assert bytes(obstore.get(raw, path).bytes()) == path.encode()


def test_azurites_declared_deviation_a_conditional_read_of_a_missing_blob_is_412(
    azurite: AzureEndpoint,
) -> None:
    """Azurite answers a GET with If-Match of a missing blob 412 where Azure answers 404 (DEVIATIONS); the
    adapter reads either as the pinned version being gone, so a reader sees ObjectChangedError on both."""
    assert any("412" in deviation for deviation in DEVIATIONS)
    raw = _raw(azurite)
    etag = obstore.put(raw, "deviation/k", b"v")["e_tag"]
    obstore.delete(raw, "deviation/k")
    with pytest.raises(PreconditionError):
        obstore.get(raw, "deviation/k", options={"if_match": etag})
    adapter = open_adapter(azurite.url("deviation-reader"), **azurite.adapter_options())
    adapter.write("k", b"0123456789")
    with adapter.open_reader("k") as reader:
        assert reader.read(2) == b"01"
        adapter.delete("k")
        with pytest.raises(ObjectChangedError):
            reader.read(2)


def test_azurites_declared_deviation_a_listings_start_is_ignored(azurite: AzureEndpoint) -> None:
    """Azurite ignores the ``startFrom`` object_store sends for a listing's offset (DEVIATIONS): raw
    obstore lists from the start again, the adapter from after the key asked for."""
    assert any("startFrom" in deviation for deviation in DEVIATIONS)
    keys = [f"r/{i:02d}" for i in range(6)] + ["r/a.txt", "r/a/x"]
    adapter = open_adapter(azurite.url("deviation-offset"), **azurite.adapter_options())
    for key in keys:
        adapter.write(key, b"v")
    raw = [
        m["path"]
        for page in obstore.list(_raw(azurite), "deviation-offset/r", offset="deviation-offset/r/03")
        for m in page
    ]
    assert "deviation-offset/r/00" in raw  # not skipped by the server
    assert [i.key for i in adapter.iter_list("r", start_after="r/03")] == ["r/04", "r/05", "r/a.txt", "r/a/x"]


# -- the server and the stage ---------------------------------------------------------------------------------
def test_without_node_azurite_cannot_run_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(
        ServerUnavailable, match=r"Azurite needs Node\.js and npm, and node and npm is not on PATH"
    ):
        install_azurite(tmp_path / "home")
    with pytest.raises(ServerUnavailable, match="node is not on PATH"):
        Azurite().version()


# A user's Azure environment, all of it wrong for the Azurite the stage starts.
HOSTILE = {
    "AZURE_STORAGE_ACCOUNT_NAME": "hostile",
    "AZURE_STORAGE_ACCOUNT_KEY": KEY,
    "AZURE_STORAGE_TOKEN": "bearer-token-of-the-shell",
    "AZURE_STORAGE_SAS_TOKEN": "sv=2023-11-03&sig=hostile",
    "AZURE_STORAGE_ENDPOINT": "http://127.0.0.1:9/hostile",
    "AZURE_STORAGE_USE_EMULATOR": "true",
    "AZURITE_BLOB_STORAGE_URL": "http://127.0.0.1:9",
    "AZURE_SKIP_SIGNATURE": "true",
    "AZURE_ALLOW_HTTP": "false",
}


def test_the_stage_starts_azurite_and_checks_it_whatever_the_users_azure_environment(tmp_path: Path) -> None:
    """``ci/contract-stage azurite`` = ``storage-adapter check --server azurite --no-peers``, under a
    user's Azure environment that is wrong in every variable: the clauses that open the URL in the
    check's process and in spawned ones (every clause runs on Azurite in tests/test_contract_embedded.py)
    pass, and the report names the emulator and its version."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AZURE_", "PYTEST_"))}
    base.update(HOSTILE)
    result = subprocess.run(
        [
            str(REPO / "ci" / "contract-stage"),
            "azurite",
            "--threads",
            "4",
            "--processes",
            "2",
            "--increments",
            "5",
            "--clauses",
            "round_trip or one_winner or cas_increments",
            "--report",
            str(tmp_path / "stage"),
        ],
        cwd=tmp_path,
        env=base,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    report = json.loads((tmp_path / "stage.json").read_text())
    rows = {r["clause"]: r["outcome"] for r in report["results"] if r["target"] == "azurite"}
    assert rows and set(rows.values()) == {"pass"}, rows
    assert "test_cas_increments_processes" in rows and "test_write_if_absent_one_winner_processes" in rows
    versions = json.dumps(report["versions"])
    assert "Azurite 3.35.0" in versions and "declared deviations from Azure" in versions and "412" in versions
    assert "azurite: conforms - " in result.stdout
