"""Run the storage contract programmatically and collect one result per (clause, target).

One source of truth: this runs the very clauses the pytest plugin runs (``pytest --pyargs contract_tests``),
through ``pytest.main`` with a collector plugin, against targets given to the plugin as
``--storage-url NAME=URL``. A clause is a test function of ``contract_tests.clauses.AdapterContract``;
a target is the ``storage_contract_target`` parameter. Judged targets and peers run as separate pytest sessions
(peers have their own factory and usually smaller race sizes); peers never make a run non-conforming.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import importlib.metadata
import io
import platform
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest

from contract_tests.plugin import ContractSizes, NotReached, declared_options, target_health
from contract_tests.remedies import remedies
from contract_tests.targets import Target, load_factory
from contract_tests.verdicts import Inconclusive, split_message
from storage_adapter.errors import StorageError
from storage_adapter.registry import redact_environment
from storage_adapter.types import SkippedObject, SkipReason

CONTRACT_SUITE = ("--pyargs", "contract_tests")
DEFAULT_SIZES = ContractSizes(threads=8, processes=4, increments=25)
PEER_SIZES = ContractSizes(threads=8, processes=2, increments=5)


class ClauseOutcome(enum.Enum):
    """The outcome of one clause on one target. Order of severity: error > fail > inconclusive > not run >
    pass > skip. Inconclusive (the clause could not decide within its bound) and not run (the check's
    total budget ran out, or it was interrupted, before the clause) are never violations, and never a pass."""

    PASSED = "pass"
    FAILED = "fail"
    INCONCLUSIVE = "inconclusive"
    NOT_RUN = "not-run"
    SKIPPED = "skip"
    ERROR = "error"  # the clause could not run (fixture or teardown failure): counts as a violation

    @property
    def is_violation(self) -> bool:
        return self in (ClauseOutcome.FAILED, ClauseOutcome.ERROR)


_SEVERITY = {
    ClauseOutcome.SKIPPED: 0,
    ClauseOutcome.PASSED: 1,
    ClauseOutcome.NOT_RUN: 2,
    ClauseOutcome.INCONCLUSIVE: 3,
    ClauseOutcome.FAILED: 4,
    ClauseOutcome.ERROR: 5,
}


class RunStatus(enum.Enum):
    """The verdict of a whole check on its judged targets (peers never count)."""

    CONFORMS = "conforms"  # every clause passed or was skipped
    VIOLATIONS = "violations"  # some clause failed (with evidence) or could not run
    INCONCLUSIVE = "inconclusive"  # no violation, but some clause could not decide within its bound
    NOT_RUN = "not-run"  # the contract did not run at all (preflight, server start): see ``not_run``


@dataclass(frozen=True)
class Clause:
    """A contract clause: the test function's name and the first line of its docstring."""

    name: str
    summary: str


@dataclass(frozen=True)
class ClauseResult:
    """One clause on one target. A parametrized clause aggregates its ``cases`` (the worst outcome wins;
    ``reason`` names the first failing case)."""

    clause: str
    target: str
    outcome: ClauseOutcome
    reason: str
    duration_s: float
    cases: int = 1
    evidence: str = ""  # the clause's further message lines, whole: a counterexample, expected vs actual


