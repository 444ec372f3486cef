"""A Hypothesis state machine that drives any :class:`~storage_adapter.StorageAdapter` against a dict model.

Shipped for downstream stores (like zarr's ``zarr.testing.stateful``)::

    from contract_tests.stateful import run_state_machine

    def test_my_store_behaves_like_a_dict():
        run_state_machine(my_adapter)                     # or run_state_machine(my_adapter, raw=bypass)

Rules: write, write_if_absent, write_if_match with the fresh token (must win) and with a stale token
(must lose and change nothing), read, read_versioned, delete, list, delete_prefix. Bodies are unique
within an example (a counter is appended), so a stale token is stale on every backend, S3's content-MD5
ETags included. Each example works under its own prefix of the adapter, removed at teardown.

``raw`` is an optional :class:`RawBypass`: a way to change the store *around* the adapter (the
filesystem directly, another client of the bucket). With it the machine also writes and deletes out of
band, and the adapter must see those changes: reads and listings reflect them, and a token read before
an out-of-band change is stale after it.

Default size: 40 examples x up to 30 steps (seconds on memory and local, 10-20 s on SeaweedFS).
"""

from __future__ import annotations

import uuid
from typing import Protocol

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule, run_state_machine_as_test

from storage_adapter.errors import NotFoundError
from storage_adapter.keys import join_key
from storage_adapter.protocol import StorageAdapter

KEYS = st.sampled_from(["a", "b", "d/x", "d/y", "d/e/z"])
DATA = st.binary(max_size=24)
LIST_PREFIXES = st.sampled_from(["", "d", "d/e"])
DELETE_PREFIXES = st.sampled_from(["d", "d/e"])
SETTINGS = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class RawBypass(Protocol):
    """Changes the store without going through the adapter. Keys are relative to the adapter's root."""

    def put(self, key: str, data: bytes) -> None:
        """Create or replace the object at ``key`` out of band (whole: readers never see a part)."""
        ...

    def delete(self, key: str) -> None:
        """Delete the object at ``key`` out of band (a missing object is not an error)."""
        ...


def under(key: str, prefix: str) -> bool:
    return not prefix or key.startswith(prefix + "/")


class AdapterVersusDict(RuleBasedStateMachine):
    """``model`` maps key -> bytes; ``tokens`` holds each key's current token once it is known;
    ``stale`` collects tokens of versions that were replaced or deleted."""

    def __init__(self, root: StorageAdapter, raw: RawBypass | None = None) -> None:
        super().__init__()
        self.root = root
        self.raw = raw
        self.prefix = f"machine-{uuid.uuid4().hex[:10]}"
        self.store = root.child(self.prefix)
        self.model: dict[str, bytes] = {}
        self.tokens: dict[str, str] = {}
        self.stale: list[tuple[str, str]] = []
        self.bodies = 0

    def unique(self, data: bytes) -> bytes:
        self.bodies += 1
        return data + b"#%d" % self.bodies

    def retire(self, key: str) -> None:
        if key in self.tokens:
            self.stale.append((key, self.tokens.pop(key)))

    def set(self, key: str, body: bytes, token: str | None) -> None:
        self.retire(key)
        self.model[key] = body
        if token is not None:
            self.tokens[key] = token

    def forget(self, key: str) -> None:
        self.retire(key)
        self.model.pop(key, None)

    @rule(key=KEYS, data=DATA)
    def write(self, key: str, data: bytes) -> None:
        body = self.unique(data)
        token = self.store.write(key, body)
        assert isinstance(token, str) and token
        self.set(key, body, token)

    @rule(key=KEYS, data=DATA)
    def write_if_absent(self, key: str, data: bytes) -> None:
        body = self.unique(data)
        token = self.store.write_if_absent(key, body)
        assert (token is not None) == (key not in self.model)
        if token is not None:
            assert isinstance(token, str) and token
            self.set(key, body, token)

    @rule(key=KEYS, data=DATA)
    def write_if_match_fresh_token(self, key: str, data: bytes) -> None:
        body = self.unique(data)
        if key not in self.model:
            assert self.store.write_if_match(key, body, '"no-such-version"') is None
            assert not self.store.exists(key)
            return
        current = self.store.read_versioned(key)
        new = self.store.write_if_match(key, body, current.token)
        assert new is not None and new != current.token
        self.tokens[key] = current.token
        self.set(key, body, new)

    @precondition(lambda self: self.stale)
    @rule(data=DATA, pick=st.integers(min_value=0))
    def write_if_match_stale_token(self, data: bytes, pick: int) -> None:
        key, token = self.stale[pick % len(self.stale)]
        assert self.store.write_if_match(key, self.unique(data), token) is None
        assert self.store.read_if_exists(key) == self.model.get(key)

    @rule(key=KEYS)
    def read(self, key: str) -> None:
        assert self.store.read_if_exists(key) == self.model.get(key)

    @rule(key=KEYS)
    def read_versioned(self, key: str) -> None:
        if key not in self.model:
            with pytest.raises(NotFoundError):
                self.store.read_versioned(key)
            return
        current = self.store.read_versioned(key)
        assert current.data == self.model[key]
        assert self.tokens.setdefault(key, current.token) == current.token

    @rule(key=KEYS)
    def delete(self, key: str) -> None:
        self.store.delete(key)
        self.forget(key)

    @rule(prefix=LIST_PREFIXES)
    def list(self, prefix: str) -> None:
        listed = self.store.list(prefix)
        assert [info.key for info in listed] == sorted(k for k in self.model if under(k, prefix))
        for info in listed:
            assert info.size == len(self.model[info.key])

    @rule(prefix=DELETE_PREFIXES)
    def delete_prefix(self, prefix: str) -> None:
        doomed = [k for k in self.model if under(k, prefix)]
        assert self.store.delete_prefix(prefix) == len(doomed)
        for key in doomed:
            self.forget(key)
        assert self.store.list(prefix) == []

    @precondition(lambda self: self.raw is not None)
    @rule(key=KEYS, data=DATA)
    def raw_write(self, key: str, data: bytes) -> None:
        """An out-of-band write: the adapter must see it, and the key's known token is stale after it."""
        assert self.raw is not None
        body = self.unique(data)
        self.raw.put(join_key(self.prefix, key), body)
        self.set(key, body, None)

    @precondition(lambda self: self.raw is not None)
    @rule(key=KEYS)
    def raw_delete(self, key: str) -> None:
        assert self.raw is not None
        self.raw.delete(join_key(self.prefix, key))
        self.forget(key)

    def teardown(self) -> None:
        self.root.delete_prefix(self.prefix)


def run_state_machine(
    adapter: StorageAdapter, raw: RawBypass | None = None, settings: settings = SETTINGS
) -> None:
    """Run :class:`AdapterVersusDict` on ``adapter`` (under fresh prefixes) as a test; raises on the first
    divergence from the model, with Hypothesis's shrunk sequence of steps."""
    run_state_machine_as_test(lambda: AdapterVersusDict(adapter, raw), settings=settings)  # type: ignore[arg-type]  # a factory is accepted too
