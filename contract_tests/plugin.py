"""pytest plugin (``pytest11`` entry point ``storage_contract``): run the storage contract anywhere.

Options (each mirrored as an ini setting of the same name with dashes as underscores):

``--storage-url URL``            a target (repeatable), ``NAME=URL`` or ``URL``; credentials from env.
``--storage-factory MOD:FUNC``   open targets with this factory instead of ``open_adapter``.
``--storage-embedded LIST``      embedded targets when no URL is given (default memory,local,seaweedfs):
                                 any registered backend that makes throwaway instances, or any server
                                 provider of ``storage_adapter.servers.registry`` (azurite for Azure Blob Storage; minio,
                                 rustfs run through Docker and skip with the reason without it).
``--contract-threads N``         threads in the thread races (default 8).
``--contract-processes N``       processes in the process races (default 4).
``--contract-increments N``      CAS increments per worker (default 25).
``--contract-check-budget S``    seconds the linearizability search may take per history (default 60);
                                 a search cut off is an inconclusive clause, never a failure.
``--contract-clause-timeout S``  deadline of each clause (default 300; 0: none). A clause still running
                                 then fails "did not finish within S s", naming where it is blocked.
``--contract-budget S``          total seconds for the session's clauses (default 0: none). Each clause's
                                 deadline is cut to what is left; a clause not reached when it has run
                                 out is reported not run (skipped as :class:`NotReached`), never a pass.
                                 Under a budget every adapter is watched for broken primitives
                                 (:mod:`contract_tests.health`).
``--contract-stall S``           under a budget, how long a call may run before a transient failure of it
                                 counts as a hang (default 60; set it to the client's request timeout).
``--storage-option KEY=VALUE``   an option for every target's factory, where the target's backend declares
                                 it (repeatable), e.g. ``request_timeout_s=10`` for S3 targets.

The deadline is a watchdog, not an interruption: a storage call blocked in native code cannot be
interrupted from Python, so the clause body runs in a daemon thread that is abandoned when its deadline
passes (it may go on running until the process exits); fixtures run in the main thread as usual.

Fixtures, all prefixed so they cannot collide with a project's own: ``storage_contract_target``
(session, one per target), ``storage_contract_servers`` (session: servers started on demand),
``storage_contract_root`` (session adapter at the target's root), ``storage_contract_adapter``
(function: a fresh random prefix, deleted afterwards), ``storage_contract_opener`` (session: opens a
URL of the target as its root was opened), ``storage_contract_wire`` (function: signed raw S3 requests
under the fresh prefix; skips for a target that is not S3) and ``storage_contract_sizes``.

The plugin is silent in a session that did not ask for it: it prints its report header only when a
target is configured (``--storage-url``, ``--storage-embedded`` or their ini settings), and its fixtures
do nothing unless a test requests them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import pytest

from contract_tests.health import PrimitiveHealth, watched
from contract_tests.targets import DEFAULT_FACTORY, EMBEDDED, Target, parse_target
from contract_tests.verdicts import Inconclusive, Violation
from contract_tests.wire import S3Wire, WireUnavailable, open_wire
from storage_adapter.protocol import StorageAdapter
from storage_adapter.registry import Backend, backend_for_scheme, registered

if TYPE_CHECKING:
    from storage_adapter.servers.server import ServerEndpoint

_OPTIONS: tuple[tuple[str, str, Any, str], ...] = (
    ("storage-url", "append", None, "storage URL to run the contract against (NAME=URL or URL)"),
    ("storage-factory", "store", DEFAULT_FACTORY, "module:function that opens an adapter for a URL"),
    ("storage-embedded", "store", ",".join(EMBEDDED), "embedded targets used when no URL is given"),
    ("contract-threads", "store", "8", "threads in thread races"),
    ("contract-processes", "store", "4", "processes in process races"),
    ("contract-increments", "store", "25", "CAS increments per worker"),
    ("contract-check-budget", "store", "60", "seconds the linearizability search may take per history"),
    ("contract-clause-timeout", "store", "300", "deadline of each clause in seconds (0: none)"),
    ("contract-budget", "store", "0", "total seconds for the session's clauses (0: none)"),
    ("contract-stall", "store", "60", "seconds after which a transiently failing call counts as hung"),
    ("storage-option", "append", None, "KEY=VALUE option for targets whose backend declares it"),
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("storage-contract", "storage adapter contract")
    for name, action, default, help_text in _OPTIONS:
        group.addoption(f"--{name}", action=action, default=None, help=help_text)
        ini_type: Literal["linelist", "string"] = "linelist" if action == "append" else "string"
        parser.addini(name.replace("-", "_"), help_text, type=ini_type, default=default)


def option(config: pytest.Config, name: str) -> Any:
    """Command line first, then the ini setting, then the default."""
    value = config.getoption(name.replace("-", "_"))
    return value if value not in (None, []) else config.getini(name.replace("-", "_"))


def _asked(config: pytest.Config) -> bool:
    """Whether this session configured a target itself: on the command line, or in its ini file (an
    ini ``storage_url``, or ``storage_embedded`` other than the default)."""
    if any(config.getoption(n) not in (None, []) for n in ("storage_url", "storage_embedded")):
        return True
    return bool(config.getini("storage_url")) or config.getini("storage_embedded") != ",".join(EMBEDDED)


class NotReached(pytest.skip.Exception):  # type: ignore[name-defined,misc]
    """A clause the session's total budget (``--contract-budget``) did not reach: not run, never a pass."""


