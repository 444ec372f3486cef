"""CommitRequest (storage_adapter/engine/request.py) on its own: a frozen, hashable value, every field
checked once, in its constructor, before any engine or storage is involved; and, on one memory engine,
that a request built once serves several commits as documented (a landed idempotency key replays).

The engine-side checks (key window, replace_where's tables and columns, expected_version against the
manifest, watermarks on every backend) are proven in test_exactly_once_engine.py,
test_engine_tables_spark_ready.py, test_engine_core.py and test_engine_app_watermark.py; this file only
uses memory and stays fast.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pyarrow as pa
import pytest

from storage_adapter.engine import CommitMode, CommitRequest, Engine
from storage_adapter.engine.key_ledger import MAX_KEY_CHARS
from storage_adapter.engine.request import DEFAULT_REQUEST, MODES
from storage_adapter.errors import ConfigurationError, StorageError

SCHEMA = pa.schema([("id", pa.int64())])
NOW = datetime.now(UTC)


def full_request(**changes: Any) -> CommitRequest:
    """A request with every field set (an overwrite, so replace_where is allowed), with ``changes``."""
    fields: dict[str, Any] = dict(
        mode="overwrite",
        expected_version=3,
        idempotency_key="realm/k-1",
        actor="alice",
        key_issued_at=NOW,
        replace_where={"ev": {"day": ["2026-01-01", "2026-01-02"], "region": ["eu"]}},
        app_id="job",
        app_version=7,
    )
    fields.update(changes)
    return CommitRequest(**fields)


# -- a frozen, hashable value -------------------------------------------------------------------------------
@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(CommitRequest)])
def test_no_field_can_be_assigned_or_deleted(name: str) -> None:
    """Frozen: assigning or deleting any field raises, and the request keeps its value."""
    request = full_request()
    before = getattr(request, name)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(request, name, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        delattr(request, name)
    assert getattr(request, name) is before


def test_equal_requests_compare_and_hash_equal_replace_where_included() -> None:
    """Two requests built from equal arguments are equal and hash alike (so usable as set members and
    dict keys), with or without replace_where; replace_where takes part in equality, so requests
    differing only there are not equal; a mode given as its string equals the same mode as a member."""
    assert full_request() == full_request() and hash(full_request()) == hash(full_request())
    assert full_request(mode=CommitMode.OVERWRITE) == full_request(mode="overwrite")
    assert len({full_request(), full_request(), full_request(replace_where=None)}) == 2
    assert {full_request(): "x"}[full_request()] == "x"
    other_days = full_request(replace_where={"ev": {"day": ["2026-01-03"], "region": ["eu"]}})
    assert other_days != full_request()
    assert full_request(replace_where=None) != full_request()
    assert full_request(replace_where={}) != full_request(replace_where=None)
    assert CommitRequest(mode="append") == CommitRequest(mode=CommitMode.APPEND) == CommitRequest()
    assert hash(CommitRequest(mode="append")) == hash(CommitRequest())
    for name, value in [("expected_version", 4), ("idempotency_key", "realm/k-2"), ("actor", "bob")]:
        assert full_request(**{name: value}) != full_request()
    assert full_request(key_issued_at=NOW + timedelta(seconds=1)) != full_request()
    assert full_request(app_id="job2") != full_request() and full_request(app_version=8) != full_request()


def test_replace_where_is_a_read_only_copy_of_what_the_caller_passed() -> None:
    """The request keeps its own copy of replace_where: changing the caller's mapping afterwards (a new
    table, a new column, another value) leaves the request as it was; the stored mapping and each table's
    filter are read-only and value lists are stored as tuples (sets as frozensets)."""
    days = ["2026-01-01"]
    where: dict[str, Any] = {"ev": {"day": days}}
    request = CommitRequest(mode="overwrite", replace_where=where)
    snapshot = CommitRequest(mode="overwrite", replace_where={"ev": {"day": ["2026-01-01"]}})
    where["other"] = {"day": ["2026-01-02"]}
    where["ev"]["region"] = ["eu"]
    days.append("2026-01-09")
    assert request == snapshot and hash(request) == hash(snapshot)
    assert request.replace_where is not None
    assert dict(request.replace_where) == {"ev": {"day": ("2026-01-01",)}}
    with pytest.raises(TypeError):
        request.replace_where["ev"] = {"day": ["2026-01-02"]}  # type: ignore[index]
    with pytest.raises(TypeError):
        del request.replace_where["ev"]  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        request.replace_where["ev"]["day"] = ["2026-01-02"]  # type: ignore[index]
    assert isinstance(request.replace_where["ev"]["day"], tuple)
    as_set = CommitRequest(mode="overwrite", replace_where={"ev": {"region": {"eu", "us"}}})
    assert as_set.replace_where is not None
    assert as_set.replace_where["ev"]["region"] == frozenset({"eu", "us"})


# -- every bad field refused at construction -----------------------------------------------------------------
class NotAMode:
    """A mode that is neither a CommitMode nor a str."""


BAD_FIELDS: list[Any] = [
    # (constructor arguments, the field names the message must contain)
    pytest.param({"mode": "delete"}, ("mode",), id="mode-unknown-string"),
    pytest.param({"mode": "APPEND"}, ("mode",), id="mode-wrong-case"),
    pytest.param({"mode": ""}, ("mode",), id="mode-empty"),
    pytest.param({"mode": None}, ("mode",), id="mode-none"),
    pytest.param({"mode": 1}, ("mode",), id="mode-int"),
    pytest.param({"mode": b"append"}, ("mode",), id="mode-bytes"),
    pytest.param({"mode": ["append"]}, ("mode",), id="mode-unhashable-list"),
    pytest.param({"mode": NotAMode()}, ("mode",), id="mode-object"),
    pytest.param({"expected_version": -1}, ("expected_version",), id="expected_version-negative"),
    pytest.param({"expected_version": True}, ("expected_version",), id="expected_version-true"),
    pytest.param({"expected_version": False}, ("expected_version",), id="expected_version-false"),
    pytest.param({"expected_version": 1.0}, ("expected_version",), id="expected_version-float"),
    pytest.param({"expected_version": "1"}, ("expected_version",), id="expected_version-str"),
    pytest.param({"actor": 7}, ("actor",), id="actor-int"),
    pytest.param({"actor": b"alice"}, ("actor",), id="actor-bytes"),
    pytest.param({"actor": ""}, ("actor",), id="actor-empty"),  # the engine would put its own in its place
    pytest.param({"idempotency_key": ""}, ("idempotency_key",), id="key-empty"),
    pytest.param({"idempotency_key": "k" * (MAX_KEY_CHARS + 1)}, ("idempotency_key",), id="key-too-long"),
    pytest.param({"idempotency_key": b"k"}, ("idempotency_key",), id="key-bytes"),
    pytest.param({"idempotency_key": 7}, ("idempotency_key",), id="key-int"),
    pytest.param({"key_issued_at": NOW}, ("key_issued_at", "idempotency_key"), id="issued_at-without-key"),
    pytest.param(
        {"idempotency_key": "k", "key_issued_at": datetime.now()},  # naive on purpose
        ("key_issued_at",),
        id="issued_at-naive",
    ),
    pytest.param(
        {"idempotency_key": "k", "key_issued_at": NOW.isoformat()}, ("key_issued_at",), id="issued_at-str"
    ),
    pytest.param({"app_id": "job"}, ("app_id", "app_version"), id="app_id-without-version"),
    pytest.param({"app_version": 1}, ("app_id", "app_version"), id="app_version-without-id"),
    pytest.param(
        {"replace_where": {"ev": {"day": ["2026-01-01"]}}},
        ("replace_where", "mode"),
        id="replace_where-default-mode",
    ),
    pytest.param(
        {"mode": "append", "replace_where": {"ev": {"day": ["2026-01-01"]}}},
        ("replace_where", "mode"),
        id="replace_where-append",
    ),
    pytest.param(
        {"mode": CommitMode.APPEND, "replace_where": {}},
        ("replace_where", "mode"),
        id="replace_where-empty-append",
    ),
    pytest.param(
        {"mode": "overwrite", "replace_where": [("ev", {"day": ["2026-01-01"]})]},
        ("replace_where",),
        id="replace_where-list",
    ),
    pytest.param({"mode": "overwrite", "replace_where": "ev"}, ("replace_where",), id="replace_where-str"),
]


@pytest.mark.parametrize(("arguments", "named"), BAD_FIELDS)
def test_a_bad_field_is_refused_when_the_request_is_made(
    arguments: dict[str, Any], named: tuple[str, ...]
) -> None:
    """Each malformed field is a ConfigurationError (a StorageError, and a ValueError) raised by the
    constructor itself (no engine, no adapter exists in this test), and its message names the offending
    field (and, for fields that go together, the other one)."""
    with pytest.raises(ValueError) as info:
        CommitRequest(**arguments)
    assert type(info.value) is ConfigurationError and isinstance(info.value, StorageError)
    message = str(info.value)
    for name in named:
        assert name in message, (name, message)


def test_unknown_mode_names_the_modes() -> None:
    """CommitMode with a value that is not a mode is a ValueError listing the modes, directly or
    through a request."""
    assert MODES == ("append", "overwrite")
    for make in (CommitMode, lambda value: CommitRequest(mode=value)):
        with pytest.raises(ValueError, match=r"mode must be one of \('append', 'overwrite'\), not 'merge'"):
            make("merge")


@pytest.mark.parametrize(
    "arguments",
    [
        pytest.param({"expected_version": 0}, id="expected_version-zero"),
        pytest.param({"idempotency_key": "k" * MAX_KEY_CHARS}, id="key-longest"),
        pytest.param(
            {"idempotency_key": "k", "key_issued_at": datetime.now(timezone(timedelta(hours=-5)))},
            id="issued_at-non-utc",
        ),
        pytest.param({"app_id": "job", "app_version": 0}, id="app_version-zero"),
        pytest.param({"app_id": "job", "app_version": 2**63 - 1}, id="app_version-largest"),
        pytest.param({"mode": "overwrite", "replace_where": {}}, id="replace_where-empty"),
    ],
)
def test_the_edges_of_each_rule_are_accepted(arguments: dict[str, Any]) -> None:
    """The values just inside each rule make a request that keeps them."""
    request = CommitRequest(**arguments)
    for name, value in arguments.items():
        if name == "mode":
            assert request.mode is CommitMode(value)
        elif name == "replace_where":
            assert request.replace_where is not None and dict(request.replace_where) == value
        else:
            assert getattr(request, name) == value


def test_replace_revalidates() -> None:
    """dataclasses.replace builds a new request through the constructor, so it cannot make an invalid
    one (a request that exists is well formed): dropping to append while keeping replace_where, or a bad
    expected_version, is refused."""
    request = full_request()
    with pytest.raises(ValueError, match="replace_where"):
        dataclasses.replace(request, mode="append")
    with pytest.raises(ValueError, match="expected_version"):
        dataclasses.replace(request, expected_version=-1)
    assert dataclasses.replace(request, mode="append", replace_where=None).mode is CommitMode.APPEND
    assert dataclasses.replace(request) == request


# -- modes and the default -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("given", "member"), [("append", CommitMode.APPEND), ("overwrite", CommitMode.OVERWRITE)]
)
def test_a_string_mode_is_stored_as_its_member(given: str, member: CommitMode) -> None:
    """ "append"/"overwrite" become the CommitMode members (not kept as strings); mode_name gives the
    string back, as commit records store it."""
    for mode in (given, member):
        request = CommitRequest(mode=mode)
        assert request.mode is member and request.mode_name == given
    assert CommitMode(given) is member


def test_the_default_request_is_a_plain_append() -> None:
    """CommitRequest() (and DEFAULT_REQUEST, every entry point's default) is an append with nothing else
    set: no expected version, key, actor, issue time, replace_where or watermark."""
    assert CommitRequest() == DEFAULT_REQUEST
    for request in (DEFAULT_REQUEST, CommitRequest()):
        assert request.mode is CommitMode.APPEND and request.mode_name == "append"
        assert all(
            getattr(request, f.name) is None for f in dataclasses.fields(CommitRequest) if f.name != "mode"
        )
        assert request.app is None
    assert CommitRequest(app_id="job", app_version=4).app == ("job", 4)


# -- one request, several commits ----------------------------------------------------------------------------
@pytest.fixture
def engine() -> Iterator[Engine]:
    """An engine on a fresh in-memory store (no other backend: this file stays fast)."""
    eng = Engine.open(f"memory://commit-request-{uuid.uuid4().hex}", actor="tester")
    eng.create_table("a", SCHEMA)
    yield eng


def ids(engine: Engine) -> list[int]:
    return sorted(engine.read("a").column("id").to_pylist())


def test_a_request_is_validated_once_and_reusing_it_replays_the_landed_commit(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keyed request built once (its __post_init__ runs exactly once) commits; passing the same object
    again to commit, commit_fragments and precheck returns the landed commit with replayed=True and
    writes nothing, as Engine.commit_fragments documents; no entry point rebuilds or re-checks the
    request (the constructor runs no more) and the request is unchanged afterwards."""
    built = 0
    original = CommitRequest.__post_init__

    def counting(self: CommitRequest) -> None:
        nonlocal built
        built += 1
        original(self)

    monkeypatch.setattr(CommitRequest, "__post_init__", counting)
    request = CommitRequest(mode="append", idempotency_key="realm/once", actor="alice", key_issued_at=NOW)
    assert built == 1

    first = engine.commit({"a": pa.table({"id": [1, 2]}, schema=SCHEMA)}, request)
    assert not first.replayed and first.record.actor == "alice" and ids(engine) == [1, 2]
    again = engine.commit({"a": pa.table({"id": [3]}, schema=SCHEMA)}, request)
    assert again.replayed and again.version == first.version and again.record == first.record
    fragments = engine.write_fragments("a", pa.table({"id": [4]}, schema=SCHEMA))
    by_fragments = engine.commit_fragments({"a": fragments}, request)
    assert by_fragments.replayed and by_fragments.version == first.version
    prechecked = engine.precheck(["a"], request)
    assert prechecked is not None and prechecked.replayed and prechecked.version == first.version
    assert ids(engine) == [1, 2] and engine.snapshot().version == first.version
    assert built == 1
    assert request == CommitRequest(
        mode="append", idempotency_key="realm/once", actor="alice", key_issued_at=NOW
    )
    assert built == 2  # the comparison request above; the engine built none


def test_a_request_pickles_and_copies_as_the_arguments_that_make_it() -> None:
    """A request with a partition filter survives pickle and deepcopy (rebuilt, so validated again), and
    its mode compares equal to the string a user writes."""
    import copy
    import pickle

    request = CommitRequest(
        mode="overwrite", replace_where={"t": {"day": ["2026-11-28"]}}, app_id="a", app_version=1
    )
    for clone in (pickle.loads(pickle.dumps(request)), copy.deepcopy(request)):
        assert clone == request and hash(clone) == hash(request)
    assert request.mode == "overwrite" and CommitRequest().mode == "append"
