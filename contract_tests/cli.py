"""``storage-adapter`` command line: ``check`` (the contract as a conformance matrix), ``bench``,
``mutate`` (contract_tests.mutation) and ``chaos`` (contract_tests.chaos).

Exit status of ``check``: 0 when every judged backend keeps every clause, 1 on any violation of a judged
backend (peers never count), 2 on bad input (unknown scheme, unreachable endpoint, missing credentials,
no permission, a failed preflight, ``--server`` with URLs), 3 when an S3 server the check must start
cannot run here (no Docker engine, no ``weed`` binary), 4 when nothing was violated but some clause was
inconclusive (it could not decide within its bound). 2 and 3 are printed as one line without a
traceback. With ``--allow-unavailable`` case 3 prints ``SKIPPED <server>: <reason>`` and exits 0. With
``--report`` the Markdown and JSON reports are written in every case, a run that did not happen saying why;
so are ``--junit`` (JUnit XML) and the step summary (``--summary``, else ``$GITHUB_STEP_SUMMARY``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from contract_tests.ci_report import append_step_summary, write_junit
from contract_tests.conformance import (
    DEFAULT_SIZES,
    PEER_SIZES,
    Bounds,
    CheckInterrupted,
    ClauseOutcome,
    ConformanceRun,
    ContractRunError,
    RunInProgress,
    RunStatus,
    not_run,
    preflight,
    run_contract,
)
from contract_tests.plugin import ContractSizes
from contract_tests.report import (
    evidence,
    evidence_title,
    fold,
    header_lines,
    left_out_lines,
    matrix_table,
    notes,
    ordered_targets,
    overall,
    report_paths,
    write_report,
)
from contract_tests.targets import DEFAULT_FACTORY, EMBEDDED, Target, load_factory, parse_target
from storage_adapter.builtin_backends import UNQUOTED_IF_MATCH
from storage_adapter.config import parse_url
from storage_adapter.errors import ConfigurationError, PermissionDeniedError, StorageError
from storage_adapter.registry import Backend, backend_for_scheme, redact_environment, registered, schemes
from storage_adapter.servers.registry import provider, provider_names
from storage_adapter.servers.server import ServerEndpoint, ServerUnavailable, scoped_environment

PEER_FACTORY = "contract_tests.peers:open_peer"
EXIT_OK, EXIT_VIOLATION, EXIT_BAD_INPUT, EXIT_SERVER_UNAVAILABLE, EXIT_INCONCLUSIVE = 0, 1, 2, 3, 4
_EXIT_OF = {
    RunStatus.CONFORMS: EXIT_OK,
    RunStatus.VIOLATIONS: EXIT_VIOLATION,
    RunStatus.INCONCLUSIVE: EXIT_INCONCLUSIVE,
    RunStatus.NOT_RUN: EXIT_BAD_INPUT,  # a judged target answered nothing after its preflight
}
# The check's total budget when none is given: the embedded defaults with their peers take about 10
# minutes on a busy 2-core machine, one server alone 1 to 3.
DEFAULT_BUDGET_S = 900.0
# After a signal's report is written, the check has this long to stop its servers and exit by itself.
STOP_GRACE_S = 20.0
# --compat MODE: the compatibility modes a check can turn on, and the environment variable that turns each
# on for every adapter the run opens (spawned clause workers inherit it).
COMPAT_MODES = {UNQUOTED_IF_MATCH: "STORAGE_ADAPTER_S3_UNQUOTED_IF_MATCH"}
# Preflight fails fast where the backend takes these options: one retry, short timeouts (the suite
# itself uses the URL's normal settings).
_PREFLIGHT_OPTIONS = {
    "max_retries": 1,
    "retry_timeout_s": 5.0,
    "connect_timeout_s": 3.0,
    "request_timeout_s": 10.0,
}


class InputError(Exception):
    """Bad input for the command: reported as one line, exit status 2."""


class ServerCannotRun(Exception):
    """An S3 server the check must start cannot run here: exit status 3, or a SKIPPED line on request."""

    def __init__(self, server: str, reason: str) -> None:
        super().__init__(f"{server}: {reason}")
        self.server = server
        self.reason = reason


# -- progress -------------------------------------------------------------------------------------------------
class _RichProgress:
    """ProgressListener drawing one bar per backend."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.tasks: dict[str, Any] = {}
        self.violations: dict[str, int] = {}

    def collected(self, target: str, clauses: int) -> None:
        self.tasks[target] = self.progress.add_task(target, total=clauses)
        self.violations[target] = 0

    def finished(self, target: str, clause: str, outcome: ClauseOutcome) -> None:
        self.violations[target] += outcome.is_violation
        bad = self.violations[target]
        label = f"{target} [red]{bad} failing[/red]" if bad else target
        self.progress.update(self.tasks[target], advance=1, description=f"{label} [dim]{clause}[/dim]")


