"""A failure that matches a known server quirk with an option that fixes it names the remedy (issue 30,
item 3): the option, its environment variable and the docs, in the failing clause's evidence in every
report format; never when the option is already on for the target (contract_tests/remedies.py)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from contract_tests.clauses import AdapterContract
from contract_tests.conformance import ClauseOutcome, ConformanceRun, Target, run_contract
from contract_tests.plugin import ContractSizes
from contract_tests.remedies import QUIRKS, remedies
from contract_tests.report import to_json, to_markdown
from servers.server import S3Endpoint, scoped_environment

ROOT = Path(__file__).resolve().parent.parent
SMALL = ContractSizes(threads=2, processes=2, increments=2, check_budget_s=10.0, clause_timeout_s=60.0)
CONFIRM = "STORAGE_ADAPTER_S3_CONFIRM_PREFIXES"
# The clauses SeaweedFS fails without confirm_prefixes (measured: check s3://... against a user-supplied
# SeaweedFS 4.48 with the option off fails exactly these three of 84).
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
    with embedded_seaweedfs.scoped(), scoped_environment({CONFIRM: "false"}):
        off = remedies(url, {})
        assert "confirm_prefixes" not in " ".join(remedies(url, {"confirm_prefixes": "true"}).values())
    with embedded_seaweedfs.scoped():
        on = remedies(url, {})
    assert "test_list_dir_forgets_deleted_prefixes" in off
    assert "test_list_dir_forgets_deleted_prefixes" not in on
    assert remedies("memory://remedies", {}) == {}


def _check(endpoint: S3Endpoint, confirm: str) -> ConformanceRun:
    """The emptied-prefix clauses against ``endpoint`` as a user-supplied URL (endpoint and credentials
    from the environment), with ``STORAGE_ADAPTER_S3_CONFIRM_PREFIXES=confirm``."""
    target = Target("seaweedfs-url", endpoint.url(f"remedies-{uuid.uuid4().hex[:8]}"))
    with endpoint.scoped(), scoped_environment({CONFIRM: confirm}):
        return run_contract([target], sizes=SMALL, selection=EMPTIED_PREFIX_CLAUSES)


def test_seaweedfs_conforms_without_confirm_prefixes_since_every_list_dir_confirms(
    embedded_seaweedfs: S3Endpoint,
) -> None:
    """Before issue 41, SeaweedFS failed the emptied-prefix clauses without the option (it reports a
    directory emptied by deletes as a prefix). Every list_dir now confirms its prefixes (a folder marker
    makes the same phantom on any server), so no clause fails and no remedy is shown."""
    run = _check(embedded_seaweedfs, "false")
    assert {r.outcome for r in run.results} == {ClauseOutcome.PASSED}
    assert "remedy:" not in str(to_json(run))


def test_seaweedfs_with_confirm_prefixes_shows_no_remedy(embedded_seaweedfs: S3Endpoint) -> None:
    run = _check(embedded_seaweedfs, "true")
    assert {r.outcome for r in run.results} == {ClauseOutcome.PASSED}
    assert "remedy:" not in str(to_json(run)) and "remedy:" not in to_markdown(run)
