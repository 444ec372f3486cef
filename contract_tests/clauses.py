"""Contract clauses (being written)."""


class AdapterContract:
    """Placeholder."""
