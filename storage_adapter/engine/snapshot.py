"""Snapshots: one manifest's pins, held for a whole read so a reader never re-reads the head mid-query."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from storage_adapter.engine import layout
from storage_adapter.engine.errors import UnknownTableError
from storage_adapter.engine.schema import table_layout


@dataclass(frozen=True)
class Snapshot:
    """The tables as of manifest ``version``: ``pins`` maps table -> table version. Picklable."""

    version: int
    pins: dict[str, int]
    schemas: dict[str, str]

    @property
    def tables(self) -> list[str]:
        return sorted(self.pins)

    def table_version(self, table: str) -> int:
        pin = self.pins.get(table)
        if pin is None:
            raise UnknownTableError(
                f"unknown table {table!r} in snapshot at manifest version {self.version}; "
                f"tables: {self.tables}",
                key=layout.table_prefix(table),
            )
        return pin

    def schema(self, table: str) -> pa.Schema:
        """The table's Arrow schema (without metadata)."""
        self.table_version(table)
        return table_layout(self.schemas[table])[0]

    def partition_by(self, table: str) -> tuple[str, ...]:
        """The table's partition columns (empty for an unpartitioned table)."""
        self.table_version(table)
        return table_layout(self.schemas[table])[1]
