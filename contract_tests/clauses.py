"""The storage contract: every promise of :class:`storage_adapter.StorageAdapter` as an executable clause.

Each ``test_*`` method of :class:`AdapterContract` is one clause, run against every target the plugin
configures. A clause works only under the ``adapter`` fixture's fresh prefix. To run the contract against
your own adapter, subclass and override the ``adapter`` fixture::

    class TestMyAdapter(AdapterContract):
        @pytest.fixture
        def adapter(self):
            yield my_adapter.child(f"contract-{uuid.uuid4().hex}")

The adapter must pickle (process clauses reopen it in spawned processes) and offer ``child(prefix)``.
Override ``reopen`` too (a callable opening an adapter at a URL as yours was opened) to have an adapter
opened afresh at a child's URL compared with the child itself (test_identity_follows_the_address).
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import traceback
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any

import pytest

from contract_tests import race_tasks
from contract_tests.bodies import describe, make_body
from contract_tests.bulk_clauses import BulkClauses
from contract_tests.concurrency_clauses import ConcurrencyClauses, require_processes
from contract_tests.failure_clauses import FailureClauses
from contract_tests.foreign_clauses import ForeignObjectClauses
from contract_tests.history import History, Outcome
from contract_tests.housekeeping_clauses import HousekeepingClauses
from contract_tests.linearizability import KeyVerdict, check_history
from contract_tests.plugin import ContractSizes
from contract_tests.races import Sync, race_in_processes, race_in_threads
from contract_tests.stream_clauses import StreamClauses
from contract_tests.verdicts import Inconclusive, Violation
from contract_tests.wire_clauses import WireClauses
from contract_tests.workloads import WorkloadSpec, run_processes, run_threads
from storage_adapter.errors import InvalidKeyError, NotFoundError, StorageError, UnsupportedOperationError
from storage_adapter.keys import MAX_KEY_BYTES, MAX_SEGMENT_BYTES
from storage_adapter.protocol import StorageAdapter
from storage_adapter.redaction import redact_url
from storage_adapter.types import Capabilities, DirListing, ObjectInfo, Support, Versioned

INVALID_KEYS = (
    "",
    "/abs",
    "a//b",
    "a/",
    "./a",
    "a/./b",
    "a/../b",
    "..",
    ".",
    "a\\b",
    "a\x00b",
    "a\nb",
    "a\x7fb",
    "x" * 1025,
    "a/b#123",
    "a#1/b",
    "\udc80x",
    "a/\ud800",
    "ok/b\udc80c",  # lone surrogates: not UTF-8, unlistable on local
    "é" * 513,  # 513 characters, 1,026 bytes
    "a/" + "s" * (MAX_SEGMENT_BYTES + 1),
    "日" * (MAX_SEGMENT_BYTES // 3 + 1),  # segments over the limit
    "/".join(["k" * MAX_SEGMENT_BYTES] * 5 + ["k" * 20]),  # ASCII, valid segments, 1,025 bytes in all
    "/".join(["é" * (MAX_SEGMENT_BYTES // 2)] * 6),  # valid segments, 605 characters of 1,205 bytes
    "d#\u0661\u0662/k",
    "x#\uff11",  # '#' then Unicode digits (Arabic-Indic, fullwidth) are reserved too
)
# Prefixes no listing or deletion may accept ("" and "/" are the root, one trailing "/" is dropped).
INVALID_PREFIXES = ("a//", "//", "/a", "a//b/", "a/./", "../", "a\\b/")
# Names that look odd but are valid everywhere: each must round-trip and list exactly as written.
ODD_NAMES = (
    "with space",
    " leading",
    "trailing ",
    "ünïcødé/日本語",
    "emoji-🙂",
    "#hash",
    "a#",
    "a#b1",
    "#12x",
    ".hidden",
    "..double",
    "...",
    "dir.d/.x",
    "per%20cent",
    "plus+sign",
    "q?m&a=1",
    "nbsp\u00a0inside",
    "combining-e\u0301",
    "c1-\u0085-\u009f",
)


Runner = Callable[[int, Callable[[int, Sync], Any]], list[Any]]


def _assert_replace_is_atomic(adapter: StorageAdapter, run: Runner, racers: int, writes: int) -> None:
    adapter.write("hot", make_body("v-init", race_tasks.REPLACE_BODY_SIZE))
    tallies = run(racers, partial(race_tasks.replace_while_reading, adapter, "hot", writes))
    readers = tallies[1:]
    assert sum(t.reads for t in readers) > 0
    torn = [(i, t) for i, t in enumerate(readers, 1) if t.torn]
    if torn:
        raise Violation(
            f"torn reads by {len(torn)} of {len(readers)} readers",
            "\n".join(
                f"reader {i}: {t.torn} of {t.reads} reads torn, the first: {t.sample}" for i, t in torn
            ),
        )


def _assert_one_winner(adapter: StorageAdapter, run: Runner, racers: int, rounds: int) -> None:
    keys = [f"race/{r}" for r in range(rounds)]
    attempts = run(racers, partial(race_tasks.create_race, adapter, keys))
    for key in keys:
        winners = [i for i, mine in enumerate(attempts) for a in mine if a.key == key and a.won]
        assert len(winners) == 1, f"{key}: {len(winners)} winners (racers {winners})"
        assert adapter.read_bytes(key) == race_tasks.create_body(key, winners[0]), (
            f"{key}: not the winner's body"
        )
    assert all(a.readback_ok for mine in attempts for a in mine), (
        "a winner could not read its own bytes under the token write_if_absent returned"
    )


def _assert_increments_exact(adapter: StorageAdapter, run: Runner, racers: int, increments: int) -> None:
    adapter.write("counter", json.dumps({"n": 0}))
    probe = race_tasks.probe_cas(adapter, "counter")
    if not probe.successes:
        raise Violation("CAS with the current token never succeeds, even uncontended", probe.evidence())
    adapter.write("counter", json.dumps({"n": 0}))
    tallies = run(racers, partial(race_tasks.cas_increments, adapter, "counter", increments))
    replaced = sorted(v for tally in tallies for v in tally.replaced)
    final, expected = race_tasks.counter_value(adapter, "counter"), racers * increments
    racer_lines = [tally.line(i) for i, tally in enumerate(tallies)]
    duplicates = sorted({v for v in replaced if replaced.count(v) > 1})
    evidence = "\n".join(
        [
            f"expected {expected} ({racers} racers x {increments}), actual {final}; "
            f"{len(replaced)} CAS calls reported success",
            *racer_lines,
        ]
    )
    if duplicates:
        raise Violation(f"lost updates: values replaced more than once: {duplicates[:10]}", evidence)
    if final != len(replaced) or replaced != list(range(len(replaced))):
        raise Violation(f"counter ended at {final} after {len(replaced)} successful CAS calls", evidence)
    if any(tally.cut_off for tally in tallies):
        raise Inconclusive(
            f"the race was cut off by its attempt/time budget after {final} of {expected} increments; "
            "no lost update seen",
            evidence,
        )


def _assert_linearizable(history: History, budget_s: float) -> None:
    """Pass only on a linearizable history in which every call had a declared outcome. An undeclared error
    is a violation (the checker's verdict); a transient one (BackendUnavailableError) leaves its call's
    effect unknown, which the checker allows either way, but the race then did not test what it meant to
    (a bug that answers a conflict with an outage looks just like one), so the clause is Inconclusive."""
    result = check_history(history, time_budget_s=budget_s)
    if result.verdict is KeyVerdict.VIOLATION:
        raise Violation("the history is not linearizable", result.report())
    if result.verdict is KeyVerdict.UNKNOWN:
        raise Inconclusive(
            f"the linearizability search ran out of its {budget_s:g} s budget; no violation found",
            result.report(),
        )
    transient = [o for o in history if o.outcome is Outcome.UNKNOWN]
    if transient:
        raise Inconclusive(
            f"{len(transient)} of {len(history)} operations failed transiently (outcome unknown); the rest "
            "is linearizable",
            "\n".join(o.describe(history.operations[0].invoke_ns) for o in transient[:10]),
        )


@pytest.mark.storage_contract
class AdapterContract(
    BulkClauses,
    ConcurrencyClauses,
    FailureClauses,
    ForeignObjectClauses,
    HousekeepingClauses,
    StreamClauses,
    WireClauses,
):
    """The contract clauses. Subclass and override the ``adapter`` fixture to run them on your adapter."""

    @pytest.fixture
    def adapter(self, storage_contract_adapter: StorageAdapter) -> StorageAdapter:
        """The adapter under test: by default the plugin's, under a fresh prefix of each target."""
        return storage_contract_adapter

    @pytest.fixture
    def sizes(self, storage_contract_sizes: ContractSizes) -> ContractSizes:
        """Race sizes (threads, processes, increments) from the plugin's options."""
        return storage_contract_sizes

    @pytest.fixture
    def reopen(self, request: pytest.FixtureRequest) -> Callable[[str], StorageAdapter] | None:
        """Opens an adapter at a URL the way ``adapter`` was opened (same factory, same options), or None
        where the suite does not know how. The plugin's own ``adapter`` has one; a subclass that
        overrides ``adapter`` overrides this too, to have an adapter opened afresh compared with one
        built by ``child()`` (test_identity_follows_the_address)."""
        if "storage_contract_adapter" not in request.fixturenames:
            return None
        opener: Callable[[str], StorageAdapter] = request.getfixturevalue("storage_contract_opener")
        return opener

    # -- round trips -------------------------------------------------------------------------------------
    def test_round_trip_bytes(self, adapter: StorageAdapter) -> None:
        """Bytes written are the bytes read, under a nested key."""
        body = bytes(range(256)) * 4
        adapter.write("dir/sub/object.bin", body)
        assert adapter.read_bytes("dir/sub/object.bin") == body

    def test_round_trip_text(self, adapter: StorageAdapter) -> None:
        """str is stored as UTF-8 and read back by read_text."""
        text = "grüße, 世界, ½ — ok\n"
        adapter.write("text.txt", text)
        assert adapter.read_text("text.txt") == text
        assert adapter.read_bytes("text.txt") == text.encode("utf-8")

    def test_empty_object(self, adapter: StorageAdapter) -> None:
        """An empty object exists, has size 0 and reads back empty."""
        adapter.write("empty", b"")
        assert adapter.read_bytes("empty") == b""
        assert adapter.exists("empty")
        assert [i.size for i in adapter.list() if i.key == "empty"] == [0]

    def test_large_object_5mib(self, adapter: StorageAdapter) -> None:
        """A 5 MiB object round-trips intact."""
        body = make_body("large", 5 * 1024 * 1024)
        adapter.write("large.bin", body)
        assert adapter.read_bytes("large.bin") == body

    def test_keys_with_spaces_and_non_ascii(self, adapter: StorageAdapter) -> None:
        """Keys with spaces, non-ASCII letters and URL-special characters round-trip and list as written."""
        keys = ["with space/file name.txt", "ünïcødé/日本語.txt", "percent%20plus+sign", "q?mark&amp=1"]
        for key in keys:
            adapter.write(key, key)
        for key in keys:
            assert adapter.read_text(key) == key
        assert [i.key for i in adapter.list()] == sorted(keys)

    def test_overwrite_replaces(self, adapter: StorageAdapter) -> None:
        """write replaces an existing object entirely (a shorter body leaves no tail)."""
        adapter.write("k", b"a much longer first body")
        adapter.write("k", b"short")
        assert adapter.read_bytes("k") == b"short"

    def test_write_returns_token_of_what_reads_see(self, adapter: StorageAdapter) -> None:
        """The token write returns is the token read_versioned and list report for those bytes."""
        token = adapter.write("k", b"v1")
        versioned = adapter.read_versioned("k")
        assert (versioned.data, versioned.token) == (b"v1", token)
        assert [i.token for i in adapter.list() if i.key == "k"] == [token]

    def test_tokens_never_repeat_along_a_history(self, adapter: StorageAdapter) -> None:
        """Successive versions of a key carry distinct tokens (no ABA), even for same-size bodies, and for
        identical bodies unless capabilities.equal_content_equal_token admits it."""
        tokens = [adapter.write("k", make_body(f"v{i:04d}", 256)) for i in range(60)]
        if not adapter.capabilities.equal_content_equal_token:
            tokens += [adapter.write("k", b"identical body") for _ in range(20)]
        repeated = [t for t, n in Counter(tokens).items() if n > 1]
        assert not repeated, f"tokens repeated along one key's history: {repeated[:3]}"

    # -- atomic replace --------------------------------------------------------------------------------------
    def test_atomic_replace_threads(self, adapter: StorageAdapter, sizes: ContractSizes) -> None:
        """Readers in threads racing a writer see a whole old or new body, never a partial or empty one."""
        _assert_replace_is_atomic(adapter, race_in_threads, max(3, sizes.threads // 2 + 1), writes=40)

    @pytest.mark.storage_contract_processes
    def test_atomic_replace_processes(self, adapter: StorageAdapter, sizes: ContractSizes) -> None:
        """Readers in other processes racing a writer see a whole old or new body, never a partial one."""
        require_processes(adapter)
        _assert_replace_is_atomic(adapter, race_in_processes, max(2, sizes.processes // 2 + 1), writes=60)

    # -- write_if_absent ---------------------------------------------------------------------------------------
    def test_write_if_absent_creates_once(self, adapter: StorageAdapter) -> None:
        """The first write_if_absent creates; a second returns None (not False) and changes nothing."""
        assert adapter.write_if_absent("k", b"first") is not None
        before = adapter.read_versioned("k")
        assert adapter.write_if_absent("k", b"second") is None
        after = adapter.read_versioned("k")
        assert (after.data, after.token) == (b"first", before.token)

    def test_write_if_absent_returns_the_new_token(self, adapter: StorageAdapter) -> None:
        """A winning write_if_absent returns the token of the bytes it wrote: a non-empty str equal to
        what read_versioned and list report, and a write_if_match with it succeeds at once."""
        token = adapter.write_if_absent("d/k", b"first")
        if not isinstance(token, str) or not token:
            raise Violation(
                "a winning write_if_absent returned no token",
                f"write_if_absent('d/k', b'first') on an absent key -> {token!r}; expected a non-empty str",
            )
        versioned = adapter.read_versioned("d/k")
        listed = {info.key: info.token for info in adapter.list("d")}
        if (versioned.data, versioned.token, listed.get("d/k")) != (b"first", token, token):
            raise Violation(
                "write_if_absent returned a token that is not the new object's",
                f"write_if_absent -> {token!r}; then read_versioned -> ({describe(versioned.data)}, "
                f"{versioned.token!r}), list('d') token -> {listed.get('d/k')!r}",
            )
        if adapter.write_if_match("d/k", b"second", token) is None:
            raise Violation(
                "write_if_match with the token write_if_absent returned was rejected",
                f"write_if_absent('d/k', b'first') -> {token!r}; write_if_match('d/k', b'second', "
                f"{token!r}) -> None with nothing in between",
            )
        assert adapter.read_bytes("d/k") == b"second"

    def test_write_if_absent_one_winner_threads(self, adapter: StorageAdapter, sizes: ContractSizes) -> None:
        """N threads released together race write_if_absent on each key: exactly one wins, its bytes are
        readable when it returns, and the stored body is the winner's."""
        _assert_one_winner(adapter, race_in_threads, sizes.threads, rounds=10)

    @pytest.mark.storage_contract_processes
    def test_write_if_absent_one_winner_processes(
        self, adapter: StorageAdapter, sizes: ContractSizes
    ) -> None:
        """N processes released together race write_if_absent on each key: exactly one winner per key."""
        require_processes(adapter)
        _assert_one_winner(adapter, race_in_processes, max(2, sizes.processes), rounds=8)

    # -- compare-and-swap --------------------------------------------------------------------------------------
    def test_cas_fresh_token_wins(self, adapter: StorageAdapter) -> None:
        """write_if_match with the current token replaces and returns the new token."""
        token = adapter.write("k", b"v1")
        new_token = adapter.write_if_match("k", b"v2", token)
        if new_token is None:
            raise Violation(
                "write_if_match with the current token was rejected (returned None)",
                f"write('k', b'v1') returned token {token!r}; write_if_match('k', b'v2', {token!r}) -> None; "
                f"expected a new token (on S3: the server answered 412 to If-Match: {token})",
            )
        assert new_token != token, f"the new version kept the old token {token!r}"
        assert adapter.read_versioned("k") == type(adapter.read_versioned("k"))(data=b"v2", token=new_token)

    def test_cas_stale_token_gets_none(self, adapter: StorageAdapter) -> None:
        """write_if_match with a superseded token returns None and writes nothing."""
        stale = adapter.write("k", b"v1")
        current = adapter.write("k", b"v2")
        assert adapter.write_if_match("k", b"v3", stale) is None
        assert adapter.read_versioned("k").data == b"v2"
        assert adapter.read_versioned("k").token == current

    def test_cas_absent_gets_none(self, adapter: StorageAdapter) -> None:
        """write_if_match on an absent key returns None and does not create it."""
        token = adapter.write("other", b"x")
        assert adapter.write_if_match("missing", b"v", token) is None
        assert not adapter.exists("missing")

    def test_cas_after_delete_gets_none(self, adapter: StorageAdapter) -> None:
        """A token does not survive its object: after delete, CAS with it returns None."""
        token = adapter.write("k", b"v1")
        adapter.delete("k")
        assert adapter.write_if_match("k", b"v2", token) is None
        assert not adapter.exists("k")

    def test_cas_token_of_deleted_incarnation_fails(self, adapter: StorageAdapter) -> None:
        """After delete and re-create with different bytes, the old incarnation's token is stale."""
        old = adapter.write("k", make_body("incarnation-1", 128))
        adapter.delete("k")
        adapter.write("k", make_body("incarnation-2", 128))
        assert adapter.write_if_match("k", b"v3", old) is None

    def test_cas_increments_threads(self, adapter: StorageAdapter, sizes: ContractSizes) -> None:
        """N threads x M CAS increments end at exactly N*M, and no value is replaced twice (no lost update)."""
        _assert_increments_exact(adapter, race_in_threads, sizes.threads, sizes.increments)

    @pytest.mark.storage_contract_processes
    def test_cas_increments_processes(self, adapter: StorageAdapter, sizes: ContractSizes) -> None:
        """N processes x M CAS increments end at exactly N*M with no value replaced twice."""
        require_processes(adapter)
        _assert_increments_exact(adapter, race_in_processes, max(2, sizes.processes), sizes.increments)

    # -- linearizability ---------------------------------------------------------------------------------------
    def test_mixed_history_is_linearizable_threads(
        self, adapter: StorageAdapter, sizes: ContractSizes
    ) -> None:
        """A recorded history of mixed reads, writes, creates, CASes and deletes on a few hot keys, from
        N threads, is linearizable (contract_tests.linearizability, per-key register model)."""
        history = run_threads(adapter, WorkloadSpec(), workers=sizes.threads)
        _assert_linearizable(history, sizes.check_budget_s)

    @pytest.mark.storage_contract_processes
    def test_mixed_history_is_linearizable_processes(
        self, adapter: StorageAdapter, sizes: ContractSizes
    ) -> None:
        """The same mixed workload from N processes: the merged history is linearizable."""
        require_processes(adapter)
        history = run_processes(adapter, WorkloadSpec(), workers=max(2, sizes.processes))
        _assert_linearizable(history, sizes.check_budget_s)

    # -- delete, exists ----------------------------------------------------------------------------------------
    def test_delete_is_idempotent(self, adapter: StorageAdapter) -> None:
        """delete removes the object; deleting again, or deleting a never-written key, is not an error."""
        adapter.write("k", b"v")
        adapter.delete("k")
        adapter.delete("k")
        adapter.delete("never/written")
        assert not adapter.exists("k")
        assert adapter.read_if_exists("k") is None

    def test_deleting_a_key_that_is_only_a_prefix_deletes_nothing(self, adapter: StorageAdapter) -> None:
        """A key with no object of its own but objects below it (``d`` of ``d/x``) is a missing object to
        ``delete`` and ``delete_many``: no error, and the objects below stay."""
        adapter.write("d/x", b"below")
        adapter.delete("d")
        assert adapter.delete_many(["d", "d/y"]) == 2
        assert adapter.read_bytes("d/x") == b"below" and not adapter.exists("d")

    def test_exists(self, adapter: StorageAdapter) -> None:
        """exists is True for objects only: not for absent keys, nor for prefixes of other keys."""
        adapter.write("a/b", b"v")
        assert adapter.exists("a/b")
        assert not adapter.exists("a/c")
        assert not adapter.exists("a")

    # -- listing -------------------------------------------------------------------------------------------------
    def test_list_is_recursive_and_sorted(self, adapter: StorageAdapter) -> None:
        """list returns every object under the prefix, recursively, sorted by key, with size and token."""
        keys = ["b", "a/z", "a/b/c", "a/a", "c/d/e/f"]
        tokens = {k: adapter.write(k, k * 3) for k in keys}
        infos = adapter.list()
        assert [i.key for i in infos] == sorted(keys)
        assert all(isinstance(i, ObjectInfo) for i in infos)
        assert {i.key: (i.size, i.token) for i in infos} == {k: (len(k) * 3, tokens[k]) for k in keys}
        assert [i.key for i in adapter.list("a")] == ["a/a", "a/b/c", "a/z"]
        assert [i.key for i in adapter.list("a/")] == ["a/a", "a/b/c", "a/z"]

    def test_list_has_no_sibling_prefix_bleed(self, adapter: StorageAdapter) -> None:
        """A prefix names whole segments: list('a/b') never returns 'a/bc/...' or 'a/b.txt'."""
        for key in ["a/b/1", "a/b/2", "a/bc/3", "a/b.txt", "a/b-x/4"]:
            adapter.write(key, b"x")
        assert [i.key for i in adapter.list("a/b")] == ["a/b/1", "a/b/2"]
        assert [o.key for o in adapter.list_dir("a/b").objects] == ["a/b/1", "a/b/2"]

    def test_list_empty_and_missing_prefix(self, adapter: StorageAdapter) -> None:
        """Listing an empty root or a prefix with no objects returns nothing (not an error)."""
        assert adapter.list() == []
        assert adapter.list("nothing/here") == []
        assert adapter.list_dir("nothing") == DirListing(objects=(), prefixes=())

    def test_list_dir_direct_children(self, adapter: StorageAdapter) -> None:
        """list_dir returns the objects directly under a prefix and its child prefixes, sorted."""
        for key in ["d/x", "d/a", "d/sub1/y", "d/sub2/deep/z", "top"]:
            adapter.write(key, b"x")
        listing = adapter.list_dir("d")
        assert [o.key for o in listing.objects] == ["d/a", "d/x"]
        assert listing.prefixes == ("d/sub1", "d/sub2")
        root = adapter.list_dir()
        assert [o.key for o in root.objects] == ["top"] and root.prefixes == ("d",)

    def test_list_dir_forgets_deleted_prefixes(self, adapter: StorageAdapter) -> None:
        """Once the last object under a prefix is deleted, the prefix no longer lists (as on S3)."""
        adapter.write("d/gone/x", b"x")
        adapter.write("d/kept", b"x")
        adapter.delete("d/gone/x")
        assert adapter.list_dir("d").prefixes == ()
        assert adapter.list_dir().prefixes == ("d",)

    def test_delete_prefix(self, adapter: StorageAdapter) -> None:
        """delete_prefix removes exactly the objects under the prefix, returns their count, spares siblings;
        the root ("" or "/") is refused with InvalidKeyError."""
        for key in ["p/1", "p/2/3", "p/2/4", "pq/5", "p.txt", "other"]:
            adapter.write(key, b"x")
        assert adapter.delete_prefix("p") == 3
        assert [i.key for i in adapter.list()] == ["other", "p.txt", "pq/5"]
        assert adapter.delete_prefix("p") == 0
        for root in ("", "/"):  # never the whole root: refused as an invalid prefix, before any I/O
            with pytest.raises(InvalidKeyError):
                adapter.delete_prefix(root)
        assert [i.key for i in adapter.list()] == ["other", "p.txt", "pq/5"]

    # -- rename --------------------------------------------------------------------------------------------------
    def test_rename(self, adapter: StorageAdapter) -> None:
        """rename moves the bytes, replaces an existing destination and removes the source."""
        adapter.write("src", b"moving")
        adapter.write("dst/existing", b"old")
        adapter.rename("src", "dst/existing")
        assert adapter.read_bytes("dst/existing") == b"moving"
        assert not adapter.exists("src")
        adapter.rename("dst/existing", "elsewhere/new")
        assert [i.key for i in adapter.list()] == ["elsewhere/new"]

    def test_rename_missing_source_is_not_found(self, adapter: StorageAdapter) -> None:
        """Renaming an absent source raises NotFoundError and creates nothing."""
        with pytest.raises(NotFoundError):
            adapter.rename("missing", "dst")
        assert adapter.list() == []

    def test_rename_onto_itself_is_a_no_op(self, adapter: StorageAdapter) -> None:
        """rename(k, k) leaves the object intact: same bytes, same token; of an absent key, NotFoundError."""
        token = adapter.write("same/key", b"stays")
        adapter.rename("same/key", "same/key")
        assert adapter.read_versioned("same/key") == Versioned(data=b"stays", token=token)
        assert [i.key for i in adapter.list()] == ["same/key"]
        with pytest.raises(NotFoundError):
            adapter.rename("missing", "missing")
        assert [i.key for i in adapter.list()] == ["same/key"]

    def test_last_modified_never_decreases_across_replacements(self, adapter: StorageAdapter) -> None:
        """An object's listed last_modified never goes back along the operations that replace it: a
        write, a write_if_match, a streamed write, and a rename onto it of an object written before all
        of them (from another directory, then from the same one). A replacement is dated when it takes
        effect, not with the time of the bytes it moves; list, iter_list and list_dir agree."""
        adapter.write("early/src", b"written first, moved last")
        adapter.write("d/src", b"written second, moved last")
        history: list[tuple[str, datetime]] = []

        def dated(step: str) -> None:
            listed = {
                "list": [i.last_modified for i in adapter.list("d") if i.key == "d/k"],
                "iter_list": [i.last_modified for i in adapter.iter_list("d") if i.key == "d/k"],
                "list_dir": [o.last_modified for o in adapter.list_dir("d").objects if o.key == "d/k"],
            }
            times = {time for found in listed.values() for time in found}
            if len(times) != 1 or any(len(found) != 1 for found in listed.values()):
                raise Violation(f"after {step}, the listings disagree on 'd/k'", repr(listed))
            history.append((step, times.pop()))

        token = adapter.write("d/k", b"v1")
        dated("write")
        if adapter.write_if_match("d/k", b"v2", token) is not None:  # a refused CAS replaces nothing
            dated("write_if_match")
        adapter.write("d/k", iter([b"v3, ", b"streamed"]))
        dated("streamed write")
        adapter.rename("early/src", "d/k")
        dated("rename from another directory of an older object")
        adapter.rename("d/src", "d/k")
        dated("rename within the directory of an older object")
        backwards = []
        latest = history[0]  # each step is judged against the latest time before it
        for step, after in history[1:]:
            if after < latest[1]:
                backwards.append(f"{step}: {after.isoformat()} < {latest[1].isoformat()} ({latest[0]})")
            else:
                latest = (step, after)
        if backwards:
            raise Violation(
                "last_modified went back across a replacement",
                "\n".join([*backwards, *(f"  {step}: {time.isoformat()}" for step, time in history)]),
            )

    # -- errors and keys -------------------------------------------------------------------------------------------
    def test_not_found_is_typed(self, adapter: StorageAdapter) -> None:
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
    def test_invalid_keys_rejected_everywhere(self, adapter: StorageAdapter, bad: str) -> None:
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
            "read_range": lambda: adapter.read_range(bad, 0, 1),
            "read_ranges": lambda: adapter.read_ranges(bad, [(0, 1)]),
            "open_reader": lambda: adapter.open_reader(bad),
            "read_buffer": lambda: adapter.read_buffer(bad),
            "write(stream)": lambda: adapter.write(bad, iter([b"x"])),
            "write_if_absent(stream)": lambda: adapter.write_if_absent(bad, iter([b"x"])),
            "write_if_match(stream)": lambda: adapter.write_if_match(bad, iter([b"x"]), '"token"'),
        }
        # "" and a trailing "/" are valid prefixes (the root, a directory); delete_prefix refuses the root
        # with a StorageError of its own (test_delete_prefix_refuses_the_root).
        if bad not in ("", "a/"):
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

    @pytest.mark.parametrize("bad", INVALID_PREFIXES)
    def test_invalid_prefixes_rejected(self, adapter: StorageAdapter, bad: str) -> None:
        """list, list_dir, delete_prefix and child refuse a malformed prefix with InvalidKeyError before
        any I/O (only one trailing '/' is forgiven); nothing under the root is deleted."""
        adapter.write("a/b", b"keep")
        calls: dict[str, Callable[[], Any]] = {
            "list": lambda: adapter.list(bad),
            "list_dir": lambda: adapter.list_dir(bad),
            "delete_prefix": lambda: adapter.delete_prefix(bad),
            "child": lambda: adapter.child(bad).list(),
        }
        accepted = []
        for name, call in calls.items():
            try:
                call()
                accepted.append(name)
            except InvalidKeyError:
                pass
        assert not accepted, f"prefix {bad!r} accepted by {accepted}"
        assert adapter.read_bytes("a/b") == b"keep"

    @pytest.mark.parametrize(
        "token",
        ["", None, b'"etag"', 7, '"tok\nen"', "\x00", "*", '"\udc80"', '"é"', "x" * 1025],
        ids=lambda token: repr(token)[:24],
    )
    def test_cas_refuses_a_token_no_call_returned(self, adapter: StorageAdapter, token: Any) -> None:
        """write_if_match refuses a token no read or write returns (not a non-empty str of an ETag's
        visible ASCII characters, or the wildcard ``*`` that would match any version) with
        InvalidTokenError (also a TypeError) before any I/O, rather than treating it as a stale token or
        sending it in a header; nothing is written."""
        adapter.write("k", b"v1")
        with pytest.raises(TypeError):
            adapter.write_if_match("k", b"v2", token)
        with pytest.raises(TypeError):
            adapter.write_if_match("absent", b"v2", token)
        assert adapter.read_bytes("k") == b"v1" and not adapter.exists("absent")

    def test_keys_cannot_escape_the_root(self, adapter: StorageAdapter) -> None:
        """No key, from an adapter rooted below another, reaches the parent's objects."""
        adapter.write("sentinel", b"keep me")
        inner = adapter.child("inner")
        for attack in ("../sentinel", "inner/../../sentinel", "/sentinel", "..\\sentinel"):
            for call in (inner.delete, lambda k: inner.write(k, b"overwrite"), inner.read_bytes):
                with pytest.raises(InvalidKeyError):
                    call(attack)
        assert adapter.read_bytes("sentinel") == b"keep me"
        assert [i.key for i in adapter.list()] == ["sentinel"]

    # -- hostile input --------------------------------------------------------------------------------------------
    @pytest.mark.parametrize(
        "bad", [k for k in INVALID_KEYS if k not in ("", "a/")], ids=lambda k: repr(k)[:20]
    )
    def test_invalid_child_names_rejected(self, adapter: StorageAdapter, bad: str) -> None:
        """child() refuses an invalid name (surrogates, overlong segments, ...) with InvalidKeyError, before
        any I/O; nothing is created."""
        with pytest.raises(InvalidKeyError):
            adapter.child(bad).write("k", b"x")
        assert adapter.list() == []

    def test_key_length_is_counted_in_utf8_bytes(self, adapter: StorageAdapter) -> None:
        """Lengths are UTF-8 bytes: a 600-byte key of 2-byte characters round-trips and lists; a key one
        byte over MAX_KEY_BYTES is an InvalidKeyError before any I/O; a key of exactly MAX_KEY_BYTES is
        never refused by validation (it round-trips, or a backend that counts the root's prefix in the
        key, as S3 does, refuses it with a typed StorageError)."""
        segment = "é" * (MAX_SEGMENT_BYTES // 2)  # MAX_SEGMENT_BYTES bytes
        medium = "/".join([segment] * 3)
        adapter.write(medium, b"multi-byte")
        assert adapter.read_bytes(medium) == b"multi-byte"
        assert [i.key for i in adapter.list()] == [medium]
        head = "/".join([segment] * (MAX_KEY_BYTES // (MAX_SEGMENT_BYTES + 1)))
        longest = f"{head}/" + "x" * (MAX_KEY_BYTES - len(head.encode()) - 1)
        assert len(longest.encode()) == MAX_KEY_BYTES
        with pytest.raises(InvalidKeyError):
            adapter.write(longest + "x", b"x")
        try:
            adapter.write(longest, b"longest")
        except InvalidKeyError:
            raise AssertionError(f"a key of exactly {MAX_KEY_BYTES} bytes was refused as invalid") from None
        except StorageError:
            return  # the backend's own limit counts the root prefix: a typed refusal
        assert adapter.read_bytes(longest) == b"longest"
        assert sorted(i.key for i in adapter.list()) == sorted([medium, longest])
        adapter.delete(longest)  # from a parent adapter its key, prefixed, is over the limit

    def test_listing_survives_odd_names(self, adapter: StorageAdapter) -> None:
        """Valid but odd names (spaces at either end, non-ASCII, combining marks, C1 controls, '#' not
        followed by digits only, leading dots, URL-special characters) round-trip, and list and list_dir
        return exactly them."""
        for name in ODD_NAMES:
            adapter.write(f"odd/{name}", name)
        expected = sorted(f"odd/{name}" for name in ODD_NAMES)
        assert [i.key for i in adapter.list()] == expected
        assert [i.key for i in adapter.list("odd")] == expected
        listing = adapter.list_dir("odd")
        assert sorted([o.key for o in listing.objects] + [f"{p}/" for p in listing.prefixes]) == sorted(
            {k if k.count("/") == 1 else k.rsplit("/", 1)[0] + "/" for k in expected}
        )
        assert all(adapter.read_text(f"odd/{name}") == name for name in ODD_NAMES)

    def test_errors_name_key_and_backend_and_no_secret(self, adapter: StorageAdapter) -> None:
        """A NotFoundError and an InvalidKeyError name the key and the backend; their messages and full
        tracebacks quote no value of a secret option of the adapter's config (when it exposes one with
        ``secret_values()``), and the adapter's URL carries no userinfo."""
        assert redact_url(adapter.url) == adapter.url, "the adapter's URL carries credentials"
        config = getattr(adapter, "config", None)
        secrets = [s for s in getattr(config, "secret_values", tuple)() if isinstance(s, str) and s]
        backend = adapter.capabilities.backend
        provoked: dict[str, Callable[[], Any]] = {
            "no/such key": lambda: adapter.read_bytes("no/such key"),
            "bad//key": lambda: adapter.write("bad//key", b"x"),
        }
        for key, call in provoked.items():
            with pytest.raises(StorageError) as info:
                call()
            assert key in str(info.value) and backend in str(info.value), str(info.value)
            printed = "".join(traceback.format_exception(info.value))
            assert not [s for s in secrets if s in printed], "a secret option's value is printed"

    # -- identity -------------------------------------------------------------------------------------------------
    def test_pickle_round_trip(self, adapter: StorageAdapter) -> None:
        """An adapter pickles, compares equal to its original, and the copy sees the same objects."""
        adapter.write("k", b"shared")
        clone = pickle.loads(pickle.dumps(adapter))
        assert clone == adapter and hash(clone) == hash(adapter)
        assert clone.read_bytes("k") == b"shared"

    def test_identity_follows_the_address(
        self, adapter: StorageAdapter, reopen: Callable[[str], StorageAdapter] | None
    ) -> None:
        """Equality, hash and URL follow the place an adapter addresses, not how it was built:
        ``child('a').child('b')``, ``child('a/b')``, ``child('a/b/')``, a pickled copy and (where the suite
        knows how to open one, ``reopen``) an adapter opened afresh at that child's URL with the same
        options are all equal, hash alike, have one URL and read the same objects; an adapter of any
        other place (the parent, ``child('a')``, ``child('a/c')``, ``child('a/b/c')``) equals none of them
        and has another URL."""
        adapter.write("a/b/k", b"addressed")
        same = {
            "child('a').child('b')": adapter.child("a").child("b"),
            "child('a/b')": adapter.child("a/b"),
            "child('a/b/')": adapter.child("a/b/"),
            "pickled child('a/b')": pickle.loads(pickle.dumps(adapter.child("a/b"))),
        }
        if reopen is not None:
            # Opened where the objects already are: opening a local root creates its directory.
            same["opened at child('a/b').url"] = reopen(adapter.child("a/b").url)
        others = {
            "the adapter": adapter,
            "child('a')": adapter.child("a"),
            "child('a/c')": adapter.child("a/c"),
            "child('a/b/c')": adapter.child("a/b/c"),
        }
        try:
            problems = []
            (first_name, first), *rest = same.items()
            for name, other in rest:
                if not (other == first and first == other):
                    problems.append(f"{name} != {first_name} ({other!r} vs {first!r})")
                elif hash(other) != hash(first):
                    problems.append(f"{name} == {first_name}, but their hashes differ")
                if other.url != first.url:
                    problems.append(f"{name}.url is {other.url!r}, {first_name}.url {first.url!r}")
            for name, built in same.items():
                if built.read_if_exists("k") != b"addressed":
                    problems.append(f"{name} does not read 'a/b/k' as 'k'")
            problems += [
                f"{name} == {first_name}, though it addresses another place ({other.url!r})"
                for name, other in others.items()
                if other == first or other.url == first.url
            ]
        finally:
            adapter.delete("a/b/k")
        if problems:
            raise Violation("adapter identity does not follow the address", "\n".join(problems))

    def test_capabilities_are_declared_and_honest(self, adapter: StorageAdapter) -> None:
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