# Primitives hung with no answer at all on a target, after which its other clauses are not run.
SILENT_AFTER = 2
_DEADLINE = pytest.StashKey[float]()  # monotonic end of the session's budget
_HEALTH_ROOT = pytest.StashKey[str]()  # directory of every target's PrimitiveHealth
_FIRST_SEEN = pytest.StashKey[dict[tuple[str, str], str]]()  # (target, primitive) -> clause that broke it


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "storage_contract: a clause of the storage adapter contract")
    config.addinivalue_line(
        "markers", "storage_contract_processes: a storage contract clause that races OS processes"
    )
    budget = float(option(config, "contract-budget"))
    if budget > 0:
        config.stash[_DEADLINE] = time.monotonic() + budget
        config.stash[_HEALTH_ROOT] = tempfile.mkdtemp(prefix="storage-contract-health-")
        config.stash[_FIRST_SEEN] = {}


def pytest_unconfigure(config: pytest.Config) -> None:
    root = config.stash.get(_HEALTH_ROOT, None)
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


def target_health(config: pytest.Config, target: Target) -> PrimitiveHealth | None:
    """The health of ``target``'s primitives in this session; None unless it runs under a budget."""
    root = config.stash.get(_HEALTH_ROOT, None)
    if root is None:
        return None
    directory = os.path.join(root, hashlib.sha256(target.name.encode()).hexdigest()[:16])
    return PrimitiveHealth(directory, target.name, float(option(config, "contract-stall")))


def storage_options(config: pytest.Config, target: Target, url: str) -> dict[str, str]:
    """The ``--storage-option`` settings the backend of ``url`` declares (the others are not its own)."""
    given: dict[str, str] = {}
    for setting in option(config, "storage-option") or []:
        name, sep, value = str(setting).partition("=")
        if not sep or not name.strip():
            raise pytest.UsageError(f"--storage-option {setting!r}: expected KEY=VALUE")
        given[name.strip()] = value.strip()
    return declared_options(url, given)


def url_backend(url: str) -> Backend | None:
    """The registered backend of ``url``'s scheme (a URL without one is a local path), or None."""
    return backend_for_scheme(url.split("://", 1)[0].lower() if "://" in url else "file")


def declared_options(url: str, given: Mapping[str, str]) -> dict[str, str]:
    """The options of ``given`` that the backend of ``url`` declares: what a target's factory gets of the
    ``--storage-option`` settings (the check's ``Bounds.storage_options``) for that URL."""
    backend = url_backend(url)
    takes = backend.options if backend is not None else {}
    return {name: value for name, value in given.items() if name in takes}


def configured_targets(config: pytest.Config) -> list[Target]:
    factory = option(config, "storage-factory") or DEFAULT_FACTORY
    urls = [u for u in option(config, "storage-url") or [] if u]
    if urls:
        return [parse_target(u, factory) for u in urls]
    names = [n.strip() for n in str(option(config, "storage-embedded")).split(",") if n.strip()]
    choices = embedded_choices()
    unknown = set(names) - set(choices)
    if unknown:
        raise pytest.UsageError(f"--storage-embedded: unknown {sorted(unknown)}; choose from {choices}")
    return [Target(name=n, factory=factory) for n in names]


