"""Schema rules and partitions: how data a writer hands the engine is made to fit a table.

:func:`conform` is the one place where incoming Arrow data meets a table's schema (``Engine.commit`` and
``Engine.write_fragments`` call it; so can anyone who wants the check before writing):

* columns are matched **by name** (any order; by position only with ``by_name=False``); a missing or an
  extra column is a SchemaMismatchError naming it;
* a column whose type differs is cast only when the cast is a **safe widening** (:func:`is_widening`):
  a larger integer of the same signedness, or a signed one at least twice as wide from unsigned; an
  integer of at most 32 bits to float64 (at most 16 bits to float32), exactly representable; float16/32
  to float64; string <-> large_string, binary <-> large_binary; a dictionary to (a widening of) its value
  type; timestamps to a finer unit with the same time zone (a value out of the finer unit's range fails
  like any cast); date32 -> date64; a decimal to one with at least its integer and fraction digits; a
  null-typed column to any nullable type; lists and structs whose items and fields (by name) widen.
  Anything else (``'1.5'`` into a float, an int into a string, int64 into float64) is refused unless
  ``allow_lossy``: then any cast Arrow defines is tried, still in Arrow's safe mode (no overflow, no
  truncated fraction, no unparseable text);
* a cast that fails is a SchemaMismatchError naming the column and a sample offending value; a null in
  a non-nullable field likewise.

Partition columns (:func:`check_partition_by`) have a string, integer, boolean or date type, whose one
text form (:func:`partition_texts`: Arrow's cast to string, e.g. ``"7"``, ``"true"``, ``"2024-05-01"``;
None for null) is used in fragment keys, in ``FragmentRef.partition`` and ``DataFile.partition``, and to
match a :data:`PartitionFilter`. The table's partition columns are stored in its schema's metadata
(:func:`table_schema_text`), so they travel wherever the schema does (manifest, table map, sidecar).
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.compute as pc
from ulid import ULID

from storage_adapter.engine import layout
from storage_adapter.engine.errors import SchemaMismatchError
from storage_adapter.engine.tables import schema_from_text, schema_to_text
from storage_adapter.keys import validate_key

PartitionFilter = Mapping[str, Sequence[Any]]
"""column -> the values allowed in it (any of them); all columns must match (AND). ``None`` matches null."""

Partition = tuple[tuple[str, str | None], ...]
"""A fragment's partition: (column, text form of its value) in the table's ``partition_by`` order; the
text is None for null."""

PARTITION_METADATA = b"storage_adapter.partition_by"  # JSON list of column names, in the stored schema
NULL_SEGMENT_VALUE = "%"  # a null's value in a key segment: quote() never yields a lone "%"


# -- conform -------------------------------------------------------------------------------------------
def conform(
    table: str,
    schema: pa.Schema,
    data: pa.Table | pa.RecordBatch,
    *,
    by_name: bool = True,
    allow_lossy: bool = False,
) -> pa.Table:
    """``data`` (a pyarrow Table or RecordBatch) as a Table with exactly ``schema`` (metadata dropped), by
    the rules of the module docstring. SchemaMismatchError (a ValueError) naming the table and column
    otherwise (also for any other kind of ``data``, e.g. a pandas DataFrame); nothing is written."""
    target = schema.remove_metadata()
    if isinstance(data, pa.RecordBatch):  # what Spark's Arrow functions hand over
        data = pa.Table.from_batches([data])
    if not isinstance(data, pa.Table):
        raise SchemaMismatchError(
            f"table {table!r} takes a pyarrow.Table, not {type(data).__module__}.{type(data).__name__}",
            key=layout.table_prefix(table),
        )
    names = data.column_names
    if by_name:
        duplicated = sorted({n for n in names if names.count(n) > 1})
        missing = [f.name for f in target if f.name not in names]
        extra = [n for n in names if target.get_field_index(n) < 0]
        if duplicated or missing or extra:
            problems = [
                *([f"missing columns {missing}"] if missing else []),
                *([f"extra columns {extra}"] if extra else []),
                *([f"duplicated columns {duplicated}"] if duplicated else []),
            ]
            raise _mismatch(table, f"{'; '.join(problems)} (table columns: {target.names})")
        columns = [data.column(f.name) for f in target]
    else:
        if len(names) != len(target):
            raise _mismatch(
                table, f"{len(names)} columns given by position, the table has {len(target)}: {target.names}"
            )
        columns = list(data.columns)
    arrays = [
        _conform_column(table, field, column, allow_lossy)
        for field, column in zip(target, columns, strict=True)
    ]
    return pa.Table.from_arrays(arrays, schema=target)


def _conform_column(
    table: str, field: pa.Field, column: pa.ChunkedArray, allow_lossy: bool
) -> pa.ChunkedArray:
    source = column.type
    if source != field.type:
        if not (is_widening(source, field.type) or allow_lossy):
            raise _mismatch(
                table,
                f"column {field.name!r} is {source}, the table's is {field.type}: not a safe widening "
                "(pass allow_lossy=True to cast anyway)",
            )
        column = _cast(table, field, column)
    if not field.nullable and column.null_count:
        raise _mismatch(table, f"column {field.name!r} is not nullable but has {column.null_count} null(s)")
    return column


def _cast(table: str, field: pa.Field, column: pa.ChunkedArray) -> pa.ChunkedArray:
    try:
        return column.cast(field.type, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        sample = _first_failing(column, field.type)
        raise _mismatch(
            table,
            f"column {field.name!r}: cannot cast {column.type} to {field.type}"
            + (f", e.g. value {sample!r}" if sample is not _NONE else "")
            + f" ({exc})",
        ) from exc


_NONE = object()


def _first_failing(column: pa.ChunkedArray, target: pa.DataType) -> Any:
    """A value of ``column`` that does not cast to ``target`` (bisection: O(log n) casts), or _NONE."""
    for chunk in column.chunks:
        if _casts(chunk, target):
            continue
        while len(chunk) > 1:
            half = chunk.slice(0, len(chunk) // 2)
            chunk = chunk.slice(len(chunk) // 2) if _casts(half, target) else half
        return chunk[0].as_py() if len(chunk) else _NONE
    return _NONE


def _casts(array: pa.Array, target: pa.DataType) -> bool:
    try:
        array.cast(target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return False
    return True


def is_widening(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether every value of ``source`` has one exact value in ``target`` (module docstring)."""
    t = pa.types
    if source == target or t.is_null(source):
        return True
    if t.is_dictionary(source):
        return is_widening(source.value_type, target)
    if t.is_integer(source) and t.is_integer(target):
        if t.is_signed_integer(source) == t.is_signed_integer(target):
            return bool(target.bit_width >= source.bit_width)
        return t.is_unsigned_integer(source) and bool(target.bit_width > source.bit_width)
    if t.is_integer(source) and t.is_floating(target):
        return bool(source.bit_width <= {16: 8, 32: 16, 64: 32}[target.bit_width])
    if t.is_floating(source) and t.is_floating(target):
        return bool(target.bit_width >= source.bit_width)
    if (t.is_string(source) or t.is_large_string(source)) and (
        t.is_string(target) or t.is_large_string(target)
    ):
        return True
    if (t.is_binary(source) or t.is_large_binary(source)) and (
        t.is_binary(target) or t.is_large_binary(target)
    ):
        return True
    if t.is_timestamp(source) and t.is_timestamp(target):
        units = ("s", "ms", "us", "ns")
        return source.tz == target.tz and units.index(target.unit) >= units.index(source.unit)
    if t.is_date32(source) and t.is_date64(target):
        return True
    if t.is_decimal(source) and t.is_decimal(target):
        return bool(
            target.scale >= source.scale
            and target.precision - target.scale >= source.precision - source.scale
        )
    if (t.is_list(source) or t.is_large_list(source)) and (t.is_list(target) or t.is_large_list(target)):
        return is_widening(source.value_type, target.value_type)
    if t.is_struct(source) and t.is_struct(target):
        fields = {source.field(i).name: source.field(i).type for i in range(source.num_fields)}
        wanted = [target.field(i) for i in range(target.num_fields)]
        return set(fields) == {f.name for f in wanted} and all(
            is_widening(fields[f.name], f.type) for f in wanted
        )
    return False


