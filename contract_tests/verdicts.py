"""How a clause states its verdict, and the one channel that carries its evidence to the report.

A clause ends in one of three ways:

* it returns: **pass**;
* it raises ``AssertionError`` (a plain ``assert`` or :class:`Violation`): **fail**. The message's first
  line is the reason, every further line is evidence (a counterexample history, expected vs actual);
* it raises :class:`Inconclusive`: **inconclusive**. The clause could not decide within its budget (the
  linearizability search ran out of time, a race was cut off without evidence of a violation). A referee
  never claims a violation it did not find, so this is never counted as one.

The message of the exception is the evidence, whole: :mod:`contract_tests.conformance` keeps it
untruncated in every report format, and a plain ``pytest`` run prints it too.
"""

from __future__ import annotations


class Violation(AssertionError):
    """A clause found a violation. ``reason`` is one line; ``evidence`` lines follow it in the message."""

    def __init__(self, reason: str, evidence: str = "") -> None:
        super().__init__(f"{reason}\n{evidence}" if evidence else reason)


class Inconclusive(Exception):
    """A clause could not reach pass or fail within its bound; the message says why (first line) and what
    was seen (further lines)."""

    def __init__(self, reason: str, evidence: str = "") -> None:
        super().__init__(f"{reason}\n{evidence}" if evidence else reason)


def split_message(message: str) -> tuple[str, str]:
    """A clause's exception message as (reason: its first non-empty line, evidence: the rest, dedented of
    surrounding blank lines)."""
    lines = message.strip().splitlines()
    if not lines:
        return "", ""
    return lines[0].strip(), "\n".join(lines[1:]).strip("\n")
