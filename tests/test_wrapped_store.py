"""Bring your own store: ``open_adapter(store=<obstore store>, capabilities=...)`` and its async twin.
Typed errors for bad input, keys and redaction as for any adapter, identity and pickling (obstore's own
where it has one), and Engine.open. The contract itself runs in tests/test_contract_wrapped_store.py."""

from __future__ import annotations

import asyncio
import dataclasses
import pickle
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
from obstore.store import LocalStore, MemoryStore, S3Store

from storage_adapter import (
    AsyncObjectStorageAdapter,
    ConfigurationError,
    InvalidKeyError,
    NotFoundError,
    ObjectStorageAdapter,
    open_adapter,
    open_async_adapter,
)
from storage_adapter.builtin_backends import MEMORY, S3
from storage_adapter.errors import BackendUnavailableError, StorageError

CAPS = dataclasses.replace(MEMORY.capabilities, backend="my-store")


def test_a_wrapped_store_is_an_adapter_over_that_very_store() -> None:
    store = MemoryStore()
    adapter = open_adapter(store=store, capabilities=CAPS)
    assert isinstance(adapter, ObjectStorageAdapter)
    assert adapter.capabilities is CAPS and adapter.backend == "my-store"
    adapter.child("p").write("k", b"v")
    assert bytes(store.get("p/k").bytes()) == b"v"  # the user's store holds it, under the child prefix
    assert [i.key for i in adapter.list()] == ["p/k"]
    assert adapter.url.startswith("obstore://memorystore-")
    assert open_adapter(store=store, capabilities=CAPS) == adapter  # the same store, wrapped twice
    assert open_adapter(store=MemoryStore(), capabilities=CAPS) != adapter
    twin = open_async_adapter(store=store, capabilities=CAPS)
    assert isinstance(twin, AsyncObjectStorageAdapter)
    assert asyncio.run(twin.read_bytes("p/k")) == b"v"


@pytest.mark.parametrize("opener", [open_adapter, open_async_adapter])
def test_bad_input_is_a_typed_error_before_any_io(opener: object) -> None:
    open_ = opener  # type: ignore[assignment]
    with pytest.raises(ConfigurationError, match="no declared capabilities"):
        open_(store=MemoryStore())  # type: ignore[operator]
    with pytest.raises(ConfigurationError, match="must be a Capabilities"):
        open_(store=MemoryStore(), capabilities={"write_if_match": "native"})  # type: ignore[operator]
    with pytest.raises(ConfigurationError, match="obstore store"):
        open_(store={"not": "a store"}, capabilities=CAPS)  # type: ignore[operator]
    with pytest.raises(ConfigurationError, match="not both"):
        open_("memory://x", store=MemoryStore(), capabilities=CAPS)  # type: ignore[operator]
    with pytest.raises(ConfigurationError, match="unknown option"):
        open_(store=MemoryStore(), capabilities=CAPS, region="x")  # type: ignore[operator]
    with pytest.raises(ConfigurationError, match="only for a wrapped store"):
        open_("memory://x", capabilities=CAPS)  # type: ignore[operator]
    with pytest.raises(ConfigurationError, match="wraps a store object"):
        open_("obstore://memorystore-1-2")  # type: ignore[operator]


def test_keys_are_validated_as_everywhere() -> None:
    adapter = open_adapter(store=MemoryStore(), capabilities=CAPS)
    for bad in ("a//b", "../x", "/abs", "a/b#12"):
        with pytest.raises(InvalidKeyError, match="my-store"):
            adapter.write(bad, b"x")
    with pytest.raises(InvalidKeyError):
        adapter.child("a//b")
    with pytest.raises(NotFoundError, match="'missing' on my-store"):
        adapter.read_bytes("missing")