def _server_names() -> tuple[str, ...]:
    from storage_adapter.servers.registry import provider_names

    return provider_names()


def embedded_choices() -> tuple[str, ...]:
    """Registered backends that make throwaway instances (memory, local, ...), then every server provider
    of ``storage_adapter.servers.registry`` (seaweedfs, minio, rustfs, azurite, ...)."""
    scratch = tuple(b.name for b in registered() if b.scratch is not None)
    return scratch + tuple(n for n in _server_names() if n not in scratch)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "storage_contract_target" in metafunc.fixturenames:
        targets = configured_targets(metafunc.config)
        metafunc.parametrize(
            "storage_contract_target", targets, ids=[t.name for t in targets], scope="session"
        )


@dataclass(frozen=True)
class ContractSizes:
    """Race sizes (threads and processes per race, CAS increments per worker) and the bounds of a clause:
    the linearizability search budget and the clause deadline (seconds; 0: none)."""

    threads: int
    processes: int
    increments: int
    check_budget_s: float = 60.0
    clause_timeout_s: float = 300.0


@pytest.fixture(scope="session")
def storage_contract_sizes(pytestconfig: pytest.Config) -> ContractSizes:
    return ContractSizes(
        threads=int(option(pytestconfig, "contract-threads")),
        processes=int(option(pytestconfig, "contract-processes")),
        increments=int(option(pytestconfig, "contract-increments")),
        check_budget_s=float(option(pytestconfig, "contract-check-budget")),
        clause_timeout_s=float(option(pytestconfig, "contract-clause-timeout")),
    )


def _blocked_at(thread: threading.Thread) -> str:
    """The innermost frames of ``thread``'s stack, for a clause that missed its deadline."""
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is None:
        return "(no stack: the thread has just finished)"
    return "".join(traceback.format_stack(frame)[-4:]).rstrip()