@dataclass(frozen=True)
class TargetVerdict:
    """Counts per outcome for one target and its violations (clause names)."""

    target: Target
    passed: int
    failed: int
    skipped: int
    errors: int
    violations: tuple[str, ...]
    inconclusive: tuple[str, ...] = ()
    compatibility_modes: tuple[str, ...] = ()
    not_run: tuple[str, ...] = ()  # clauses the budget or an interruption left unchecked

    @property
    def conforms(self) -> bool:
        return (
            not self.violations
            and not self.inconclusive
            and not self.not_run
            and not self.compatibility_modes
        )

    @property
    def status(self) -> RunStatus:
        """Violations, else inconclusive when some clause could not decide or was not run, else conforms."""
        if self.violations:
            return RunStatus.VIOLATIONS
        return RunStatus.INCONCLUSIVE if self.inconclusive or self.not_run else RunStatus.CONFORMS

    def line(self) -> str:
        """One line: conforms, PARTIAL (passes only with declared compatibility modes, or fails with
        them), VIOLATES or INCONCLUSIVE, with the clauses concerned."""
        role = " (peer, not judged)" if self.target.peer else ""
        modes = (
            f" with compatibility mode {', '.join(self.compatibility_modes)}"
            if self.compatibility_modes
            else ""
        )
        counts = f"{self.passed} passed, {self.skipped} skipped"
        if self.inconclusive:
            counts += f", {len(self.inconclusive)} inconclusive"
        if self.not_run:
            counts += f", {len(self.not_run)} not run"

        def names(clauses: tuple[str, ...]) -> str:
            return ", ".join(c.removeprefix("test_") for c in clauses)

        if self.status is RunStatus.VIOLATIONS:
            verdict = f"PARTIAL{modes}, VIOLATES" if self.compatibility_modes else "VIOLATES"
            detail = f"; inconclusive: {names(self.inconclusive)}" if self.inconclusive else ""
            return (
                f"{self.target.name}{role}: {verdict} {len(self.violations)} clause(s) - {counts}; "
                f"{names(self.violations)}{detail}"
            )
        if self.status is RunStatus.INCONCLUSIVE:
            undecided = f"; undecided: {names(self.inconclusive)}" if self.inconclusive else ""
            return f"{self.target.name}{role}: INCONCLUSIVE{modes} - {counts}{undecided}"
        if self.compatibility_modes:
            return f"{self.target.name}{role}: PARTIAL{modes} (not conforming without it) - {counts}"
        return f"{self.target.name}{role}: conforms - {counts}"


# The entries of a survey a report names one by one; the others only count.
LEFT_OUT_SHOWN = 20


@dataclass(frozen=True)
class LeftOut:
    """What a judged target's root holds that listings leave out (``StorageAdapter.skipped("")``: folder
    markers, names no key can have, local entries that are not files; docs/listing.md), surveyed once
    after its clauses ran: ``count`` entries, the first ``LEFT_OUT_SHOWN`` by name in ``entries``; or
    ``error``, the first line of why the survey could not list (then no entries). Information about what
    another tool left there, never part of a verdict."""

    target: str
    count: int = 0
    entries: tuple[SkippedObject, ...] = ()
    error: str = ""

    def line(self) -> str:
        """One line naming the target, how many entries and the shown ones (``!r``: a name may hold
        control characters) with their reasons, or that the survey failed."""
        what = f"{self.target}: %s under the root listings leave out (another tool's)"
        if self.error:
            return f"{what % 'entries'}: could not survey: {self.error}"
        shown = [
            f"{e.name!r} ({e.reason.value})"
            if e.reason is SkipReason.FOLDER_MARKER  # its detail only repeats what a marker is
            else f"{e.name!r} ({e.reason.value}: {e.detail})"
            for e in self.entries
        ]
        if self.count > len(self.entries):
            shown.append(f"... and {self.count - len(self.entries)} more")
        noun = "1 entry" if self.count == 1 else f"{self.count} entries"
        return f"{what % noun}: {', '.join(shown)}; see docs/listing.md"


