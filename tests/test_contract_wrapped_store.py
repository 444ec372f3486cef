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
# The clauses of the default tier here (tests/conftest.py sends the others to the stress tier). A wrapped
# store is driven by the URL backends' own drivers (ObstoreDriver for a MemoryStore or S3Store, with S3's
# prefix confirmation and signed deletes; LocalDriver for a LocalStore), whose every clause runs in the
# default tier in tests/test_contract_embedded.py; what wrapping changes is exercised by these: opening
# and the driver chosen (basic reads, writes, conditional writes, listings, deletes, streams), pickling the
# store into spawned processes (every *_processes clause), and the capabilities its user declares.
DEFAULT_TIER_CLAUSES = frozenset(
    {
        "test_round_trip_bytes",
        "test_not_found_is_typed",
        "test_write_if_absent_one_winner_threads",
        "test_cas_fresh_token_wins",
        "test_cas_stale_token_gets_none",
        "test_list_is_recursive_and_sorted",
        "test_list_dir_direct_children",
        "test_list_dir_forgets_deleted_prefixes",
        "test_delete_prefix_takes_whole_segments_and_leaves_no_trace",
        "test_delete_many_deletes_exactly_those_keys",
        "test_rename",
        "test_a_streamed_write_is_visible_only_complete",
        "test_read_ranges_come_from_one_version",
        "test_pickle_round_trip",
        "test_atomic_replace_processes",
        "test_cas_increments_processes",
        "test_write_if_absent_one_winner_processes",
        "test_mixed_history_is_linearizable_processes",
        "test_remove_orphans_spares_writes_in_flight_processes",
        "test_shared_across_processes_is_observed",
        "test_capabilities_are_declared_and_honest",
        "test_errors_name_key_and_backend_and_no_secret",
    }
)
assert set(dir(AdapterContract)) >= DEFAULT_TIER_CLAUSES, DEFAULT_TIER_CLAUSES - set(dir(AdapterContract))
WRAPPED_TARGETS = ("memory", "local", "seaweedfs", "azurite")


# The async twin over a wrapped store runs in the stress tier: its drivers are the URL backends' own
# (ObstoreDriver's async twin, the local threaded one), whose every clause runs in the default tier in
# tests/test_contract_async.py; what wrapping changes the sync twin runs here on every target.
@pytest.fixture(scope="module", params=["sync", pytest.param("async", marks=pytest.mark.stress)])
def wrapped_root(storage_contract_target: Target, request: pytest.FixtureRequest) -> Iterator[StorageAdapter]:
    """The target's root as a wrapped user store (a fresh MemoryStore, a LocalStore of a fresh directory,
    an S3Store of a fresh bucket prefix on SeaweedFS, an AzureStore of one on Azurite), sync or async."""
    if storage_contract_target.name not in WRAPPED_TARGETS:
        pytest.skip(
            f"no user-supplied obstore store is wrapped for the {storage_contract_target.name} target"
        )
    target = dataclasses.replace(storage_contract_target, factory=FACTORIES[request.param])
    with target_root(target, request) as root:
        yield root


class TestWrappedStoreContract(AdapterContract):
    """Every clause on a wrapped MemoryStore, LocalStore, S3Store (SeaweedFS) and AzureStore (Azurite), sync
    and async."""

    @pytest.fixture
    def adapter(self, wrapped_root: StorageAdapter) -> Iterator[StorageAdapter]:
        with fresh_prefix(wrapped_root) as adapter:
            yield adapter
