"""Clauses on failures: an injected backend fault surfaces as the right typed error, never as an outcome (None, False, success), and a failed operation leaves no side effect.

Mixed into :class:`contract_tests.clauses.AdapterContract`, whose ``adapter`` and ``sizes`` fixtures the
clauses use.
"""

from __future__ import annotations


class FailureClauses:
    """Clauses on failures."""