def test_the_stores_credentials_are_never_reported() -> None:
    """The secret key inside a user's S3Store config is masked in the adapter's repr and errors."""
    secret = "wrapped-S3-secret-never-printed"
    store = S3Store(
        "bucket",
        config={
            "endpoint": "http://127.0.0.1:9",
            "access_key_id": "AKIDEXAMPLE",
            "secret_access_key": secret,
        },
        client_options={"allow_http": True},
        retry_config={"max_retries": 0, "retry_timeout": __import__("datetime").timedelta(seconds=1)},
    )
    caps = dataclasses.replace(S3.capabilities, backend="my-s3")
    adapter = open_adapter(store=store, capabilities=caps)
    assert secret not in repr(adapter) and secret not in repr(adapter.config) and secret not in adapter.url
    with pytest.raises(BackendUnavailableError) as info:
        adapter.read_bytes("k")
    assert "my-s3" in str(info.value)
    assert secret not in "".join(traceback.format_exception(info.value))


def test_pickling_uses_obstores_own_pickling_where_it_has_one(tmp_path: Path) -> None:
    local = open_adapter(
        store=LocalStore(str(tmp_path)), capabilities=dataclasses.replace(CAPS, backend="ls")
    )
    local.write("k", b"on disk")
    clone = pickle.loads(pickle.dumps(local))
    assert clone == local and clone.read_bytes("k") == b"on disk"
    s3 = S3Store("b", config={"endpoint": "http://127.0.0.1:9", "skip_signature": True})
    assert pickle.loads(pickle.dumps(open_adapter(store=s3, capabilities=CAPS))).url.startswith(
        "obstore://s3store-"
    )


def _unpickled_in_another_process(tmp_path: Path, blob: bytes, code: str) -> str:
    """What ``code`` prints in a fresh interpreter given the path of a file holding ``blob``."""
    (tmp_path / "adapter.pickle").write_bytes(blob)
    return subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "adapter.pickle")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_a_memory_store_pickles_by_reference_and_is_per_process(tmp_path: Path) -> None:
    """obstore cannot pickle a MemoryStore: in this process the copy is the very same store; in another
    process it is a new, empty one (as for memory://)."""
    adapter = open_adapter(store=MemoryStore(), capabilities=CAPS)
    adapter.write("k", b"here")
    blob = pickle.dumps(adapter)
    assert pickle.loads(blob) == adapter and pickle.loads(blob).read_bytes("k") == b"here"
    code = (
        "import pickle, sys; a = pickle.loads(open(sys.argv[1], 'rb').read()); "
        "print(a.read_if_exists('k'), a.backend)"
    )
    out = _unpickled_in_another_process(tmp_path, blob, code)
    assert out.split() == ["None", "my-store"]


def test_a_store_obstore_cannot_pickle_is_a_typed_error_in_another_process(tmp_path: Path) -> None:
    """An S3Store with a Python credential provider does not pickle: its adapter's copy reopens it in
    this process only; elsewhere unpickling raises ConfigurationError saying why."""

    def provider() -> dict[str, object]:
        return {"access_key_id": "a", "secret_access_key": "b", "token": None, "expires_at": None}

    store = S3Store("b", config={"endpoint": "http://127.0.0.1:9"}, credential_provider=provider)  # type: ignore[arg-type]
    adapter = open_adapter(store=store, capabilities=CAPS)
    blob = pickle.dumps(adapter)
    assert pickle.loads(blob) == adapter
    code = (
        "import pickle, sys\n"
        "from storage_adapter import ConfigurationError\n"
        "try:\n    pickle.loads(open(sys.argv[1], 'rb').read())\n"
        "except ConfigurationError as exc:\n    print('typed:', exc)\n"
    )
    out = _unpickled_in_another_process(tmp_path, blob, code)
    assert out.startswith("typed:") and "cannot pickle it" in out, out


def test_engine_open_takes_a_wrapped_store_and_refuses_a_bare_one() -> None:
    pytest.importorskip("pyarrow")
    from storage_adapter.engine import Engine

    store = MemoryStore()
    engine = Engine.open(open_adapter(store=store, capabilities=CAPS), actor="byo")
    assert engine is not None
    assert any(path["path"].startswith("_") or path["path"] for batch in store.list() for path in batch)
    with pytest.raises(ConfigurationError, match="open_adapter\\(store="):
        Engine.open(store)  # type: ignore[arg-type]
    with pytest.raises(StorageError):
        Engine.open(MemoryStore())  # type: ignore[arg-type]
