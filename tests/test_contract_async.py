"""The contract suite against the async twin (AsyncObjectStorageAdapter) on memory, local and SeaweedFS.

Every clause runs unchanged through contract_tests.async_bridge: each call of a clause is a coroutine of
the async adapter, run on the bridge's event loop (racing threads become concurrent tasks of one loop).
The same run from the command line: ``pytest --pyargs contract_tests --storage-factory
contract_tests.async_bridge:open_bridged_async_adapter``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import pytest

from contract_tests.clauses import AdapterContract
from contract_tests.plugin import fresh_prefix, target_opener, target_root
from contract_tests.targets import Target
from storage_adapter.protocol import StorageAdapter

BRIDGE = "contract_tests.async_bridge:open_bridged_async_adapter"


@pytest.fixture(scope="module")
def bridged_root(storage_contract_target: Target, request: pytest.FixtureRequest) -> Iterator[StorageAdapter]:
    """The target's root, opened by the bridge factory (a fresh scratch instance or bucket)."""
    with target_root(dataclasses.replace(storage_contract_target, factory=BRIDGE), request) as root:
        yield root


class TestAsyncTwinContract(AdapterContract):
    """Every clause on the async twin of each embedded backend."""

    @pytest.fixture
    def adapter(self, bridged_root: StorageAdapter) -> Iterator[StorageAdapter]:
        with fresh_prefix(bridged_root) as adapter:
            yield adapter

    @pytest.fixture
    def reopen(
        self, storage_contract_target: Target, request: pytest.FixtureRequest
    ) -> Callable[[str], StorageAdapter]:
        """Opens a URL of the target as ``bridged_root`` was opened: through the bridge factory."""
        return target_opener(dataclasses.replace(storage_contract_target, factory=BRIDGE), request)
