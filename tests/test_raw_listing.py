"""The exact lister (storage_adapter.obstore_driver.raw_listing) on SeaweedFS and Azurite: every name
exactly as stored, each once, with the tokens and times obstore gives; delimiters, StartAfter, pages;
typed errors that quote no credential.

Names are full names in the bucket (the adapter's stores have no store prefix); each test works under a
fresh random prefix and deletes what it planted.
"""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any

import obstore
import pytest
from loopback_http import serving
from obstore.store import LocalStore, MemoryStore, S3Store

from storage_adapter import open_adapter
from storage_adapter.errors import (
    BackendUnavailableError,
    NotFoundError,
    PermissionDeniedError,
    StorageError,
)
from storage_adapter.obstore_driver import raw_listing
from storage_adapter.obstore_driver.raw_listing import RawClient, RawEntry, raw_client
from storage_adapter.servers.seaweedfs import S3Identity, SeaweedFS
from storage_adapter.servers.server import S3Endpoint, ServerEndpoint

# Names both servers store and list exactly.
COMMON = [
    "a\tb",
    "dir/",  # a folder marker: zero bytes (obstore lists it as "dir")
    "dir/x",
    "deep/er/",
    "nonempty/",  # ends in "/" but holds bytes
    "ok",
    "é",
    "sp ace",
    "%41",  # stays literally %41
    "+plus",
    "cr\rx",
    "nl\nx",
    "amp&<>\"'",
    "q?x#y",
]
ODD = {
    # SeaweedFS (as pinned) refuses "." and ".." segments (400 InvalidRequest), stores "a//b" as "a/b"
    # and "/lead" as "lead" (so those are not its names to list), and refuses "dir/" beside a file "dir"
    # (409 ExistingObjectIsFile): none of them is planted there.
    "seaweedfs": [*COMMON, "\x07bell"],
    # Azurite (3.35.0) stores every name here, but answers 500 to any listing of a name with \x07 (it
    # writes the character into its XML unencoded), as it does to obstore: no such name is planted there.
    "azurite": [*COMMON, "a//b", "./c", "x/../c", "/lead", ".."],
}
# Names obstore can address, so its head answers for them.
ADDRESSABLE = ["ok", "dir/x", "é", "sp ace", "+plus"]


@dataclass
class Target:
    name: str
    endpoint: ServerEndpoint
    store: Any
    client: RawClient
    prefix: str  # the test's own, ends in "/"

    @property
    def names(self) -> list[str]:
        return ODD[self.name]

    def full(self, names: list[str]) -> list[str]:
        return sorted(self.prefix + name for name in names)

    def plant(self, names: list[str] | None = None) -> None:
        for name in self.names if names is None else names:
            self.client.put(self.prefix + name, _body(name))

    def listed(self, prefix: str | None = None, **kwargs: Any) -> list[RawEntry]:
        return [
            e
            for page in self.client.pages(self.prefix if prefix is None else prefix, **kwargs)
            for e in page.entries
        ]


def _body(name: str) -> bytes:
    return b"" if name in ("dir/", "deep/er/") else f"body of {name!r}".encode()


def _store(endpoint: ServerEndpoint, **options: Any) -> Any:
    adapter = open_adapter(endpoint.url(), **{**endpoint.adapter_options(), **options})
    return adapter._driver.store  # type: ignore[attr-defined]


@pytest.fixture(params=["seaweedfs", "azurite"])
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    endpoint: ServerEndpoint = request.getfixturevalue(f"embedded_{request.param}")
    store = _store(endpoint)
    client = raw_client(store, backend=request.param)
    assert client is not None
    planted = Target(request.param, endpoint, store, client, f"raw-{uuid.uuid4().hex[:10]}/")
    yield planted
    for entry in planted.listed():
        client.delete(entry.path)


def test_lists_every_name_exactly_once_with_its_size(target: Target) -> None:
    target.plant()
    entries = target.listed()
    assert [e.path for e in entries] == target.full(target.names)  # key order, each once
    # SeaweedFS keeps a name ending in "/" as a directory and drops its bytes (boto3 reads it back empty).
    dropped = target.name == "seaweedfs"
    sizes = {target.prefix + n: 0 if dropped and n.endswith("/") else len(_body(n)) for n in target.names}
    assert {e.path: e.size for e in entries} == sizes
    assert all(e.last_modified.utcoffset() == timedelta(0) for e in entries)  # aware, UTC


