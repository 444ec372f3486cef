"""Run the storage contract programmatically and collect one result per (clause, target).

One source of truth: this runs the very clauses the pytest plugin runs (``pytest --pyargs contract_tests``),
through ``pytest.main`` with a collector plugin, against targets given to the plugin as
``--storage-url NAME=URL``. A clause is a test function of ``contract_tests.clauses.AdapterContract``;
a target is the ``storage_contract_target`` parameter. Judged targets and peers run as separate pytest sessions
(peers have their own factory and usually smaller race sizes); peers never make a run non-conforming.
"""

from __future__ import annotations

import contextlib
import enum
import importlib.metadata
import io
import platform
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest

from contract_tests.plugin import ContractSizes
from contract_tests.targets import Target, load_factory
from storage_adapter.errors import StorageError
from storage_adapter.redaction import redact_environment

CONTRACT_SUITE = ("--pyargs", "contract_tests")
DEFAULT_SIZES = ContractSizes(threads=8, processes=4, increments=25)
PEER_SIZES = ContractSizes(threads=8, processes=2, increments=5)
_REASON_CHARS = 240


class ClauseOutcome(enum.Enum):
    """The outcome of one clause on one target. Order of severity: error > fail > pass > skip."""

    PASSED = "pass"
    FAILED = "fail"
    SKIPPED = "skip"
    ERROR = "error"  # the clause could not run (fixture or teardown failure): counts as a violation

    @property
    def is_violation(self) -> bool:
        return self in (ClauseOutcome.FAILED, ClauseOutcome.ERROR)


_SEVERITY = {
    ClauseOutcome.SKIPPED: 0,
    ClauseOutcome.PASSED: 1,
    ClauseOutcome.FAILED: 2,
    ClauseOutcome.ERROR: 3,
}


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


@dataclass(frozen=True)
class TargetVerdict:
    """Counts per outcome for one target and its violations (clause names)."""

    target: Target
    passed: int
    failed: int
    skipped: int
    errors: int
    violations: tuple[str, ...]

    @property
    def conforms(self) -> bool:
        return not self.violations

    def line(self) -> str:
        role = " (peer, not judged)" if self.target.peer else ""
        counts = f"{self.passed} passed, {self.skipped} skipped"
        if self.conforms:
            return f"{self.target.name}{role}: conforms - {counts}"
        broken = ", ".join(v.removeprefix("test_") for v in self.violations)
        return f"{self.target.name}{role}: VIOLATES {len(self.violations)} clause(s) - {counts}; {broken}"


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
        )

    @property
    def conforms(self) -> bool:
        return all(self.verdict(t).conforms for t in self.targets if not t.peer)


class ProgressListener(Protocol):
    """Told about progress while the suite runs (the CLI draws it)."""

    def collected(self, target: str, clauses: int) -> None: ...

    def finished(self, target: str, clause: str, outcome: ClauseOutcome) -> None: ...


class ContractRunError(StorageError):
    """The contract suite itself could not run (collection or usage error); the message has pytest's tail."""


@dataclass
class _Case:
    clause: str
    target: str
    case_id: str
    outcome: ClauseOutcome = ClauseOutcome.PASSED
    reason: str = ""
    duration_s: float = 0.0


def _first_line(text: str) -> str:
    """The first non-blank line of ``text``, shortened, with the environment's secrets masked (every
    reason the matrix and the reports show passes here)."""
    line = redact_environment(next((ln.strip() for ln in text.strip().splitlines() if ln.strip()), ""))
    return line if len(line) <= _REASON_CHARS else line[: _REASON_CHARS - 3] + "..."


def _reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # a skip: (path, lineno, "Skipped: why")
        return _first_line(str(longrepr[2]).removeprefix("Skipped: "))
    crash = getattr(longrepr, "reprcrash", None)
    message = _first_line(crash.message) if crash is not None and getattr(crash, "message", None) else ""
    if message in ("", "AssertionError"):
        # A bare assert (clauses are not assertion-rewritten): name the failing source line instead.
        failing = [ln.lstrip("> ").strip() for ln in str(longrepr).splitlines() if ln.startswith(">")]
        if failing:
            return _first_line(f"{message or 'failed'}: {failing[-1]}")
    return message or _first_line(str(longrepr))