class _PlainProgress:
    """ProgressListener for logs and pipes (CI): one line per finished clause with its outcome, the time
    since the previous line (the clause's duration, near enough) and since the start."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.started = self.last = time.monotonic()
        self.totals: dict[str, int] = {}
        self.done: dict[str, int] = {}

    def collected(self, target: str, clauses: int) -> None:
        self.totals[target], self.done[target] = clauses, 0
        self.console.print(f"{target}: {clauses} clauses", highlight=False, markup=False)

    def finished(self, target: str, clause: str, outcome: ClauseOutcome) -> None:
        now = time.monotonic()
        self.done[target] += 1
        line = (
            f"[{now - self.started:7.1f}s] {target} {self.done[target]}/{self.totals[target]} "
            f"{clause.removeprefix('test_')}: {outcome.value} ({now - self.last:.1f} s)"
        )
        self.last = now
        self.console.print(line, highlight=False, markup=False, soft_wrap=True)


@contextlib.contextmanager
def _terminal() -> Iterator[IO[str]]:
    """A private duplicate of stdout: pytest's fd-level capture swaps fd 1 while a clause runs, and the
    progress display must keep drawing on the real terminal meanwhile."""
    try:
        fd = os.dup(sys.stdout.fileno())
    except (AttributeError, OSError, ValueError):  # no real file descriptor (embedded use)
        yield sys.stdout
        return
    with os.fdopen(fd, "w", buffering=1) as stream:
        yield stream


# -- targets --------------------------------------------------------------------------------------------------
def _backend_of(url: str) -> Backend | None:
    return backend_for_scheme(url.split("://", 1)[0].lower()) if "://" in url else None


def _peer_of(target: Target, named_by_kind: bool = False) -> Target | None:
    """The fsspec peer declared by the target's backend, on the same URL (None if it declares none),
    named ``kind:target`` or, for a store of its own, just by its kind (``s3fs``)."""
    backend = _backend_of(target.address)
    if backend is None or backend.fsspec_peer is None:
        return None
    kind = backend.fsspec_peer.name
    name = kind if named_by_kind else f"{kind}:{target.name}"
    return Target(name=name, url=target.url, factory=PEER_FACTORY, peer=True)


def _peer_named_by_kind(target: Target) -> Target | None:
    return _peer_of(target, named_by_kind=True)


def _with_peers(targets: list[Target]) -> list[Target]:
    return targets + [peer for peer in map(_peer_of, targets) if peer is not None]


def _user_targets(specs: Sequence[str], peers: bool) -> list[Target]:
    targets = []
    for spec in specs:
        parsed = parse_target(spec)
        url = parsed.address
        if url.startswith("/"):
            url = "file://" + url
        if _backend_of(url) is None:
            supported = ", ".join(f"{scheme}://" for scheme in schemes())
            raise InputError(f"unsupported storage URL {url!r}: the scheme must be one of {supported}")
        targets.append(Target(name=parsed.name, url=url))
    if len({t.name for t in targets}) != len(targets):
        raise InputError("two URLs have the same name: name them, e.g. a=s3://bucket/x b=s3://bucket/y")
    return _with_peers(targets) if peers else targets


def _preflight_all(targets: list[Target], console: Console) -> list[Target]:
    """Probe every target. A judged target that fails is bad input; a failing peer is dropped."""
    usable = []
    for target in targets:
        backend = _backend_of(target.address)
        takes = backend.options if backend is not None else {}
        options = {name: value for name, value in _PREFLIGHT_OPTIONS.items() if name in takes}
        try:
            preflight(target, **options)
        except (StorageError, OSError) as exc:
            message = _explain(target, exc)
            if not target.peer:
                raise InputError(message) from None
            console.print(Text.assemble(("peer skipped: ", "yellow"), message), soft_wrap=True)
            continue
        usable.append(target)
    return usable


def _explain(target: Target, exc: BaseException) -> str:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    hint = ""
    backend = _backend_of(target.address)
    takes = backend.options if backend is not None else {}
    if isinstance(exc, PermissionDeniedError) and "access_key_id" in takes:
        if not os.environ.get("AWS_ACCESS_KEY_ID"):
            hint = " (no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
        else:
            hint = " (check the credentials and the bucket's permissions)"
    else:
        variables, endpoint = _endpoint_setting(backend)
        if variables and endpoint is None and not isinstance(exc, ConfigurationError):
            hint = (
                f" (no {variables[-1]} set: talking to the {backend.name if backend else ''} service itself)"
            )
    return redact_environment(f"{target.name} ({target.url}): {type(exc).__name__}: {first}{hint}")


@contextlib.contextmanager
def _started_server(name: str, console: Console) -> Iterator[tuple[ServerEndpoint, str]]:
    """Start the server provider ``name`` (``storage_adapter.servers.registry``) with a bucket (container), and point the
    client environment (``AWS_*``, ``AZURE_*``) at it for the duration (spawned clause workers and s3fs read
    it). Yields the endpoint and the server's version; stops the server at exit. Raises ServerCannotRun when
    it cannot run here."""
    server = provider(name)(bucket="check")
    with contextlib.ExitStack() as stack:
        try:
            with console.status(f"starting the {name} server ..."):
                endpoint = stack.enter_context(server)
            version = server.version()
        except ServerUnavailable as exc:
            raise ServerCannotRun(name, str(exc)) from None
        console.print(f"{name} server ({version}) at {endpoint.endpoint}", highlight=False, markup=False)
        stack.enter_context(endpoint.scoped())
        yield endpoint, version


@contextlib.contextmanager
def _embedded_targets(peers: bool, console: Console) -> Iterator[tuple[list[Target], list[tuple[str, str]]]]:
    """The embedded defaults (``contract_tests.targets.EMBEDDED``: memory, a temporary local directory,
    an embedded SeaweedFS started and stopped here), plus each one's peer on a store of its own. Yields
    the targets and the server's version."""
    run = uuid.uuid4().hex[:8]
    scratch = {b.name: b.scratch for b in registered() if b.scratch is not None}
    with contextlib.ExitStack() as stack:
        servers = [n for n in EMBEDDED if n not in scratch]
        endpoints = {n: stack.enter_context(_started_server(n, console)) for n in servers}

        def instance(name: str, role: str) -> Target:
            if name in scratch:
                return Target(name, stack.enter_context(scratch[name]()))
            return Target(name, endpoints[name][0].url(f"{role}-{run}"))

        judged = [instance(name, "adapter") for name in EMBEDDED]
        compared = [instance(name, "peer") for name in EMBEDDED] if peers else []
        peer_targets = [peer for peer in map(_peer_named_by_kind, compared) if peer is not None]
        yield judged + peer_targets, [(n, endpoints[n][1]) for n in servers]


