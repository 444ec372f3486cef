"""Evidence a person can read in a CI log (issue 30, item 5): bytes in a clause's message are shown by one
function, ``contract_tests.bodies.describe`` (length, the text they start with, a short hex prefix), never
as pages of raw escapes; and long evidence is folded in the console, whole in every report file."""

from __future__ import annotations

import re
import uuid

import pytest

from contract_tests.bodies import describe, make_body
from contract_tests.conformance import ClauseOutcome, Target, run_contract
from contract_tests.history import Operation, Outcome
from contract_tests.plugin import ContractSizes

SMALL = ContractSizes(threads=4, processes=2, increments=5, check_budget_s=30.0, clause_timeout_s=60.0)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (b"first", "b'first'"),
        (b"", "b''"),
        (b"a\tb\n", "b'a\\tb\\n'"),
        (make_body("v6", 262144)[:131072], "131072 bytes b'v6|262144|>' + 0x8286044388886ee0..."),
        (b"\x82\x86\x00", "3 bytes 0x828600"),
        (b"\x00", "1 byte 0x00"),
        (b"a" * 300, "300 bytes b'" + "a" * 40 + "'..."),
        (b"a" * 40 + b"\x01", "41 bytes b'" + "a" * 40 + "' + 0x01"),
        (bytearray(b"\xff" * 9), "9 bytes 0xffffffffffffffff..."),
        (memoryview(b"ok"), "b'ok'"),
        ((("k", b"\x00v"),), "(('k', 2 bytes 0x0076),)"),
        ([b"x", None], "[b'x', None]"),
        ({"k": b"\x01"}, "{'k': 1 byte 0x01}"),
        ("text", "'text'"),
    ],
)
def test_describe_shows_bytes_as_length_text_and_a_short_hex_prefix(value: object, shown: str) -> None:
    assert describe(value) == shown


def test_describe_stays_short_whatever_the_size() -> None:
    assert len(describe(bytes(range(256)) * 4096)) < 100


def test_a_history_shows_bodies_through_describe() -> None:
    """Before: a counterexample showed a torn body as its decoded escapes, ``'v6|262144|>\\x82\\x86...'``."""
    torn = make_body("v6", 262144)[:131072]
    operation = Operation(
        op_id="0",
        worker="w1",
        op="read",
        key="k",
        args=(),
        result=torn,
        outcome=Outcome.OK,
        invoke_ns=0,
        complete_ns=1_000,
    )
    line = operation.describe()
    assert "131072 bytes b'v6|262144|>' + 0x8286" in line
    assert "\\x" not in line


def test_a_torn_read_is_reported_readably() -> None:
    """Before: ``torn reads (count, first sample) per reader: [(1352, b'v0|262144|\\x02p\\xdaM...`` on one
    line: 80 raw bytes per reader, no size. Now the reason is one short line and each reader's first torn
    read is its size and head."""
    target = Target(
        "torn", f"memory://torn-{uuid.uuid4().hex[:8]}", factory="contract_tests.planted_bugs:open_torn_write"
    )
    run = run_contract(
        [target], sizes=SMALL, suite=("--pyargs", "contract_tests", "-k", "atomic_replace_threads")
    )
    (result,) = run.results
    assert result.outcome is ClauseOutcome.FAILED
    assert re.fullmatch(r"torn reads by \d+ of \d+ readers", result.reason), result.reason
    assert "\\x" not in result.reason + result.evidence
    lines = result.evidence.splitlines()
    assert lines and all(
        re.fullmatch(r"reader \d+: \d+ of \d+ reads torn, the first: \d+ bytes b'v\d+\|\d+\|.*", line)
        for line in lines
    ), result.evidence
