"""How strong is the referee? Mutation testing of the contract, and of each layer's own tests, against
this package's own code.

Each mutant plants one realistic bug in a copy of ``storage_adapter``: its text, found in the function it
names wherever that function now lives and however the formatter laid it out, must match exactly once, so
a stale catalogue fails loudly (the rule is stated in :mod:`contract_tests.mutants`). Every mutant belongs
to one :data:`LAYERS` entry, which says who judges it:

* ``adapter`` (:data:`contract_tests.mutants.CATALOGUE`): the contract, as a separate pytest session per
  target where the mutated code runs;
* ``engine``, ``recovery``, ``idempotency``, ``http`` (:mod:`contract_tests.layer_mutants`): the layer's
  own tests of this source tree, default tier, one session on memory and local (the tests choose their
  backends; their SeaweedFS and Azurite cases are deselected).

Each mutant is judged ``runs`` times:

* **killed**: every run found it (the contract failed on at least one target where the code runs);
* **flaky**: some runs did, some did not - a referee that catches a bug only sometimes certifies it;
* **survived**: no run did;
* **equivalent**: listed with the reason no observable behaviour changes, never run;
* **not run**: its code runs on none of the selected targets (e.g. an S3-only bug with ``--targets
  memory,local``).

The score is killed / (killed + flaky + survived): flaky counts against it, per layer and over all. An
unmutated baseline runs first for every layer selected, on every target; if one fails, nothing is scored
(every mutant would look killed).

``storage-adapter mutate`` runs it (``--layer`` picks the catalogues, ``--smoke`` the CI-sized subset);
``pytest -m stress`` runs the adapter's whole catalogue three times; docs/mutation.md holds the last
scores.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from functools import partial
from pathlib import Path

from contract_tests.layer_mutants import ENGINE, HTTP, IDEMPOTENCY, RECOVERY
from contract_tests.mutants import BUG_CLASSES, CATALOGUE, Mutant
from contract_tests.targets import EMBEDDED
from storage_adapter.servers.server import without_client_settings

PACKAGE = "storage_adapter"
REFEREE = "contract_tests"
SOURCE_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RUNS = 3
DEFAULT_MIN_SCORE = 0.95
# A contract session that takes longer than this is a hung clause: the mutant made the referee hang,
# which an operator's CI would report as a failure too. A layer's session may take as long as this many
# times its baseline's.
SESSION_TIMEOUT_S = 240.0
BASELINE_TIMEOUT_FACTOR = 3.0
CLAUSE_TIMEOUT_S = 60.0
_FAILED_LINE = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)

EXIT_OK, EXIT_BELOW_SCORE, EXIT_BAD_INPUT = 0, 1, 2


class MutationError(Exception):
    """The harness cannot score: a stale catalogue entry, a failing baseline, an unknown target."""


# -- layers ---------------------------------------------------------------------------------------------------
# What a layer's session runs besides its tests: the default tier (the ini file's own marker expression,
# spelt out so that it holds whatever the ini says), memory and local only (the cases the tests
# parametrize on a server are deselected: the harness judges what runs without one), in one process (the
# harness's --jobs runs mutants side by side) and in file order.
_LAYER_OPTIONS = (
    "-m",
    "not stress and not servers",
    "--storage-embedded",
    "memory,local",
    "-k",
    "not seaweedfs and not azurite",
    "-p",
    "no:xdist",
    "-p",
    "no:randomly",
)
# What a layer's tests need of the source tree besides the packages: the tests themselves (their conftest
# and workers), the examples they start as services, and the ini file (markers, options, timeout).
_LAYER_TREE = ("tests", "examples", "pyproject.toml")


@dataclass(frozen=True)
class Layer:
    """A layer of ``storage_adapter`` the harness plants bugs in: its catalogue and who judges it.
    ``tests``: the test files (globs) or node ids, relative to the source root, that judge a mutant of
    the layer; none: the contract, once per target. ``smoke_tests``: the cheaper selection that judges
    the layer's smoke mutants (``--smoke``), a part of ``tests`` that kills them."""

    name: str
    catalogue: tuple[Mutant, ...]
    tests: tuple[str, ...] = ()
    smoke_tests: tuple[str, ...] = ()

    @property
    def by_contract(self) -> bool:
        return not self.tests

    def selection(self, smoke: bool, root: Path = SOURCE_ROOT) -> tuple[str, ...]:
        """The test files and node ids of the session, globs expanded under ``root``; MutationError for
        a glob or file that names nothing (a renamed test file would otherwise judge nothing)."""
        chosen: list[str] = []
        for pattern in self.smoke_tests if smoke and self.smoke_tests else self.tests:
            path = pattern.split("::", 1)[0]
            found = sorted(p.relative_to(root).as_posix() for p in root.glob(path))
            if not found:
                raise MutationError(f"layer {self.name}: {pattern} names no test file under {root}")
            chosen += [pattern] if "::" in pattern else found
        return tuple(dict.fromkeys(chosen))


