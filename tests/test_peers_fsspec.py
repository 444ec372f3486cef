"""The fsspec peer adapters: same API as ObjectStorageAdapter, honest capabilities, safe keys."""

from __future__ import annotations

import pickle
import threading
import uuid
from typing import Any

import pytest

from contract_tests.peers import FsspecAdapter, open_peer
from storage_adapter.errors import ConfigurationError, InvalidKeyError, NotFoundError
from storage_adapter.types import Support


@pytest.fixture(params=["memory", "local"])
def peer(request: pytest.FixtureRequest, tmp_path: Any) -> FsspecAdapter:
    if request.param == "memory":
        return open_peer(f"memory://peer-test-{uuid.uuid4().hex[:8]}")
    return open_peer(f"file://{tmp_path}")


def test_peer_round_trip_list_child_and_pickle(peer: FsspecAdapter) -> None:
    token = peer.write("a/b", b"v1")
    assert peer.read_versioned("a/b").data == b"v1"
    assert peer.read_versioned("a/b").token == token
    assert [i.key for i in peer.list()] == ["a/b"]
    child = peer.child("a")
    assert child.read_bytes("b") == b"v1"
    clone = pickle.loads(pickle.dumps(child))
    assert clone == child and hash(clone) == hash(child)
    assert clone.read_bytes("b") == b"v1"
    assert peer.write_if_absent("a/b", b"other") is None
    assert peer.write_if_match("a/b", b"v2", token) is not None
    assert peer.write_if_match("a/b", b"v3", token) is None
    with pytest.raises(NotFoundError, match=peer.capabilities.backend):
        peer.read_bytes("missing")
    assert peer.delete_prefix("a") == 1


def test_peer_capabilities_declare_check_then_act(peer: FsspecAdapter) -> None:
    caps = peer.capabilities
    assert caps.write_if_match is Support.EMULATED and "check-then-act" in caps.token_semantics
    assert caps.backend.startswith("fsspec-")


def test_peer_keys_never_escape_the_root(peer: FsspecAdapter) -> None:
    inner = peer.child("inner")
    for attack in ("../x", "/x", "a/../../x"):
        with pytest.raises(InvalidKeyError):
            inner.write(attack, b"escape")
    assert peer.list() == []


def test_peer_unknown_scheme_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="scheme"):
        open_peer("ftp://host/x")


def test_s3fs_peer_create_is_native_if_none_match(embedded_seaweedfs: Any) -> None:
    """s3fs sends If-None-Match: * for mode="create": one winner among racing threads on SeaweedFS."""
    peer = open_peer(
        embedded_seaweedfs.url(f"peer-{uuid.uuid4().hex[:8]}"), **embedded_seaweedfs.adapter_options()
    )
    assert peer.capabilities.write_if_absent is Support.NATIVE
    assert peer.capabilities.write_if_match is Support.EMULATED
    barrier = threading.Barrier(6)
    wins: list[str | None] = []

    def create(i: int) -> None:
        barrier.wait()
        wins.append(peer.write_if_absent("race", f"body-{i}"))

    threads = [threading.Thread(target=create, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) - wins.count(None) == 1
    assert peer.delete_prefix("race") == 0 and peer.list() != []  # "race" is an object, not a prefix
    peer.delete("race")
    assert peer.list() == []
