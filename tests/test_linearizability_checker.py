"""The WGL checker on hand-built histories: linearizable ones pass, each classic anomaly is caught."""

from __future__ import annotations

import itertools

import pytest

from contract_tests.history import Operation, Outcome
from contract_tests.linearizability import KeyVerdict, check_history

_ids = itertools.count()


def op(
    worker: str,
    name: str,
    args: tuple[object, ...],
    result: object,
    start: int,
    end: int | None,
    key: str = "k",
    outcome: Outcome = Outcome.OK,
) -> Operation:
    """An operation on ``key`` over [start, end] (end None: outcome unknown)."""
    if end is None:
        outcome = Outcome.UNKNOWN
    return Operation(
        op_id=f"op{next(_ids)}",
        worker=worker,
        op=name,
        key=key,
        args=args,
        invoke_ns=start,
        complete_ns=end,
        outcome=outcome,
        result=None if outcome is Outcome.UNKNOWN else result,
    )


def w(worker: str, body: bytes, token: str, start: int, end: int | None, key: str = "k") -> Operation:
    return op(worker, "write", (body,), token, start, end, key)


def r(worker: str, body: bytes | None, start: int, end: int, key: str = "k") -> Operation:
    return op(worker, "read", (), body, start, end, key)


def rv(worker: str, body: bytes, token: str, start: int, end: int) -> Operation:
    return op(worker, "read_versioned", (), (body, token), start, end)


def cas(worker: str, body: bytes, token: str, result: str | None, start: int, end: int | None) -> Operation:
    return op(worker, "write_if_match", (body, token), result, start, end)


def create(worker: str, body: bytes, token: str | None, start: int, end: int | None) -> Operation:
    """write_if_absent: ``token`` is the winner's new token, None a loss."""
    return op(worker, "write_if_absent", (body,), token, start, end)


def verdict(*ops: Operation) -> KeyVerdict:
    return check_history(ops).verdict


# -- linearizable -------------------------------------------------------------------------------------


def test_empty_and_sequential_histories_are_linearizable() -> None:
    assert verdict() is KeyVerdict.LINEARIZABLE
    assert (
        verdict(r("A", None, 0, 1), w("A", b"a", "t1", 2, 3), r("B", b"a", 4, 5)) is KeyVerdict.LINEARIZABLE
    )


def test_concurrent_writes_may_land_in_either_order() -> None:
    writes = (w("A", b"a", "t1", 0, 10), w("B", b"b", "t2", 1, 11))
    assert verdict(*writes, r("C", b"a", 12, 13)) is KeyVerdict.LINEARIZABLE
    assert verdict(*writes, r("C", b"b", 12, 13)) is KeyVerdict.LINEARIZABLE


def test_a_read_overlapping_a_write_may_see_old_or_new() -> None:
    base = (w("A", b"a", "t1", 0, 1), w("A", b"b", "t2", 2, 10))
    assert verdict(*base, r("B", b"a", 3, 4)) is KeyVerdict.LINEARIZABLE
    assert verdict(*base, r("B", b"b", 3, 4), r("B", b"b", 5, 6)) is KeyVerdict.LINEARIZABLE


def test_cas_chain_and_single_create_winner_are_linearizable() -> None:
    history = (
        create("A", b"a", "t1", 0, 10),
        create("B", b"b", None, 1, 11),
        rv("A", b"a", "t1", 12, 13),
        cas("A", b"c", "t1", "t2", 14, 15),
        cas("B", b"d", "t1", None, 14, 16),  # lost the race: changed nothing
        rv("B", b"c", "t2", 17, 18),
        op("C", "delete", (), None, 19, 20),
        op("C", "exists", (), False, 21, 22),
        cas("A", b"e", "t2", None, 23, 24),  # absent: fails
    )
    assert verdict(*history) is KeyVerdict.LINEARIZABLE


def test_cas_with_the_token_write_if_absent_returned() -> None:
    assert verdict(create("A", b"a", "t1", 0, 1), cas("A", b"b", "t1", "t2", 2, 3)) is KeyVerdict.LINEARIZABLE


def test_write_if_absent_returning_another_versions_token() -> None:
    # The create's token is the state's: a read of the same version under another token is impossible.
    assert verdict(create("A", b"a", "t1", 0, 1), rv("B", b"a", "t9", 2, 3)) is KeyVerdict.VIOLATION
    assert verdict(create("A", b"a", "t1", 0, 1), cas("B", b"b", "t1", None, 2, 3)) is KeyVerdict.VIOLATION