def _mismatch(table: str, detail: str) -> SchemaMismatchError:
    return SchemaMismatchError(f"table {table!r}: {detail}", key=layout.table_prefix(table))


# -- partitions ----------------------------------------------------------------------------------------
def is_partition_type(type_: pa.DataType) -> bool:
    t = pa.types
    return bool(
        t.is_string(type_)
        or t.is_large_string(type_)
        or t.is_integer(type_)
        or t.is_boolean(type_)
        or t.is_date(type_)
    )


def check_partition_by(table: str, schema: pa.Schema, partition_by: Sequence[str]) -> tuple[str, ...]:
    """The partition columns as a tuple: each a column of ``schema`` with a partition type
    (:func:`is_partition_type`), none twice, and not every column. SchemaMismatchError otherwise."""
    if isinstance(partition_by, str):
        raise _mismatch(table, f"partition_by is a sequence of column names, not the string {partition_by!r}")
    columns = tuple(partition_by)
    for name in columns:
        if not isinstance(name, str) or schema.get_field_index(name) < 0:
            raise _mismatch(table, f"partition column {name!r} is not a column of the schema: {schema.names}")
        if not is_partition_type(schema.field(name).type):
            raise _mismatch(
                table,
                f"partition column {name!r} is {schema.field(name).type}; partition columns must be "
                "string, integer, boolean or date",
            )
    if len(set(columns)) != len(columns):
        raise _mismatch(table, f"partition_by names a column twice: {list(columns)}")
    if columns and len(columns) == len(schema):
        raise _mismatch(table, "every column is a partition column: at least one must hold data")
    return columns