def test_tokens_and_times_are_obstores(target: Target) -> None:
    target.plant()
    listed = {e.path: e for e in target.listed()}
    for name in ADDRESSABLE:
        head = obstore.head(target.store, target.prefix + name)
        entry = listed[target.prefix + name]
        # Azure answers a HEAD with the ETag quoted and lists it unquoted (the driver quotes listed ones).
        token = f'"{entry.e_tag}"' if target.name == "azurite" else entry.e_tag
        assert (token, entry.last_modified, entry.size) == (
            head["e_tag"],
            head["last_modified"],
            head["size"],
        )
    # Where obstore can list too, its listing and this one are the same, token for token.
    clean = f"{target.prefix}dir/"
    # (obstore lists the marker "dir/" itself as "dir": that row is not compared.)
    theirs = [
        (m["path"], m["size"], m["e_tag"], m["last_modified"])
        for b in obstore.list(target.store, clean)
        for m in b
        if m["path"].startswith(clean)
    ]
    ours = [(e.path, e.size, e.e_tag, e.last_modified) for e in target.listed(clean) if e.path != clean]
    assert ours == sorted(theirs)


def test_delimiter_gives_entries_and_common_prefixes(target: Target) -> None:
    target.plant()
    pages = list(target.client.pages(target.prefix, delimiter="/"))
    entries = [e.path for p in pages for e in p.entries]
    prefixes = [c for p in pages for c in p.common_prefixes]
    assert entries == target.full([n for n in target.names if "/" not in n])
    assert sorted(prefixes) == sorted(
        {target.prefix + n[: n.index("/") + 1] for n in target.names if "/" in n}
    )
    assert f"{target.prefix}dir/" in prefixes
    inside = list(target.client.pages(f"{target.prefix}dir/", delimiter="/"))
    assert [e.path for p in inside for e in p.entries] == [f"{target.prefix}dir/", f"{target.prefix}dir/x"]


def test_start_after_a_control_character_name(target: Target) -> None:
    target.plant()
    start = target.prefix + "a\tb"
    expected = [p for p in target.full(target.names) if p > start]
    assert [e.path for e in target.listed(start_after=start)] == expected
    assert [e.path for e in target.listed(start_after=start, page_size=2)] == expected
    assert target.listed(start_after=target.full(target.names)[-1]) == []