@contextlib.contextmanager
def _server_targets(
    name: str, peers: bool, console: Console
) -> Iterator[tuple[list[Target], list[tuple[str, str]]]]:
    """``--server NAME``: that provider's server (started and stopped here) as the one judged target, plus
    its peer on a bucket prefix of its own. Yields the targets and the server's version."""
    run = uuid.uuid4().hex[:8]
    with _started_server(name, console) as (endpoint, version):
        targets = [Target(name, endpoint.url(f"adapter-{run}"))]
        peer = _peer_named_by_kind(Target(name, endpoint.url(f"s3fs-{run}"))) if peers else None
        yield targets + ([peer] if peer else []), [(name, version)]


# -- bounds and signals ---------------------------------------------------------------------------------------
def budget_bounds(budget_s: float, started: float) -> Bounds:
    """The bounds of a check with a total budget of ``budget_s`` seconds from ``started``: a storage
    request may take a thirtieth of it (5 to 60 s), its retries stop once that long again has passed,
    and a call that fails transiently after a request timeout counts as hung (``contract_tests.health``).
    So a server that never answers costs each primitive about two request timeouts once, never a clause
    deadline per clause. 0: no budget, the backends' own client settings."""
    if budget_s <= 0:
        return Bounds()
    request_s = min(60.0, max(5.0, budget_s / 30))
    options = {
        "request_timeout_s": request_s,
        "connect_timeout_s": min(5.0, request_s),
        "retry_timeout_s": request_s,
    }
    return Bounds(
        budget_s=budget_s,
        started=started,
        stall_s=request_s,
        storage_options=tuple((name, f"{value:g}") for name, value in options.items()),
    )