def test_keys_are_independent_registers() -> None:
    history = (
        w("A", b"a", "t1", 0, 1, key="x"),
        w("A", b"b", "t2", 0, 1, key="y"),
        r("B", b"a", 2, 3, key="x"),
        r("B", b"b", 2, 3, key="y"),
    )
    result = check_history(history)
    assert result.ok and [k.key for k in result.keys] == ["x", "y"]


def test_ambiguous_write_may_have_taken_effect() -> None:
    assert verdict(w("A", b"a", "?", 0, None), r("B", b"a", 5, 6)) is KeyVerdict.LINEARIZABLE


def test_ambiguous_write_may_not_have_taken_effect() -> None:
    assert (
        verdict(w("A", b"a", "?", 0, None), r("B", None, 5, 6), r("B", None, 7, 8)) is KeyVerdict.LINEARIZABLE
    )


def test_ambiguous_write_may_take_effect_long_after_its_call() -> None:
    history = (w("A", b"a", "?", 0, None), w("B", b"b", "t2", 5, 6), r("B", b"b", 7, 8), r("C", b"a", 9, 10))
    assert verdict(*history) is KeyVerdict.LINEARIZABLE


def test_ambiguous_cas_and_create_both_ways() -> None:
    base = (w("A", b"a", "t1", 0, 1),)
    assert verdict(*base, cas("B", b"b", "t1", None, 2, None), r("C", b"b", 5, 6)) is KeyVerdict.LINEARIZABLE
    assert verdict(*base, cas("B", b"b", "t1", None, 2, None), r("C", b"a", 5, 6)) is KeyVerdict.LINEARIZABLE
    assert verdict(create("A", b"a", "t1", 0, None), r("C", b"a", 5, 6)) is KeyVerdict.LINEARIZABLE
    assert verdict(create("A", b"a", "t1", 0, None), r("C", None, 5, 6)) is KeyVerdict.LINEARIZABLE


def test_failed_operations_had_no_effect() -> None:
    failed = op("A", "write", (b"a",), None, 0, 1, outcome=Outcome.FAILED)
    assert verdict(failed, r("B", None, 2, 3)) is KeyVerdict.LINEARIZABLE
    assert verdict(failed, r("B", b"a", 2, 3)) is KeyVerdict.VIOLATION


def test_an_undeclared_error_is_a_violation_even_in_a_linearizable_history() -> None:
    """The answer an operation gave is judged before the order: a write that raised a plain StorageError
    is no outcome of write, so no interleaving can explain it."""
    spurious = op("B", "write", (b"b",), None, 2, 3, outcome=Outcome.UNDECLARED)
    spurious = Operation(**{**spurious.__dict__, "error": "StorageError: [Errno 17] File exists"})
    history = (w("A", b"a", "t1", 0, 1), spurious, r("C", b"a", 4, 5))
    assert verdict(w("A", b"a", "t1", 0, 1), r("C", b"a", 4, 5)) is KeyVerdict.LINEARIZABLE
    result = check_history(history)
    assert result.verdict is KeyVerdict.VIOLATION
    [key] = result.violations
    assert key.counterexample == (spurious,) and "StorageError" in key.reason
    assert "File exists (not a declared outcome)" in result.report()


# -- not linearizable ---------------------------------------------------------------------------------


def test_lost_update_two_cas_from_one_token_both_succeed() -> None:
    history = (
        w("A", b"v0", "t0", 0, 1),
        rv("A", b"v0", "t0", 2, 3),
        rv("B", b"v0", "t0", 2, 3),
        cas("A", b"vA", "t0", "tA", 10, 20),
        cas("B", b"vB", "t0", "tB", 12, 22),
    )
    result = check_history(history)
    assert result.verdict is KeyVerdict.VIOLATION
    assert "write_if_match" in result.report()


def test_two_write_if_absent_winners() -> None:
    assert verdict(create("A", b"a", "t1", 0, 10), create("B", b"b", "t2", 1, 11)) is KeyVerdict.VIOLATION


def test_write_if_absent_winner_on_a_present_key() -> None:
    assert verdict(w("A", b"a", "t1", 0, 1), create("B", b"b", "t2", 2, 3)) is KeyVerdict.VIOLATION


def test_stale_read_after_a_completed_write() -> None:
    history = (w("A", b"a", "t1", 0, 1), w("A", b"b", "t2", 2, 3), r("B", b"a", 4, 5))
    assert verdict(*history) is KeyVerdict.VIOLATION


def test_read_absent_after_a_completed_create() -> None:
    assert verdict(create("A", b"a", "t1", 0, 1), r("B", None, 2, 3)) is KeyVerdict.VIOLATION


