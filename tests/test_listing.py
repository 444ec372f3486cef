"""The lean listing: ObjectInfo stays a public frozen value type however a listing builds it."""

from __future__ import annotations

import dataclasses
import pickle
from datetime import UTC, datetime

import pytest

from storage_adapter import open_adapter
from storage_adapter.types import ObjectInfo, object_infos

WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_object_infos_equal_the_constructor_field_for_field() -> None:
    keys, sizes, tokens = ["a", "b/c"], [1, 2], ['"1"', '"2"']
    built = object_infos(2, iter(keys), iter(sizes), iter(tokens), iter([WHEN, WHEN]))
    expected = [ObjectInfo(k, s, t, WHEN) for k, s, t in zip(keys, sizes, tokens, strict=True)]
    assert built == expected and [hash(i) for i in built] == [hash(i) for i in expected]
    assert [repr(i) for i in built] == [repr(i) for i in expected]
    assert object_infos(0, [], [], [], []) == []


def test_a_listed_object_info_is_frozen_and_pickles() -> None:
    adapter = open_adapter("memory://listing-types").child("p")
    adapter.write("k", b"v")
    (info,) = adapter.list()
    assert info.key == "k" and info.size == 1 and type(info) is ObjectInfo
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.key = "other"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(info)) == info
    assert dataclasses.asdict(info)["key"] == "k" and dataclasses.replace(info, size=2).size == 2


def test_the_arrow_listing_equals_obstores_own_metadata_to_the_microsecond() -> None:
    """The adapter lists through obstore's Arrow form; every field, the time to the microsecond, is what
    obstore's per-object metadata says (sync and delimited listings, under a rooted prefix)."""
    import obstore
    from obstore.store import MemoryStore

    from storage_adapter.builtin_backends import MEMORY

    store = MemoryStore()
    adapter = open_adapter(store=store, capabilities=MEMORY.capabilities).child("root")
    for i in range(300):
        adapter.write(f"p/k{i:04d}", b"x" * i)
    adapter.write("p/sub/deeper", b"d")
    expected = [
        ObjectInfo(meta["path"].removeprefix("root/"), meta["size"], meta["e_tag"], meta["last_modified"])
        for meta in obstore.list(store, "root/p").collect()
    ]
    assert adapter.list("p") == sorted(expected, key=lambda info: info.key)
    assert all(info.last_modified.tzinfo is not None for info in adapter.list("p"))
    direct = [info for info in expected if "/" not in info.key.removeprefix("p/")]
    assert list(adapter.list_dir("p").objects) == sorted(direct, key=lambda info: info.key)
    assert open_adapter("memory://listing-arrow/empty").list() == []
