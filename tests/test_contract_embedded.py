"""The contract suite against this repo's embedded backends: memory, local and SeaweedFS."""

from contract_tests.clauses import AdapterContract


class TestEmbeddedContract(AdapterContract):
    """Every clause on memory, a temporary local directory and an embedded SeaweedFS server."""
