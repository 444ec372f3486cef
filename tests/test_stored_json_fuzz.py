"""Hostile stored JSON, fed to every decoder through the public API (issue 12, finding 6).

For each kind of stored object (manifest, table version, recovery sidecar, audit record, idempotency
record) a valid document is written by the real code; then hostile bytes replace it at its key and every
public entry point that reads it must raise that object's typed corrupt error, naming the key, and leave the
bytes in place. Hostile inputs: numbers beyond int64 or float range, NaN/Infinity, 100,000-deep nesting,
lone surrogates, wrong types in every field, bad dates, duplicate keys, invalid UTF-8, truncation, and a
body over the size cap. A deterministic catalogue covers each kind once per decoder (and each field once);
Hypothesis then combines fields and hostile values at random.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_adapter import open_adapter, stored_json
from storage_adapter.engine import (
    CommitRequest,
    CorruptManifestError,
    CorruptMetadataError,
    CorruptSidecarError,
    Engine,
    layout,
)
from storage_adapter.engine.audit import AuditRecord, RecoveryOutcome
from storage_adapter.engine.sidecar import Sidecar, SidecarPin
from storage_adapter.errors import StorageError
from storage_adapter.idempotency import CorruptRecordError, IdempotencyStore, Owned

SCHEMA = pa.schema([("id", pa.int64())])
OPERATION_ID = "01JFUZZ0000000000000000000"
REALM = "realm"
RECORD_KEY = "0b0e6f5e-8c53-4f5a-9a55-2a0c3a5e0d11"
OVERSIZED_STRING = "x" * stored_json.MAX_BYTES  # over the cap, however the rest of the body looks

# Raw JSON tokens that no decoder may accept in any field: each is valid JSON syntax (or a literal
# Python's json module accepts), so only the bounds stop it.
HOSTILE_TOKENS = {
    "5000-digit-int": "1" * 5000,
    "int64-overflow": str(2**63),
    "int64-underflow": str(-(2**63) - 1),
    "float-overflow": "1e400",
    "negative-float-overflow": "-1e400",
    "nan": "NaN",
    "infinity": "Infinity",
    "negative-infinity": "-Infinity",
    "deep-list": "[" * 100_000 + "]" * 100_000,
    "deep-object": '{"a":' * 100_000 + "0" + "}" * 100_000,
    "lone-surrogate": '"\\udc80x"',
}
BAD_DATES = {"not-a-date": "yesterday", "naive": "2026-01-01T00:00:00", "impossible": "2026-02-30T00:00:00Z"}


def wrong_types(value: Any) -> list[Any]:
    """Values of a JSON type the field never holds (null excluded: optional fields accept it)."""
    if isinstance(value, bool):
        return ["true", 1]
    if isinstance(value, (int, float)):
        return [str(value), 1.5 if isinstance(value, int) else 1, True]
    if isinstance(value, str):
        return [7, True, []]
    if value is None:
        return [[], {"x": 1}]
    if isinstance(value, list):
        return [{"x": 1}, "x"]
    return [["x"], 7]


@dataclass
class Target:
    """One stored object: its key, a valid body, the typed error, and the public calls that read it."""

    name: str
    adapter: Any
    key: str
    valid: bytes
    error: type[StorageError]
    readers: tuple[Callable[[], Any], ...]
    date_fields: frozenset[str]
    any_json_fields: frozenset[str] = frozenset()  # fields holding any JSON value (no "wrong type")

    @property
    def document(self) -> dict[str, Any]:
        return json.loads(self.valid)  # type: ignore[no-any-return]

    def field_paths(self) -> list[tuple[Any, ...]]:
        """Every path to a value below the root, except inside any-JSON fields."""
        paths: list[tuple[Any, ...]] = []
        stack: list[tuple[tuple[Any, ...], Any]] = [((), self.document)]
        while stack:
            path, value = stack.pop()
            if path:
                paths.append(path)
            if path and path[-1] in self.any_json_fields:
                continue
            children = (
                value.items()
                if isinstance(value, dict)
                else enumerate(value)
                if isinstance(value, list)
                else ()
            )
            stack.extend(((*path, k), v) for k, v in children)
        return sorted(paths, key=repr)

    def check_refused(self, body: bytes) -> None:
        """Every reader raises the typed corrupt error naming the key; the body stays in place."""
        self.adapter.write(self.key, body)
        try:
            for read in self.readers:
                with pytest.raises(self.error) as caught:
                    read()
                assert caught.value.key == self.key, caught.value
                assert self.key in str(caught.value)
            assert self.adapter.read_bytes(self.key) == body
        finally:
            self.adapter.write(self.key, self.valid)


class Raw:
    """A placeholder for a raw JSON token (json.dumps cannot write NaN literals or 5000-digit ints)."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.marker = f"@@raw-{uuid.uuid4().hex}@@"


