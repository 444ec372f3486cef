"""Clauses on work over many keys: the streamed listing (``list_pages``, ``iter_list``) and ``delete_many``.

Mixed into :class:`contract_tests.clauses.AdapterContract`, whose ``adapter`` fixture they use. What they
pin down, on every backend:

* ``iter_list`` and the concatenated ``list_pages`` are exactly ``list()`` (same objects, tokens, order)
  under a prefix of more than two pages (a page is at most 1000 objects on the built-in backends), and
  taking the first object costs at most half the I/O steps of the whole listing (counted at the
  drivers' fault points, storage_adapter.faults): the listing is fetched as it is taken. That listings
  never show a write in flight is checked with the other listings (housekeeping_clauses).
* a listing resumes: ``iter_list(prefix, start_after=k, limit=n)`` taken in steps of ``n`` from the last
  key of each step is the whole listing, in its order, each object once; after any listed key it is
  exactly the rest; ``limit=0`` is nothing. A bad ``limit`` (InvalidArgumentError) or ``start_after``
  (InvalidKeyError) is refused before any I/O.
* ``delete_many`` deletes exactly the keys it is given (missing ones are fine, duplicates count once),
  under a child adapter too, and nothing else; one invalid key refuses the whole call before any I/O;
  1,500 keys (more than S3's 1,000 per DeleteObjects) are all deleted. That a failure names the keys it
  left is checked with the other operations' faults (failure_clauses).
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

import pytest

from storage_adapter.batch import LIST_PAGE
from storage_adapter.errors import InvalidArgumentError, InvalidKeyError
from storage_adapter.faults import FaultKind, FaultPlan, injected
from storage_adapter.protocol import StorageAdapter
from storage_adapter.types import ObjectInfo

# Two pages of the built-in backends' listings (the second half full) and two S3 DeleteObjects batches:
# enough to cross every page and batch boundary, few enough to keep the check on a slow server in bounds.
MANY = LIST_PAGE + LIST_PAGE // 2
# Writers filling a prefix with MANY objects: a round trip each, so several in flight.
FILL_WORKERS = 16
# Steps the recorder lets pass: far more than any listing of MANY objects takes.
UNLIMITED_STEPS = 10**9
# Listing arguments refused at the call: limits that are not ints >= 0, resume points that are no keys.
BAD_LISTING_ARGUMENTS = [
    {"limit": -1},
    {"limit": 1.5},
    {"limit": True},
    {"limit": "3"},
    {"start_after": "../x"},
    {"start_after": "a//b"},
    {"start_after": 7},
]


def _fill(adapter: StorageAdapter, keys: list[str]) -> None:
    with ThreadPoolExecutor(FILL_WORKERS) as pool:
        list(pool.map(lambda key: adapter.write(key, key.encode()), keys))


def _by_key(infos: Iterable[ObjectInfo]) -> list[ObjectInfo]:
    """``infos`` in key order (a stream comes in the server's order: see the protocol)."""
    return sorted(infos, key=lambda i: i.key)


def _steps(call: object) -> int:
    """How many I/O steps (fault points) ``call()`` passes."""
    recorder = FaultPlan(FaultKind.BROKEN, skip=UNLIMITED_STEPS)
    with injected(recorder):
        call()  # type: ignore[operator]
    return len(recorder.passed)


class BulkClauses:
    """Streamed listings and batch deletes."""

    def test_iter_list_yields_what_list_returns_page_by_page(self, adapter: StorageAdapter) -> None:
        """Under a prefix of MANY objects (with neighbours that must not list: ``many0``, ``man/y``),
        iter_list, the concatenated list_pages and list() agree object for object (key, size, token,
        time), each object once; every page is non-empty. The stream's order is the server's (key order
        on memory, local and AWS S3; SeaweedFS lists segment by segment, ``a/x`` before ``a.txt``).

        And it is lazy: taking the first object passes fewer I/O steps than taking them all, and no more
        than the first page's share of them (a driver may pass one step per page or per entry). One
        clause, one filled prefix: a server may take long to list objects just written (Ceph RGW
        reconciles its bucket index on the first listing)."""
        keys = [f"many/{i:05d}" for i in range(MANY)] + ["many/sub/x", "many.txt", "many0", "man/y"]
        _fill(adapter, keys)
        listed = adapter.list("many")
        assert [i.key for i in listed] == sorted(k for k in keys if k.startswith("many/"))
        pages = list(adapter.list_pages("many"))
        assert all(pages), "list_pages yielded an empty page"
        assert _by_key(info for page in pages for info in page) == listed
        assert _by_key(adapter.iter_list("many")) == listed
        assert _by_key(adapter.iter_list()) == adapter.list()
        whole = _steps(lambda: list(adapter.iter_list("many")))
        if whole == 0:
            return  # this adapter's drivers mark no fault points (storage_adapter.faults): laziness unseen
        first = _steps(lambda: next(adapter.iter_list("many")))
        first_page_share = whole * LIST_PAGE // len(listed) + 4  # a page's entries, plus the listing's own
        assert first < whole and first <= first_page_share, (
            f"the first object took {first} I/O steps, the whole listing {whole}"
        )

    def test_iter_list_resumes_after_a_key_in_steps_of_a_limit(self, adapter: StorageAdapter) -> None:
        """Under a prefix whose keys order differently by key and by segment (``r/a.txt``, ``r/a/x``,
        ``r/a0``) and with neighbours that must not list (``r.txt``, ``r0``): taking the listing in steps
        of 4 (``start_after`` the last key of the previous step) gives the whole listing in order, each
        object once and no step longer than its limit; after any listed key, exactly what follows it;
        ``limit=0`` gives nothing, a limit above the size everything."""
        keys = [f"r/{i:02d}" for i in range(13)] + ["r/a.txt", "r/a/x", "r/a/y/z", "r/a0", "r.txt", "r0"]
        _fill(adapter, keys)
        order = [info.key for info in adapter.iter_list("r")]
        assert sorted(order) == sorted(k for k in keys if k.startswith("r/"))
        taken: list[str] = []
        after: str | None = None
        for _ in range(len(order)):  # a listing that never advances must fail, not loop forever
            step = [info.key for info in adapter.iter_list("r", start_after=after, limit=4)]
            assert len(step) <= 4, step
            if not step:
                break
            taken += step
            after = step[-1]
        assert taken == order
        for i, key in enumerate(order):
            assert [info.key for info in adapter.iter_list("r", start_after=key)] == order[i + 1 :], key
        pages = adapter.list_pages("r", start_after=order[2])
        assert [info.key for page in pages for info in page] == order[3:]
        assert list(adapter.iter_list("r", limit=0)) == []
        assert [info.key for info in adapter.iter_list("r", limit=len(order) + 5)] == order

    @pytest.mark.parametrize("arguments", BAD_LISTING_ARGUMENTS)
    def test_a_bad_listing_argument_is_refused_before_any_io(
        self, adapter: StorageAdapter, arguments: dict[str, object]
    ) -> None:
        """A limit that is not an int >= 0 is InvalidArgumentError, a start_after that is not a valid key
        InvalidKeyError (both ValueErrors), naming the backend, raised at the call before any I/O step."""
        adapter.write("r/k", b"v")
        recorder = FaultPlan(FaultKind.BROKEN, skip=UNLIMITED_STEPS)
        expected = InvalidArgumentError if "limit" in arguments else InvalidKeyError
        with injected(recorder), pytest.raises(expected) as caught:
            adapter.iter_list("r", **arguments)  # type: ignore[arg-type]
        assert isinstance(caught.value, ValueError) and caught.value.backend == adapter.backend
        if "start_after" in arguments:
            with injected(recorder), pytest.raises(InvalidKeyError):
                adapter.list_pages("r", **arguments)  # type: ignore[arg-type]
        assert recorder.passed == [], f"I/O before the refusal: {recorder.passed}"

    def test_delete_many_deletes_exactly_those_keys(self, adapter: StorageAdapter) -> None:
        """Through a child adapter: the given keys go (a missing one and a duplicate are fine, the count is
        of distinct keys), every other object stays, inside and outside the child."""
        _fill(adapter, ["c/a", "c/b", "c/sub/x", "c/sub/y", "ca", "other/a", "a"])
        child = adapter.child("c")
        assert child.delete_many(["a", "sub/x", "missing", "a", "sub/none/deeper"]) == 4
        assert [i.key for i in adapter.list()] == ["a", "c/b", "c/sub/y", "ca", "other/a"]
        assert child.delete_many([]) == 0

    @pytest.mark.parametrize("bad", ["", "../x", "a//b", "a/b#123", "\udc80x"])
    def test_delete_many_refuses_an_invalid_key_before_any_io(
        self, adapter: StorageAdapter, bad: str
    ) -> None:
        """One invalid key among valid ones: InvalidKeyError naming it, raised before any I/O step, and
        nothing deleted."""
        adapter.write("k1", b"1")
        adapter.write("k2", b"2")
        recorder = FaultPlan(FaultKind.BROKEN, skip=UNLIMITED_STEPS)
        with injected(recorder), pytest.raises(InvalidKeyError) as caught:
            adapter.delete_many(["k1", bad, "k2"])
        assert caught.value.key == bad, caught.value
        assert recorder.passed == [], f"I/O before the refusal: {recorder.passed}"
        assert [i.key for i in adapter.list()] == ["k1", "k2"]

    def test_delete_many_deletes_a_large_batch(self, adapter: StorageAdapter) -> None:
        """MANY keys (more than one S3 DeleteObjects request holds) are all deleted; a bystander stays."""
        keys = [f"big/{i:05d}" for i in range(MANY)]
        _fill(adapter, [*keys, "bystander"])
        assert adapter.delete_many(keys) == MANY
        assert [i.key for i in adapter.list()] == ["bystander"]