_ENGINE_TESTS = ("tests/test_engine_*.py", "tests/test_exactly_once_engine.py", "tests/test_commit_*.py")
LAYERS: dict[str, Layer] = {
    layer.name: layer
    for layer in (
        Layer("adapter", CATALOGUE),
        Layer(
            "engine",
            ENGINE,
            _ENGINE_TESTS,
            ("tests/test_engine_core.py::test_multi_table_commit_is_one_version_with_its_record",),
        ),
        Layer(
            "recovery",
            RECOVERY,
            (
                "tests/test_recovery_*.py",
                "tests/test_exactly_once_engine.py",
                "tests/test_engine_referee.py",  # its roll-back, roll-forward, lease and heal-bound promises
                # the engine's crash and heal tests of the default tier
                "tests/test_engine_app_watermark.py",
                "tests/test_engine_core.py::test_heal_reads_a_live_foreign_sidecar_once_and_rechecks_it_when_its_writer_may_be_dead",
                "tests/test_engine_core.py::test_a_commits_heal_reads_no_sidecar_written_within_the_lease",
                "tests/test_engine_tables_spark_ready.py::test_crashed_partition_overwrite_is_all_or_nothing",
                "tests/test_commit_history.py::test_recovery_finds_a_publish_older_than_the_tail_in_the_stored_history",
                "tests/test_commit_history.py::test_a_crash_between_the_stored_objects_and_the_cas_is_rolled_forward_once",
            ),
            ("tests/test_recovery_matrix.py",),
        ),
        Layer(
            "idempotency",
            IDEMPOTENCY,
            ("tests/test_idempotency_*.py",),
            ("tests/test_idempotency_handler.py::test_deterministic_4xx_is_stored_other_errors_cancel",),
        ),
        Layer(
            "http",
            HTTP,
            ("tests/test_http_*.py",),
            (
                "tests/test_http_middleware.py::"
                "test_replay_carries_status_body_and_the_headers_that_matter_never_a_cookie",
            ),
        ),
    )
}
EVERY_MUTANT: tuple[Mutant, ...] = tuple(m for layer in LAYERS.values() for m in layer.catalogue)


class RunOutcome(Enum):
    KILLED = "killed"
    SURVIVED = "survived"
    TIMEOUT = "timeout"  # the session hung: killed, shown apart
    ERROR = "error"  # pytest could not run (usage, collection): the harness's fault, never a kill


class Verdict(Enum):
    KILLED = "killed"
    FLAKY = "flaky"
    SURVIVED = "survived"
    EQUIVALENT = "equivalent"
    NOT_RUN = "not run"  # its code runs on none of the selected targets
    ERROR = "error"


@dataclass(frozen=True)
class SessionResult:
    """One contract session against one target."""

    target: str
    outcome: RunOutcome
    seconds: float
    failed: tuple[str, ...] = ()  # the clauses that failed
    detail: str = ""  # the tail of the output when pytest could not run


@dataclass(frozen=True)
class MutantResult:
    mutant: Mutant
    verdict: Verdict
    runs: tuple[tuple[SessionResult, ...], ...] = ()  # per run, the sessions it took (stops at a kill)

    @property
    def killed_runs(self) -> int:
        return sum(any(s.outcome in _KILLS for s in run) for run in self.runs)


_KILLS = (RunOutcome.KILLED, RunOutcome.TIMEOUT)


@dataclass(frozen=True)
class MutationReport:
    """The verdicts of one campaign, over one or more layers. ``judged_by``: per layer, what judged it
    (the contract's targets, or the layer's test selection)."""

    results: tuple[MutantResult, ...]
    targets: tuple[str, ...]
    runs: int
    seconds: float
    baseline: tuple[SessionResult, ...] = field(default=())
    judged_by: dict[str, str] = field(default_factory=dict)

    @property
    def layers(self) -> tuple[str, ...]:
        """The layers of the results, in the order of :data:`LAYERS`."""
        present = {r.mutant.layer for r in self.results}
        return tuple(name for name in LAYERS if name in present)

    def of_layer(self, layer: str) -> MutationReport:
        """This report restricted to the mutants of ``layer``."""
        return replace(
            self,
            results=tuple(r for r in self.results if r.mutant.layer == layer),
            judged_by={layer: self.judged_by.get(layer, "")},
        )

    def count(self, verdict: Verdict) -> int:
        return sum(r.verdict is verdict for r in self.results)

    def by_class(self) -> dict[str, Counter[Verdict]]:
        """The verdicts of each bug class (the catalogue's order of classes), classes with no mutant left out."""
        counts: dict[str, Counter[Verdict]] = {}
        for name in BUG_CLASSES:
            verdicts = Counter(r.verdict for r in self.results if r.mutant.bug_class == name)
            if verdicts:
                counts[name] = verdicts
        return counts

    @property
    def scored(self) -> int:
        return sum(r.verdict in (Verdict.KILLED, Verdict.FLAKY, Verdict.SURVIVED) for r in self.results)

    @property
    def score(self) -> float:
        return self.count(Verdict.KILLED) / self.scored if self.scored else 1.0


