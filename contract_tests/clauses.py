"""The storage contract: every promise of ObjectStorageAdapter as an executable clause.

Each ``test_*`` method of :class:`AdapterContract` is one clause, run against every target the plugin
configures. A clause works only under the ``adapter`` fixture's fresh prefix. To run the contract against
your own adapter, subclass and override the ``adapter`` fixture::

    class TestMyAdapter(AdapterContract):
        @pytest.fixture
        def adapter(self):
            yield my_adapter.child(f"contract-{uuid.uuid4().hex}")

The adapter must pickle (process clauses reopen it in spawned processes) and offer ``child(prefix)``.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import pickle
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from contract_tests import workers
from contract_tests.bodies import body_is_whole, make_body
from storage_adapter.errors import InvalidKeyError, NotFoundError, UnsupportedOperationError
from storage_adapter.linearizability import check_history
from storage_adapter.types import Capabilities, DirListing, ObjectInfo, Support
from storage_adapter.workloads import WorkloadSpec, run_processes, run_threads

SPAWN = multiprocessing.get_context("spawn")  # never fork a process whose Tokio runtime is running
PROCESS_TIMEOUT_S = 300
# A thread whose call raised never reaches the next rendezvous: the others fail with BrokenBarrierError
# after this long instead of waiting forever.
BARRIER_TIMEOUT_S = 120

INVALID_KEYS = (
    "", "/abs", "a//b", "a/", "./a", "a/./b", "a/../b", "..", ".", "a\\b", "a\x00b", "a\nb", "a\x7fb",
    "x" * 1025, "a/b#123",
)  # fmt: skip


def _require_processes(adapter: Any) -> None:
    if not adapter.capabilities.shared_across_processes:
        pytest.skip(
            f"{adapter.capabilities.backend} stores are per-process "
            "(capabilities.shared_across_processes is False)"
        )


def _run_threads(count: int, target: Callable[[int], Any]) -> list[Any]:
    """Run ``target(i)`` in ``count`` threads; return results in order, re-raising the first error."""
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = target(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def _run_processes(
    count: int, target: Callable[..., None], args_for: Callable[[int], tuple[Any, ...]]
) -> list[Any]:
    """Run ``target(*args_for(i), barrier, results)`` in ``count`` spawned processes released together;
    collect one result from each."""
    results = SPAWN.Queue()
    barrier = SPAWN.Barrier(count)
    procs = [SPAWN.Process(target=target, args=(*args_for(i), barrier, results)) for i in range(count)]
    for p in procs:
        p.start()
    try:
        return _collect(procs, results)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()


def _collect(procs: list[Any], results: Any) -> list[Any]:
    """One result per process; fails as soon as a process died without reporting (a crashed worker must
    not cost the whole timeout), or when PROCESS_TIMEOUT_S passes."""
    collected: list[Any] = []
    deadline = time.monotonic() + PROCESS_TIMEOUT_S
    while len(collected) < len(procs):
        try:
            collected.append(results.get(timeout=0.5))
        except queue.Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead and results.empty():
                raise AssertionError(f"worker processes exited with {dead} before reporting") from None
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"a worker process reported nothing within {PROCESS_TIMEOUT_S}s"
                ) from None
    return collected


@pytest.mark.contract
class AdapterContract:
    """The contract clauses. Subclass and provide an ``adapter`` fixture to run them."""

    # -- round trips -------------------------------------------------------------------------------------
    def test_round_trip_bytes(self, adapter: Any) -> None:
        """Bytes written are the bytes read, under a nested key."""
        body = bytes(range(256)) * 4
        adapter.write("dir/sub/object.bin", body)
        assert adapter.read_bytes("dir/sub/object.bin") == body

    def test_round_trip_text(self, adapter: Any) -> None:
        """str is stored as UTF-8 and read back by read_text."""
        text = "grüße, 世界, ½ — ok\n"
        adapter.write("text.txt", text)
        assert adapter.read_text("text.txt") == text
        assert adapter.read_bytes("text.txt") == text.encode("utf-8")

    def test_empty_object(self, adapter: Any) -> None:
        """An empty object exists, has size 0 and reads back empty."""
        adapter.write("empty", b"")
        assert adapter.read_bytes("empty") == b""
        assert adapter.exists("empty")
        assert [i.size for i in adapter.list() if i.key == "empty"] == [0]

    def test_large_object_5mib(self, adapter: Any) -> None:
        """A 5 MiB object round-trips intact."""
        body = make_body("large", 5 * 1024 * 1024)
        adapter.write("large.bin", body)
        assert adapter.read_bytes("large.bin") == body

    def test_keys_with_spaces_and_non_ascii(self, adapter: Any) -> None:
        """Keys with spaces, non-ASCII letters and URL-special characters round-trip and list as written."""
        keys = ["with space/file name.txt", "ünïcødé/日本語.txt", "percent%20plus+sign", "q?mark&amp=1"]
        for key in keys:
            adapter.write(key, key)
        for key in keys:
            assert adapter.read_text(key) == key
        assert [i.key for i in adapter.list()] == sorted(keys)

    def test_overwrite_replaces(self, adapter: Any) -> None:
        """write replaces an existing object entirely (a shorter body leaves no tail)."""
        adapter.write("k", b"a much longer first body")
        adapter.write("k", b"short")
        assert adapter.read_bytes("k") == b"short"

    def test_write_returns_token_of_what_reads_see(self, adapter: Any) -> None:
        """The token write returns is the token read_versioned and list report for those bytes."""
        token = adapter.write("k", b"v1")
        versioned = adapter.read_versioned("k")
        assert (versioned.data, versioned.token) == (b"v1", token)
        assert [i.token for i in adapter.list() if i.key == "k"] == [token]

    def test_tokens_never_repeat_along_a_history(self, adapter: Any) -> None:
        """Successive versions of a key carry distinct tokens (no ABA), even for same-size bodies, and for
        identical bodies unless capabilities.equal_content_equal_token admits it."""
        tokens = [adapter.write("k", make_body(f"v{i:04d}", 256)) for i in range(60)]
        if not adapter.capabilities.equal_content_equal_token:
            tokens += [adapter.write("k", b"identical body") for _ in range(20)]
        repeated = [t for t, n in Counter(tokens).items() if n > 1]
        assert not repeated, f"tokens repeated along one key's history: {repeated[:3]}"

    # -- atomic replace --------------------------------------------------------------------------------------
    def test_atomic_replace_threads(self, adapter: Any, contract_sizes: Any) -> None:
        """Readers in threads racing a writer see a whole old or new body, never a partial or empty one."""
        adapter.write("hot", make_body("v-init", 256 * 1024))
        stop = threading.Event()
        torn: list[bytes] = []
        reads = Counter[int]()

        def read(i: int) -> None:
            while not stop.is_set():
                data = adapter.read_bytes("hot")
                reads[i] += 1
                if not body_is_whole(data):
                    torn.append(data[:80])

        readers = [
            threading.Thread(target=read, args=(i,)) for i in range(max(2, contract_sizes.threads // 2))
        ]
        for r in readers:
            r.start()
        try:
            for i in range(40):
                adapter.write("hot", make_body(f"v{i}", 256 * 1024 + (i % 3) * 1000))
        finally:
            stop.set()
            for r in readers:
                r.join()
        assert sum(reads.values()) > 0
        assert not torn, f"{len(torn)} torn reads, e.g. {torn[0]!r}"

    @pytest.mark.contract_processes
    def test_atomic_replace_processes(self, adapter: Any, contract_sizes: Any) -> None:
        """Readers in other processes racing a writer see a whole old or new body, never a partial one."""
        _require_processes(adapter)
        adapter.write("hot", make_body("v-init", 256 * 1024))
        stop = SPAWN.Event()
        results = SPAWN.Queue()
        readers = [
            SPAWN.Process(target=workers.read_until_stopped, args=(adapter, "hot", stop, results))
            for _ in range(max(1, contract_sizes.processes // 2))
        ]
        for r in readers:
            r.start()
        try:
            # Keep writing until every reader has had time to start and overlap with the writes.
            for i in range(60):
                adapter.write("hot", make_body(f"v{i}", 256 * 1024 + (i % 3) * 1000))
        finally:
            stop.set()
        try:
            outcomes = _collect(readers, results)
        finally:
            for r in readers:
                r.join(timeout=30)
                if r.is_alive():
                    r.kill()
        torn = [(n, sample) for _, n, sample in outcomes if n]
        assert not torn, f"torn reads in reader processes: {torn}"

    # -- write_if_absent ---------------------------------------------------------------------------------------
    def test_write_if_absent_creates_once(self, adapter: Any) -> None:
        """The first write_if_absent creates; a second returns False and changes nothing."""
        assert adapter.write_if_absent("k", b"first") is True
        before = adapter.read_versioned("k")
        assert adapter.write_if_absent("k", b"second") is False
        after = adapter.read_versioned("k")
        assert (after.data, after.token) == (b"first", before.token)

    def test_write_if_absent_one_winner_threads(self, adapter: Any, contract_sizes: Any) -> None:
        """N threads released together race write_if_absent on each key: exactly one wins, its bytes are
        readable when it returns, and the stored body is the winner's."""
        n = contract_sizes.threads
        keys = [f"race/{r}" for r in range(10)]
        barrier = threading.Barrier(n, timeout=BARRIER_TIMEOUT_S)

        def contend(i: int) -> list[tuple[str, bool, bool]]:
            out = []
            for key in keys:
                body = make_body(f"t{i}-{key}", 512)
                barrier.wait()
                won = adapter.write_if_absent(key, body)
                out.append((key, won, adapter.read_bytes(key) == body if won else True))
            return out

        results = _run_threads(n, contend)
        for key in keys:
            winners = [i for i, out in enumerate(results) for k, won, _ in out if k == key and won]
            assert len(winners) == 1, f"{key}: {len(winners)} winners (threads {winners})"
            assert adapter.read_bytes(key) == make_body(f"t{winners[0]}-{key}", 512)
        assert all(ok for out in results for _, _, ok in out), "a winner could not read its own bytes"

    @pytest.mark.contract_processes
    def test_write_if_absent_one_winner_processes(self, adapter: Any, contract_sizes: Any) -> None:
        """N processes released together race write_if_absent on each key: exactly one winner per key."""
        _require_processes(adapter)
        n = max(2, contract_sizes.processes)
        keys = [f"race/{r}" for r in range(8)]
        results = _run_processes(n, workers.race_create, lambda i: (adapter, keys, f"p{i}"))
        for key in keys:
            winners = [(w, body) for w, out in results for k, won, _, body in out if k == key and won]
            assert len(winners) == 1, f"{key}: {len(winners)} winners {[w for w, _ in winners]}"
            assert adapter.read_bytes(key) == winners[0][1]
        assert all(ok for _, out in results for _, _, ok, _ in out), "a winner could not read its own bytes"

    # -- compare-and-swap --------------------------------------------------------------------------------------
    def test_cas_fresh_token_wins(self, adapter: Any) -> None:
        """write_if_match with the current token replaces and returns the new token."""
        token = adapter.write("k", b"v1")
        new_token = adapter.write_if_match("k", b"v2", token)
        assert new_token is not None and new_token != token
        assert adapter.read_versioned("k") == type(adapter.read_versioned("k"))(data=b"v2", token=new_token)

    def test_cas_stale_token_gets_none(self, adapter: Any) -> None:
        """write_if_match with a superseded token returns None and writes nothing."""
        stale = adapter.write("k", b"v1")
        current = adapter.write("k", b"v2")
        assert adapter.write_if_match("k", b"v3", stale) is None
        assert adapter.read_versioned("k").data == b"v2"
        assert adapter.read_versioned("k").token == current

    def test_cas_absent_gets_none(self, adapter: Any) -> None:
        """write_if_match on an absent key returns None and does not create it."""
        token = adapter.write("other", b"x")
        assert adapter.write_if_match("missing", b"v", token) is None
        assert not adapter.exists("missing")

    def test_cas_after_delete_gets_none(self, adapter: Any) -> None:
        """A token does not survive its object: after delete, CAS with it returns None."""
        token = adapter.write("k", b"v1")
        adapter.delete("k")
        assert adapter.write_if_match("k", b"v2", token) is None
        assert not adapter.exists("k")

    def test_cas_token_of_deleted_incarnation_fails(self, adapter: Any) -> None:
        """After delete and re-create with different bytes, the old incarnation's token is stale."""
        old = adapter.write("k", make_body("incarnation-1", 128))
        adapter.delete("k")
        adapter.write("k", make_body("incarnation-2", 128))
        assert adapter.write_if_match("k", b"v3", old) is None

    def test_cas_increments_threads(self, adapter: Any, contract_sizes: Any) -> None:
        """N threads x M CAS increments end at exactly N*M, and no value is replaced twice (no lost update)."""
        n, m = contract_sizes.threads, contract_sizes.increments
        adapter.write("counter", json.dumps({"n": 0}))
        barrier = threading.Barrier(n, timeout=BARRIER_TIMEOUT_S)

        def increment(i: int) -> list[int]:
            barrier.wait()
            replaced: list[int] = []
            attempt = 0
            while len(replaced) < m:
                attempt += 1
                current = adapter.read_versioned("counter")
                value = json.loads(current.data)["n"]
                body = json.dumps({"n": value + 1, "by": f"t{i}", "attempt": attempt})
                if adapter.write_if_match("counter", body, current.token) is not None:
                    replaced.append(value)
            return replaced

        replaced = [v for out in _run_threads(n, increment) for v in out]
        assert json.loads(adapter.read_bytes("counter"))["n"] == n * m
        assert sorted(replaced) == list(range(n * m)), "some value was replaced twice: a lost update"

    @pytest.mark.contract_processes
    def test_cas_increments_processes(self, adapter: Any, contract_sizes: Any) -> None:
        """N processes x M CAS increments end at exactly N*M with no value replaced twice."""
        _require_processes(adapter)
        n, m = max(2, contract_sizes.processes), contract_sizes.increments
        adapter.write("counter", json.dumps({"n": 0}))
        results = _run_processes(n, workers.cas_increment, lambda i: (adapter, "counter", f"p{i}", m))
        replaced = [v for _, out in results for v in out]
        assert json.loads(adapter.read_bytes("counter"))["n"] == n * m
        assert sorted(replaced) == list(range(n * m)), "some value was replaced twice: a lost update"

    def test_write_or_delete_racing_a_cas_is_never_lost(self, adapter: Any) -> None:
        """A write or delete issued after a CAS read its token always survives that CAS.

        Whatever the timing, the CAS either takes effect first (and the write/delete then lands on top)
        or finds its token superseded and fails; either way the last word is the write/delete. A CAS
        built as compare-then-replace without serialization overwrites it (a lost update).
        """
        lost = []
        for round_ in range(12):
            key = f"round-{round_}"
            token = adapter.write(key, make_body(f"{key}-base", 64))
            cas = threading.Thread(
                target=adapter.write_if_match, args=(key, make_body(f"{key}-cas", 64), token)
            )
            cas.start()
            if round_ % 2:
                adapter.delete(key)
                expected = None
            else:
                expected = make_body(f"{key}-plain", 64)
                adapter.write(key, expected)
            cas.join()
            if adapter.read_if_exists(key) != expected:
                lost.append(f"{key}: the {'delete' if expected is None else 'write'} was lost")
        assert not lost, lost

    # -- linearizability ---------------------------------------------------------------------------------------
    def test_mixed_history_is_linearizable_threads(self, adapter: Any, contract_sizes: Any) -> None:
        """A recorded history of mixed reads, writes, creates, CASes and deletes on a few hot keys, from
        N threads, is linearizable (storage_adapter.linearizability, per-key register model)."""
        history = run_threads(adapter, WorkloadSpec(), workers=contract_sizes.threads)
        result = check_history(history)
        assert result.ok, result.report()

    @pytest.mark.contract_processes
    def test_mixed_history_is_linearizable_processes(self, adapter: Any, contract_sizes: Any) -> None:
        """The same mixed workload from N processes: the merged history is linearizable."""
        _require_processes(adapter)
        history = run_processes(adapter, WorkloadSpec(), workers=max(2, contract_sizes.processes))
        result = check_history(history)
        assert result.ok, result.report()

    # -- delete, exists ----------------------------------------------------------------------------------------
    def test_delete_is_idempotent(self, adapter: Any) -> None:
        """delete removes the object; deleting again, or deleting a never-written key, is not an error."""
        adapter.write("k", b"v")
        adapter.delete("k")
        adapter.delete("k")
        adapter.delete("never/written")
        assert not adapter.exists("k")
        assert adapter.read_if_exists("k") is None

    def test_exists(self, adapter: Any) -> None:
        """exists is True for objects only: not for absent keys, nor for prefixes of other keys."""
        adapter.write("a/b", b"v")
        assert adapter.exists("a/b")
        assert not adapter.exists("a/c")
        assert not adapter.exists("a")

    # -- listing -------------------------------------------------------------------------------------------------
    def test_list_is_recursive_and_sorted(self, adapter: Any) -> None:
        """list returns every object under the prefix, recursively, sorted by key, with size and token."""
        keys = ["b", "a/z", "a/b/c", "a/a", "c/d/e/f"]
        tokens = {k: adapter.write(k, k * 3) for k in keys}
        infos = adapter.list()
        assert [i.key for i in infos] == sorted(keys)
        assert all(isinstance(i, ObjectInfo) for i in infos)
        assert {i.key: (i.size, i.token) for i in infos} == {k: (len(k) * 3, tokens[k]) for k in keys}
        assert [i.key for i in adapter.list("a")] == ["a/a", "a/b/c", "a/z"]
        assert [i.key for i in adapter.list("a/")] == ["a/a", "a/b/c", "a/z"]

    def test_list_has_no_sibling_prefix_bleed(self, adapter: Any) -> None:
        """A prefix names whole segments: list('a/b') never returns 'a/bc/...' or 'a/b.txt'."""
        for key in ["a/b/1", "a/b/2", "a/bc/3", "a/b.txt", "a/b-x/4"]:
            adapter.write(key, b"x")
        assert [i.key for i in adapter.list("a/b")] == ["a/b/1", "a/b/2"]
        assert [o.key for o in adapter.list_dir("a/b").objects] == ["a/b/1", "a/b/2"]

    def test_list_empty_and_missing_prefix(self, adapter: Any) -> None:
        """Listing an empty root or a prefix with no objects returns nothing (not an error)."""
        assert adapter.list() == []
        assert adapter.list("nothing/here") == []
        assert adapter.list_dir("nothing") == DirListing(objects=(), prefixes=())

    def test_list_dir_direct_children(self, adapter: Any) -> None:
        """list_dir returns the objects directly under a prefix and its child prefixes, sorted."""
        for key in ["d/x", "d/a", "d/sub1/y", "d/sub2/deep/z", "top"]:
            adapter.write(key, b"x")
        listing = adapter.list_dir("d")
        assert [o.key for o in listing.objects] == ["d/a", "d/x"]
        assert listing.prefixes == ("d/sub1", "d/sub2")
        root = adapter.list_dir()
        assert [o.key for o in root.objects] == ["top"] and root.prefixes == ("d",)

    def test_list_dir_forgets_deleted_prefixes(self, adapter: Any) -> None:
        """Once the last object under a prefix is deleted, the prefix no longer lists (as on S3)."""
        adapter.write("d/gone/x", b"x")
        adapter.write("d/kept", b"x")
        adapter.delete("d/gone/x")
        assert adapter.list_dir("d").prefixes == ()
        assert adapter.list_dir().prefixes == ("d",)

    def test_delete_prefix(self, adapter: Any) -> None:
        """delete_prefix removes exactly the objects under the prefix, returns their count, spares siblings."""
        for key in ["p/1", "p/2/3", "p/2/4", "pq/5", "p.txt", "other"]:
            adapter.write(key, b"x")
        assert adapter.delete_prefix("p") == 3
        assert [i.key for i in adapter.list()] == ["other", "p.txt", "pq/5"]
        assert adapter.delete_prefix("p") == 0

    # -- rename --------------------------------------------------------------------------------------------------
    def test_rename(self, adapter: Any) -> None:
        """rename moves the bytes, replaces an existing destination and removes the source."""
        adapter.write("src", b"moving")
        adapter.write("dst/existing", b"old")
        adapter.rename("src", "dst/existing")
        assert adapter.read_bytes("dst/existing") == b"moving"
        assert not adapter.exists("src")
        adapter.rename("dst/existing", "elsewhere/new")
        assert [i.key for i in adapter.list()] == ["elsewhere/new"]

    def test_rename_missing_source_is_not_found(self, adapter: Any) -> None:
        """Renaming an absent source raises NotFoundError and creates nothing."""
        with pytest.raises(NotFoundError):
            adapter.rename("missing", "dst")
        assert adapter.list() == []

    # -- errors and keys -------------------------------------------------------------------------------------------
    def test_not_found_is_typed(self, adapter: Any) -> None:
        """Reads of an absent key raise NotFoundError (also a FileNotFoundError) naming key and backend;
        read_if_exists returns None."""
        backend = adapter.capabilities.backend
        for read in (adapter.read_bytes, adapter.read_text, adapter.read_versioned):
            with pytest.raises(NotFoundError) as info:
                read("no/such key")
            assert isinstance(info.value, FileNotFoundError)
            assert "no/such key" in str(info.value) and backend in str(info.value)
        assert adapter.read_if_exists("no/such key") is None

    @pytest.mark.parametrize("bad", INVALID_KEYS, ids=[repr(k)[:20] for k in INVALID_KEYS])
    def test_invalid_keys_rejected_everywhere(self, adapter: Any, bad: str) -> None:
        """Every method refuses an unsafe key with InvalidKeyError (a ValueError) before any I/O."""
        calls: dict[str, Callable[[], Any]] = {
            "read_bytes": lambda: adapter.read_bytes(bad),
            "read_text": lambda: adapter.read_text(bad),
            "read_if_exists": lambda: adapter.read_if_exists(bad),
            "read_versioned": lambda: adapter.read_versioned(bad),
            "exists": lambda: adapter.exists(bad),
            "write": lambda: adapter.write(bad, b"x"),
            "write_if_absent": lambda: adapter.write_if_absent(bad, b"x"),
            "write_if_match": lambda: adapter.write_if_match(bad, b"x", '"token"'),
            "delete": lambda: adapter.delete(bad),
            "rename(src)": lambda: adapter.rename(bad, "ok"),
            "rename(dst)": lambda: adapter.rename("ok", bad),
        }
        if bad not in ("", "a/"):  # "" and a trailing "/" are valid prefixes (the root, a directory)
            calls["list"] = lambda: adapter.list(bad)
            calls["list_dir"] = lambda: adapter.list_dir(bad)
            calls["delete_prefix"] = lambda: adapter.delete_prefix(bad)
        accepted = []
        for name, call in calls.items():
            try:
                call()
                accepted.append(name)
            except InvalidKeyError as exc:
                assert isinstance(exc, ValueError)
        assert not accepted, f"{bad!r} accepted by {accepted}"
        assert adapter.list() == [], "an invalid key created something"

    def test_keys_cannot_escape_the_root(self, adapter: Any) -> None:
        """No key, from an adapter rooted below another, reaches the parent's objects."""
        adapter.write("sentinel", b"keep me")
        inner = adapter.child("inner")
        for attack in ("../sentinel", "inner/../../sentinel", "/sentinel", "..\\sentinel"):
            for call in (inner.delete, lambda k: inner.write(k, b"overwrite"), inner.read_bytes):
                with pytest.raises(InvalidKeyError):
                    call(attack)
        assert adapter.read_bytes("sentinel") == b"keep me"
        assert [i.key for i in adapter.list()] == ["sentinel"]

    # -- identity -------------------------------------------------------------------------------------------------
    def test_pickle_round_trip(self, adapter: Any) -> None:
        """An adapter pickles, compares equal to its original, and the copy sees the same objects."""
        adapter.write("k", b"shared")
        clone = pickle.loads(pickle.dumps(adapter))
        assert clone == adapter and hash(clone) == hash(adapter)
        assert clone.read_bytes("k") == b"shared"

    def test_capabilities_are_declared_and_honest(self, adapter: Any) -> None:
        """capabilities is a frozen Capabilities; unsupported operations raise rather than degrade;
        distinct-token promises hold."""
        caps = adapter.capabilities
        assert isinstance(caps, Capabilities)
        with pytest.raises(dataclasses.FrozenInstanceError):
            caps.atomic_rename = not caps.atomic_rename  # type: ignore[misc]
        token = adapter.write("k", b"same")
        if caps.write_if_absent is Support.UNSUPPORTED:
            with pytest.raises(UnsupportedOperationError):
                adapter.write_if_absent("k2", b"x")
        if caps.write_if_match is Support.UNSUPPORTED:
            with pytest.raises(UnsupportedOperationError):
                adapter.write_if_match("k", b"x", token)
        if not caps.equal_content_equal_token:
            assert adapter.write("k", b"same") != token, "equal content gave an equal token"
