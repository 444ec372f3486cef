"""A failure that matches a known server quirk with an option that fixes it names the remedy (issue 30,
item 3): the option, its environment variable and the docs, in the failing clause's evidence in every
report format; never when the option is already on for the target (contract_tests/remedies.py)."""

from __future__ import annotations

import dataclasses
import re
import uuid
from pathlib import Path

from contract_tests.clauses import AdapterContract
from contract_tests.conformance import ClauseOutcome, ClauseResult, Target, _with_remedy, run_contract
from contract_tests.plugin import ContractSizes
from contract_tests.remedies import QUIRKS, remedies
from contract_tests.report import to_json, to_markdown
from storage_adapter.servers.server import S3Endpoint, scoped_environment

ROOT = Path(__file__).resolve().parent.parent
SMALL = ContractSizes(threads=2, processes=2, increments=2, check_budget_s=10.0, clause_timeout_s=60.0)
UNQUOTED = "STORAGE_ADAPTER_S3_UNQUOTED_IF_MATCH"
# The clauses SeaweedFS failed while list_dir confirmed prefixes only on request (SeaweedFS 4.48: exactly
# these three of 84).
EMPTIED_PREFIX_CLAUSES = "emptied_prefix_leaves_nothing or delete_prefix_takes_whole or list_dir_forgets"


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    headings = re.findall(r"^#+ (.+)$", markdown, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_quirk_names_contract_clauses_a_declared_option_and_a_docs_section() -> None:
    clauses = {name for name in dir(AdapterContract) if name.startswith("test_")}
    for quirk in QUIRKS:
        assert quirk.clauses and quirk.clauses <= clauses, sorted(quirk.clauses - clauses)
        assert quirk.declared.kind is bool and quirk.declared.env, quirk.option
        path, _, anchor = quirk.docs.partition("#")
        assert anchor in _anchors((ROOT / path).read_text()), quirk.docs


def test_no_remedy_when_the_option_is_on_from_the_environment_or_an_option(
    embedded_seaweedfs: S3Endpoint,
) -> None:
    url = embedded_seaweedfs.url("remedies")
    with embedded_seaweedfs.scoped(), scoped_environment({UNQUOTED: "false"}):
        off = remedies(url, {})
        assert "unquoted_if_match" not in " ".join(remedies(url, {"unquoted_if_match": "true"}).values())
    with embedded_seaweedfs.scoped(), scoped_environment({UNQUOTED: "true"}):
        on = remedies(url, {})
    assert "test_cas_fresh_token_wins" in off and f"{UNQUOTED}=true" in off["test_cas_fresh_token_wins"]
    assert "test_cas_fresh_token_wins" not in on
    assert remedies("memory://remedies", {}) == {}


def test_a_failed_clause_of_a_quirk_ends_its_evidence_with_the_remedy_and_a_passed_one_does_not() -> None:
    """The one place remedies join the evidence (every report format shows what it holds)."""
    remedy = {"t": {"test_cas_fresh_token_wins": "remedy: ..."}}
    failed = ClauseResult(
        "test_cas_fresh_token_wins", "t", ClauseOutcome.FAILED, "refused", 0.1, evidence="ce"
    )
    assert _with_remedy(failed, remedy).evidence == "ce\nremedy: ..."
    passed = dataclasses.replace(failed, outcome=ClauseOutcome.PASSED, evidence="")
    assert _with_remedy(passed, remedy) == passed
    other = dataclasses.replace(failed, clause="test_round_trip_bytes")
    assert _with_remedy(other, remedy) == other


def test_seaweedfs_conforms_on_the_emptied_prefix_clauses_with_no_option(
    embedded_seaweedfs: S3Endpoint,
) -> None:
    """SeaweedFS reports a directory emptied by deletes as a common prefix: before issue 41 it failed these
    clauses unless an option made list_dir confirm its prefixes. Every list_dir confirms them now (a
    folder marker makes the same phantom on any server), so they pass and no remedy is shown."""
    target = Target("seaweedfs-url", embedded_seaweedfs.url(f"remedies-{uuid.uuid4().hex[:8]}"))
    with embedded_seaweedfs.scoped():
        run = run_contract([target], sizes=SMALL, selection=EMPTIED_PREFIX_CLAUSES)
    assert {r.outcome for r in run.results} == {ClauseOutcome.PASSED} and len(run.results) == 3
    assert "remedy:" not in str(to_json(run)) and "remedy:" not in to_markdown(run)
