"""Clauses on what other tools leave in a bucket: names no key can have and folder markers, planted below
the adapter's root through the backend's raw store (``Backend.foreign_writer``: obstore directly on
memory, the file system on local, raw signed requests on S3 and Azure), never through the adapter.

Mixed into :class:`contract_tests.clauses.AdapterContract`. What they pin down, on every backend, for
every odd name the store can hold (storage_adapter.listing states the rule):

* every listing (``list``, ``list_pages``, ``iter_list``, ``list_dir``, at the root and below) completes,
  shows every object once, by its own name, and never an odd name under another one (``dir`` for the
  marker ``dir/``, ``a/b`` for ``a//b``); every key it shows reads back;
* what it leaves out is reported: ``skipped`` names each planted entry once, with its reason, and
  ``list_dir`` reports the ones directly under it;
* a folder marker is no object and makes no directory: a prefix holding only markers is not listed, does
  not exist, and lists nothing;
* a foreign object with a valid name is an object like any other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from storage_adapter.driver import ForeignWriter
from storage_adapter.errors import InvalidKeyError, NotFoundError, StorageError
from storage_adapter.keys import validate_key
from storage_adapter.protocol import StorageAdapter
from storage_adapter.registry import AdapterConfig
from storage_adapter.types import ObjectInfo, SkippedObject, SkipReason

# Odd names, relative to the clause's root, each with the bytes planted: folder markers alone, beside an
# object and at several depths; names with control characters, empty, "." and ".." segments, a trailing
# "/" on an object with bytes, a leading "/", a backslash, a staging-file suffix, an over-long segment.
# A store that cannot hold a name (obstore's memory store parses names; SeaweedFS refuses some) skips it.
MARKERS = ("alone/", "beside/", "deep/", "deep/er/", "deep/er/est/", "only/markers/")
INVALID = (
    "ctl\tab",
    "bell\x07/inner",
    "sub/esc\x1bape",
    "dbl//slash",
    "dot/./seg",
    "up/../down",
    "trailing-bytes/",
    "/leading",
    "back\\slash",
    "stage#123",
    "seg/" + "x" * 201,
)
# Objects written through the adapter around them (the marker "beside/" has one below it).
OBJECTS = ("beside/object", "deep/er/real", "plain", "sub/real")
# An object another tool wrote with a name that is a valid key: listed like the adapter's own.
FOREIGN_VALID = "sub/foreign.txt"


@dataclass
class Planted:
    """What the store holds below a clause's root after planting, by the raw store's own listing (a server
    may store a name otherwise than sent): the odd entries (name -> the reason a listing must give) and
    the objects (key -> bytes)."""

    odd: dict[str, SkipReason]
    objects: dict[str, bytes]


def _expected_reason(name: str, size: int) -> SkipReason | None:
    """What the contract requires of an entry: None for an object (its name is a key), else the reason."""
    try:
        validate_key(name)
    except InvalidKeyError:
        return SkipReason.FOLDER_MARKER if name.endswith("/") and size == 0 else SkipReason.INVALID_KEY
    return None


def listable(writer: ForeignWriter, sent: dict[str, bytes]) -> dict[str, int]:
    """What the store holds (``writer.held()``: one raw listing). Where the server took a name but its
    own listing then fails (Azurite answers 500 for a name with a character XML cannot carry, where Azure
    encodes it: no client can list there), the odd names are planted again one at a time, each listed
    once, and the ones the listing fails on are removed and forgotten."""
    try:
        return writer.held()
    except StorageError:
        odd = {name: data for name, data in sent.items() if name not in OBJECTS}
    for name in odd:
        writer.remove(name)
    for name, data in odd.items():
        writer.put(name, data)
        try:
            writer.held()
        except StorageError:
            writer.remove(name)
            del sent[name]
    return writer.held()


def plant_foreign(adapter: StorageAdapter) -> Iterator[Planted]:
    """Plant the module's odd names and objects below ``adapter``'s root through its backend's raw store,
    yield what the store then holds, and remove it all again (a generator for a pytest fixture: it skips
    where there is no raw store, or the store holds none of the odd names)."""
    config: AdapterConfig | None = getattr(adapter, "config", None)
    make = None if config is None else config.spec.foreign_writer
    if config is None or make is None:
        pytest.skip(f"{adapter.backend}: no raw store to plant other tools' objects through")
    writer = make(config)
    sent = {name: name.encode() for name in OBJECTS}
    for name, data in sent.items():
        adapter.write(name, data)
    try:
        for name in (*MARKERS, *INVALID, FOREIGN_VALID):
            data = b"" if name in MARKERS else b"written by another tool"
            try:
                writer.put(name, data)
            except StorageError:  # this store cannot hold the name (UnsupportedOperationError, a 4xx)
                continue
            sent[name] = data
        held = listable(writer, sent)
        planted = Planted({}, {})
        for name, size in held.items():
            reason = _expected_reason(name, size)
            if reason is None:
                planted.objects[name] = sent.get(name, b"written by another tool")
            else:
                planted.odd[name] = reason
        if not planted.odd:
            pytest.skip(f"{adapter.backend} holds none of the odd names")
        yield planted
    finally:
        for name in {*sent, *writer.held()}:
            with contextlib.suppress(StorageError):
                writer.remove(name)


class ForeignObjectClauses:
    """Listings in a bucket other tools wrote to (module docstring)."""

    @pytest.fixture
    def planted(self, adapter: StorageAdapter) -> Iterator[Planted]:
        yield from plant_foreign(adapter)

    def test_odd_names_never_break_a_listing_and_every_listed_key_reads_back(
        self, adapter: StorageAdapter, planted: Planted
    ) -> None:
        """Every listing completes and shows exactly the objects, each once, by its own name; each reads
        back; nothing odd shows under another name."""
        expected = sorted(planted.objects)
        assert [info.key for info in adapter.list()] == expected
        assert sorted(info.key for page in adapter.list_pages() for info in page) == expected
        assert sorted(info.key for info in adapter.iter_list()) == expected
        for prefix in ("deep", "sub", "beside", "deep/er"):
            below = [key for key in expected if key.startswith(prefix + "/")]
            assert [info.key for info in adapter.list(prefix)] == below, prefix
        for key in expected:
            assert adapter.read_bytes(key) == planted.objects[key], key
            assert adapter.exists(key), key

    def test_what_a_listing_leaves_out_is_reported_once_with_its_reason(
        self, adapter: StorageAdapter, planted: Planted
    ) -> None:
        """``skipped`` names every planted entry once with its reason, and nothing else; ``entry_pages``
        gives the objects of ``list_pages`` and those entries in one pass; ``list_dir`` reports those
        directly under its prefix."""
        reported = {entry.name: entry.reason for entry in adapter.skipped()}
        assert len(adapter.skipped()) == len(reported)
        assert reported == planted.odd
        # entry_pages: the same objects as list_pages, in the same order, and the same skipped entries.
        entries = [entry for page in adapter.entry_pages() for entry in page]
        objects = [entry.key for entry in entries if isinstance(entry, ObjectInfo)]
        assert objects == [info.key for page in adapter.list_pages() for info in page]
        assert sorted(e.name for e in entries if isinstance(e, SkippedObject)) == sorted(planted.odd)
        # Directly under a prefix: names with no "/" below it, and the prefix's own marker.
        assert {entry.name for entry in adapter.list_dir().skipped} == {
            n for n in planted.odd if "/" not in n
        }
        assert {entry.name for entry in adapter.list_dir("deep").skipped} == {"deep/"} & set(planted.odd)

    def test_a_folder_marker_is_no_object_and_makes_no_directory(
        self, adapter: StorageAdapter, planted: Planted
    ) -> None:
        """A prefix holding only markers is not listed, does not exist and lists nothing; a marker beside
        objects changes nothing; no marker is ever an object under its name without the ``/``."""
        markers = [name for name, reason in planted.odd.items() if reason is SkipReason.FOLDER_MARKER]
        if not markers:
            pytest.skip(f"{adapter.backend} holds no folder marker")
        listing = adapter.list_dir()
        assert sorted(listing.prefixes) == sorted(
            {key.split("/")[0] for key in planted.objects if "/" in key}
        )
        assert [info.key for info in listing.objects] == [
            key for key in sorted(planted.objects) if "/" not in key
        ]
        for marker in markers:
            name = marker.rstrip("/")
            assert not adapter.exists(name), marker
            with pytest.raises(NotFoundError):
                adapter.read_bytes(name)
        for lonely in ("alone", "only", "only/markers"):
            assert adapter.list(lonely) == [], lonely
            assert adapter.list_dir(lonely).objects == () and adapter.list_dir(lonely).prefixes == (), lonely
        assert adapter.list_dir("deep").prefixes == ("deep/er",)
        assert adapter.list_dir("deep/er").prefixes == ()
