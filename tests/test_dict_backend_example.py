"""examples/dict_backend.py, the minimal third-party backend docs/architecture.md shows, passes the whole
contract: every clause of AdapterContract, sync, on a throwaway dict store the plugin makes from the
backend's ``scratch``. Its process clauses skip as memory's do: a dict store is per-process, declared and
observed by a spawned process (which knows the ``dict://`` scheme by the example's entry point, as an
installed package's would be found)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from contract_tests.clauses import AdapterContract
from contract_tests.plugin import fresh_prefix, target_root
from contract_tests.targets import Target
from storage_adapter.protocol import StorageAdapter
from storage_adapter.registry import unregister_backend

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(scope="module")
def dict_root(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[StorageAdapter]:
    """The example installed as a package would be (importable, with an entry point naming its
    ``BACKEND``; spawned processes start with this process's sys.path) and registered here by its
    ``register()``; then the root of a scratch store. Unregistered afterwards: the rest of the session
    sees the built-in backends only."""
    site = tmp_path_factory.mktemp("site")
    dist_info = site / "dict_backend_example-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: dict-backend-example\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text("[storage_adapter.backends]\ndict = dict_backend:BACKEND\n")
    saved = list(sys.path)
    sys.path[:0] = [str(site), str(EXAMPLES)]
    try:
        backend = importlib.import_module("dict_backend").register()
        with target_root(Target(name=backend.name), request) as root:
            assert root.url.startswith("dict://scratch-")
            yield root
    finally:
        unregister_backend("dict")
        sys.path[:] = saved


class TestDictBackendContract(AdapterContract):
    """Every clause on the example's dict store, under a fresh prefix each."""

    @pytest.fixture
    def adapter(self, dict_root: StorageAdapter) -> Iterator[StorageAdapter]:
        with fresh_prefix(dict_root) as adapter:
            yield adapter
