"""Known server quirks that an option of the adapter fixes, and the remedy a failing clause's evidence names.

A server may fail clauses because of a known behaviour of its own for which the adapter already has an
option (Ceph RGW before its 2025 fix refuses the quoted ETag in ``If-Match``: ``unquoted_if_match``). A check that fails such a clause says
so where the reader looks, in the clause's evidence: ``remedy: ...`` naming the quirk, the option, its
environment variable and the documentation. :data:`QUIRKS` is the one table of them; the check applies
it in one place (:mod:`contract_tests.conformance`), so the console, Markdown and JSON reports all show it.

A quirk belongs to a registered backend (the :class:`~storage_adapter.registry.Backend` object whose
option fixes it), and its remedy is shown only for a judged target of that backend whose resolved options
(explicit ones, then the environment, as the adapter resolves them) leave the option off. The remedy is
advice, not a diagnosis: the same clause can fail on another server for another reason, which is why the
text names the quirk it would fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from contract_tests.plugin import declared_options, url_backend
from storage_adapter.builtin_backends import S3, UNQUOTED_IF_MATCH
from storage_adapter.config import parse_url
from storage_adapter.registry import Backend, Option


@dataclass(frozen=True)
class Quirk:
    """A known server behaviour that fails ``clauses`` (test function names) on ``backend`` unless its
    boolean option ``option`` is on. ``behaviour`` says which servers do what, in one clause of a
    sentence; ``docs`` is where the quirk and the option are explained (a path of this repository with
    its anchor); ``compatibility_mode`` is the mode the option turns on (``check --compat``), if it is
    one: a target relying on it is PARTIAL, never conforming."""

    behaviour: str
    backend: Backend
    option: str
    clauses: frozenset[str]
    docs: str
    compatibility_mode: str = ""

    @property
    def declared(self) -> Option:
        """The backend's declaration of the option (its environment variables). Raises KeyError for an
        option the backend does not declare."""
        return self.backend.options[self.option]

    def remedy(self) -> str:
        """The evidence line: ``remedy: ...``, naming the quirk, the option, its environment variables and
        the documentation."""
        env = " or ".join(f"{variable}=true" for variable in self.declared.env)
        mode = (
            f"; a compatibility mode (check --compat {self.compatibility_mode}): the target is then PARTIAL, "
            "never conforming"
            if self.compatibility_mode
            else ""
        )
        return (
            f"remedy: {self.behaviour} (a known server quirk); for such a server turn on the "
            f"{self.backend.name} option {self.option} (open_adapter(..., {self.option}=True), or the "
            f"environment {env}), off for this target{mode}; see {self.docs}"
        )


# Each quirk's clauses are those measured failing without its option and passing with it (except where
# noted): SeaweedFS 4.48 and Ceph RGW 16.2.15, ``storage-adapter check`` with and without the option.
QUIRKS: tuple[Quirk, ...] = (
    Quirk(
        behaviour="Ceph RGW before its 2025 fix answers 412 to an If-Match carrying the quoted ETag it "
        "returned itself, so a CAS with the current token is refused",
        backend=S3,
        option="unquoted_if_match",
        clauses=frozenset(
            {
                "test_cas_fresh_token_wins",
                "test_cas_increments_threads",
                "test_cas_increments_processes",
                "test_write_if_absent_returns_the_new_token",
                "test_a_streamed_create_has_one_winner_or_is_refused",
                "test_remove_orphans_spares_writes_in_flight_threads",
                "test_remove_orphans_spares_writes_in_flight_processes",
                # Their counterexample without the option is a refused CAS with the current token; with it
                # they may still fail on Ceph 16.2 for another reason (a racing DeleteObjects errs).
                "test_mixed_history_is_linearizable_threads",
                "test_mixed_history_is_linearizable_processes",
            }
        ),
        docs="docs/ceph.md#known-deviations-of-16215-observed-here",
        compatibility_mode=UNQUOTED_IF_MATCH,
    ),
)


def remedies(url: str, given: Mapping[str, str]) -> dict[str, str]:
    """The remedy line of each clause a quirk of ``url``'s backend fails, for a target opened at ``url``
    with the options ``given`` (the check's ``--storage-option`` settings; those its backend does not
    declare are dropped, as the plugin drops them) and the environment: only for quirks whose option
    these leave off. Empty for a URL of no registered backend. Raises ConfigurationError as ``open_adapter``
    would for the same URL and options."""
    backend = url_backend(url)
    mine = [quirk for quirk in QUIRKS if quirk.backend is backend]
    if not mine:
        return {}
    config = parse_url(url, declared_options(url, given))
    found: dict[str, list[str]] = {}
    for quirk in mine:
        if not config.option(quirk.option):
            for clause in quirk.clauses:
                found.setdefault(clause, []).append(quirk.remedy())
    return {clause: "\n".join(lines) for clause, lines in found.items()}


__all__ = ["QUIRKS", "Quirk", "remedies"]
