"""Schema rules and partitions: how data a writer hands the engine is made to fit a table.

:func:`conform` is the one place where incoming Arrow data meets a table's schema (``Engine.commit`` and
``Engine.write_fragments`` call it; so can anyone who wants the check before writing). Partition values
have one text form (:func:`partition_texts`), used in fragment keys, in ``FragmentRef.partition`` and
``DataFile.partition``, and to match a :data:`PartitionFilter`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

PartitionFilter = Mapping[str, Sequence[Any]]
"""column -> the values allowed in it (any of them); all columns must match (AND). ``None`` matches null."""

Partition = tuple[tuple[str, str | None], ...]
"""A fragment's partition: (column, text form of its value) in the table's ``partition_by`` order; the
text is None for null."""


def conform(table: str, schema: pa.Schema, data: pa.Table, *, by_name: bool = True,
            allow_lossy: bool = False) -> pa.Table:  # fmt: skip
    """``data`` with exactly ``schema`` (see docs/engine.md, "Schema rules")."""
    raise NotImplementedError


def check_partition_by(table: str, schema: pa.Schema, partition_by: Sequence[str]) -> tuple[str, ...]:
    """The partition columns, validated against ``schema``."""
    raise NotImplementedError