# -- the catalogue -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Site:
    """Where a mutant lands: a module (relative to the source root) and the span of its text there."""

    path: str
    start: int
    end: int


class _Package:
    """The modules of ``storage_adapter`` under one source root, each read and parsed at most once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._texts: dict[str, str] = {}
        self._functions: dict[str, dict[str, list[tuple[int, int]]]] = {}

    def modules(self) -> list[str]:
        return sorted(p.relative_to(self.root).as_posix() for p in (self.root / PACKAGE).rglob("*.py"))

    def text(self, path: str) -> str:
        if path not in self._texts:
            self._texts[path] = (self.root / path).read_text(encoding="utf-8")
        return self._texts[path]

    def functions(self, path: str) -> dict[str, list[tuple[int, int]]]:
        """Qualified name -> the spans of its definitions in ``path``, each from its first decorator's
        line to the end of its last line (a property's getter and setter share one name)."""
        if path not in self._functions:
            text = self.text(path)
            try:
                tree = ast.parse(text, path)
            except SyntaxError as exc:
                raise MutationError(f"{path} does not parse: {exc}") from None
            # Line starts as ast counts lines (str.splitlines would also split at \f and \u2028).
            lines = [0, *(m.end() for m in re.finditer("\n", text)), len(text)]
            found: dict[str, list[tuple[int, int]]] = {}

            def visit(node: ast.AST, scope: str) -> None:
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                        name = scope + child.name
                        if not isinstance(child, ast.ClassDef):
                            first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                            last = child.end_lineno or child.lineno
                            found.setdefault(name, []).append((lines[first - 1], lines[last]))
                        visit(child, name + ".")
                    else:
                        visit(child, scope)

            visit(tree, "")
            self._functions[path] = found
        return self._functions[path]

    def line(self, path: str, offset: int) -> int:
        return self.text(path).count("\n", 0, offset) + 1


# Where the formatter may reflow code: between two tokens it adds or drops whitespace and line breaks,
# wraps a long expression in parentheses (or unwraps it) and puts a trailing comma before a closing one.
# Lazy, so that a match ends at the first bracket that can close it rather than swallowing the next.
_GAP = r"(?:\s|\(|,?\s*\))*?"
_WORDS_GAP = r"(?:\s|\(|,?\s*\))+?"
_WORD = re.compile(r"\w")


def _pattern(find: str) -> re.Pattern[str]:
    """``find`` as a regex that matches the same code however a formatter lays it out: whitespace is
    required only where it separates two words and may be any whitespace there; elsewhere whitespace,
    added parentheses and a trailing comma before a closing bracket are allowed; either quote matches."""
    parts: list[str] = []
    previous, spaced = "", False
    for char in find.strip():
        if char.isspace():
            spaced = True
            continue
        if previous:
            words = _WORD.match(previous) and _WORD.match(char)
            parts.append((_WORDS_GAP if spaced else "") if words else _GAP)
        if char in ")]}":
            parts.append(r",?\s*")
        parts.append("[\"']" if char in "\"'" else re.escape(char))
        previous, spaced = char, False
    return re.compile("".join(parts))


def _matches(mutant: Mutant, text: str, spans: Sequence[tuple[int, int]]) -> list[re.Match[str]]:
    """The matches of ``mutant``'s text inside ``spans`` of ``text``."""
    pattern = _pattern(mutant.find)
    # The parentheses a match adds to find's must pair up inside it: the replacement drops them all.
    balance = mutant.find.count("(") - mutant.find.count(")")
    return [
        m
        for start, end in spans
        for m in pattern.finditer(text, start, end)
        if m[0].count("(") - m[0].count(")") == balance
    ]


def _module_of(mutant: Mutant, package: _Package) -> str:
    """The module ``mutant`` lands in: its own path while that still defines its function (module-level
    code: still holds its text), else the one module of the package that does (the code moved)."""

    def holds(path: str) -> bool:
        if mutant.function:
            return mutant.function in package.functions(path)
        return bool(_matches(mutant, package.text(path), [(0, len(package.text(path)))]))

    if (package.root / mutant.path).is_file() and holds(mutant.path):
        return mutant.path
    holders = [p for p in package.modules() if holds(p)]
    if len(holders) != 1:
        what = f"its function {mutant.function} is" if mutant.function else "its module-level text is"
        where = ", ".join(holders) or f"no module of {PACKAGE}"
        raise MutationError(f"{mutant.name}: {what} not in {mutant.path} but in {where} (must be one module)")
    return holders[0]


def _locate(mutant: Mutant, package: _Package) -> _Site:
    """The one match of ``mutant``'s text in its function (its module if it names none); MutationError,
    naming the mutant, for none or several."""
    path = _module_of(mutant, package)
    text = package.text(path)
    spans = package.functions(path)[mutant.function] if mutant.function else [(0, len(text))]
    found = _matches(mutant, text, spans)
    if len(found) != 1:
        scope = f"{mutant.function} of {path}" if mutant.function else path
        # Where: the lines of the matches, or of the code searched when there is none.
        where = [str(package.line(path, m.start())) for m in found] or [
            f"{package.line(path, start)}-{package.line(path, end - 1)}" for start, end in spans
        ]
        raise MutationError(
            f"{mutant.name}: its text occurs {len(found)} times in {scope} "
            f"(lines {', '.join(where)}) (must be once)"
        )
    return _Site(path, found[0].start(), found[0].end())


def check_catalogue(catalogue: Sequence[Mutant], root: Path = SOURCE_ROOT) -> None:
    """Raise MutationError unless names are unique and every mutant lands exactly once under ``root``."""
    problems = [
        f"duplicate mutant name {n!r}" for n, c in Counter(m.name for m in catalogue).items() if c > 1
    ]
    package = _Package(root)
    for mutant in catalogue:
        try:
            _locate(mutant, package)
        except MutationError as exc:
            problems.append(str(exc))
        if mutant.find == mutant.replace:
            problems.append(f"{mutant.name}: replacement equals the original")
        lead, trail = _margins(mutant.find)
        if mutant.replace and not (mutant.replace.startswith(lead) and mutant.replace.endswith(trail)):
            problems.append(
                f"{mutant.name}: its replacement must keep its text's leading and trailing whitespace"
            )
        if "\n" in mutant.replace.strip() and not lead:
            problems.append(
                f"{mutant.name}: a replacement of several lines needs a text that starts with its indentation"
            )
        unknown = set(mutant.targets) - set(EMBEDDED)
        if unknown:
            problems.append(f"{mutant.name}: unknown targets {sorted(unknown)}")
        if mutant.bug_class not in BUG_CLASSES:
            problems.append(f"{mutant.name}: bug class {mutant.bug_class!r} is none of {sorted(BUG_CLASSES)}")
        if mutant.layer not in LAYERS:
            problems.append(f"{mutant.name}: layer {mutant.layer!r} is none of {sorted(LAYERS)}")
    if problems:
        raise MutationError("stale mutant catalogue:\n  " + "\n  ".join(problems))


def planted_source(mutant: Mutant, root: Path = SOURCE_ROOT) -> tuple[str, str]:
    """The module ``mutant`` lands in (relative to ``root``) and its source with the bug planted: the
    match replaced by ``replace``, whose lines after the first move by as much as the code's indentation
    differs from the one ``find`` assumed. MutationError if it does not land once or does not compile."""
    package = _Package(root)
    site = _locate(mutant, package)
    text = package.text(site.path)
    lead, trail = _margins(mutant.find)
    body = mutant.replace.removeprefix(lead).removesuffix(trail)
    before = text[text.rfind("\n", 0, site.start) + 1 : site.start]
    shift = len(before) - len(before.lstrip(" ")) - len(lead.rsplit("\n", 1)[-1])
    first, *rest = body.split("\n")
    try:
        body = "\n".join([first, *(_shifted(line, shift) for line in rest)])
        mutated = text[: site.start] + body + text[site.end :]
        compile(mutated, site.path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        raise MutationError(f"{mutant.name}: the mutated {site.path} does not compile: {exc}") from None
    return site.path, mutated


def _margins(find: str) -> tuple[str, str]:
    """The whitespace before and after ``find``'s code: the source's own is kept where it lands."""
    return find[: len(find) - len(find.lstrip())], find[len(find.rstrip()) :]


def _shifted(line: str, shift: int) -> str:
    """``line`` moved ``shift`` columns (left if negative); a blank line stays blank."""
    if not line.strip():
        return line
    if shift >= 0:
        return " " * shift + line
    if not line.startswith(" " * -shift):
        raise ValueError(f"cannot move {line!r} {-shift} columns left")
    return line[-shift:]


def planted_copy(
    mutant: Mutant | None, into: Path, root: Path = SOURCE_ROOT, tree: Sequence[str] = ()
) -> Path:
    """A copy of the package under ``into`` with ``mutant`` applied (none: unmutated); returns the
    directory to put first on PYTHONPATH. The contract is copied beside it, unmutated: the sessions run
    the clauses of this source tree, not those of whatever tree is installed (an editable install of
    another checkout would judge the mutant by its own, older clauses). So are the files and folders
    of ``tree`` (a layer's tests, unmutated): a worker a test starts from its own folder's parent then
    runs the mutated package too."""
    for name in (PACKAGE, REFEREE, *tree):
        if (root / name).is_dir():
            shutil.copytree(root / name, into / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            into.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, into / name)
    if mutant is not None:
        path, text = planted_source(mutant, root)
        (into / path).write_text(text, encoding="utf-8")
    return into


# -- sessions -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TargetRoute:
    """How a session judges a mutant: pytest arguments and, for a server, its client settings (which
    replace the caller's). ``in_copy``: the session runs in the planted copy (a layer's tests: its ini
    file and conftest); else in an empty folder (the contract: no ini file, no conftest)."""

    name: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    in_copy: bool = False


# The contract from the copy, in --import-mode=importlib: pytest's default mode would put the source
# tree's root first on ``sys.path`` while collecting ``contract_tests``, and spawned racers, which inherit
# the path, would run the unmutated package.
_CONTRACT = (
    "--pyargs",
    REFEREE,
    "--import-mode=importlib",
    "--contract-clause-timeout",
    f"{CLAUSE_TIMEOUT_S:g}",
)


@contextlib.contextmanager
def target_routes(names: Sequence[str]) -> Iterator[dict[str, TargetRoute]]:
    """Routes to the embedded targets ``names``. Scratch targets (memory, local) are made by each session
    itself; an S3 server target is started once here and each session gets a fresh prefix."""
    from storage_adapter.registry import registered

    scratch = {b.name for b in registered() if b.scratch is not None}
    with contextlib.ExitStack() as stack:
        routes = {}
        for name in names:
            if name in scratch:
                routes[name] = TargetRoute(name, (*_CONTRACT, "--storage-embedded", name))
                continue
            from storage_adapter.servers.registry import provider

            endpoint = stack.enter_context(provider(name)(bucket="mutation"))
            routes[name] = TargetRoute(
                name,
                (*_CONTRACT, "--storage-url", f"{name}={endpoint.url('{prefix}')}"),
                tuple(endpoint.environment().items()),
            )
        yield routes


def layer_route(layer: Layer, smoke: bool = False) -> TargetRoute:
    """The one session that judges a mutant of ``layer`` (not the adapter's): its test selection,
    default tier, memory and local, run in the copy."""
    return TargetRoute(f"{layer.name}:tests", (*layer.selection(smoke), *_LAYER_OPTIONS), in_copy=True)


def run_session(route: TargetRoute, pythonpath: Path, timeout_s: float = SESSION_TIMEOUT_S) -> SessionResult:
    """One pytest session of ``route`` with ``pythonpath`` (a planted copy) first on the path, so that
    it and every process it starts run the copy; stops at the first failing test."""
    args = [arg.replace("{prefix}", f"mut-{uuid.uuid4().hex[:10]}") for arg in route.args]
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-x",
        "-q",
        "--no-header",
        "-rfE",
        *args,
    ]
    # A server's route hands the session that server's settings and none of the caller's AWS_* ones.
    base = without_client_settings() if route.env else os.environ
    env = {**base, **dict(route.env), "PYTHONPATH": str(pythonpath), "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mutation-cwd-") as empty:
        cwd = pythonpath if route.in_copy else empty
        try:
            done = subprocess.run(
                command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout_s
            )
        except subprocess.TimeoutExpired:
            return SessionResult(route.name, RunOutcome.TIMEOUT, time.monotonic() - started)
    seconds = time.monotonic() - started
    output = done.stdout + done.stderr
    if done.returncode == 0:
        return SessionResult(route.name, RunOutcome.SURVIVED, seconds)
    failed = tuple(_FAILED_LINE.findall(done.stdout))
    if done.returncode == 1 and failed:
        return SessionResult(route.name, RunOutcome.KILLED, seconds, failed)
    return SessionResult(route.name, RunOutcome.ERROR, seconds, failed, output[-2000:])


@dataclass(frozen=True)
class _Referee:
    """Who judges the mutants of one layer: its routes, what the planted copy needs beside the package,
    and each route's timeout (from its baseline once that ran)."""

    layer: Layer
    routes: tuple[TargetRoute, ...]
    timeouts: dict[str, float] = field(default_factory=dict)

    @property
    def tree(self) -> tuple[str, ...]:
        return () if self.layer.by_contract else _LAYER_TREE

    def routes_for(self, mutant: Mutant) -> list[TargetRoute]:
        """The contract's routes to the targets where the mutated code runs; a layer's one session."""
        if not self.layer.by_contract:
            return list(self.routes)
        return [r for t in mutant.targets for r in self.routes if r.name == t]

    def describe(self) -> str:
        if self.layer.by_contract:
            return "the contract on " + ", ".join(r.name for r in self.routes)
        tests = [a for a in self.routes[0].args if a.startswith("tests/")]
        return f"{', '.join(tests)} (default tier, memory and local)"

    def session(self, route: TargetRoute, copy: Path) -> SessionResult:
        return run_session(route, copy, self.timeouts.get(route.name, SESSION_TIMEOUT_S))


def _probe(work: Path) -> None:
    """MutationError unless a copy first on PYTHONPATH shadows the installed package."""
    copy = planted_copy(None, work / "probe")
    probe = subprocess.run(
        [sys.executable, "-c", f"import {PACKAGE}; print({PACKAGE}.__file__)"],
        env={**os.environ, "PYTHONPATH": str(copy)},
        capture_output=True,
        text=True,
        cwd=work,
    )
    shutil.rmtree(copy, ignore_errors=True)
    if not probe.stdout.strip().startswith(str(copy)):
        raise MutationError(
            f"a copy first on PYTHONPATH does not shadow the installed {PACKAGE} "
            f"({probe.stdout.strip() or probe.stderr.strip()}): install it as a normal or editable package"
        )


def _baseline(referee: _Referee, work: Path) -> tuple[_Referee, tuple[SessionResult, ...]]:
    """The referee's sessions on the unmutated copy, and the referee with timeouts from their times;
    MutationError if any does not pass."""
    copy = planted_copy(None, work / f"baseline-{referee.layer.name}", tree=referee.tree)
    try:
        results = tuple(referee.session(route, copy) for route in referee.routes)
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    broken = [r for r in results if r.outcome is not RunOutcome.SURVIVED]
    if broken:
        lines = [f"{r.target}: {r.outcome.value} {', '.join(r.failed)} {r.detail[-600:]}" for r in broken]
        raise MutationError(
            f"the unmutated {referee.describe()} does not pass, nothing can be scored:\n" + "\n".join(lines)
        )
    timeouts = {r.target: max(SESSION_TIMEOUT_S, BASELINE_TIMEOUT_FACTOR * r.seconds) for r in results}
    return replace(referee, timeouts=timeouts), results


def run_mutant(mutant: Mutant, referee: _Referee, runs: int, work: Path) -> MutantResult:
    if mutant.equivalent:
        return MutantResult(mutant, Verdict.EQUIVALENT)
    routes = referee.routes_for(mutant)
    if not routes:
        return MutantResult(mutant, Verdict.NOT_RUN)
    copy = planted_copy(mutant, work / mutant.name, tree=referee.tree)
    try:
        history = []
        for _ in range(runs):
            sessions = []
            for route in routes:
                sessions.append(referee.session(route, copy))
                if sessions[-1].outcome in _KILLS:
                    break
            history.append(tuple(sessions))
            if any(s.outcome is RunOutcome.ERROR for s in sessions):
                return MutantResult(mutant, Verdict.ERROR, tuple(history))
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    killed = sum(any(s.outcome in _KILLS for s in run) for run in history)
    verdict = Verdict.KILLED if killed == runs else Verdict.SURVIVED if killed == 0 else Verdict.FLAKY
    return MutantResult(mutant, verdict, tuple(history))


def run_catalogue(
    mutants: Sequence[Mutant],
    targets: Sequence[str],
    runs: int = DEFAULT_RUNS,
    jobs: int = 1,
    progress: Callable[[MutantResult], None] | None = None,
    smoke: bool = False,
) -> MutationReport:
    """Score ``mutants`` (of any layers): the adapter's on ``targets`` (embedded target names), every
    other layer's by its tests (its smoke selection with ``smoke``). Every layer's baseline runs first;
    ``progress(result)`` after each mutant."""
    check_catalogue(mutants)
    layers = [layer for name, layer in LAYERS.items() if any(m.layer == name for m in mutants)]
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mutation-")))
        _probe(work)
        referees: list[_Referee] = []
        baseline: list[SessionResult] = []
        for layer in layers:
            if layer.by_contract:
                routes = tuple(stack.enter_context(target_routes(targets)).values())
            else:
                routes = (layer_route(layer, smoke),)
            referee, sessions = _baseline(_Referee(layer, routes), work)
            referees.append(referee)
            baseline += sessions
        results: list[MutantResult] = []
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            for referee in referees:
                chosen = [m for m in mutants if m.layer == referee.layer.name]
                judge = partial(run_mutant, referee=referee, runs=runs, work=work)
                for result in pool.map(judge, chosen):
                    results.append(result)
                    if progress is not None:
                        progress(result)
    return MutationReport(
        tuple(results),
        tuple(targets),
        runs,
        time.monotonic() - started,
        tuple(baseline),
        {referee.layer.name: referee.describe() for referee in referees},
    )


# -- reports --------------------------------------------------------------------------------------------------
def _module(mutant: Mutant) -> str:
    return Path(mutant.path).name


_CLASS_COLUMNS = (Verdict.KILLED, Verdict.FLAKY, Verdict.SURVIVED, Verdict.EQUIVALENT, Verdict.NOT_RUN)


def render_markdown(report: MutationReport) -> str:
    """The report as Markdown: one layer's tables under its title; several layers' under a table of
    their scores."""
    layers = report.layers or ("adapter",)
    if len(layers) == 1:
        return "\n".join(_layer_markdown(report, layers[0], "#", report.seconds)) + "\n"
    lines = [
        "# Mutation score by layer",
        "",
        f"{report.runs} runs each; {report.seconds:.0f} s in all.",
        "",
        "| layer | score | killed | flaky | survived | equivalent | not run | errors | judged by |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name in layers:
        part = report.of_layer(name)
        cells = [str(part.count(v)) for v in (*_CLASS_COLUMNS, Verdict.ERROR)]
        lines.append(f"| {name} | {part.score:.1%} | {' | '.join(cells)} | {part.judged_by[name]} |")
    for name in layers:
        part = report.of_layer(name)
        seconds = sum(s.seconds for r in part.results for run in r.runs for s in run)
        lines += ["", *_layer_markdown(part, name, "##", seconds)]
    return "\n".join(lines) + "\n"


def _layer_markdown(report: MutationReport, layer: str, heading: str, seconds: float) -> list[str]:
    """The tables of one layer's report (per module, per class, per mutant), under ``heading``."""
    judged = (
        f"on {', '.join(report.targets)}"
        if LAYERS[layer].by_contract
        else f"judged by {report.judged_by.get(layer) or 'its tests'}"
    )
    title = "the storage contract" if LAYERS[layer].by_contract else f"the {layer} layer's tests"
    lines = [
        f"{heading} Mutation score of {title}",
        "",
        f"**{report.score:.1%}** killed in every run: {report.count(Verdict.KILLED)} of {report.scored} "
        f"non-equivalent mutants ({report.count(Verdict.FLAKY)} flaky, {report.count(Verdict.SURVIVED)} "
        f"survived, {report.count(Verdict.EQUIVALENT)} equivalent, {report.count(Verdict.NOT_RUN)} not run here, "
        f"{report.count(Verdict.ERROR)} errors); "
        f"{report.runs} runs each {judged}; {seconds:.0f} s.",
        "",
        "| module | killed | flaky | survived | equivalent |",
        "|---|---:|---:|---:|---:|",
    ]
    by_module: dict[str, Counter[Verdict]] = {}
    for result in report.results:
        by_module.setdefault(_module(result.mutant), Counter())[result.verdict] += 1
    for module, counts in sorted(by_module.items()):
        cells = [
            str(counts[v]) for v in (Verdict.KILLED, Verdict.FLAKY, Verdict.SURVIVED, Verdict.EQUIVALENT)
        ]
        lines.append(f"| {module} | {' | '.join(cells)} |")
    lines += [
        "",
        "| bug class | killed | flaky | survived | equivalent | not run |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, counts in report.by_class().items():
        cells = [str(counts[v]) for v in _CLASS_COLUMNS]
        lines.append(f"| {name} | {' | '.join(cells)} |")
    judge = "clause" if LAYERS[layer].by_contract else "test"
    lines += [
        "",
        f"| mutant | class | module | bug | verdict | runs killed | first {judge} that failed |",
        "|---|---|---|---|---|---|---|",
    ]
    for result in report.results:
        first = next((s for run in result.runs for s in run if s.failed), None)
        clause = (
            f"{first.target}: {first.failed[0].split('::')[-1]}"
            if first
            else (result.mutant.equivalent or "")
        )
        killed = f"{result.killed_runs}/{len(result.runs)}" if result.runs else "-"
        lines.append(
            f"| {result.mutant.name} | {result.mutant.bug_class} | {_module(result.mutant)} | {result.mutant.bug} | "
            f"{result.verdict.value} | {killed} | {clause.replace('|', '/')} |"
        )
    errors = [r for r in report.results if r.verdict is Verdict.ERROR]
    for result in errors:
        details = [s.detail for run in result.runs for s in run if s.detail]
        lines += [
            "",
            f"{heading}# error: {result.mutant.name}",
            "",
            "```",
            (details[-1] if details else "no target"),
            "```",
        ]
    return lines


def render_json(report: MutationReport) -> str:
    def result(r: MutantResult) -> dict[str, object]:
        return {
            "mutant": asdict(r.mutant),
            "verdict": r.verdict.value,
            "runs": [[{**asdict(s), "outcome": s.outcome.value} for s in run] for run in r.runs],
        }

    def scores(part: MutationReport) -> dict[str, object]:
        return {
            "score": part.score,
            "scored": part.scored,
            "counts": {v.value: part.count(v) for v in Verdict},
            "classes": {
                name: {v.value: counts[v] for v in Verdict} for name, counts in part.by_class().items()
            },
        }

    return json.dumps(
        {
            **scores(report),
            "layers": {
                name: {**scores(report.of_layer(name)), "judged_by": report.judged_by.get(name, "")}
                for name in report.layers
            },
            "targets": list(report.targets),
            "runs": report.runs,
            "seconds": report.seconds,
            "baseline": [{**asdict(s), "outcome": s.outcome.value} for s in report.baseline],
            "results": [result(r) for r in report.results],
        },
        indent=2,
    )


# -- command line ---------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="storage-adapter mutate",
        description="Plant each catalogued bug in a copy of storage_adapter, judge it (the adapter's by the "
        "contract, every other layer's by its own tests) and report killed / flaky / survived per layer, "
        "module and bug class (the mutation score of the referee).",
        epilog="exit status: 0 score reached, 1 below --min-score (or an error), 2 bad input or a failing "
        "baseline",
    )
    parser.add_argument(
        "--layer",
        metavar="NAMES",
        help=f"catalogues to run, comma-separated, or all ({', '.join(LAYERS)}; default adapter, or the "
        "layers of the --only mutants; --list: all)",
    )
    parser.add_argument(
        "--targets",
        default=",".join(EMBEDDED),
        help=f"embedded targets the contract runs on, comma-separated (default {','.join(EMBEDDED)}); "
        "the other layers' tests run on memory and local",
    )
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="runs per mutant (default 3)")
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="only these mutants")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="only the CI-sized subset (mutants marked smoke; a layer's judged by its smoke tests)",
    )
    parser.add_argument(
        "--jobs", type=int, default=1, help="mutants run at once (default 1: races need cores)"
    )
    parser.add_argument(
        "--min-score", type=float, default=DEFAULT_MIN_SCORE, help="exit 1 below (default 0.95)"
    )
    parser.add_argument("--report", metavar="PATH", help="write PATH.md and PATH.json")
    parser.add_argument("--list", action="store_true", help="list the catalogues and exit")
    return parser


