"""Collected by ``pytest --pyargs contract_tests``: the contract against every configured target."""

from contract_tests.clauses import AdapterContract


class TestAdapterContract(AdapterContract):
    """Runs every clause against the targets the plugin configures (--storage-url or embedded)."""