class _SignalReport:
    """SIGTERM and SIGINT (a CI job's timeout, Ctrl-C) stop a check with a report: the report of what was
    done so far, marked incomplete, is written at once by a watcher thread (woken through
    ``signal.set_wakeup_fd``, so a main thread blocked in a storage call cannot delay it), then the main
    thread unwinds (KeyboardInterrupt: pytest tears its fixtures down, servers stop) and the check exits
    with 128 + the signal's number. One that has not exited ``STOP_GRACE_S`` after the report is ended
    by the watcher."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, progress: RunInProgress, report: Any) -> None:
        self.progress = progress
        self.report = report  # called with the reason, writes the report of the run so far
        self.signal: int | None = None
        self.reported = threading.Event()
        self.exited = threading.Event()

    def _why(self, signum: int) -> str:
        elapsed = time.monotonic() - self.progress.started
        return f"stopped by {signal.Signals(signum).name} after {elapsed:.0f} s"

    def _handler(self, signum: int, frame: Any) -> None:
        if self.signal is None:
            self.signal = signum
            self.progress.interrupt(self._why(signum))
        raise KeyboardInterrupt

    def _watch(self, read_fd: int) -> None:
        while True:
            data = os.read(read_fd, 1)
            if not data:
                return  # closed: the check ended without a signal
            signum = data[0]
            if signum in self.SIGNALS:
                break
        if self.signal is None:
            self.signal = signum
            self.progress.interrupt(self._why(signum))
        try:
            self.report(self.progress.interrupted)
        finally:
            self.reported.set()
        if not self.exited.wait(STOP_GRACE_S):
            os._exit(128 + signum)

    @contextlib.contextmanager
    def installed(self) -> Iterator[_SignalReport]:
        if threading.current_thread() is not threading.main_thread():
            yield self  # signals are the main thread's: embedded in another thread, none are caught
            return
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        previous = {signum: signal.getsignal(signum) for signum in self.SIGNALS}
        old_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        for signum in self.SIGNALS:
            signal.signal(signum, self._handler)
        watcher = threading.Thread(target=self._watch, args=(read_fd,), name="signal report", daemon=True)
        watcher.start()
        try:
            yield self
        finally:
            self.exited.set()
            signal.set_wakeup_fd(old_fd)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            os.close(write_fd)  # wakes the watcher if no signal came
            watcher.join(1.0)
            os.close(read_fd)


# -- commands -------------------------------------------------------------------------------------------------
def _endpoint_setting(backend: Backend | None) -> tuple[tuple[str, ...], str | None]:
    """The environment variables the ``endpoint`` option of ``backend`` reads (none where it has no
    such option), and the value of the first one set (None: the service's own endpoint)."""
    option = backend.options.get("endpoint") if backend is not None else None
    variables = option.env if option is not None else ()
    return variables, next((os.environ[name] for name in variables if os.environ.get(name)), None)


def _user_server_version(targets: Sequence[Target]) -> list[tuple[str, str]]:
    """What can be learned of the server behind user URLs: the ``Server`` header the endpoint (from the
    judged backend's environment variables) answers a plain HEAD with (obstore does not expose response
    headers), else an honest "unknown"."""
    judged = [_backend_of(t.address) for t in targets if not t.peer]
    backend = next((b for b in judged if _endpoint_setting(b)[0]), None)
    if backend is None:
        return [("server", "none (no URL of a service with an endpoint)")]
    variables, endpoint = _endpoint_setting(backend)
    if not endpoint:
        return [("server", f"the {backend.name} service itself (no {variables[-1]} set)")]
    header = None
    with contextlib.suppress(OSError, ValueError):
        request = urllib.request.Request(endpoint, method="HEAD")
        try:
            with urllib.request.urlopen(request, timeout=3) as response:
                header = response.headers.get("Server")
        except urllib.error.HTTPError as answer:  # an S3 endpoint answers 403/400 to an anonymous HEAD
            header = answer.headers.get("Server")
    if header:
        return [("server", f"{header} (Server header of the user-supplied endpoint {endpoint})")]
    return [("server", f"unknown (user-supplied endpoint {endpoint})")]


def _create_buckets(targets: Sequence[Target], console: Console) -> None:
    """``--create-bucket``: for every judged target whose backend has containers (an S3 bucket), create the
    one its URL addresses if missing, with the endpoint and credentials the adapter would use (its options
    and the environment). Raises InputError when it cannot."""
    for target in targets:
        if target.peer or not target.url:
            continue
        config = parse_url(target.url, {})
        create = config.spec.create_container
        if create is None:
            continue
        try:
            create(config)
        except StorageError as exc:
            raise InputError(f"{target.name}: {exc}") from None
        console.print(f"{config.location} is there ({target.name})", highlight=False, markup=False)


def _progress(console: Console) -> tuple[contextlib.AbstractContextManager[Any], Any]:
    """Rich progress bars on a terminal (gone once the run ends), plain lines elsewhere."""
    if not console.is_terminal:
        return contextlib.nullcontext(), _PlainProgress(console)
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        redirect_stdout=False,
        redirect_stderr=False,
        transient=True,
    )
    return progress, _RichProgress(progress)