def layers_named(names: str | None, only: Sequence[str], listing: bool = False) -> list[str]:
    """The layers ``--layer`` names (``all``: every one); when it names none, those of the ``only``
    mutants, else every layer for a listing and the adapter for a run. MutationError for an unknown one."""
    if names is None:
        if only:
            return [name for name in LAYERS if any(m.layer == name and m.name in only for m in EVERY_MUTANT)]
        return list(LAYERS) if listing else ["adapter"]
    chosen = list(LAYERS) if names == "all" else [n for n in names.split(",") if n]
    unknown = sorted(set(chosen) - set(LAYERS))
    if unknown or not chosen:
        raise MutationError(f"unknown layers {unknown}; choose from {', '.join(LAYERS)} or all")
    return [name for name in LAYERS if name in chosen]


def select(
    catalogue: Sequence[Mutant], only: Sequence[str], smoke: bool, layers: Sequence[str] | None = None
) -> list[Mutant]:
    """The mutants of ``catalogue`` in ``layers`` (all when None), ``only`` these names if any, only the
    smoke subset with ``smoke``. MutationError for a name no catalogue has."""
    unknown = sorted(set(only) - {m.name for m in EVERY_MUTANT} - {m.name for m in catalogue})
    if unknown:
        raise MutationError(f"unknown mutants {unknown}; see --list")
    return [
        m
        for m in catalogue
        if (layers is None or m.layer in layers) and (not only or m.name in only) and (not smoke or m.smoke)
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        targets = [t for t in args.targets.split(",") if t]
        unknown = sorted(set(targets) - set(EMBEDDED))
        if unknown or not targets:
            raise MutationError(f"unknown targets {unknown}; choose from {', '.join(EMBEDDED)}")
        if args.runs < 1 or args.jobs < 1:
            raise MutationError("--runs and --jobs must be at least 1")
        layers = layers_named(args.layer, args.only, args.list)
        mutants = select(EVERY_MUTANT, args.only, args.smoke, layers)
        if args.list:
            check_catalogue(EVERY_MUTANT)
            for m in mutants:
                print(
                    f"{m.layer:12} {m.name:45} {m.bug_class:21} {_module(m):18} "
                    f"{'SMOKE ' if m.smoke else ''}{'EQUIVALENT ' if m.equivalent else ''}{m.bug}"
                )
            return EXIT_OK
        if not mutants:
            raise MutationError(f"no mutant of {', '.join(layers)} is selected")

        def progress(result: MutantResult) -> None:
            print(
                f"{result.verdict.value:10} {result.killed_runs}/{len(result.runs)} {result.mutant.name} "
                f"({result.mutant.layer}, {result.mutant.bug_class})",
                flush=True,
            )

        report = run_catalogue(mutants, targets, args.runs, args.jobs, progress, args.smoke)
    except MutationError as exc:
        print(f"storage-adapter mutate: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    markdown = render_markdown(report)
    print(markdown)
    if args.report:
        base = Path(args.report)
        base.parent.mkdir(parents=True, exist_ok=True)
        base.with_suffix(".md").write_text(markdown, encoding="utf-8")
        base.with_suffix(".json").write_text(render_json(report), encoding="utf-8")
    ok = report.score >= args.min_score and not report.count(Verdict.ERROR)
    return EXIT_OK if ok else EXIT_BELOW_SCORE
