"""Clauses on races around delete, rename and directory pruning, and on what a process sees of another (capability truthfulness).

Mixed into :class:`contract_tests.clauses.AdapterContract`, whose ``adapter`` and ``sizes`` fixtures the
clauses use.
"""

from __future__ import annotations


class ConcurrencyClauses:
    """Clauses on races around delete, rename and directory pruning, and on what a process sees of another (capability truthfulness).."""