def test_cas_succeeding_on_a_stale_token() -> None:
    history = (w("A", b"a", "t1", 0, 1), w("B", b"b", "t2", 2, 3), cas("C", b"c", "t1", "t3", 4, 5))
    assert verdict(*history) is KeyVerdict.VIOLATION


def test_cas_failing_on_the_current_token() -> None:
    assert verdict(w("A", b"a", "t1", 0, 1), cas("B", b"b", "t1", None, 2, 3)) is KeyVerdict.VIOLATION


def test_torn_write_a_read_of_bytes_nobody_wrote() -> None:
    assert verdict(w("A", b"abcd", "t1", 0, 10), r("B", b"ab", 2, 3)) is KeyVerdict.VIOLATION


def test_read_versioned_token_differs_from_the_token_write_returned() -> None:
    assert verdict(w("A", b"a", "t1", 0, 1), rv("B", b"a", "t9", 2, 3)) is KeyVerdict.VIOLATION


def test_token_naming_two_bodies() -> None:
    result = check_history((w("A", b"a", "t1", 0, 1), rv("B", b"b", "t1", 2, 3)))
    assert result.verdict is KeyVerdict.VIOLATION and "different bodies" in result.violations[0].reason


def test_ambiguous_write_cannot_take_effect_before_its_call() -> None:
    assert verdict(r("B", b"a", 0, 5), w("A", b"a", "?", 10, None)) is KeyVerdict.VIOLATION


def test_ambiguous_write_takes_effect_at_most_once() -> None:
    history = (
        w("A", b"a", "?", 0, None),
        r("B", b"a", 5, 6),
        w("B", b"b", "t2", 7, 8),
        r("C", b"a", 9, 10),  # "a" cannot come back: the ambiguous write happened once, before the read
    )
    assert verdict(*history) is KeyVerdict.VIOLATION


def test_ambiguous_cas_cannot_succeed_on_a_stale_token() -> None:
    history = (w("A", b"a", "t1", 0, 1), w("A", b"b", "t2", 2, 3), cas("B", b"c", "t1", None, 4, None))
    assert verdict(*history, r("C", b"c", 10, 11)) is KeyVerdict.VIOLATION


# -- counterexamples and budget -----------------------------------------------------------------------


def test_counterexample_is_shrunk_to_the_operations_involved() -> None:
    noise = [w("N", f"n{i}".encode(), f"tn{i}", 100 * i, 100 * i + 5) for i in range(1, 8)]
    noise += [r("R", f"n{i}".encode(), 100 * i + 6, 100 * i + 7) for i in range(1, 8)]
    noise += [w("O", b"x", "tx", 1, 2, key="other"), r("O", b"x", 3, 4, key="other")]
    v0 = w("A", b"v0", "t0", 1000, 1001)
    reads = (rv("A", b"v0", "t0", 1002, 1003), rv("B", b"v0", "t0", 1002, 1004))
    racing = (cas("A", b"vA", "t0", "tA", 1010, 1020), cas("B", b"vB", "t0", "tB", 1012, 1022))
    later = [r("C", b"vB", 1030 + i, 1031 + i) for i in range(5)]
    result = check_history([*noise, v0, *reads, *racing, *later])
    assert result.verdict is KeyVerdict.VIOLATION
    [bad] = result.violations
    assert bad.key == "k"
    assert {o.op_id for o in bad.counterexample} == {v0.op_id, racing[0].op_id, racing[1].op_id}
    assert "t0" in result.report()


def test_budget_exhaustion_gives_unknown_not_a_hang() -> None:
    writes = [w(f"W{i}", f"b{i}".encode(), f"t{i}", 0, 100) for i in range(12)]
    reads = [r("R", f"b{i}".encode(), 101 + 2 * i, 102 + 2 * i) for i in range(12)]  # impossible order
    result = check_history([*writes, *reads], max_steps=50)
    assert result.verdict is KeyVerdict.UNKNOWN
    assert result.keys[0].reason


@pytest.mark.parametrize("concurrency", [4, 8])
def test_wide_concurrent_history_is_decided(concurrency: int) -> None:
    """Many overlapping ops: memoization keeps this fast (the unmemoized search is factorial)."""
    ops = []
    for round_ in range(20):
        base = round_ * 100
        ops += [
            w(f"W{i}", f"r{round_}w{i}".encode(), f"t{round_}.{i}", base, base + 50)
            for i in range(concurrency)
        ]
        ops.append(r("R", f"r{round_}w0".encode(), base + 60, base + 70))
    assert check_history(ops).ok
