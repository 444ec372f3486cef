"""The mutation harness (contract_tests.mutation): its catalogues - the adapter's and every layer's - stay
applicable - to this tree, to a reformatted copy of it and to functions moved between modules - it
refuses what it cannot score, and the CI-sized subset of planted bugs is caught: the layers' part here,
the adapter's under ``pytest -m stress``. The adapter's full catalogue, three runs on every embedded
target, is a stress run too; the scores are recorded in docs/mutation.md."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from contract_tests import mutation
from contract_tests.mutants import BUG_CLASSES, CATALOGUE, Mutant

EVERY_MUTANT = mutation.EVERY_MUTANT  # the adapter's catalogue and every layer's


def test_every_mutant_applies_exactly_once_and_compiles(tmp_path: Path) -> None:
    """Every mutant of every catalogue lands once and compiles; the copy a session runs holds it (one
    copy per layer: copying is the same for every mutant, and a copy per mutant cost a minute)."""
    mutation.check_catalogue(EVERY_MUTANT)
    copied: set[str] = set()
    for mutant in EVERY_MUTANT:
        path, text = mutation.planted_source(mutant)
        original = (mutation.SOURCE_ROOT / path).read_text(encoding="utf-8")
        assert text != original and all(line.strip() in text for line in mutant.replace.splitlines()), mutant
        if mutant.layer not in copied:
            copied.add(mutant.layer)
            copy = mutation.planted_copy(mutant, tmp_path / mutant.name)
            assert (copy / path).read_text(encoding="utf-8") == text


def _reformatted(into: Path) -> Path:
    """A copy of the package as the formatter would lay it out with no ``# fmt: skip`` marker left and
    80 columns instead of 110: most long lines reflow, some into parentheses it adds."""
    package = into / mutation.PACKAGE
    shutil.copytree(
        mutation.SOURCE_ROOT / mutation.PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__")
    )
    for module in package.rglob("*.py"):
        text = module.read_text(encoding="utf-8")
        module.write_text(re.sub(r"[ \t]*# fmt: skip[ \t]*$", "", text, flags=re.MULTILINE), "utf-8")
    ruff = [sys.executable, "-m", "ruff", "format", "--isolated", "--target-version", "py311"]
    subprocess.run([*ruff, "--line-length", "80", str(package)], check=True, capture_output=True)
    return into


def test_every_mutant_applies_exactly_once_to_a_reformatted_copy(tmp_path: Path) -> None:
    root = _reformatted(tmp_path)
    reflowed = [m.name for m in EVERY_MUTANT if m.find not in (root / m.path).read_text(encoding="utf-8")]
    assert reflowed, "the reformat moved no mutant's code: this test would prove nothing"
    mutation.check_catalogue(EVERY_MUTANT, root)
    for mutant in EVERY_MUTANT:
        if not mutant.equivalent:
            mutation.planted_source(mutant, root)


_STORE = """
    class Store:
        def put(self, key: str) -> str:
            if not key:
                raise ValueError(key)
            return key
"""
# The same method after a move into sub/b.py: one level deeper (under an if, which leaves its qualified
# name alone) and reflowed with a trailing comma.
_STORE_MOVED = """
    LIMIT = 3

    if True:
        class Store:
            def put(self, key: str) -> str:
                if not key:
                    raise ValueError(
                        key,
                    )
                return key