@dataclass(frozen=True)
class ConformanceRun:
    """Everything one check produced. ``conforms`` ignores peers."""

    clauses: tuple[Clause, ...]
    targets: tuple[Target, ...]
    results: tuple[ClauseResult, ...]
    duration_s: float
    sizes: ContractSizes
    peer_sizes: ContractSizes
    versions: tuple[tuple[str, str], ...] = field(default=())
    # Active compatibility modes per target name (capabilities.compatibility_modes of its adapter).
    compatibility_modes: tuple[tuple[str, tuple[str, ...]], ...] = field(default=())
    not_run: str = ""  # why the contract did not run at all (then ``results`` is empty)
    # A pytest ``-k`` expression when only the clauses it matches ran (``check --clauses``): such a run
    # speaks for those clauses only, and every report says so.
    selection: str = ""
    # Why the run stopped before its end (a signal, e.g. a CI job's timeout): its results are those so far.
    incomplete: str = ""
    budget_s: float = 0.0  # the check's total budget (0: none)
    # The judged targets whose root holds entries listings leave out, or whose survey failed (no others).
    left_out: tuple[LeftOut, ...] = ()

    def result(self, clause: str, target: str) -> ClauseResult | None:
        return next((r for r in self.results if r.clause == clause and r.target == target), None)

    def verdict(self, target: Target) -> TargetVerdict:
        mine = [r for r in self.results if r.target == target.name]
        count = {o: sum(1 for r in mine if r.outcome is o) for o in ClauseOutcome}
        return TargetVerdict(
            target=target,
            passed=count[ClauseOutcome.PASSED],
            failed=count[ClauseOutcome.FAILED],
            skipped=count[ClauseOutcome.SKIPPED],
            errors=count[ClauseOutcome.ERROR],
            violations=tuple(r.clause for r in mine if r.outcome.is_violation),
            inconclusive=tuple(r.clause for r in mine if r.outcome is ClauseOutcome.INCONCLUSIVE),
            compatibility_modes=dict(self.compatibility_modes).get(target.name, ()),
            not_run=tuple(r.clause for r in mine if r.outcome is ClauseOutcome.NOT_RUN),
        )

    @property
    def status(self) -> RunStatus:
        """Not run, else the worst judged target: violations > inconclusive > conforms. A target that
        passes only with compatibility modes is reported PARTIAL but does not change the status."""
        if self.not_run:
            return RunStatus.NOT_RUN
        statuses = {self.verdict(t).status for t in self.targets if not t.peer}
        if RunStatus.VIOLATIONS in statuses:
            return RunStatus.VIOLATIONS
        if RunStatus.INCONCLUSIVE in statuses or self.incomplete:
            return RunStatus.INCONCLUSIVE
        return RunStatus.CONFORMS

    @property
    def conforms(self) -> bool:
        """Every judged target keeps every clause, without compatibility modes, in a complete run."""
        return (
            not self.not_run
            and not self.incomplete
            and all(self.verdict(t).conforms for t in self.targets if not t.peer)
        )


class ProgressListener(Protocol):
    """Told about progress while the suite runs (the CLI draws it)."""

    def collected(self, target: str, clauses: int) -> None: ...

    def finished(self, target: str, clause: str, outcome: ClauseOutcome) -> None: ...


class ContractRunError(StorageError):
    """The contract suite itself could not run (collection or usage error); the message has pytest's tail."""


class SelectionError(ContractRunError, ValueError):
    """A clause selection (``check --clauses``) that is not a valid ``-k`` expression or matches no clause."""


@dataclass
class _Case:
    clause: str
    target: str
    case_id: str
    outcome: ClauseOutcome = ClauseOutcome.PASSED
    reason: str = ""
    evidence: str = ""
    duration_s: float = 0.0
    finished: bool = False  # every phase reported (a run interrupted before that did not run the case)


def _first_line(text: str) -> str:
    """The first non-blank line of ``text``, with the environment's secrets masked."""
    return redact_environment(next((ln.strip() for ln in text.strip().splitlines() if ln.strip()), ""))


# The packages whose versions every report names; any other entry of ``versions`` names a server.
PACKAGES = ("storage-adapter", "obstore", "pytest", "fsspec", "s3fs")
_INCONCLUSIVE_PROPERTY = "storage_contract_inconclusive"
_NOT_REACHED_PROPERTY = "storage_contract_not_reached"
# The user property that carries a clause's whole exception message from the report hook to the collector.
_MESSAGE_PROPERTY = "storage_contract_message"


def _reason_and_evidence(report: pytest.TestReport) -> tuple[str, str]:
    """:func:`_clause_message` with the environment's secrets masked in both parts (every reason and
    every piece of evidence the matrix and the reports show passes here)."""
    reason, evidence = _clause_message(report)
    return redact_environment(reason), redact_environment(evidence)