def _whole_evidence_at(args: argparse.Namespace) -> str:
    """Where a folded evidence is whole: the Markdown report, else the JUnit file, else how to get one."""
    if args.report:
        return f"see the report {report_paths(args.report)[0]}"
    if args.junit:
        return f"see the JUnit file {args.junit}"
    return "rerun with --report PATH to keep it whole"


def _print_run(run: ConformanceRun, console: Console, whole_at: str) -> None:
    """The matrix, the reason notes, each failing or inconclusive clause's evidence (folded when long: a
    log stays readable, the report files keep it whole, ``whole_at`` says where), the verdict lines, then
    a line per judged target whose root holds entries listings leave out (none when there are none)."""
    for line in header_lines(run):
        console.print(line, style="yellow", highlight=False, markup=False)
    if run.not_run and not run.results:
        console.print(f"overall: {overall(run)}", highlight=False, markup=False)
        return
    console.print(matrix_table(run))
    for number, reason in notes(run):
        console.print(Text.assemble((f"[{number}] ", "dim"), reason), highlight=False)
    for result in evidence(run):
        console.print()
        console.print(evidence_title(result), style="bold", highlight=False, markup=False, soft_wrap=True)
        console.print(Text(fold(result.evidence, whole_at)), highlight=False, soft_wrap=True)
    console.print()
    for target in ordered_targets(run):
        verdict = run.verdict(target)
        style = "green" if verdict.conforms else ("yellow" if target.peer else "bold red")
        console.print(verdict.line(), style=style, highlight=False, markup=False)
    for line in left_out_lines(run):
        console.print(line, style="yellow", highlight=False, markup=False, soft_wrap=True)
    console.print(
        f"checked in {run.duration_s:.0f} s; overall: {overall(run)}", highlight=False, markup=False
    )