def test_pages_of_two_each_name_once_in_order_one_request_each(
    target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    target.plant()
    requests: list[str] = []
    original = raw_listing._Session.request

    def counted(self: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        requests.append(method)
        return original(self, method, *args, **kwargs)

    monkeypatch.setattr(raw_listing._Session, "request", counted)
    pages = target.client.pages(target.prefix, page_size=2)
    assert requests == []  # lazy: nothing before the first page is asked for
    first = next(pages)
    assert len(requests) == 1 and len(first.entries) == 2
    rest = list(pages)
    names = [e.path for p in [first, *rest] for e in p.entries]
    assert names == target.full(target.names)
    assert all(1 <= len(p.entries) <= 2 for p in rest)
    assert len(requests) in (len([first, *rest]), len([first, *rest]) + 1)  # a last, empty page may follow


def test_empty_listing_yields_no_page(target: Target) -> None:
    assert list(target.client.pages(target.prefix)) == []
    assert list(target.client.pages(target.prefix, delimiter="/")) == []


def test_delete_each_odd_name(target: Target) -> None:
    target.plant()
    for name in target.names:
        target.client.delete(target.prefix + name)
    assert target.listed() == []
    target.client.delete(target.prefix + "ok")  # already gone: fine


def test_missing_bucket_is_not_found(target: Target) -> None:
    missing = f"missing{uuid.uuid4().hex[:10]}"
    location = "s3://" if target.name == "seaweedfs" else "az://"
    store = open_adapter(f"{location}{missing}", **target.endpoint.adapter_options())._driver.store  # type: ignore[attr-defined]
    client = raw_client(store, backend=target.name)
    assert client is not None
    with pytest.raises(NotFoundError) as caught:
        list(client.pages("some/"))
    assert "'some/'" in str(caught.value) and target.name in str(caught.value)
    assert (caught.value.key, caught.value.backend) == ("some/", target.name)


def _denied(store: Any, backend: str, prefix: str, secret: str) -> None:
    """Listing and writing with ``store``'s wrong credentials are denied, quoting no secret."""
    client = raw_client(store, backend=backend)
    assert client is not None
    with pytest.raises(PermissionDeniedError) as caught:
        list(client.pages(prefix))
    with pytest.raises(PermissionDeniedError) as put_caught:
        client.put(prefix + "x", b"x")
    for error in (caught.value, put_caught.value):
        shown = f"{error}{error!r}{error.args!r}{client!r}{error.__cause__!r}{error.__context__!r}"
        assert secret not in shown and backend in shown and prefix in shown


def test_wrong_azure_key_is_denied_and_never_quoted(embedded_azurite: ServerEndpoint) -> None:
    secret = base64.b64encode(os.urandom(64)).decode()
    _denied(_store(embedded_azurite, account_key=secret), "azurite", "raw-denied/", secret)


# The embedded SeaweedFS accepts any credentials (and checks no signature): signing is proven against one
# that enforces its identity.
OWNER = S3Identity("RAWLISTKEY", "raw-listing-secret-value")


@pytest.fixture(scope="module")
def guarded() -> Iterator[S3Endpoint]:
    with SeaweedFS(identities=(OWNER,)) as endpoint:
        yield endpoint


def test_signed_requests_pass_an_enforcing_server(guarded: S3Endpoint) -> None:
    store = _store(guarded)
    client = raw_client(store, backend="seaweedfs")
    assert client is not None
    prefix = f"raw-{uuid.uuid4().hex[:10]}/"
    names = sorted(prefix + n for n in ODD["seaweedfs"])
    for name in names:  # signed paths with every odd character
        client.put(name, b"x")
    # signed queries with a control character, a delimiter and continuation tokens
    after = [
        e.path for p in client.pages(prefix, start_after=prefix + "a\tb", page_size=2) for e in p.entries
    ]
    assert after == [n for n in names if n > prefix + "a\tb"]
    common = [c for p in client.pages(prefix, delimiter="/") for c in p.common_prefixes]
    assert prefix + "dir/" in common
    for name in names:
        client.delete(name)
    assert list(client.pages(prefix)) == []


def test_wrong_s3_secret_is_denied_and_never_quoted(guarded: S3Endpoint) -> None:
    secret = f"wrong-secret-{uuid.uuid4().hex}"
    _denied(_store(guarded, secret_access_key=secret), "seaweedfs", "raw-denied/", secret)


def test_a_credential_provider_signs_and_is_asked_again_when_it_expires(guarded: S3Endpoint) -> None:
    calls: list[datetime] = []

    def provider() -> dict[str, Any]:
        calls.append(datetime.now(UTC))
        # Expiring within the refresh margin: asked again before every request.
        expires = datetime.now(UTC) + timedelta(seconds=1)
        return {
            "access_key_id": OWNER.access_key_id,
            "secret_access_key": OWNER.secret_access_key,
            "token": None,
            "expires_at": expires,
        }

    store = S3Store(
        guarded.bucket,
        config={"endpoint": guarded.endpoint, "region": guarded.region},
        client_options={"allow_http": True},
        credential_provider=provider,  # type: ignore[arg-type]
    )
    client = raw_client(store, backend="seaweedfs")
    assert client is not None
    client.put("raw-provided/x", b"x")
    assert [e.path for p in client.pages("raw-provided/") for e in p.entries] == ["raw-provided/x"]
    client.delete("raw-provided/x")
    assert len(calls) >= 3


# -- without a server ----------------------------------------------------------------------------------


def test_only_s3_and_azure_stores_have_one(tmp_path: Any) -> None:
    assert raw_client(MemoryStore(), backend="memory") is None
    assert raw_client(LocalStore(str(tmp_path)), backend="local") is None
    assert raw_client(object(), backend="other") is None


def _loopback_store(url: str) -> Any:
    return S3Store(
        "bucket",
        config={
            "endpoint": url,
            "access_key_id": "AKID",
            "secret_access_key": "loopback-secret-value",
            "region": "us-east-1",
        },
        client_options={"allow_http": True, "timeout": timedelta(seconds=5)},
        retry_config={
            "max_retries": 3,
            "backoff": {
                "init_backoff": timedelta(milliseconds=10),
                "max_backoff": timedelta(milliseconds=20),
            },
        },
    )


_PAGE = (
    b'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
    b"<EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>"
    b"<Contents><Key>a%09b+c%2Bd</Key><Size>3</Size><ETag>&quot;e1&quot;</ETag>"
    b"<LastModified>2024-05-06T07:08:09.123Z</LastModified></Contents></ListBucketResult>"
)


def test_transient_failures_are_retried_then_reported() -> None:
    answers = [503, 500, 200]

    class Flaky(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status = answers.pop(0) if answers else 503
            body = _PAGE if status == 200 else b"<Error><Code>SlowDown</Code></Error>"
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Flaky) as url:
        client = raw_client(_loopback_store(url), backend="s3")
        assert client is not None
        (page,) = list(client.pages("p/"))
        (entry,) = page.entries
        assert entry.path == "a\tb c+d" and entry.e_tag == '"e1"' and entry.size == 3
        assert entry.last_modified.isoformat() == "2024-05-06T07:08:09.123000+00:00"
        with pytest.raises(BackendUnavailableError, match=r"'p/' on s3: HTTP 503 SlowDown"):
            list(client.pages("p/"))


def test_an_oversized_answer_is_refused() -> None:
    class Huge(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(raw_listing.MAX_RESPONSE_BYTES + 1))
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Huge) as url:
        client = raw_client(_loopback_store(url), backend="s3")
        assert client is not None
        with pytest.raises(StorageError, match="over"):
            list(client.pages(""))


def test_a_refused_connection_is_unavailable_and_quotes_no_secret() -> None:
    with serving(BaseHTTPRequestHandler) as url:
        pass  # the port is free again
    client = raw_client(_loopback_store(url), backend="s3")
    assert client is not None
    with pytest.raises(BackendUnavailableError) as caught:
        list(client.pages("p/"))
    assert "loopback-secret-value" not in f"{caught.value}{caught.value!r}{client!r}"


def _account_sas(account: str, key: str) -> str:
    """An account SAS (blob service; read, write, delete, list) for an hour, signed with ``key``."""
    import hashlib
    import hmac
    from urllib.parse import urlencode

    expiry = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    fields = {"sv": "2021-08-06", "ss": "b", "srt": "sco", "sp": "rwdlc", "se": expiry, "spr": "https,http"}
    to_sign = "\n".join(
        [
            account,
            fields["sp"],
            fields["ss"],
            fields["srt"],
            "",
            expiry,
            "",
            fields["spr"],
            fields["sv"],
            "",
            "",
        ]
    )
    signature = hmac.new(base64.b64decode(key), to_sign.encode(), hashlib.sha256).digest()
    return urlencode({**fields, "sig": base64.b64encode(signature).decode()})


def test_a_sas_signs_azure_requests(embedded_azurite: ServerEndpoint) -> None:
    options = embedded_azurite.adapter_options()
    sas = _account_sas(str(options["account_name"]), str(options["account_key"]))
    store = _store(embedded_azurite, account_key=None, sas_token=sas)
    assert "sas_key" in store.config and "account_key" not in store.config
    client = raw_client(store, backend="azurite")
    assert client is not None
    prefix = f"raw-{uuid.uuid4().hex[:10]}/"
    client.put(prefix + "a\tb", b"sas")
    assert [e.path for p in client.pages(prefix, delimiter="/") for e in p.entries] == [prefix + "a\tb"]
    client.delete(prefix + "a\tb")
    assert list(client.pages(prefix)) == []
    missing = open_adapter(
        f"az://missing{uuid.uuid4().hex[:10]}", **{**options, "account_key": None, "sas_token": sas}
    )
    lister = raw_client(missing._driver.store, backend="azurite")  # type: ignore[attr-defined]
    assert lister is not None
    with pytest.raises(NotFoundError) as caught:
        list(lister.pages(""))
    signature = sas.rpartition("sig=")[2]
    assert signature not in f"{caught.value}{caught.value!r}{lister!r}" and "sig=" not in str(caught.value)