def _clause_message(report: pytest.TestReport) -> tuple[str, str]:
    """A failed or skipped phase as (one-line reason, further evidence lines), never truncated. The
    clause's own exception message is preferred (see :mod:`contract_tests.verdicts`)."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # a skip: (path, lineno, "Skipped: why")
        return _first_line(str(longrepr[2]).removeprefix("Skipped: ")), ""
    message = dict(report.user_properties).get(_MESSAGE_PROPERTY)
    reason, evidence = split_message(str(message)) if message else ("", "")
    if reason in ("", "AssertionError"):
        # A bare assert (clauses are not assertion-rewritten): name the failing source line instead.
        failing = [ln.lstrip("> ").strip() for ln in str(longrepr).splitlines() if ln.startswith(">")]
        if failing:
            return f"{reason or 'failed'}: {failing[-1]}", evidence
    return (reason, evidence) if reason else split_message(str(longrepr))


class _Collector:
    """pytest plugin: maps each collected contract item to (clause, target) and records its phases."""

    def __init__(self, listener: ProgressListener | None) -> None:
        self.listener = listener
        self.clauses: dict[str, Clause] = {}
        self.cases: dict[str, _Case] = {}
        self.finished_cases: Counter[tuple[str, str]] = Counter()
        self.targets: dict[str, Target] = {}
        # Judged targets on which no primitive ever answered after the preflight, with the first evidence.
        self.unanswered: dict[str, str] = {}

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            callspec = getattr(item, "callspec", None)
            target = callspec.params.get("storage_contract_target") if callspec is not None else None
            if callspec is None or not isinstance(target, Target):
                continue
            clause = getattr(item, "originalname", item.name)
            doc = (getattr(item, "obj", None).__doc__ or "").strip()
            self.clauses.setdefault(clause, Clause(clause, _first_line(doc)))
            self.targets.setdefault(target.name, target)
            extra = [str(v) for k, v in callspec.params.items() if k != "storage_contract_target"]
            self.cases[item.nodeid] = _Case(clause, target.name, ",".join(extra))

    def pytest_deselected(self, items: Sequence[pytest.Item]) -> None:
        """A clause deselected (``-k``, ``-m`` in the suite's arguments) has no result."""
        for item in items:
            self.cases.pop(item.nodeid, None)

    def pytest_collection_finish(self) -> None:
        """Once selection is final: forget deselected clauses, and tell the listener what will run."""
        kept = {case.clause for case in self.cases.values()}
        self.clauses = {name: clause for name, clause in self.clauses.items() if name in kept}
        per_target: dict[str, set[str]] = {}
        for case in self.cases.values():
            per_target.setdefault(case.target, set()).add(case.clause)
        if self.listener is not None:
            for name, clauses in per_target.items():
                self.listener.collected(name, len(clauses))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, Any, None]:
        """Keep the clause's whole exception message, and whether it was a verdict of Inconclusive."""
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        if call.excinfo is not None and item.nodeid in self.cases:
            report.user_properties.append((_MESSAGE_PROPERTY, str(call.excinfo.value)))
            if call.excinfo.errisinstance(Inconclusive):
                report.user_properties.append((_INCONCLUSIVE_PROPERTY, True))
            if call.excinfo.errisinstance(NotReached):
                report.user_properties.append((_NOT_REACHED_PROPERTY, True))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        case = self.cases.get(report.nodeid)
        if case is None:
            return
        case.duration_s += report.duration
        case.finished = case.finished or report.when == "teardown"
        if report.skipped and case.outcome is ClauseOutcome.PASSED:
            properties = dict(report.user_properties)
            case.reason, case.evidence = _reason_and_evidence(report)
            case.outcome = ClauseOutcome.SKIPPED
            if properties.get(_NOT_REACHED_PROPERTY):
                case.outcome, case.reason = ClauseOutcome.NOT_RUN, str(properties[_MESSAGE_PROPERTY])
        elif report.failed and not case.outcome.is_violation:
            reason, evidence = _reason_and_evidence(report)
            if report.when != "call":
                outcome, reason = ClauseOutcome.ERROR, f"{report.when} error: {reason}"
            elif dict(report.user_properties).get(_INCONCLUSIVE_PROPERTY):
                outcome = ClauseOutcome.INCONCLUSIVE
            else:
                outcome = ClauseOutcome.FAILED
            case.outcome, case.reason, case.evidence = outcome, reason, evidence

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        case = self.cases.get(nodeid)
        if case is None or self.listener is None:
            return
        pair = (case.clause, case.target)
        self.finished_cases[pair] += 1
        siblings = [c for c in self.cases.values() if (c.clause, c.target) == pair]
        if self.finished_cases[pair] == len(siblings):  # a parametrized clause is done with its last case
            self.listener.finished(
                case.target, case.clause, _aggregate(case.clause, case.target, siblings).outcome
            )

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Note the judged targets whose primitives never answered (while the health is still there)."""
        for target in self.targets.values():
            health = target_health(session.config, target)
            broken = health.broken_primitives() if health is not None else {}
            if broken and health is not None and not health.answered() and not target.peer:
                self.unanswered[target.name] = next(iter(broken.values()))

    def results(self, interrupted: str = "") -> list[ClauseResult]:
        """One result per (clause, target). ``interrupted`` (why the run stopped early) is the reason of
        the cases that had not finished: not run."""
        grouped: dict[tuple[str, str], list[_Case]] = {}
        for case in list(self.cases.values()):
            if interrupted and not case.finished:
                case = dataclasses.replace(
                    case, outcome=ClauseOutcome.NOT_RUN, reason=f"not run: {interrupted}", evidence=""
                )
            grouped.setdefault((case.clause, case.target), []).append(case)
        return [_aggregate(clause, target, cases) for (clause, target), cases in grouped.items()]


def _aggregate(clause: str, target: str, cases: Sequence[_Case]) -> ClauseResult:
    worst = max(cases, key=lambda c: _SEVERITY[c.outcome])
    reason = worst.reason
    if len(cases) > 1 and worst.outcome not in (ClauseOutcome.PASSED, ClauseOutcome.SKIPPED):
        bad = sum(1 for c in cases if c.outcome is worst.outcome)
        reason = f"{bad}/{len(cases)} cases, e.g. [{worst.case_id}]: {reason}"
    return ClauseResult(
        clause=clause,
        target=target,
        outcome=worst.outcome,
        reason=reason,
        duration_s=sum(c.duration_s for c in cases),
        cases=len(cases),
        evidence=worst.evidence,
    )


@dataclass(frozen=True)
class Bounds:
    """The bounds of a whole check: its total budget in seconds from ``started`` (monotonic; 0: none),
    after which clauses are not run; the stall threshold of a call (see :mod:`contract_tests.health`);
    and the options every target's factory gets where its backend declares them (the client's request
    timeout and retries, set from the budget)."""

    budget_s: float = 0.0
    started: float = 0.0
    stall_s: float = 60.0
    storage_options: tuple[tuple[str, str], ...] = ()

    def left_s(self) -> float:
        """Seconds of the budget left (at least a millisecond: 0 would mean no budget)."""
        return max(0.001, self.started + self.budget_s - time.monotonic())


def _pytest_args(
    suite: Sequence[str],
    targets: Iterable[Target],
    factory: str,
    sizes: ContractSizes,
    ini_dir: str,
    selection: str,
    bounds: Bounds,
) -> list[str]:
    ini = Path(ini_dir, "pytest.ini")
    ini.write_text("[pytest]\n")  # isolate from the caller's own pytest configuration and conftests
    args = [
        *suite,
        "-c",
        str(ini),
        "--rootdir",
        ini_dir,
        "-p",
        "no:cacheprovider",
        "-q",
        "--storage-factory",
        factory,
        "--contract-threads",
        str(sizes.threads),
        "--contract-processes",
        str(sizes.processes),
        "--contract-increments",
        str(sizes.increments),
        "--contract-check-budget",
        str(sizes.check_budget_s),
        "--contract-clause-timeout",
        str(sizes.clause_timeout_s),
    ]
    if bounds.budget_s > 0:
        args += ["--contract-budget", repr(bounds.left_s()), "--contract-stall", repr(bounds.stall_s)]
    for name, value in bounds.storage_options:
        args += ["--storage-option", f"{name}={value}"]
    for target in targets:
        args += ["--storage-url", f"{target.name}={target.url}"]
    return [*args, "-k", selection] if selection else args


def _run_session(
    suite: Sequence[str],
    targets: Sequence[Target],
    sizes: ContractSizes,
    listener: ProgressListener | None,
    selection: str,
    bounds: Bounds,
    progress: RunInProgress,
) -> _Collector:
    """One pytest session over ``targets`` (all opened by the same factory), only the clauses matching
    ``selection`` if one is given."""
    collector = _Collector(listener)
    progress.collectors.append(collector)
    output = io.StringIO()
    with tempfile.TemporaryDirectory(prefix="storage-check-") as ini_dir:
        args = _pytest_args(suite, targets, targets[0].factory, sizes, ini_dir, selection, bounds)
        # pytest's own terminal output is kept out of the caller's display; it is only shown on a crash.
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            code = pytest.main(args, plugins=[collector])
    if progress.interrupted:
        raise CheckInterrupted(progress.interrupted)
    if selection and (code is pytest.ExitCode.USAGE_ERROR or not collector.cases):
        tail = "\n".join(output.getvalue().strip().splitlines()[-3:])
        raise SelectionError(f"--clauses {selection!r} selects no clause of the contract:\n{tail}")
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED) or not collector.cases:
        tail = "\n".join(output.getvalue().strip().splitlines()[-15:])
        raise ContractRunError(f"the contract suite did not run (pytest exit {int(code)}):\n{tail}")
    return collector


def versions() -> tuple[tuple[str, str], ...]:
    """Versions of Python and of the packages a check depends on (those installed)."""
    found = [("python", platform.python_version())]
    for dist in PACKAGES:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found.append((dist, importlib.metadata.version(dist)))
    return tuple(found)


class CheckInterrupted(ContractRunError):
    """The check was stopped by a signal (``RunInProgress.interrupt``); its report of what was done so far
    has been written by whoever interrupted it."""


class RunInProgress:
    """A check while it runs: enough to report the results so far at any moment (a signal handler writes
    the report of an interrupted check from :meth:`snapshot`), and to stop it (:meth:`interrupt`)."""

    def __init__(self) -> None:
        self.collectors: list[_Collector] = []
        self.interrupted = ""
        self.targets: tuple[Target, ...] = ()
        self.started = time.monotonic()
        self.settings: dict[str, Any] = {}
        self.left_out: list[LeftOut] = []

    def interrupt(self, why: str) -> None:
        """Mark the run interrupted; the session under way raises CheckInterrupted once pytest unwinds."""
        self.interrupted = why

    def snapshot(self, incomplete: str = "") -> ConformanceRun:
        """The run as it stands: finished clauses with their outcomes, the others not run because of
        ``incomplete`` (say why the run is being cut short)."""
        for _ in range(10):  # the running session may add a case while this copies them
            try:
                return _assemble(self, incomplete=incomplete)
            except RuntimeError:
                time.sleep(0.01)
        return _assemble(self, incomplete=incomplete)


def _assemble(progress: RunInProgress, incomplete: str = "") -> ConformanceRun:
    collectors = list(progress.collectors)
    clauses: dict[str, Clause] = {}
    for collector in collectors:
        for name, clause in list(collector.clauses.items()):
            clauses.setdefault(name, clause)
    unanswered = {name: why for c in collectors for name, why in c.unanswered.items()}
    settings = progress.settings
    results = [r for c in collectors for r in c.results(interrupted=incomplete)]
    return ConformanceRun(
        clauses=tuple(clauses.values()),
        targets=progress.targets,
        results=tuple(_with_remedy(r, settings["remedies"]) for r in results),
        duration_s=time.monotonic() - progress.started,
        sizes=settings["sizes"],
        peer_sizes=settings["peer_sizes"],
        versions=settings["versions"],
        compatibility_modes=settings["compatibility_modes"],
        selection=settings["selection"],
        not_run="; ".join(
            f"{name} answered nothing after the preflight: {why}" for name, why in unanswered.items()
        ),
        incomplete=incomplete,
        budget_s=settings["bounds"].budget_s,
        left_out=tuple(progress.left_out),
    )


def _with_remedy(result: ClauseResult, remedies: Mapping[str, Mapping[str, str]]) -> ClauseResult:
    """``result`` with the remedy of a known server quirk (:mod:`contract_tests.remedies`) as the last
    lines of its evidence, when it failed and its target has one for its clause. The one place remedies
    join the results, so every report format shows them."""
    remedy = remedies.get(result.target, {}).get(result.clause)
    if result.outcome is not ClauseOutcome.FAILED or remedy is None:
        return result
    return dataclasses.replace(result, evidence="\n".join(filter(None, (result.evidence, remedy))))


def run_contract(
    targets: Sequence[Target],
    *,
    sizes: ContractSizes = DEFAULT_SIZES,
    peer_sizes: ContractSizes = PEER_SIZES,
    listener: ProgressListener | None = None,
    suite: Sequence[str] = CONTRACT_SUITE,
    extra_versions: Iterable[tuple[str, str]] = (),
    selection: str = "",
    bounds: Bounds = Bounds(),
    progress: RunInProgress | None = None,
) -> ConformanceRun:
    """Run every clause of ``suite`` against ``targets``; judged targets first, then peers. With
    ``selection`` (a pytest ``-k`` expression over clause names) only the clauses it matches run, and the
    run says so (``ConformanceRun.selection``); one that matches none raises SelectionError. ``bounds``
    holds the total budget (clauses it does not reach are not run) and the client options set from it;
    ``progress`` lets a caller report and stop the run while it goes (see :class:`RunInProgress`).

    Targets sharing a factory share one pytest session. Raises ContractRunError if pytest could not
    collect or run the suite (never for clause failures: those are results), CheckInterrupted if
    ``progress.interrupt`` was called.
    """
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise ValueError(f"target names must be unique: {names}")
    progress = RunInProgress() if progress is None else progress
    progress.targets = tuple(targets)
    progress.settings = {
        "sizes": sizes,
        "peer_sizes": peer_sizes,
        "versions": (*versions(), *extra_versions),
        "compatibility_modes": tuple(
            (t.name, compatibility_modes(t)) for t in targets if not t.peer and t.url
        ),
        "selection": selection,
        "bounds": bounds,
        # Resolved now, in the environment the targets are opened in (a started server's, --compat).
        "remedies": {
            t.name: remedies(t.url, dict(bounds.storage_options)) for t in targets if not t.peer and t.url
        },
    }
    for peer in (False, True):
        by_factory: dict[str, list[Target]] = {}
        for target in targets:
            if target.peer is peer:
                by_factory.setdefault(target.factory, []).append(target)
        for group in by_factory.values():
            collector = _run_session(
                suite, group, peer_sizes if peer else sizes, listener, selection, bounds, progress
            )
            # The rule for what a listing leaves out is the adapter's: peers are not surveyed. A target
            # that answered nothing is reported as such, and a listing would only wait on it again.
            surveyed = [t for t in group if not peer and t.url and t.name not in collector.unanswered]
            found = (survey_left_out(t, dict(bounds.storage_options)) for t in surveyed)
            progress.left_out += [left_out for left_out in found if left_out is not None]
    return _assemble(progress)


def survey_left_out(target: Target, storage_options: Mapping[str, str]) -> LeftOut | None:
    """The entries ``target``'s root holds that listings leave out, by one listing: ``skipped("")`` of an
    adapter opened at its URL by its factory with the options its clauses' adapters got (those of
    ``storage_options`` its backend declares). None when there are none, or when the factory's adapter
    has no ``skipped`` (it does not claim the rule). A survey that fails (StorageError, OSError) is a
    LeftOut with the error's first line: what another tool left is information, it never fails a check."""
    url = target.address
    try:
        adapter = target.open(url, **declared_options(url, storage_options))
        survey = getattr(adapter, "skipped", None)
        if survey is None:
            return None
        found: list[SkippedObject] = survey("")
    except (StorageError, OSError) as exc:
        return LeftOut(target.name, error=_first_line(str(exc)) or type(exc).__name__)
    return LeftOut(target.name, len(found), tuple(found[:LEFT_OUT_SHOWN])) if found else None