class _Collector:
    """pytest plugin: maps each collected contract item to (clause, target) and records its phases."""

    def __init__(self, listener: ProgressListener | None) -> None:
        self.listener = listener
        self.clauses: dict[str, Clause] = {}
        self.cases: dict[str, _Case] = {}
        self.finished_cases: Counter[tuple[str, str]] = Counter()

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        per_target: dict[str, set[str]] = {}
        for item in items:
            callspec = getattr(item, "callspec", None)
            target = callspec.params.get("storage_contract_target") if callspec is not None else None
            if callspec is None or not isinstance(target, Target):
                continue
            clause = getattr(item, "originalname", item.name)
            doc = (getattr(item, "obj", None).__doc__ or "").strip()
            self.clauses.setdefault(clause, Clause(clause, _first_line(doc)))
            extra = [str(v) for k, v in callspec.params.items() if k != "storage_contract_target"]
            self.cases[item.nodeid] = _Case(clause, target.name, ",".join(extra))
            per_target.setdefault(target.name, set()).add(clause)
        if self.listener is not None:
            for name, clauses in per_target.items():
                self.listener.collected(name, len(clauses))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        case = self.cases.get(report.nodeid)
        if case is None:
            return
        case.duration_s += report.duration
        if report.skipped and case.outcome is ClauseOutcome.PASSED:
            case.outcome, case.reason = ClauseOutcome.SKIPPED, _reason(report)
        elif report.failed and not case.outcome.is_violation:
            failed_phase = ClauseOutcome.FAILED if report.when == "call" else ClauseOutcome.ERROR
            prefix = "" if report.when == "call" else f"{report.when} error: "
            case.outcome, case.reason = failed_phase, prefix + _reason(report)

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

    def results(self) -> list[ClauseResult]:
        grouped: dict[tuple[str, str], list[_Case]] = {}
        for case in self.cases.values():
            grouped.setdefault((case.clause, case.target), []).append(case)
        return [_aggregate(clause, target, cases) for (clause, target), cases in grouped.items()]


def _aggregate(clause: str, target: str, cases: Sequence[_Case]) -> ClauseResult:
    worst = max(cases, key=lambda c: _SEVERITY[c.outcome])
    reason = worst.reason
    if len(cases) > 1 and worst.outcome.is_violation:
        bad = sum(1 for c in cases if c.outcome.is_violation)
        reason = f"{bad}/{len(cases)} cases, e.g. [{worst.case_id}]: {reason}"
    return ClauseResult(
        clause=clause,
        target=target,
        outcome=worst.outcome,
        reason=reason,
        duration_s=sum(c.duration_s for c in cases),
        cases=len(cases),
    )


def _pytest_args(suite: Sequence[str], targets: Iterable[Target], factory: str, sizes: ContractSizes,
                 ini_dir: str) -> list[str]:  # fmt: skip
    ini = Path(ini_dir, "pytest.ini")
    ini.write_text("[pytest]\n")  # isolate from the caller's own pytest configuration and conftests
    args = [*suite, "-c", str(ini), "--rootdir", ini_dir, "-p", "no:cacheprovider", "-q",
            "--storage-factory", factory, "--contract-threads", str(sizes.threads),
            "--contract-processes", str(sizes.processes), "--contract-increments", str(sizes.increments)]  # fmt: skip
    for target in targets:
        args += ["--storage-url", f"{target.name}={target.url}"]
    return args


def _run_session(suite: Sequence[str], targets: Sequence[Target], sizes: ContractSizes,
                 listener: ProgressListener | None) -> _Collector:  # fmt: skip
    """One pytest session over ``targets`` (all opened by the same factory)."""
    collector = _Collector(listener)
    output = io.StringIO()
    with tempfile.TemporaryDirectory(prefix="storage-check-") as ini_dir:
        args = _pytest_args(suite, targets, targets[0].factory, sizes, ini_dir)
        # pytest's own terminal output is kept out of the caller's display; it is only shown on a crash.
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            code = pytest.main(args, plugins=[collector])
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED) or not collector.cases:
        tail = "\n".join(output.getvalue().strip().splitlines()[-15:])
        raise ContractRunError(f"the contract suite did not run (pytest exit {int(code)}):\n{tail}")
    return collector


def versions() -> tuple[tuple[str, str], ...]:
    """Versions of Python and of the packages a check depends on (those installed)."""
    found = [("python", platform.python_version())]
    for dist in ("storage-adapter", "obstore", "pytest", "fsspec", "s3fs"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found.append((dist, importlib.metadata.version(dist)))
    return tuple(found)


def run_contract(
    targets: Sequence[Target],
    *,
    sizes: ContractSizes = DEFAULT_SIZES,
    peer_sizes: ContractSizes = PEER_SIZES,
    listener: ProgressListener | None = None,
    suite: Sequence[str] = CONTRACT_SUITE,
    extra_versions: Iterable[tuple[str, str]] = (),
) -> ConformanceRun:
    """Run every clause of ``suite`` against ``targets``; judged targets first, then peers.

    Targets sharing a factory share one pytest session. Raises ContractRunError if pytest could not
    collect or run the suite (never for clause failures: those are results).
    """
    names = [t.name for t in targets]
    if len(set(names)) != len(names):
        raise ValueError(f"target names must be unique: {names}")
    started = time.monotonic()
    collectors: list[_Collector] = []
    for peer in (False, True):
        by_factory: dict[str, list[Target]] = {}
        for target in targets:
            if target.peer is peer:
                by_factory.setdefault(target.factory, []).append(target)
        for group in by_factory.values():
            collectors.append(_run_session(suite, group, peer_sizes if peer else sizes, listener))
    clauses: dict[str, Clause] = {}
    for collector in collectors:
        for name, clause in collector.clauses.items():
            clauses.setdefault(name, clause)
    return ConformanceRun(
        clauses=tuple(clauses.values()),
        targets=tuple(targets),
        results=tuple(r for c in collectors for r in c.results()),
        duration_s=time.monotonic() - started,
        sizes=sizes,
        peer_sizes=peer_sizes,
        versions=(*versions(), *extra_versions),
    )


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
