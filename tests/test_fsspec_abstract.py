"""fsspec's own conformance suite (``fsspec.tests.abstract``: copy, get, put, pipe and open) against the fsspec
face, on memory, local, SeaweedFS and Azurite, as s3fs, gcsfs and adlfs run it against theirs.

Each test works under a fresh random prefix (a child adapter: its paths are keys relative to that prefix,
so the suite's ``source`` and ``target`` sit directly under the face's root) and deletes only that prefix.
What object storage makes different from a POSIX-like filesystem is an explicit, strict xfail of exactly
the tests it fails, naming the section of docs/fsspec.md that states the difference."""

from __future__ import annotations

import posixpath
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import fsspec.tests.abstract as abstract
import pytest

from storage_adapter import open_adapter
from storage_adapter.fsspec_filesystem import AdapterFileSystem
from storage_adapter.protocol import StorageAdapter

BACKENDS = ["memory", "local", "seaweedfs", "azurite"]
SUITES = [
    getattr(abstract, name) for name in dir(abstract) if name.startswith("Abstract") and "Tests" in name
]

# Test ids (``Class::test[backend]``) expected to fail, with the section of docs/fsspec.md that says why.
EXCLUSIVE_ON_CLOSE = (
    "docs/fsspec.md, 'Exclusive create is decided on close': open(path, 'xb') raises FileExistsError on close "
    "(the store's conditional write), not on open"
)
EXPECTED_FAILURES: dict[str, str] = {
    f"TestOpen::test_open_exclusive[{backend}]": EXCLUSIVE_ON_CLOSE for backend in BACKENDS
}


def _bases(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> StorageAdapter:
    """The backend's adapter the tests' prefixes are made under (its server started on first use)."""
    backend = request.param
    if backend == "memory":
        return open_adapter("memory://fsspec-abstract")
    if backend == "local":
        return open_adapter(f"file://{tmp_path_factory.getbasetemp() / 'fsspec-abstract'}")
    endpoint = request.getfixturevalue(f"embedded_{backend}")
    return open_adapter(endpoint.url("fsspec-abstract"), **endpoint.adapter_options())


class AdapterFixtures(abstract.AbstractFixtures):  # type: ignore[misc]  # fsspec is untyped
    """The suite's fixtures for the face: ``fs`` per backend under a fresh prefix, paths as its keys."""

    @pytest.fixture(params=BACKENDS)
    def fs(
        self, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[AdapterFileSystem]:
        base = _bases(request, tmp_path_factory)
        prefix = f"t-{uuid.uuid4().hex[:12]}"
        yield base.child(prefix).to_fsspec()
        base.delete_prefix(prefix)

    @pytest.fixture
    def fs_join(self) -> Callable[..., str]:
        return posixpath.join

    @pytest.fixture
    def fs_path(self) -> str:
        """The face's root (the test's prefix): a path has no leading ``/`` (docs/fsspec.md, Paths)."""
        return ""

    @pytest.fixture
    def supports_empty_directories(self) -> bool:
        return False

    @pytest.fixture(autouse=True)
    def _expected_failure(self, request: pytest.FixtureRequest) -> None:
        reason = EXPECTED_FAILURES.get(f"{request.cls.__name__}::{request.node.name}")
        if reason is not None:
            request.applymarker(pytest.mark.xfail(strict=True, reason=reason))


class TestCopy(abstract.AbstractCopyTests, AdapterFixtures):  # type: ignore[misc]
    pass


class TestGet(abstract.AbstractGetTests, AdapterFixtures):  # type: ignore[misc]
    pass


class TestPut(abstract.AbstractPutTests, AdapterFixtures):  # type: ignore[misc]
    pass


class TestPipe(abstract.AbstractPipeTests, AdapterFixtures):  # type: ignore[misc]
    pass


class TestOpen(abstract.AbstractOpenTests, AdapterFixtures):  # type: ignore[misc]
    pass


def test_every_suite_fsspec_ships_runs_here() -> None:
    """A suite added in a later fsspec is not silently left out."""
    here = {cls.__mro__[1] for cls in (TestCopy, TestGet, TestPut, TestPipe, TestOpen)}
    assert here == set(SUITES), sorted(s.__name__ for s in set(SUITES) - here)


def test_every_expected_failure_names_a_test_of_the_suite() -> None:
    """A misspelt id would xfail nothing (and strict would never fire)."""
    classes = {cls.__name__: cls for cls in (TestCopy, TestGet, TestPut, TestPipe, TestOpen)}
    for test_id, reason in EXPECTED_FAILURES.items():
        name, _, rest = test_id.partition("::")
        test, _, backend = rest.removesuffix("]").partition("[")
        assert name in classes and hasattr(classes[name], test) and backend in BACKENDS, test_id
        assert "docs/fsspec.md" in reason and Path(__file__).parent.parent.joinpath("docs/fsspec.md").exists()
