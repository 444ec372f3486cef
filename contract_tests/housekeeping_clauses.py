"""Clauses on housekeeping: remove_orphans, delete_prefix edge cases and the side effects of emptying a prefix.

Mixed into :class:`contract_tests.clauses.AdapterContract`, whose ``adapter`` and ``sizes`` fixtures the
clauses use.
"""

from __future__ import annotations


class HousekeepingClauses:
    """Clauses on housekeeping."""
