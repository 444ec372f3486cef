"""S3 ``list_dir``: the delimited list and, beside it, one page of the recursive listing that confirms
the child prefixes it reports (docs/listing.md).

A prefix is a child only while an object lives under it: SeaweedFS reports a directory emptied by deletes
as a common prefix, and a folder marker makes one on any server. Request counts are asserted (at the
driver's fault points), never times.
"""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from storage_adapter import open_adapter
from storage_adapter.adapter import ObjectStorageAdapter
from storage_adapter.faults import FaultKind, FaultPlan, injected
from storage_adapter.obstore_driver import driver as obstore_driver
from storage_adapter.servers.server import S3Endpoint


def _fresh(endpoint: S3Endpoint, **options: object) -> ObjectStorageAdapter:
    return open_adapter(
        endpoint.url(f"list-dir-{uuid.uuid4().hex[:8]}"), **{**endpoint.adapter_options(), **options}
    )


def _requests(call: object) -> Counter[str]:
    recorder = FaultPlan(FaultKind.BROKEN, skip=10**9)
    with injected(recorder):
        call()  # type: ignore[operator]
    return Counter(recorder.passed)


def _fill(adapter: ObjectStorageAdapter, prefixes: int) -> None:
    for i in range(prefixes):
        adapter.write(f"d/{i:02d}/x", b"v")
    adapter.write("d/top", b"v")


def test_confirmation_takes_one_listing_page_beside_the_delimited_list(
    embedded_seaweedfs: S3Endpoint,
) -> None:
    """Every list_dir: the delimited list and the first page of the recursive listing, side by side;
    that page proves every prefix it shows, and when it is the whole listing, every other one empty."""
    adapter = _fresh(embedded_seaweedfs)
    _fill(adapter, 20)
    adapter.delete("d/03/x")
    adapter.delete("d/17/x")
    listing = adapter.list_dir("d")
    assert listing.prefixes == tuple(f"d/{i:02d}" for i in range(20) if i not in (3, 17))
    assert _requests(lambda: adapter.list_dir("d")) == Counter({"list_with_delimiter": 1, "list": 1})


def test_prefixes_beyond_the_first_page_are_confirmed_each(
    embedded_seaweedfs: S3Endpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page shorter than the prefix (here 5 objects): the prefixes it does not show are confirmed one
    list each (concurrently), and the emptied ones among them are still left out."""
    monkeypatch.setattr(obstore_driver, "LIST_PAGE", 5)
    adapter = _fresh(embedded_seaweedfs)
    _fill(adapter, 12)
    for i in (1, 9, 11):
        adapter.delete(f"d/{i:02d}/x")
    listing = adapter.list_dir("d")
    assert listing.prefixes == tuple(f"d/{i:02d}" for i in range(12) if i not in (1, 9, 11))
    requests = _requests(lambda: adapter.list_dir("d"))
    # The page shows 5 live prefixes; the other 12 - 5 reported ones (4 live, 3 emptied) take a list each.
    assert requests == Counter({"list_with_delimiter": 1, "list": 1 + 12 - 5})