def _clause_target(item: pytest.Item) -> Target | None:
    callspec = getattr(item, "callspec", None)
    target = callspec.params.get("storage_contract_target") if callspec is not None else None
    return target if isinstance(target, Target) else None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Under a budget, a clause is not run (no fixture touches storage) once the budget has run out, or
    once its target has answered nothing since the preflight while :data:`SILENT_AFTER` primitives hung
    (a server that stopped answering: running on would only pay each primitive's hang in turn)."""
    deadline = item.config.stash.get(_DEADLINE, None)
    if deadline is None or item.get_closest_marker("storage_contract") is None:
        return
    if time.monotonic() >= deadline:
        raise NotReached("not run: the total budget ran out before this clause")
    target = _clause_target(item)
    health = target_health(item.config, target) if target is not None else None
    if health is not None and not health.answered():
        broken = health.broken_primitives()
        if len(broken) >= SILENT_AFTER:
            raise NotReached(
                f"not run: {health.target} has answered nothing since the preflight "
                f"({', '.join(broken)} hung)"
            )


def _health_verdict(
    item: pytest.Function, target: Target, health: PrimitiveHealth, before: frozenset[str]
) -> Violation | None:
    """What the clause did to the target's primitive health: a primitive it found broken (a hang, or one
    that always fails), or a call it made of a primitive found broken earlier; None if neither."""
    first_seen = item.config.stash[_FIRST_SEEN]
    new = health.events() - before
    found = sorted(n.removeprefix("broken-") for n in new if n.startswith("broken-"))
    for primitive in found:
        first_seen.setdefault((target.name, primitive), item.originalname.removeprefix("test_"))
    if found:
        evidence = [health.broken(p) or "" for p in found]
        return Violation(evidence[0], "\n".join(evidence[1:]))
    refused = sorted({n.split("-")[1] for n in new if n.startswith("refused-")})
    if refused:
        where = {p: first_seen.get((target.name, p), "an earlier clause") for p in refused}
        reason = "; ".join(f"{p} is broken on {target.name} (found by {where[p]})" for p in refused)
        return Violation(
            f"depends on a broken primitive: {reason}", "\n".join(health.broken(p) or "" for p in refused)
        )
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run a contract clause under its deadline (``--contract-clause-timeout``, cut to what is left of
    ``--contract-budget``; see the module docstring), and judge what it did to its target's primitive
    health (:mod:`contract_tests.health`): a primitive found broken fails the clause that found it and
    every later clause that calls it, whatever the clause itself concluded."""
    if pyfuncitem.get_closest_marker("storage_contract") is None:
        return None  # pytest's own call
    config = pyfuncitem.config
    limit = float(option(config, "contract-clause-timeout"))
    deadline = config.stash.get(_DEADLINE, None)
    if limit <= 0 and deadline is None:
        return None
    wait, cut_by_budget = (limit if limit > 0 else None), False
    if deadline is not None:
        left = max(0.0, deadline - time.monotonic())
        if wait is None or left < wait:
            wait, cut_by_budget = left, True
    target = _clause_target(pyfuncitem)
    health = target_health(config, target) if target is not None else None
    before = health.events() if health is not None else frozenset()
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    raised: list[BaseException] = []

    def body() -> None:
        try:
            pyfuncitem.obj(**arguments)
        except BaseException as exc:  # re-raised in the main thread: a skip, a failure, a verdict
            raised.append(exc)

    started = time.monotonic()
    thread = threading.Thread(target=body, name=f"clause {pyfuncitem.name}", daemon=True)
    thread.start()
    thread.join(wait)
    if thread.is_alive():
        if health is not None:
            # At its own deadline a clause's call in flight for half of it hung by any measure; cut by the
            # budget, only one in flight for the stall threshold did.
            health.mark_stalled(started, None if cut_by_budget else min(health.stall_s, limit / 2))
        verdict = _health_verdict(pyfuncitem, target, health, before) if health and target else None
        if verdict is not None:
            raise Violation(str(verdict), f"blocked at:\n{_blocked_at(thread)}")
        if cut_by_budget:
            budget = float(option(config, "contract-budget"))
            raise Inconclusive(
                f"cut off by the total budget of {budget:g} s after {time.monotonic() - started:.0f} s; "
                "blocked at:",
                _blocked_at(thread),
            )
        raise Violation(
            f"did not finish within {limit:g} s (the clause deadline); blocked at:", _blocked_at(thread)
        )
    verdict = _health_verdict(pyfuncitem, target, health, before) if health and target else None
    if verdict is not None:
        raise verdict
    if raised:
        raise raised[0]
    return True


class ServerPool:
    """Servers of ``storage_adapter.servers.registry`` (S3 servers, Azurite) started on first use and stopped when the session ends. A
    provider that cannot run here (no Docker for MinIO, no ``weed`` binary) skips the requesting test with
    its reason; one that was started and did not come up fails it (a crashed server is no reason to skip:
    a run that skipped the server's clauses would look green)."""

    def __init__(self, stack: ExitStack) -> None:
        self._stack = stack
        self._endpoints: dict[str, ServerEndpoint] = {}
        self._unavailable: dict[str, str] = {}
        self._failed: dict[str, str] = {}

    def endpoint(self, name: str) -> ServerEndpoint:
        from storage_adapter.servers.registry import provider
        from storage_adapter.servers.server import ServerStartFailed, ServerUnavailable

        if name in self._failed:
            pytest.fail(self._failed[name], pytrace=False)
        if name in self._unavailable:
            pytest.skip(self._unavailable[name])
        if name not in self._endpoints:
            try:
                self._endpoints[name] = self._stack.enter_context(provider(name)())
            except ServerStartFailed as exc:
                self._failed[name] = f"{name} was started and did not come up: {exc}"
                pytest.fail(self._failed[name], pytrace=False)
            except ServerUnavailable as exc:
                self._unavailable[name] = str(exc)
                pytest.skip(str(exc))
        return self._endpoints[name]


@pytest.fixture(scope="session")
def storage_contract_servers() -> Iterator[ServerPool]:
    with ExitStack() as stack:
        yield ServerPool(stack)


def _server(target: Target, request: pytest.FixtureRequest) -> ServerEndpoint | None:
    """The server of an embedded server target (started on first use); None for any other target."""
    if target.url is not None or target.name in {b.name for b in registered() if b.scratch is not None}:
        return None
    servers: ServerPool = request.getfixturevalue("storage_contract_servers")
    return servers.endpoint(target.name)


def target_options(target: Target, request: pytest.FixtureRequest) -> Callable[[str], dict[str, Any]]:
    """The options ``target``'s factory gets for a URL of it: those of its server (none for a URL target,
    whose credentials come from the environment, or a scratch one) over the ``--storage-option`` settings
    its backend declares."""
    endpoint = _server(target, request)
    server_options: dict[str, Any] = endpoint.adapter_options() if endpoint is not None else {}

    def options(url: str) -> dict[str, Any]:
        return {**storage_options(request.config, target, url), **server_options}

    return options


def target_opener(target: Target, request: pytest.FixtureRequest) -> Callable[[str], StorageAdapter]:
    """Opens an adapter at a URL of ``target`` the way its root is opened: by its factory, with the
    options of :func:`target_options`; watched under a budget."""
    options = target_options(target, request)
    health = target_health(request.config, target)

    def open_url(url: str) -> StorageAdapter:
        return watched(target.open(url, **options(url)), health)

    return open_url


@contextmanager
def target_root(target: Target, request: pytest.FixtureRequest) -> Iterator[StorageAdapter]:
    """An adapter at ``target``'s root, opened by its factory. Embedded targets get a private root (a
    scratch instance, or a fresh bucket of a server of ``storage_contract_servers``) for the block."""
    opener = target_opener(target, request)
    if target.url is not None:
        yield opener(target.url)
        return
    endpoint = _server(target, request)
    if endpoint is None:
        scratch = {b.name: b.scratch for b in registered() if b.scratch is not None}
        with scratch[target.name]() as url:
            yield opener(url)
        return
    yield opener(endpoint.url(f"contract-{uuid.uuid4().hex[:8]}"))


@contextmanager
def fresh_prefix(root: StorageAdapter) -> Iterator[StorageAdapter]:
    """``root``'s child under a fresh random prefix; everything under it is deleted afterwards."""
    prefix = f"contract-{uuid.uuid4().hex[:12]}"
    yield root.child(prefix)
    root.delete_prefix(prefix)


@pytest.fixture(scope="session")
def storage_contract_root(
    storage_contract_target: Target, request: pytest.FixtureRequest
) -> Iterator[StorageAdapter]:
    """An adapter at the target's root. Embedded targets get a private root for the session."""
    with target_root(storage_contract_target, request) as root:
        yield root


@pytest.fixture
def storage_contract_adapter(storage_contract_root: StorageAdapter) -> Iterator[StorageAdapter]:
    """An adapter under a fresh random prefix of the target; everything under it is deleted afterwards."""
    with fresh_prefix(storage_contract_root) as adapter:
        yield adapter


@pytest.fixture(scope="session")
def storage_contract_opener(
    storage_contract_target: Target, request: pytest.FixtureRequest
) -> Callable[[str], StorageAdapter]:
    """Opens an adapter at a URL of the target as its root was opened (see :func:`target_opener`)."""
    return target_opener(storage_contract_target, request)


@pytest.fixture
def storage_contract_wire(
    storage_contract_target: Target, storage_contract_adapter: StorageAdapter, request: pytest.FixtureRequest
) -> S3Wire:
    """Signed raw S3 requests under the clause's fresh prefix (that of ``storage_contract_adapter``, whose
    teardown deletes what they wrote), to the server, bucket and key prefix the adapter addresses, with the
    credentials, region and client settings it resolves from the target's options
    (:func:`target_options`) and the environment. Skips the clause, with the reason, for a target that is
    not S3 (memory, local, another backend) or where botocore is not installed."""
    url = storage_contract_adapter.url
    try:
        return open_wire(url, target_options(storage_contract_target, request)(url))
    except WireUnavailable as exc:
        pytest.skip(str(exc))


def pytest_report_header(config: pytest.Config) -> str | None:
    if not _asked(config):
        return None
    targets = configured_targets(config)
    return "storage contract targets: " + ", ".join(t.name for t in targets)


__all__ = [
    "ContractSizes",
    "NotReached",
    "ServerPool",
    "configured_targets",
    "embedded_choices",
    "fresh_prefix",
    "target_opener",
    "target_options",
    "target_root",
]