def _write_reports(
    run: ConformanceRun, args: argparse.Namespace, console: Console, unavailable_allowed: bool = False
) -> None:
    """Every report ``args`` asks for, of ``run``: ``--report``, ``--junit``, and the step summary
    (``--summary``, else ``$GITHUB_STEP_SUMMARY`` when the environment has it, as GitHub Actions does).
    ``unavailable_allowed``: the run did not happen because a server cannot run here, and
    ``--allow-unavailable`` accepts that (the JUnit file and the summary then say skipped, not error)."""
    if args.report:
        md_path, json_path = write_report(run, args.report)
        label = "report (not run)" if run.not_run and not run.results else "report"
        label = f"report (incomplete: {run.incomplete})" if run.incomplete else label
        console.print(f"{label}: {md_path} and {json_path}", highlight=False, markup=False)
    if args.junit:
        write_junit(run, args.junit, unavailable_allowed=unavailable_allowed)
    summary = args.summary or os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        append_step_summary(run, summary, _whole_evidence_at(args), unavailable_allowed=unavailable_allowed)


def _check(args: argparse.Namespace, console: Console) -> int:
    """Run the check; with ``--report`` a report is written whatever happens (a run that could not
    happen is reported as not run, with the reason, and the exception goes on to set the exit status; a
    run stopped by SIGTERM or SIGINT is reported incomplete, see :class:`_SignalReport`)."""
    progress = RunInProgress()
    started = progress.started
    sizes = ContractSizes(
        args.threads, args.processes, args.increments, args.check_budget, args.clause_timeout
    )
    peer_sizes = PEER_SIZES if args.peer_sizes is None else args.peer_sizes
    peer_sizes = dataclasses.replace(
        peer_sizes, check_budget_s=args.check_budget, clause_timeout_s=args.clause_timeout
    )
    bounds = budget_bounds(args.budget, started)
    known: list[Target] = []
    server: list[tuple[str, str]] = []

    def not_started(reason: str, incomplete: str = "") -> ConformanceRun:
        run = not_run(
            known,
            reason,
            sizes=sizes,
            peer_sizes=peer_sizes,
            selection=args.clauses,
            duration_s=time.monotonic() - started,
            extra_versions=server,
        )
        return dataclasses.replace(run, incomplete=incomplete, budget_s=bounds.budget_s)

    def so_far(why: str) -> ConformanceRun:
        if progress.settings:
            return progress.snapshot(why)
        return not_started(f"{why}, before the contract started", incomplete=why)

    stopper = _SignalReport(progress, lambda why: _write_reports(so_far(why), args, console))
    with stopper.installed():
        try:
            if args.server and args.urls:
                raise InputError(
                    f"--server {args.server} starts and checks its own server: give no URL with it"
                )
            load_factory(args.factory)  # a bad --factory is bad input before any server starts
            with contextlib.ExitStack() as stack:
                if args.urls:
                    targets = _user_targets(args.urls, args.peers)
                    server = _user_server_version(targets)
                elif args.server:
                    server = [(args.server, "not started")]
                    targets, server = stack.enter_context(_server_targets(args.server, args.peers, console))
                else:
                    targets, server = stack.enter_context(_embedded_targets(args.peers, console))
                # After a started server's scope, which replaces every client setting with the server's own.
                stack.enter_context(scoped_environment({COMPAT_MODES[mode]: "true" for mode in args.compat}))
                targets = [t if t.peer else dataclasses.replace(t, factory=args.factory) for t in targets]
                known = targets
                if args.create_bucket:
                    _create_buckets(targets, console)
                targets = _preflight_all(targets, console)
                display, listener = _progress(console)
                with display:
                    run = run_contract(
                        targets,
                        sizes=sizes,
                        peer_sizes=peer_sizes,
                        listener=listener,
                        extra_versions=server,
                        selection=args.clauses,
                        bounds=bounds,
                        progress=progress,
                    )
        except (KeyboardInterrupt, CheckInterrupted):
            if stopper.signal is None:
                raise
            stopper.reported.wait(STOP_GRACE_S)
            console.print(
                f"storage-adapter check: {progress.interrupted}; the report says what was done so far",
                highlight=False,
                markup=False,
            )
            return 128 + stopper.signal
        except (InputError, ConfigurationError, ContractRunError, ServerCannotRun) as exc:
            allowed = isinstance(exc, ServerCannotRun) and args.allow_unavailable
            with contextlib.suppress(OSError):  # an unwritable report path is itself the bad input
                _write_reports(not_started(f"{type(exc).__name__}: {exc}"), args, console, allowed)
            raise
    _print_run(run, console, _whole_evidence_at(args))
    _write_reports(run, args, console)
    return _EXIT_OF[run.status]