"""
_ACCEPTS_EMPTY = Mutant(
    "store-accepts-empty-key",
    "storage_adapter/a.py",
    "Store.put",
    "        if not key:\n            raise ValueError(key)\n",
    "        if not key:\n            pass\n",
    "an empty key is accepted",
    bug_class="keys",
)


def _package(root: Path, modules: dict[str, str]) -> Path:
    for name, text in modules.items():
        path = root / mutation.PACKAGE / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


_LIMIT_OFF = Mutant(
    "limit-off", "storage_adapter/a.py", None, "LIMIT = 3", "LIMIT = 4", "one too many", bug_class="keys"
)


def test_code_moved_to_another_module_is_still_found_and_reindented(tmp_path: Path) -> None:
    root = _package(tmp_path, {"a.py": "VERSION = 1\n", "sub/b.py": _STORE_MOVED})
    mutation.check_catalogue([_ACCEPTS_EMPTY, _LIMIT_OFF], root)
    path, text = mutation.planted_source(_ACCEPTS_EMPTY, root)
    assert path == "storage_adapter/sub/b.py"
    assert "            if not key:\n                pass\n            return key" in text
    assert mutation.planted_source(_LIMIT_OFF, root)[0] == path


@pytest.mark.parametrize(
    ("modules", "reason"),
    [
        ({"a.py": "VERSION = 1\n"}, "Store.put is not in storage_adapter/a.py but in no module"),
        ({"b.py": _STORE, "c.py": _STORE}, "but in storage_adapter/b.py, storage_adapter/c.py"),
    ],
    ids=["missing", "ambiguous"],
)
def test_a_missing_or_ambiguous_function_is_refused_by_name(
    tmp_path: Path, modules: dict[str, str], reason: str
) -> None:
    root = _package(tmp_path, modules)
    with pytest.raises(mutation.MutationError, match=rf"{_ACCEPTS_EMPTY.name}: .*{re.escape(reason)}"):
        mutation.check_catalogue([_ACCEPTS_EMPTY], root)


def test_every_bug_class_has_a_live_mutant_and_one_in_the_smoke_subset() -> None:
    """A class whose every mutant is declared equivalent would be a class the score does not measure; the
    CI-sized subset spans every class of the adapter's catalogue, and holds at most three mutants of the
    other layers (the default tier's budget), each judged by a smoke selection of its layer's tests."""
    live = {m.bug_class for m in EVERY_MUTANT if not m.equivalent}
    assert live == set(BUG_CLASSES), sorted(set(BUG_CLASSES) - live)
    smoke = {m.bug_class for m in CATALOGUE if m.smoke}
    assert smoke == {m.bug_class for m in CATALOGUE}, sorted({m.bug_class for m in CATALOGUE} - smoke)
    layer_smoke = [m for m in EVERY_MUTANT if m.smoke and m.layer != "adapter"]
    assert 1 <= len(layer_smoke) <= 3, [m.name for m in layer_smoke]
    assert all(mutation.LAYERS[m.layer].smoke_tests and not m.equivalent for m in layer_smoke)


# Where each layer's bugs are planted (the engine's recovery modules are the recovery layer's).
_RECOVERY_MODULES = {"recovery.py", "sidecar.py", "key_ledger.py"}
_LAYER_HOMES = {
    "engine": lambda path: (
        path.startswith("storage_adapter/engine/") and Path(path).name not in _RECOVERY_MODULES
    ),
    "recovery": lambda path: (
        path.startswith("storage_adapter/engine/") and Path(path).name in _RECOVERY_MODULES
    ),
    "idempotency": lambda path: path.startswith("storage_adapter/idempotency/"),
    "http": lambda path: path.startswith("storage_adapter/http/"),
}


@pytest.mark.parametrize("layer", sorted(_LAYER_HOMES))
def test_each_layer_has_its_own_catalogue_and_tests(layer: str) -> None:
    """Every layer's catalogue plants 10 to 16 bugs in its own modules only, of at least four classes,
    and names the tests that judge them: files that exist (a renamed test file is refused by name), the
    smoke selection among them."""
    judged = mutation.LAYERS[layer]
    assert 10 <= len(judged.catalogue) <= 16
    assert all(m.layer == layer and _LAYER_HOMES[layer](m.path) for m in judged.catalogue)
    assert len({m.bug_class for m in judged.catalogue}) >= 4
    tests = judged.selection(smoke=False)
    assert tests and all(name.startswith("tests/test_") for name in tests)
    smoke_files = {name.split("::")[0] for name in judged.selection(smoke=True)}
    assert smoke_files <= {name.split("::")[0] for name in tests}
    with pytest.raises(mutation.MutationError, match=layer):
        mutation.Layer(layer, judged.catalogue, ("tests/test_no_such_file_*.py",)).selection(smoke=False)


def test_the_list_shows_every_layers_catalogue(capsys: pytest.CaptureFixture[str]) -> None:
    assert mutation.main(["--list"]) == mutation.EXIT_OK
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == len(EVERY_MUTANT)
    assert {line.split()[0] for line in listed} == set(mutation.LAYERS)
    assert mutation.main(["--list", "--layer", "http"]) == mutation.EXIT_OK
    assert {line.split()[0] for line in capsys.readouterr().out.splitlines()} == {"http"}


def test_the_report_counts_verdicts_per_bug_class() -> None:
    def result(name: str, bug_class: str, verdict: mutation.Verdict) -> mutation.MutantResult:
        mutant = Mutant(name, "storage_adapter/keys.py", None, "x", "y", "a bug", bug_class=bug_class)
        return mutation.MutantResult(mutant, verdict)

    report = mutation.MutationReport(
        (
            result("a", "keys", mutation.Verdict.KILLED),
            result("b", "keys", mutation.Verdict.SURVIVED),
            result("c", "identity", mutation.Verdict.KILLED),
            result("d", "identity", mutation.Verdict.EQUIVALENT),
        ),
        targets=("memory",),
        runs=1,
        seconds=1.0,
    )
    markdown = mutation.render_markdown(report)
    assert "| keys | 1 | 0 | 1 | 0 | 0 |" in markdown
    assert "| identity | 1 | 0 | 0 | 1 | 0 |" in markdown
    assert "| c | identity | keys.py | a bug | killed |" in markdown
    classes = json.loads(mutation.render_json(report))["classes"]
    assert list(classes) == ["keys", "identity"]  # the catalogue's order of classes
    assert classes["keys"]["survived"] == 1 and classes["identity"]["equivalent"] == 1


def test_the_report_scores_each_layer_apart() -> None:
    def result(name: str, layer: str, verdict: mutation.Verdict) -> mutation.MutantResult:
        path = "storage_adapter/keys.py" if layer == "adapter" else "storage_adapter/http/middleware.py"
        mutant = Mutant(name, path, None, "x", "y", "a bug", bug_class="fingerprint", layer=layer)
        return mutation.MutantResult(mutant, verdict)

    report = mutation.MutationReport(
        (
            result("a", "adapter", mutation.Verdict.KILLED),
            result("h1", "http", mutation.Verdict.KILLED),
            result("h2", "http", mutation.Verdict.SURVIVED),
        ),
        targets=("memory",),
        runs=1,
        seconds=1.0,
        judged_by={"adapter": "the contract on memory", "http": "tests/test_http_middleware.py"},
    )
    markdown = mutation.render_markdown(report)
    assert markdown.startswith("# Mutation score by layer")
    assert "| adapter | 100.0% | 1 | 0 | 0 | 0 | 0 | 0 | the contract on memory |" in markdown
    assert "| http | 50.0% | 1 | 0 | 1 | 0 | 0 | 0 | tests/test_http_middleware.py |" in markdown
    assert "## Mutation score of the http layer's tests" in markdown
    assert "| h2 | fingerprint | middleware.py | a bug | survived |" in markdown
    layers = json.loads(mutation.render_json(report))["layers"]
    assert list(layers) == ["adapter", "http"]
    assert layers["http"]["score"] == 0.5 and layers["http"]["classes"]["fingerprint"]["survived"] == 1


def test_every_equivalent_mutant_says_why_and_the_smoke_subset_spans_modules() -> None:
    assert all(len(m.equivalent) > 40 for m in CATALOGUE if m.equivalent)
    smoke_modules = {Path(m.path).name for m in CATALOGUE if m.smoke}
    assert smoke_modules >= {"adapter.py", "keys.py", "driver.py", "local_files.py"}


@pytest.mark.parametrize(
    "bad",
    [
        Mutant("gone", "storage_adapter/keys.py", "validate_key", "text that is nowhere", "x", "stale"),
        Mutant("twice", "storage_adapter/keys.py", None, "return", "yield", "matches many times"),
        Mutant("nofile", "storage_adapter/nope.py", None, "NOWHERE = 1", "NOWHERE = 2", "no such module"),
        Mutant(
            "elsewhere", "storage_adapter/keys.py", None, "MAX_KEY_BYTES = 1024", "x", "bad", targets=("s3",)
        ),
        Mutant(
            "other-function",
            "storage_adapter/keys.py",
            "validate_prefix",
            'size = len(key.encode("utf-8"))',
            "size = len(key)",
            "its text is in validate_key, not in the function it names",
        ),
        Mutant(
            "margins", "storage_adapter/keys.py", None, "MAX_KEY_BYTES = 1024\n", "X = 1", "drops the newline"
        ),
        Mutant(
            "unindented",
            "storage_adapter/keys.py",
            "validate_key",
            'size = len(key.encode("utf-8"))',
            "size = 0\n    size += 1",
            "several lines, no indentation to re-indent from",
        ),
    ],
    ids=lambda m: m.name,
)
def test_a_stale_catalogue_is_refused_by_name(bad: Mutant) -> None:
    with pytest.raises(mutation.MutationError, match=bad.name):
        mutation.check_catalogue([*CATALOGUE[:1], bad])


def test_a_mutant_that_does_not_compile_is_refused(tmp_path: Path) -> None:
    broken = Mutant(
        "syntax", "storage_adapter/keys.py", None, "MAX_KEY_BYTES = 1024", "MAX_KEY_BYTES = (", "x"
    )
    with pytest.raises(mutation.MutationError, match="does not compile"):
        mutation.planted_copy(broken, tmp_path)


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert mutation.main(["--targets", "s3"]) == mutation.EXIT_BAD_INPUT
    assert mutation.main(["--only", "no-such-mutant"]) == mutation.EXIT_BAD_INPUT
    assert mutation.main(["--runs", "0"]) == mutation.EXIT_BAD_INPUT
    assert mutation.main(["--layer", "no-such-layer"]) == mutation.EXIT_BAD_INPUT
    assert "error" in capsys.readouterr().err


# Over the default tier's budget (119 s: a baseline run of the whole contract per target, then each
# mutant's; split in halves it cost 193 s, each half paying the baseline). The default tier keeps kill
# power in tests/test_contract_self_test.py (planted bugs caught by their clauses) and the planted-bug
# races of tests/test_stress_linearizability.py and tests/test_stress_spark.py.
def test_the_layers_smoke_subset_is_killed_by_their_tests(tmp_path: Path) -> None:
    """The layers' part of the CI-sized subset (at most three mutants, each judged by its layer's smoke
    selection after that selection's unmutated baseline) is caught, and the report says so per layer."""
    layers = ",".join(name for name in mutation.LAYERS if name != "adapter")
    status = mutation.main(
        ["--layer", layers, "--smoke", "--runs", "1", "--report", str(tmp_path / "mutation")]
    )
    report = json.loads((tmp_path / "mutation.json").read_text())
    survivors = [r["mutant"]["name"] for r in report["results"] if r["verdict"] != "killed"]
    assert status == mutation.EXIT_OK and not survivors, survivors
    assert report["results"] and all(layer["score"] == 1.0 for layer in report["layers"].values())


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