def not_run(
    targets: Sequence[Target],
    reason: str,
    *,
    sizes: ContractSizes = DEFAULT_SIZES,
    peer_sizes: ContractSizes = PEER_SIZES,
    duration_s: float = 0.0,
    extra_versions: Iterable[tuple[str, str]] = (),
    selection: str = "",
) -> ConformanceRun:
    """The run of a check that could not start the contract (a preflight failed, a server could not run):
    no results, and ``reason`` says why, so a report is written in that case too."""
    return ConformanceRun(
        clauses=(),
        targets=tuple(targets),
        results=(),
        duration_s=duration_s,
        sizes=sizes,
        peer_sizes=peer_sizes,
        versions=(*versions(), *extra_versions),
        not_run=reason,
        selection=selection,
    )


def compatibility_modes(target: Target) -> tuple[str, ...]:
    """The compatibility modes the target's adapter declares (``Capabilities.compatibility_modes``; a
    factory's adapter that has no such field declares none)."""
    return tuple(getattr(target.open().capabilities, "compatibility_modes", ()))


def preflight(target: Target, **options: Any) -> None:
    """Write, read back and delete one probe object through the target's factory.

    Raises StorageError (ConfigurationError, PermissionDeniedError, BackendUnavailableError, ...) with a
    message naming the target, so a bad URL, an unreachable endpoint or missing rights fail in seconds,
    before the suite starts. ``options`` go to the factory (e.g. a small ``max_retries`` for S3).
    """
    adapter = load_factory(target.factory)(target.url, **options)
    probe = f"storage-adapter-preflight-{uuid.uuid4().hex[:12]}"
    adapter.write(probe, b"probe")
    try:
        if adapter.read_bytes(probe) != b"probe":
            raise StorageError(f"{target.name}: the probe object read back different bytes", key=probe)
    finally:
        adapter.delete(probe)
