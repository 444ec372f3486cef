"""The S3 wire of a contract target (contract_tests/wire.py) and the two clauses that judge a server on it
(contract_tests/wire_clauses.py): the wire addresses what the adapter addresses, resolved the same way,
and shows no credential; the clauses pass on SeaweedFS (tests/test_contract_embedded.py runs them there)
and fail on moto with the request, the answer and the object before and after as evidence. Ceph RGW,
which fails both, is checked in the servers tier (tests/test_check_servers.py)."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator

import pytest

from contract_tests.plugin import fresh_prefix
from contract_tests.verdicts import Inconclusive, Violation, split_message
from contract_tests.wire import WireResponse, WireUnavailable, open_wire
from contract_tests.wire_clauses import Attempt, WireClauses, judge
from storage_adapter import open_adapter
from storage_adapter.errors import BackendUnavailableError
from storage_adapter.servers.moto import Moto
from storage_adapter.servers.server import S3Endpoint, ServerUnavailable, free_port


@pytest.mark.parametrize("url", ["memory://wire/p", "file:///tmp/wire-p"])
def test_a_target_that_is_not_s3_has_no_wire(url: str) -> None:
    with pytest.raises(WireUnavailable, match=r"^not an S3 target \((memory|local)\): no S3 wire to judge$"):
        open_wire(url, {})


def test_without_botocore_there_is_no_wire(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "botocore", None)  # import botocore.* then raises ImportError
    with pytest.raises(WireUnavailable, match=r"need botocore \(pip install 'storage-adapter\[aws\]'\)"):
        open_wire("s3://b/p", {"access_key_id": "AKIDWIRE", "secret_access_key": "wire-secret-value"})


@pytest.mark.parametrize(
    ("options", "bucket_url"),
    [
        ({"endpoint": "http://127.0.0.1:9000/"}, "http://127.0.0.1:9000/bucket"),
        (
            {"endpoint": "https://bucket.s3.example", "virtual_hosted_style": True},
            "https://bucket.s3.example",
        ),
        ({"region": "eu-west-3"}, "https://s3.eu-west-3.amazonaws.com/bucket"),
        ({"region": "eu-west-3", "virtual_hosted_style": True}, "https://bucket.s3.eu-west-3.amazonaws.com"),
    ],
)
def test_the_wire_addresses_the_bucket_and_prefix_the_adapter_addresses(
    options: dict[str, object], bucket_url: str
) -> None:
    secret = f"wire-secret-{uuid.uuid4().hex}"
    keys = {"access_key_id": "AKIDWIRE", "secret_access_key": secret}
    wire = open_wire("s3://bucket/root/child", {**keys, **options})
    assert (wire.bucket_url, wire.prefix, wire.key("wire/k")) == (
        bucket_url,
        "root/child",
        "root/child/wire/k",
    )
    assert wire.region == options.get("region", "us-east-1") and wire.timeout_s == 60.0
    assert secret not in repr(wire) and "AKIDWIRE" not in repr(wire)
    assert wire.credentials.secret_key == secret


def test_no_answer_is_a_typed_error_that_names_the_request_and_no_secret() -> None:
    secret = f"wire-secret-{uuid.uuid4().hex}"
    wire = open_wire(
        "s3://bucket/p",
        {
            "endpoint": f"http://127.0.0.1:{free_port()}",
            "allow_http": True,
            "access_key_id": "AKIDWIRE",
            "secret_access_key": secret,
        },
    )
    with pytest.raises(BackendUnavailableError, match=r"^PUT p/k to s3://bucket/p: no answer: ") as raised:
        wire.send("PUT", "k", {"If-None-Match": '"etag"'}, b"body")
    assert secret not in repr(raised.value) and raised.value.__cause__ is None


KEPT = WireResponse(200, '"e1"', b"first")
GONE = WireResponse(404, None, b"<Error><Code>NoSuchKey</Code></Error>")


@pytest.mark.parametrize(
    ("answer", "after", "verdict"),
    [
        (WireResponse(412, None, b"<Error><Code>PreconditionFailed</Code></Error>"), KEPT, "pass"),
        (WireResponse(501, None, b"<Error><Code>NotImplemented</Code></Error>"), KEPT, "pass"),
        (WireResponse(400, None, b"<Error><Code>NotImplemented</Code></Error>"), KEPT, "pass"),
        (WireResponse(400, None, b"<Error><Code>InvalidArgument</Code></Error>"), KEPT, "fail"),
        (WireResponse(403, None, b"<Error><Code>AccessDenied</Code></Error>"), KEPT, "fail"),
        (WireResponse(200, '"e2"', b""), WireResponse(200, '"e2"', b"second"), "fail"),
        (WireResponse(200, None, b""), KEPT, "fail"),  # claims success: not a refusal
        (WireResponse(204, None, b""), GONE, "fail"),
        (WireResponse(412, None, b""), GONE, "fail"),  # refused, yet the object is gone
        (WireResponse(503, None, b"<Error><Code>SlowDown</Code></Error>"), KEPT, "inconclusive"),
        (WireResponse(503, None, b""), GONE, "fail"),
    ],
)
def test_a_request_passes_only_when_refused_with_the_object_kept(
    answer: WireResponse, after: WireResponse, verdict: str
) -> None:
    attempt = Attempt("quoted", 'PUT p/k If-None-Match: "e1"', answer, KEPT, after)
    raised = {"pass": None, "fail": Violation, "inconclusive": Inconclusive}[verdict]
    if raised is None:
        judge([attempt], "a PUT")
        return
    with pytest.raises(raised) as found:
        judge([attempt], "a PUT")
    reason, evidence = split_message(str(found.value))
    assert reason.startswith("a PUT") and f"quoted ETag: {answer.line()}" in reason
    assert evidence.startswith(f'quoted: PUT p/k If-None-Match: "e1" -> {answer.line()}\n  before: ETag "e1"')


def test_the_wire_reaches_the_adapters_objects_from_options_or_the_environment(
    embedded_seaweedfs: S3Endpoint,
) -> None:
    root = open_adapter(embedded_seaweedfs.url(), **embedded_seaweedfs.adapter_options())
    with fresh_prefix(root) as adapter:
        token = adapter.write("k", b"written by the adapter")
        with embedded_seaweedfs.scoped():  # a URL target: endpoint and keys from AWS_* only
            from_environment = open_wire(adapter.url, {})
        for wire in (open_wire(adapter.url, embedded_seaweedfs.adapter_options()), from_environment):
            got = wire.send("GET", "k")
            assert (got.status, got.etag, got.body) == (200, token, b"written by the adapter")
            assert wire.send("GET", "absent").line() == "404 NoSuchKey"


@pytest.fixture(scope="module")
def moto() -> Iterator[S3Endpoint]:
    try:
        with Moto(bucket="wire") as endpoint:
            yield endpoint
    except ServerUnavailable as exc:
        pytest.skip(str(exc))


def test_moto_overwrites_on_if_none_match_with_the_current_etag_and_the_clause_says_so(
    moto: S3Endpoint,
) -> None:
    """moto 5.2 answers 200 and overwrites, the ETag quoted or not; it refuses a stale If-Match on DELETE.
    The clauses are called as the plugin calls them, on the wire of a fresh prefix (a pytest session of
    the contract would cost several seconds more; tests/test_check_servers.py runs the check on moto)."""
    clauses = WireClauses()
    with fresh_prefix(open_adapter(moto.url(), **moto.adapter_options())) as adapter:
        wire = open_wire(adapter.url, moto.adapter_options())
        clauses.test_delete_if_match_with_a_stale_etag_never_deletes(wire)  # passes: 412, kept
        with pytest.raises(Violation) as raised:
            clauses.test_put_if_none_match_with_the_current_etag_never_overwrites(wire)
    reason, evidence = split_message(str(raised.value))
    assert reason == (
        "a PUT with If-None-Match: <the current ETag> was not refused "
        "(quoted ETag: 200, replaced; unquoted ETag: 200, replaced)"
    )
    quoted, before, after, unquoted, *_ = evidence.splitlines()
    assert quoted.startswith(f'quoted: PUT {wire.key("wire/if-none-match-quoted")} If-None-Match: "')
    assert quoted.endswith("-> 200") and "64 bytes b" in quoted and "quoted-second|64|" in quoted
    assert before.split(",")[0] != after.split(",")[0]  # the ETag changed: overwritten
    assert "b'quoted-first|64|'" in before and "quoted-second|64|" in after
    assert unquoted.startswith(f"unquoted: PUT {wire.key('wire/if-none-match-unquoted')} If-None-Match: ")
    assert 'If-None-Match: "' not in unquoted and unquoted.endswith("-> 200")