def _bench(extra: Sequence[str]) -> int:
    """Run the benchmark harness (``python -m bench.storage_bench``) from the source tree."""
    root = Path(__file__).resolve().parent.parent
    if not (root / "bench" / "storage_bench.py").exists():
        raise InputError(
            f"the benchmarks ship with the source tree (bench/), not found under {root}: run from a clone"
        )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
    }
    return subprocess.run([sys.executable, "-m", "bench.storage_bench", *extra], env=env).returncode


def _sizes_arg(text: str) -> ContractSizes:
    try:
        threads, processes, increments = (int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("expected THREADS,PROCESSES,INCREMENTS, e.g. 8,2,5") from None
    return ContractSizes(threads, processes, increments)


_CHECK_DESCRIPTION = """\
Run the storage contract against URLs (s3://bucket/prefix with the AWS_* environment, file:///dir,
memory://name; NAME=URL to name one); or, with --server NAME, against that S3 server started here;
or, with neither, against memory, a temporary local directory and an embedded SeaweedFS.
Peers (fsspec, s3fs) run side by side and are never judged."""
_CHECK_EXIT_STATUS = """\
exit status:
  0  every judged backend keeps every clause (skips are fine)
  1  a judged backend violated a clause (peers never count)
  2  bad input (unknown scheme, unreachable endpoint, credentials, permission, a failed preflight,
     --server with URLs)
  3  a server to start cannot run here (no Docker engine, no weed binary); 0 with --allow-unavailable
  4  no violation found, but some clause was inconclusive (it could not decide within its bound) or
     was not run (the total --budget ran out before it)
  128+N  stopped by signal N (143 SIGTERM, 130 SIGINT): the report, marked incomplete, lists the
     clauses done so far
With --report, the reports are written in every case (a run that did not happen says why), and so are
--junit and the step summary (--summary, else $GITHUB_STEP_SUMMARY when it is set)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="storage-adapter", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser(
        "check",
        help="run the storage contract and print a clause x backend conformance matrix",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=_CHECK_DESCRIPTION,
        epilog=_CHECK_EXIT_STATUS,
    )
    check.add_argument("urls", nargs="*", metavar="URL", help="targets to check (default: embedded backends)")
    check.add_argument(
        "--server",
        choices=provider_names(),
        metavar="NAME",
        help=f"start this server ({', '.join(provider_names())}), create its bucket and "
        "check only it (no URL with it; minio and rustfs need Docker)",
    )
    check.add_argument(
        "--allow-unavailable",
        action="store_true",
        help="when a server to start cannot run here, print SKIPPED <name>: <reason> and exit "
        "0 instead of 3; only where the server is optional",
    )
    check.add_argument(
        "--factory",
        default=DEFAULT_FACTORY,
        metavar="MOD:FUNC",
        help="(url, **options) callable opening the judged adapters, e.g. your own adapter "
        f"(default {DEFAULT_FACTORY}); peers keep theirs",
    )
    check.add_argument(
        "--peers",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also run the peer adapters (fsspec local/memory, s3fs) for comparison",
    )
    check.add_argument("--report", metavar="PATH", help="write PATH.md and PATH.json (or into a directory)")
    check.add_argument(
        "--junit",
        metavar="PATH",
        help="write JUnit XML to PATH: a testcase per clause and target; fail is a failure, error an "
        "error; skip, not run and inconclusive (never a violation) are skipped with their reason",
    )
    check.add_argument(
        "--summary",
        metavar="PATH",
        help="append a short GitHub-flavoured Markdown summary to PATH (default: $GITHUB_STEP_SUMMARY, "
        "when set, as in GitHub Actions)",
    )
    check.add_argument(
        "--create-bucket",
        action="store_true",
        help="create the bucket of each s3:// URL if missing (at AWS_ENDPOINT_URL)",
    )
    check.add_argument(
        "--compat",
        action="append",
        default=[],
        choices=sorted(COMPAT_MODES),
        metavar="MODE",
        help="turn on a declared compatibility mode for a known server bug: unquoted-if-match "
        "(Ceph RGW before 2025 rejects quoted If-Match ETags); reported, never silent",
    )
    check.add_argument(
        "--clauses",
        default="",
        metavar="EXPR",
        help="run only the clauses matching this pytest -k expression (e.g. 'cas or "
        "processes'), to re-run a failure; the verdict then speaks for those clauses only, "
        "and says so",
    )
    check.add_argument(
        "--clause-timeout",
        type=float,
        default=DEFAULT_SIZES.clause_timeout_s,
        metavar="S",
        help="deadline of each clause: a clause still running fails as 'did not finish' "
        f"(default {DEFAULT_SIZES.clause_timeout_s:g})",
    )
    check.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_BUDGET_S,
        metavar="S",
        help="total seconds for the whole check, on any server: request timeouts and retries are set "
        "from it, a primitive found hanging fails the clauses that use it at once, clauses not reached "
        f"in time are reported not run (default {DEFAULT_BUDGET_S:g}; 0: none)",
    )
    check.add_argument(
        "--check-budget",
        type=float,
        default=DEFAULT_SIZES.check_budget_s,
        metavar="S",
        help="seconds the linearizability search may take per history; a search cut off is "
        f"inconclusive, never a failure (default {DEFAULT_SIZES.check_budget_s:g})",
    )
    check.add_argument("--threads", type=int, default=DEFAULT_SIZES.threads, help="threads in thread races")
    check.add_argument("--processes", type=int, default=DEFAULT_SIZES.processes, help="processes in races")
    check.add_argument(
        "--increments", type=int, default=DEFAULT_SIZES.increments, help="CAS increments/worker"
    )
    check.add_argument(
        "--peer-sizes",
        type=_sizes_arg,
        default=None,
        metavar="T,P,I",
        help=f"race sizes for peers (default {PEER_SIZES.threads},{PEER_SIZES.processes},"
        f"{PEER_SIZES.increments})",
    )
    commands.add_parser(
        "bench", add_help=False, help="run the benchmarks (arguments go to bench; --help for theirs)"
    )
    commands.add_parser(
        "mutate", add_help=False, help="measure the contract's mutation score (--help for its options)"
    )
    commands.add_parser(
        "chaos", add_help=False, help="seeded chaos campaign against idempotent engine commits (--help)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if argv[:1] == ["bench"]:
        try:
            return _bench(argv[1:])
        except InputError as exc:
            print(f"storage-adapter bench: error: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if argv[:1] == ["mutate"]:
        from contract_tests import mutation

        return mutation.main(argv[1:])
    if argv[:1] == ["chaos"]:
        from contract_tests import chaos

        return chaos.main(argv[1:])
    args = parser.parse_args(argv)
    with _terminal() as stream:
        console = Console(file=stream, highlight=False, emoji=False)
        if not console.is_terminal:  # a log or a pipe: give the matrix room instead of wrapping it
            console = Console(file=stream, highlight=False, emoji=False, width=200)
        try:
            return _check(args, console)
        except (InputError, ConfigurationError, ContractRunError) as exc:
            message = Text.assemble(
                ("storage-adapter check: error: ", "bold red"), redact_environment(str(exc))
            )
            console.print(message, highlight=False, soft_wrap=True)
            return EXIT_BAD_INPUT
        except ServerCannotRun as exc:
            if args.allow_unavailable:
                console.print(Text(f"SKIPPED {exc.server}: {exc.reason}"), highlight=False, soft_wrap=True)
                return EXIT_OK
            message = Text.assemble(
                ("storage-adapter check: ", "bold red"), f"{exc.server} cannot run here: ", exc.reason
            )
            console.print(message, highlight=False, soft_wrap=True)
            return EXIT_SERVER_UNAVAILABLE
        except KeyboardInterrupt:
            console.print("interrupted")
            return 130


if __name__ == "__main__":
    raise SystemExit(main())
