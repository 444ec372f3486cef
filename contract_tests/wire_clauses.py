"""Clauses on the S3 wire: conditional requests whose ETag a server must never ignore.

The adapter sends ``If-None-Match: *`` and ``If-Match: <ETag>`` on PUT. Whether a server compares an
ETag in a condition as S3 does decides whether those conditions mean anything there, and servers
differ: Ceph RGW 16.2 compares the header literally against the unquoted ETag, so a quoted ETag never
matches (the ``unquoted_if_match`` quirk), and a DELETE with a stale ``If-Match`` deletes anyway; moto
5.2 overwrites on ``If-None-Match: <current ETag>``. These clauses judge the server itself, through
signed raw requests under the clause's fresh prefix (:mod:`contract_tests.wire`), with the ETag quoted
(as S3 returns it) and unquoted:

* a PUT with ``If-None-Match: <the object's current ETag>`` never overwrites it;
* a DELETE with ``If-Match: <a stale ETag>`` never deletes it.

A request passes when the server refuses it (412 Precondition Failed; or 501 Not Implemented, or 400
``NotImplemented``, as AWS S3 answers an ``If-None-Match`` other than ``*``) and the object is unchanged
(its bytes and ETag); it fails when the server accepted it or the object changed, with the request, the
answer and the object before and after as evidence. An answer of 5xx (other than 501) with the object
unchanged, or no answer to the conditional request, leaves the outcome unknown: inconclusive. Targets
that are not S3 skip.

Mixed into :class:`contract_tests.clauses.AdapterContract`.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from contract_tests.bodies import describe, make_body
from contract_tests.verdicts import Inconclusive, Violation
from contract_tests.wire import S3Wire, WireResponse
from storage_adapter.errors import BackendUnavailableError
from storage_adapter.protocol import StorageAdapter

# An ETag in a condition, as S3 returns it and as a server comparing literally might want it.
FORMS = ("quoted", "unquoted")
BODY_BYTES = 64


def _refused(answer: WireResponse) -> bool:
    """A refusal of the condition: 412, or "not implemented" (501, or 400 with that error code)."""
    return answer.status in (412, 501) or (answer.status == 400 and answer.error_code == "NotImplemented")


def _state(got: WireResponse) -> str:
    """An object as a GET found it, for evidence: its ETag and bytes, or the status that said it is not."""
    if got.status != 200:
        return f"absent ({got.line()})"
    return f"ETag {got.etag}, {describe(got.body)}"


@dataclass(frozen=True)
class Attempt:
    """One conditional request on an object: what was sent (``request``), the server's ``answer``, and the
    object as a GET found it ``before`` and ``after``."""

    form: str
    request: str
    answer: WireResponse
    before: WireResponse
    after: WireResponse

    @property
    def kept(self) -> bool:
        """The object is still there with the same ETag and bytes."""
        return (
            self.after.status == 200
            and self.after.etag == self.before.etag
            and self.after.body == self.before.body
        )

    @property
    def passed(self) -> bool:
        """Refused, and the object kept."""
        return self.kept and _refused(self.answer)

    @property
    def undecided(self) -> bool:
        """The object was kept, but the answer was a server error: whether the server refused is unknown."""
        return self.kept and not _refused(self.answer) and self.answer.status >= 500

    def summary(self) -> str:
        effect = "kept" if self.kept else "deleted" if self.after.status == 404 else "replaced"
        return f"{self.form} ETag: {self.answer.line()}, {effect}"

    def evidence(self) -> str:
        return (
            f"{self.form}: {self.request} -> {self.answer.line()}\n"
            f"  before: {_state(self.before)}\n"
            f"  after:  {_state(self.after)}"
        )


def _put(wire: S3Wire, key: str, tag: str) -> tuple[WireResponse, str]:
    """A plain PUT of a body unique to ``tag``: the object as a GET then finds it, and its ETag. Raises
    Inconclusive when the server does not store it or names no ETag: the clause has nothing to judge."""
    answer = wire.send("PUT", key, body=make_body(tag, BODY_BYTES))
    got = wire.send("GET", key)
    if answer.status != 200 or got.status != 200 or not got.etag:
        raise Inconclusive(
            f"a plain PUT of {wire.key(key)} did not store an object with an ETag: nothing to judge",
            f"PUT {wire.key(key)} -> {answer.line()}; GET -> {_state(got)}",
        )
    return got, got.etag


def _attempt(
    wire: S3Wire,
    form: str,
    method: str,
    key: str,
    condition: tuple[str, str],
    before: WireResponse,
    body: bytes = b"",
) -> Attempt:
    """Send ``method`` on ``key`` (found as ``before``) with the ``condition`` header and ETag, the ETag in
    ``form``, then GET the object again."""
    header, etag = condition
    value = etag if form == "quoted" else etag.strip('"')
    request = f"{method} {wire.key(key)} {header}: {value}" + (f" ({describe(body)})" if body else "")
    try:
        answer = wire.send(method, key, {header: value}, body)
    except BackendUnavailableError as exc:
        raise Inconclusive(f"{request} got no answer: its outcome is unknown", str(exc)) from None
    return Attempt(form, request, answer, before, wire.send("GET", key))


def judge(attempts: list[Attempt], what: str) -> None:
    """Pass if every attempt was refused and kept its object; otherwise FAIL, or INCONCLUSIVE when the
    only attempts not passed met a server error with the object kept; every attempt is evidence."""
    evidence = "\n".join(a.evidence() for a in attempts)
    failed = [a for a in attempts if not a.passed and not a.undecided]
    if failed:
        raise Violation(f"{what} was not refused ({'; '.join(a.summary() for a in failed)})", evidence)
    undecided = [a for a in attempts if a.undecided]
    if undecided:
        raise Inconclusive(
            f"{what}: a server error, so whether it was refused is unknown "
            f"({'; '.join(a.summary() for a in undecided)})",
            evidence,
        )


class WireClauses:
    """What the server answers to conditional requests the contract relies on (module docstring)."""

    @pytest.fixture
    def wire(self, adapter: StorageAdapter, request: pytest.FixtureRequest) -> S3Wire:
        """Signed raw S3 requests under ``adapter``'s fresh prefix: the plugin's ``storage_contract_wire``.
        An adapter the plugin did not open (a subclass's own ``adapter``) has no wire known here: skipped,
        unless the subclass overrides this fixture too."""
        # ``adapter`` is requested for its place in the closure: the plugin's own brings in
        # storage_contract_adapter (the prefix the wire writes under), a subclass's own does not.
        if "storage_contract_adapter" not in request.fixturenames:
            pytest.skip("the S3 wire of an adapter the plugin did not open is unknown (override `wire`)")
        wire: S3Wire = request.getfixturevalue("storage_contract_wire")
        return wire

    def test_put_if_none_match_with_the_current_etag_never_overwrites(self, wire: S3Wire) -> None:
        """A PUT with ``If-None-Match: <the object's current ETag>``, quoted and unquoted, is refused
        (412, or "not implemented") and leaves the object as it was."""
        attempts = []
        for form in FORMS:
            key = f"wire/if-none-match-{form}"
            current, etag = _put(wire, key, f"{form}-first")
            body = make_body(f"{form}-second", BODY_BYTES)
            attempts.append(_attempt(wire, form, "PUT", key, ("If-None-Match", etag), current, body))
        judge(attempts, "a PUT with If-None-Match: <the current ETag>")

    def test_delete_if_match_with_a_stale_etag_never_deletes(self, wire: S3Wire) -> None:
        """A DELETE with ``If-Match: <an ETag the object no longer has>``, quoted and unquoted, is refused
        (412, or "not implemented") and leaves the object as it was."""
        attempts = []
        for form in FORMS:
            key = f"wire/delete-if-match-{form}"
            _, stale = _put(wire, key, f"{form}-first")
            current, _ = _put(wire, key, f"{form}-second")
            attempts.append(_attempt(wire, form, "DELETE", key, ("If-Match", stale), current))
        judge(attempts, "a DELETE with If-Match: <a stale ETag>")


__all__ = ["Attempt", "WireClauses", "judge"]