def table_schema_text(schema: pa.Schema, partition_by: Sequence[str]) -> str:
    """The stored form of a table's schema: ``schema`` without its metadata, plus the partition columns
    (none: exactly ``schema_to_text``, as before partitions existed)."""
    plain = schema.remove_metadata()
    if not partition_by:
        return schema_to_text(plain)
    tagged = plain.with_metadata({PARTITION_METADATA: json.dumps(list(partition_by)).encode()})
    return base64.b64encode(tagged.serialize().to_pybytes()).decode("ascii")  # schema_to_text drops metadata


def partition_texts(values: pa.Array | pa.ChunkedArray) -> list[str | None]:
    """The text form of each value of a partition column (None for null)."""
    return list(pc.cast(values, pa.string()).to_pylist())


def split_by_partition(data: pa.Table, partition_by: Sequence[str]) -> list[tuple[Partition, pa.Table]]:
    """``data``'s rows grouped by partition value combination (rows in their order within a group;
    groups ordered by first appearance). One group, with partition (), when ``partition_by`` is empty."""
    if not partition_by:
        return [((), data)]
    if data.num_rows == 0:
        return []
    keys = {f"k{i}": pc.cast(data.column(name), pa.string()) for i, name in enumerate(partition_by)}
    rows = pa.table({**keys, "row": pa.array(range(data.num_rows), pa.int64())})
    # without threads, groups come in order of first appearance and each row list in row order
    grouped = rows.group_by(list(keys), use_threads=False).aggregate([("row", "list")])
    texts = [grouped.column(k).to_pylist() for k in keys]
    result: list[tuple[Partition, pa.Table]] = []
    for index, row_list in enumerate(grouped.column("row_list").combine_chunks()):
        partition = tuple((name, texts[i][index]) for i, name in enumerate(partition_by))
        result.append((partition, data.take(row_list.values)))
    return result


def partition_prefix(partition: Partition) -> str:
    """The key segments of a partition below the table's data prefix: ``col=<quoted value>/...``."""
    return "/".join(
        f"{quote(name, safe='')}={NULL_SEGMENT_VALUE if value is None else quote(value, safe='')}"
        for name, value in partition
    )