def value_at(document: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        document = document[step]
    return document


def replaced(document: dict[str, Any], path: tuple[Any, ...], value: Any) -> bytes:
    """``document`` with the value at ``path`` replaced, serialized (``Raw`` tokens spliced in verbatim)."""
    parent = document
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = value.marker if isinstance(value, Raw) else value
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    if isinstance(value, Raw):
        text = text.replace(json.dumps(value.marker), value.token)
    return text.encode("utf-8")


def whole_body_mutations(valid: bytes) -> dict[str, bytes]:
    """Hostile bodies not tied to one field."""
    document = json.loads(valid)
    first = sorted(document)[0]
    duplicated = (
        b"{" + json.dumps(first).encode() + b":" + json.dumps(document[first]).encode() + b"," + valid[1:]
    )
    return {
        "empty": b"",
        "truncated": valid[: len(valid) // 2],
        "invalid-utf8": valid.replace(b'"', b'"\xff', 1),
        "utf8-bom": b"\xef\xbb\xbf" + valid,
        "duplicate-key": duplicated,
        "not-an-object": b"[" + valid + b"]",
        "top-level-nan": b"NaN",
    }


def hostile_bodies(target: Target) -> Iterator[tuple[str, bytes]]:
    """The deterministic catalogue for one target: every hostile token in one field, every field with a
    wrong type, every date field with bad dates, and the whole-body mutations."""
    paths = target.field_paths()
    # Tokens go where a type check alone would let them through (integer and any-JSON fields), spread
    # over those fields; Hypothesis puts them everywhere else.
    lenient = [
        p for p in paths if p[-1] in target.any_json_fields or type(value_at(target.document, p)) is int
    ]
    for index, (name, token) in enumerate(HOSTILE_TOKENS.items()):
        path = lenient[index % len(lenient)]
        yield f"{name}@{'.'.join(map(str, path))}", replaced(target.document, path, Raw(token))
    for path in paths:
        if path[-1] in target.any_json_fields:
            continue
        wrong = wrong_types(value_at(target.document, path))[0]
        yield f"wrong-type@{'.'.join(map(str, path))}", replaced(target.document, path, wrong)
        if path[-1] in target.date_fields:
            for name, date in BAD_DATES.items():
                yield f"{name}@{'.'.join(map(str, path))}", replaced(target.document, path, date)
    yield from whole_body_mutations(target.valid).items()


# -- the targets -----------------------------------------------------------------------------------------
def engine_root() -> tuple[Any, Engine]:
    adapter = open_adapter(f"memory://stored-json-fuzz-{uuid.uuid4().hex}")
    engine = Engine.open(adapter, actor="fuzz")
    engine.create_table("a", SCHEMA)
    engine.commit({"a": pa.table({"id": [1, 2]}, schema=SCHEMA)}, CommitRequest(idempotency_key="k-1"))
    return adapter, engine


def build_targets() -> dict[str, Target]:
    adapter, engine = engine_root()
    pinned = engine.snapshot().table_version("a")
    now = datetime.now(UTC)
    sidecar = Sidecar(
        operation_id=OPERATION_ID,
        writer_kind="commit",
        actor="fuzz",
        started_at=now.isoformat(),
        lease_expires_at=(now + timedelta(days=1)).isoformat(),
        host="elsewhere",
        pid=12345,
        manifest_version=2,
        mode="append",
        idempotency_key=None,
        tables={"a": SidecarPin("tables/a", 1, 2), "b": SidecarPin("tables/b", None, 0, "c2NoZW1h")},
    )
    audit = AuditRecord(
        OPERATION_ID,
        RecoveryOutcome.ROLLED_BACK,
        {"a": (1, 3), "b": (None, 0)},
        now.isoformat(),
        "fuzz@elsewhere:1",
    )

    def read_only() -> Engine:
        return Engine.open(adapter, read_only=True)

    store_adapter = open_adapter(f"memory://stored-json-fuzz-{uuid.uuid4().hex}")
    store = IdempotencyStore(store_adapter, lifetime=timedelta(hours=1))
    binding = {"operation": "commit", "resource": "t", "fingerprint": "sha256:aa"}
    owned = store.reserve(REALM, RECORD_KEY, **binding)
    assert isinstance(owned, Owned)
    store.finalize(
        owned,
        http_status=201,
        summary={"rows": [1, 2]},
        headers=(("Location", "/t/1"),),
        error_subtype="none",
    )
    location = store.location(REALM, RECORD_KEY)
    targets = [
        Target(
            "manifest",
            adapter,
            layout.MANIFEST_KEY,
            adapter.read_bytes(layout.MANIFEST_KEY),
            CorruptManifestError,
            (lambda: Engine.open(adapter), read_only, lambda: engine.read("a"), engine.history),
            frozenset({"committed_at"}),
        ),
        Target(
            "table-version",
            adapter,
            layout.version_key("a", pinned),
            adapter.read_bytes(layout.version_key("a", pinned)),
            CorruptMetadataError,
            (lambda: read_only().read("a"),),
            frozenset(),
        ),
        Target(
            "sidecar",
            adapter,
            sidecar.key,
            sidecar.encode(),
            CorruptSidecarError,
            (lambda: Engine.open(adapter), engine.heal),
            frozenset({"started_at", "lease_expires_at"}),
        ),
        Target(
            "audit",
            adapter,
            layout.audit_key(OPERATION_ID),
            audit.encode(),
            CorruptMetadataError,
            (lambda: read_only().audit_log(),),
            frozenset({"recovered_at"}),
        ),
        Target(
            "idempotency-record",
            store_adapter,
            location,
            store_adapter.read_bytes(location),
            CorruptRecordError,
            (
                lambda: store.load(REALM, RECORD_KEY),
                lambda: store.reserve(REALM, RECORD_KEY, **binding),
                # a purge for which the record is due: one whose expiry index says "not due" skips the read
                # (docs/idempotency.md, "the expiry index"); any purge that reads it must refuse it
                lambda: store.purge_expired(datetime.now(UTC) + timedelta(days=3650)),
            ),
            frozenset({"created_at", "heartbeat_at", "lease_expires_at", "expires_at", "finalized_at"}),
            frozenset({"summary"}),
        ),
    ]
    for target in targets:  # the sidecar and audit record are not on storage yet
        target.adapter.write(target.key, target.valid)
    return {target.name: target for target in targets}


TARGETS = build_targets()
CATALOGUE = [(name, case, body) for name, target in TARGETS.items() for case, body in hostile_bodies(target)]


def test_valid_bodies_are_read() -> None:
    """The baseline: each reader accepts the valid document (so a refusal below is the hostile part's)."""
    for target in TARGETS.values():
        for read in target.readers:
            read()


@pytest.mark.parametrize(("target", "case", "body"), CATALOGUE, ids=[f"{t}-{c}" for t, c, _ in CATALOGUE])
def test_hostile_body_is_refused_typed_and_kept(target: str, case: str, body: bytes) -> None:
    TARGETS[target].check_refused(body)


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_oversized_body_is_refused_typed_and_kept(target: str) -> None:
    """A body over the size cap is refused before parsing, even when it is otherwise valid."""
    document = TARGETS[target].document
    field = next(n for n in sorted(document) if isinstance(document[n], str) and n != "format")
    TARGETS[target].check_refused(replaced(document, (field,), OVERSIZED_STRING))


def test_catalogue_size() -> None:
    """Issue 12 asks for at least 40 distinct hostile inputs overall; metadata alone gives far more."""
    assert len({body for _, _, body in CATALOGUE}) >= 100


@st.composite
def fuzzed(draw: st.DrawFn) -> tuple[Target, bytes]:
    target = draw(st.sampled_from(sorted(TARGETS.values(), key=lambda t: t.name)))
    if draw(st.booleans()):
        return target, draw(st.sampled_from(sorted(whole_body_mutations(target.valid).values())))
    path = draw(st.sampled_from(target.field_paths()))
    choices: list[Any] = [Raw(token) for token in HOSTILE_TOKENS.values()]
    if path[-1] not in target.any_json_fields:
        choices += wrong_types(value_at(target.document, path))
    if path[-1] in target.date_fields:
        choices += list(BAD_DATES.values())
    return target, replaced(target.document, path, draw(st.sampled_from(choices)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fuzzed())
def test_fuzzed_body_is_refused_typed_and_kept(case: tuple[Target, bytes]) -> None:
    target, body = case
    target.check_refused(body)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=6))
def test_what_dumps_writes_loads_reads_back(document: dict[str, Any]) -> None:
    """The encoder never writes what the decoder would refuse: it raises StoredJSONError instead."""
    try:
        data = stored_json.dumps(document, ensure_ascii=False)
    except stored_json.StoredJSONError:
        return
    assert stored_json.loads(data) == document


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


UNSTORABLE = {
    "nan": float("nan"),
    "infinity": float("inf"),
    "int64-overflow": 2**63,
    "int64-underflow": -(2**63) - 1,
    "huge-int": 10**5000,
    "lone-surrogate": "\udc80x",
    "too-deep": nested(stored_json.MAX_DEPTH),  # one more level: the enclosing document
    "recursion-deep": nested(100_000),
}


@pytest.mark.parametrize("value", UNSTORABLE.values(), ids=UNSTORABLE.keys())
@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_dumps_refuses_what_loads_would_refuse(value: Any, ensure_ascii: bool) -> None:
    with pytest.raises(stored_json.StoredJSONError, match="not storable"):
        stored_json.dumps({"field": value}, ensure_ascii=ensure_ascii)
    assert stored_json.loads(stored_json.dumps({"field": nested(stored_json.MAX_DEPTH - 1)}))
