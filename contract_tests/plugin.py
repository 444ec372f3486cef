"""pytest plugin (``pytest11`` entry point ``storage_contract``): run the storage contract anywhere.

Options (each mirrored as an ini setting of the same name with dashes as underscores):

``--storage-url URL``            a target (repeatable), ``NAME=URL`` or ``URL``; credentials from env.
``--storage-factory MOD:FUNC``   open targets with this factory instead of ``open_adapter``.
``--storage-embedded LIST``      embedded targets when no URL is given (default memory,local,seaweedfs;
                                 also minio, rustfs: run through Docker, skipped with the reason without).
``--contract-threads N``         threads in the thread races (default 8).
``--contract-processes N``       processes in the process races (default 4).
``--contract-increments N``      CAS increments per worker (default 25).

Fixtures: ``storage_target`` (session, one per target), ``embedded_seaweedfs`` (session S3 server),
``contract_root`` (session adapter at the target's root), ``adapter`` (function: a fresh random prefix,
deleted afterwards), ``contract_sizes``.
"""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from contract_tests.targets import DEFAULT_FACTORY, EMBEDDED, Target, parse_target

_OPTIONS: tuple[tuple[str, str, Any, str], ...] = (
    ("storage-url", "append", None, "storage URL to run the contract against (NAME=URL or URL)"),
    ("storage-factory", "store", DEFAULT_FACTORY, "module:function that opens an adapter for a URL"),
    ("storage-embedded", "store", ",".join(EMBEDDED), "embedded targets used when no URL is given"),
    ("contract-threads", "store", "8", "threads in thread races"),
    ("contract-processes", "store", "4", "processes in process races"),
    ("contract-increments", "store", "25", "CAS increments per worker"),
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("storage-contract", "storage adapter contract")
    for name, action, default, help_text in _OPTIONS:
        group.addoption(f"--{name}", action=action, default=None, help=help_text)
        ini_type = "linelist" if action == "append" else "string"
        parser.addini(name.replace("-", "_"), help_text, type=ini_type, default=default)


def option(config: pytest.Config, name: str) -> Any:
    """Command line first, then the ini setting, then the default."""
    value = config.getoption(name.replace("-", "_"))
    return value if value not in (None, []) else config.getini(name.replace("-", "_"))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "contract: a clause of the storage adapter contract")
    config.addinivalue_line("markers", "contract_processes: a contract clause that races OS processes")
    config.addinivalue_line("markers", "stress: heavy concurrency run, sized by options")


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


def embedded_choices() -> tuple[str, ...]:
    """memory, local, and every S3 server provider of ``backends.registry`` (seaweedfs, minio, rustfs)."""
    from backends.registry import provider_names

    return EMBEDDED + tuple(n for n in provider_names() if n not in EMBEDDED)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "storage_target" in metafunc.fixturenames:
        targets = configured_targets(metafunc.config)
        metafunc.parametrize("storage_target", targets, ids=[t.name for t in targets], scope="session")


@dataclass(frozen=True)
class ContractSizes:
    threads: int
    processes: int
    increments: int


@pytest.fixture(scope="session")
def contract_sizes(pytestconfig: pytest.Config) -> ContractSizes:
    return ContractSizes(
        threads=int(option(pytestconfig, "contract-threads")),
        processes=int(option(pytestconfig, "contract-processes")),
        increments=int(option(pytestconfig, "contract-increments")),
    )


@pytest.fixture(scope="session")
def embedded_seaweedfs() -> Iterator[Any]:
    """A SeaweedFS S3 server for the whole session (``backends.seaweedfs``); yields its S3Endpoint."""
    from backends.seaweedfs import SeaweedFS

    with SeaweedFS() as endpoint:
        yield endpoint


@pytest.fixture(scope="session")
def contract_root(storage_target: Target, request: pytest.FixtureRequest) -> Iterator[Any]:
    """An adapter at the target's root. Embedded targets get a private root for the session."""
    if storage_target.url is not None:
        yield storage_target.open()
        return
    if storage_target.name == "memory":
        yield storage_target.open(f"memory://contract-{uuid.uuid4().hex[:8]}")
    elif storage_target.name == "local":
        with tempfile.TemporaryDirectory(prefix="contract-local-") as root:
            yield storage_target.open(f"file://{root}")
    elif storage_target.name == "seaweedfs":
        endpoint = request.getfixturevalue("embedded_seaweedfs")
        yield storage_target.open(endpoint.url(), **endpoint.adapter_options())
    else:
        yield from _container_root(storage_target)


def _container_root(storage_target: Target) -> Iterator[Any]:
    """A provider that may not be able to run here (MinIO, RustFS need Docker): its clauses skip with the
    provider's one-line reason instead of erroring, and the server is stopped at session end."""
    from backends.registry import provider
    from backends.server import ServerUnavailable

    server = provider(storage_target.name)()
    try:
        endpoint = server.start()
    except ServerUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield storage_target.open(endpoint.url(), **endpoint.adapter_options())
    finally:
        server.stop()


@pytest.fixture
def adapter(contract_root: Any) -> Iterator[Any]:
    """An adapter under a fresh random prefix of the target; everything under it is deleted afterwards."""
    prefix = f"contract-{uuid.uuid4().hex[:12]}"
    yield contract_root.child(prefix)
    contract_root.delete_prefix(prefix)


def pytest_report_header(config: pytest.Config) -> str:
    targets = configured_targets(config)
    return "storage contract targets: " + ", ".join(t.name for t in targets)