def partition_of_key(data_prefix: str, key: str, partition_by: Sequence[str]) -> Partition:
    """The partition of fragment ``key`` (the inverse of :func:`partition_prefix`); () when the table is
    unpartitioned. ValueError for a key that does not have the table's partition layout."""
    if not partition_by:
        return ()
    segments = key.removeprefix(data_prefix + "/").split("/")[:-1]
    if len(segments) != len(partition_by):
        raise ValueError(f"fragment {key} is not laid out by the partition columns {list(partition_by)}")
    partition: list[tuple[str, str | None]] = []
    for name, segment in zip(partition_by, segments, strict=True):
        column, sep, value = segment.partition("=")
        if not sep or unquote(column) != name:
            raise ValueError(f"fragment {key} is not laid out by the partition columns {list(partition_by)}")
        partition.append((name, None if value == NULL_SEGMENT_VALUE else unquote(value)))
    return tuple(partition)


def filter_texts(
    table: str, schema: pa.Schema, partition_by: Sequence[str], where: PartitionFilter
) -> dict[str, set[str | None]]:
    """``where`` checked (partition columns only, each with a sequence of values) and turned into the
    text forms each column may have. SchemaMismatchError (a ValueError) before any I/O otherwise."""
    if not isinstance(where, Mapping):
        raise _mismatch(table, f"a partition filter is a mapping column -> values, not {where!r}")
    result: dict[str, set[str | None]] = {}
    for name, values in where.items():
        if name not in partition_by:
            raise _mismatch(
                table,
                f"filter column {name!r} is not a partition column (partition_by: {list(partition_by)})",
            )
        if isinstance(values, str | bytes) or not isinstance(values, Sequence | set | frozenset):
            raise _mismatch(table, f"filter on {name!r} takes a sequence of values, not {values!r}")
        type_ = schema.field(name).type
        texts: set[str | None] = set()
        for value in values:
            if value is None:
                texts.add(None)
                continue
            try:
                scalar = pa.array([value]).cast(type_, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                raise _mismatch(
                    table, f"filter value {value!r} does not fit column {name!r} ({type_})"
                ) from exc
            texts.add(partition_texts(scalar)[0])
        result[name] = texts
    return result


def matches(partition: Partition, allowed: Mapping[str, set[str | None]]) -> bool:
    """Whether ``partition`` satisfies every column of a filter given by :func:`filter_texts`."""
    values = dict(partition)
    return all(values.get(name, _NONE) in texts for name, texts in allowed.items())


@functools.lru_cache(maxsize=256)
def table_layout(schema_text: str) -> tuple[pa.Schema, tuple[str, ...]]:
    """A stored schema's (schema without metadata, partition columns). Cached: stored forms are immutable."""
    schema = schema_from_text(schema_text)
    raw = (schema.metadata or {}).get(PARTITION_METADATA)
    return schema.remove_metadata(), () if raw is None else tuple(json.loads(raw))


def fragment_key(table: str, partition: Partition) -> str:
    """A fresh key for a fragment of ``partition``, in the partition's folder, checked by the key rules
    (InvalidKeyError, a ValueError, naming it: e.g. a value too long for a segment)."""
    key = layout.data_key(table, str(ULID()), partition_prefix(partition))
    validate_key(key)
    return key


def fragment_plan(table: str, partition: Partition, data: pa.Table) -> tuple[Partition, pa.Table, str]:
    """(partition, rows, key) of one fragment to write (:func:`fragment_key`)."""
    return partition, data, fragment_key(table, partition)


def plan_fragments(
    table: str, data: pa.Table, partition_by: Sequence[str]
) -> list[tuple[Partition, pa.Table, str]]:
    """The fragments ``data`` (already conformed) is written as: one per partition value combination
    (none for no rows), or exactly one for an unpartitioned table. Every key is checked before any
    is written."""
    return [
        fragment_plan(table, partition, rows) for partition, rows in split_by_partition(data, partition_by)
    ]


def check_in_filter(
    table: str, key: str, partition: Partition, allowed: Mapping[str, set[str | None]] | None
) -> None:
    """SchemaMismatchError unless the fragment at ``key`` lies in the partitions ``allowed`` matches (a
    partition overwrite may only add fragments to the partitions it replaces)."""
    if allowed is not None and not matches(partition, allowed):
        raise SchemaMismatchError(
            f"table {table!r}: fragment {key} of partition {dict(partition)} is outside the partitions "
            f"replace_where names ({ {c: sorted(v, key=str) for c, v in allowed.items()} }); nothing published",
            key=key,
        )
