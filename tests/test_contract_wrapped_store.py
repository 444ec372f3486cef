"""The contract suite against adapters over a user-supplied obstore store (``open_adapter(store=...,
capabilities=...)``, factories in tests/wrapped_stores.py): a MemoryStore, a LocalStore (served by the
adapter's own local driver at its directory) and an S3Store pointed at the embedded SeaweedFS, each with
the capabilities its user declares (checked by the clauses, not believed), through the sync adapter and
through the async twin.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from contract_tests.clauses import AdapterContract
from contract_tests.plugin import fresh_prefix, target_root
from contract_tests.targets import Target
from storage_adapter.protocol import StorageAdapter

FACTORIES = {"sync": "wrapped_stores:open_wrapped", "async": "wrapped_stores:open_async_wrapped"}
WRAPPED_TARGETS = ("memory", "local", "seaweedfs")


@pytest.fixture(scope="module", params=sorted(FACTORIES))
def wrapped_root(storage_contract_target: Target, request: pytest.FixtureRequest) -> Iterator[StorageAdapter]:
    """The target's root as a wrapped user store (a fresh MemoryStore, a LocalStore of a fresh directory,
    or an S3Store of a fresh bucket prefix on SeaweedFS), sync or async."""
    if storage_contract_target.name not in WRAPPED_TARGETS:
        pytest.skip(
            f"no user-supplied obstore store is wrapped for the {storage_contract_target.name} target"
        )
    target = dataclasses.replace(storage_contract_target, factory=FACTORIES[request.param])
    with target_root(target, request) as root:
        yield root


class TestWrappedStoreContract(AdapterContract):
    """Every clause on a wrapped MemoryStore, LocalStore and S3Store (SeaweedFS), sync and async."""

    @pytest.fixture
    def adapter(self, wrapped_root: StorageAdapter) -> Iterator[StorageAdapter]:
        with fresh_prefix(wrapped_root) as adapter:
            yield adapter
