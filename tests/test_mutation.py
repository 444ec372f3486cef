"""The mutation harness (contract_tests.mutation): its catalogue stays applicable, it refuses what it
cannot score, and the CI-sized subset of planted bugs is caught. The full catalogue, three runs on every
embedded target, is a stress run (``pytest -m stress``); its score is recorded in docs/mutation.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contract_tests import mutation
from contract_tests.mutants import CATALOGUE, Mutant


def test_every_mutant_applies_exactly_once_and_compiles(tmp_path: Path) -> None:
    mutation.check_catalogue(CATALOGUE)
    for mutant in CATALOGUE:
        copy = mutation.planted_copy(mutant, tmp_path / mutant.name)
        text = (copy / mutant.path).read_text(encoding="utf-8")
        assert mutant.replace in text and text != (mutation.SOURCE_ROOT / mutant.path).read_text("utf-8")


def test_every_equivalent_mutant_says_why_and_the_smoke_subset_spans_modules() -> None:
    assert all(len(m.equivalent) > 40 for m in CATALOGUE if m.equivalent)
    smoke_modules = {Path(m.path).name for m in CATALOGUE if m.smoke}
    assert smoke_modules >= {"adapter.py", "keys.py", "obstore_backend.py", "local_mutation.py"}


@pytest.mark.parametrize(
    "bad",
    [
        Mutant("gone", "storage_adapter/keys.py", "text that is nowhere", "x", "stale"),
        Mutant("twice", "storage_adapter/keys.py", "return", "yield", "matches many times"),
        Mutant("nofile", "storage_adapter/nope.py", "a", "b", "no such module"),
        Mutant("elsewhere", "storage_adapter/keys.py", "MAX_KEY_BYTES = 1024", "x", "bad", targets=("s3",)),
    ],
    ids=lambda m: m.name,
)
def test_a_stale_catalogue_is_refused_by_name(bad: Mutant) -> None:
    with pytest.raises(mutation.MutationError, match=bad.name):
        mutation.check_catalogue([*CATALOGUE[:1], bad])


def test_a_mutant_that_does_not_compile_is_refused(tmp_path: Path) -> None:
    broken = Mutant("syntax", "storage_adapter/keys.py", "MAX_KEY_BYTES = 1024", "MAX_KEY_BYTES = (", "x")
    with pytest.raises(mutation.MutationError, match="does not compile"):
        mutation.planted_copy(broken, tmp_path)


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert mutation.main(["--targets", "s3"]) == mutation.EXIT_BAD_INPUT
    assert mutation.main(["--only", "no-such-mutant"]) == mutation.EXIT_BAD_INPUT
    assert mutation.main(["--runs", "0"]) == mutation.EXIT_BAD_INPUT
    assert "error" in capsys.readouterr().err


# Over the default tier's budget (119 s: a baseline run of the whole contract per target, then each
# mutant's; split in halves it cost 193 s, each half paying the baseline). The default tier keeps kill
# power in tests/test_contract_self_test.py (planted bugs caught by their clauses) and the planted-bug
# races of tests/test_stress_linearizability.py and tests/test_stress_spark.py.
@pytest.mark.stress
def test_the_smoke_subset_is_killed_on_memory_and_local(tmp_path: Path) -> None:
    """The CI-sized subset (one or two planted bugs per class) is caught, and the report says so."""
    status = mutation.main(
        ["--smoke", "--runs", "1", "--targets", "memory,local", "--report", str(tmp_path / "mutation")]
    )
    report = json.loads((tmp_path / "mutation.json").read_text())
    survivors = [r["mutant"]["name"] for r in report["results"] if r["verdict"] != "killed"]
    assert status == mutation.EXIT_OK and not survivors, survivors
    assert (tmp_path / "mutation.md").read_text().startswith("# Mutation score")


@pytest.mark.stress
def test_the_whole_catalogue_is_killed_in_every_run(tmp_path: Path) -> None:
    """>= 95% of the non-equivalent mutants killed in each of three runs on memory, local and SeaweedFS."""
    status = mutation.main(["--runs", "3", "--report", str(tmp_path / "mutation")])
    report = json.loads((tmp_path / "mutation.json").read_text())
    assert status == mutation.EXIT_OK, (report["score"], report["counts"])
