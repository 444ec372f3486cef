"""The options of the ``storage_adapter`` Spark data source, parsed once, before any task runs.

Spark hands a data source its options as a case-insensitive map of strings: the data source's own
(``table``, ``version``, ``replaceWhere``, ...; see docs/spark.md), the ones Spark adds itself (``path``,
``paths``, ``queryName``, ``checkpointLocation``) and, under their own names, every option ``open_adapter``
takes for the URL in ``path`` (credentials included). :meth:`SourceOptions.parse` alone sorts them; any
other option, and anything ill-formed, is a ConfigurationError naming the option; no message, log line
or repr ever shows an adapter option's value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from storage_adapter.adapter import ObjectStorageAdapter
from storage_adapter.config import parse_url
from storage_adapter.errors import ConfigurationError
from storage_adapter.registry import backend_for_scheme
from storage_adapter.spark.load import DEFAULT_MAX_ROWS_PER_FRAGMENT, shared_adapter

# The data source's own options (docs/spark.md, "Options"), lowercased as Spark hands them over, with the
# spelling the docs and error messages use.
OWN_OPTIONS = {
    name.lower(): name
    for name in (
        "table",
        "version",
        "replaceWhere",
        "idempotencyKey",
        "appId",
        "appVersion",
        "createTable",
        "partitionBy",
        "byPosition",
        "allowLossyCasts",
        "maxRowsPerFragment",
    )
}
# The options Spark itself adds to the ones a user gives (docs/spark.md, "Options Spark adds"): ``path``
# (DataFrameWriter.save(path), DataFrameReader.load(path), DataStreamWriter.start(path)), ``paths``
# (DataFrameReader.load of several paths, a JSON list), ``queryName`` and ``checkpointLocation``
# (DataStreamWriter passes every option of the query to its sink, these included).
SPARK_OPTIONS = {name.lower(): name for name in ("path", "paths", "queryName", "checkpointLocation")}


@dataclass(frozen=True)
class SourceOptions:
    """Parsed data-source options. ``adapter_options`` may hold secrets: the repr names them, never their
    values. Picklable (shipped to executors)."""

    url: str
    table: str
    adapter_options: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    version: int | None = None
    replace_where: dict[str, list[Any]] | None = None
    idempotency_key: str | None = None
    app_id: str | None = None
    app_version: int | None = None
    create_table: bool = False
    partition_by: tuple[str, ...] = ()
    by_position: bool = False
    allow_lossy: bool = False
    max_rows_per_fragment: int = DEFAULT_MAX_ROWS_PER_FRAGMENT
    checkpoint_location: str | None = None
    query_name: str | None = None

    def __repr__(self) -> str:
        names = ", ".join(name for name, _ in self.adapter_options)
        return f"SourceOptions(url={self.url!r}, table={self.table!r}, adapter options: [{names}])"

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """The one place that decides what each option is: the data source's own (``OWN_OPTIONS``), one
        Spark adds itself (``SPARK_OPTIONS``), or an adapter option of the URL's backend. ConfigurationError,
        naming the option, for any other (a misspelling), and for a missing ``path`` or ``table``, several
        ``paths`` or an ill-formed value of the data source's own options."""
        given = {k.lower(): v for k, v in options.items() if v is not None}
        if "paths" in given:
            raise ConfigurationError(
                f"the storage_adapter data source reads one storage root: load(url) takes one URL, not the "
                f"paths {given['paths']}"
            )
        url = given.get("path")
        if not url:
            raise ConfigurationError(
                "the storage_adapter data source needs the storage root URL: .load(url) / .save(url) or "
                "option('path', url)"
            )
        table = given.get("table")
        if not table:
            raise ConfigurationError(
                f"the storage_adapter data source needs option('table', name) for {url}", key=url
            )
        adapter_options = {k: v for k, v in given.items() if k not in OWN_OPTIONS and k not in SPARK_OPTIONS}
        _refuse_unknown(url, adapter_options)
        app_id, app_version = given.get("appid"), _integer(given, "appversion", url)
        replace_where = given.get("replacewhere")
        return cls(
            url=url,
            table=table,
            adapter_options=tuple(sorted(adapter_options.items())),
            version=_integer(given, "version", url),
            replace_where=None if replace_where is None else parse_replace_where(replace_where, url),
            idempotency_key=given.get("idempotencykey"),
            app_id=app_id,
            app_version=app_version,
            create_table=_boolean(given, "createtable", url),
            partition_by=tuple(c.strip() for c in given.get("partitionby", "").split(",") if c.strip()),
            by_position=_boolean(given, "byposition", url),
            allow_lossy=_boolean(given, "allowlossycasts", url),
            max_rows_per_fragment=_integer(given, "maxrowsperfragment", url) or DEFAULT_MAX_ROWS_PER_FRAGMENT,
            checkpoint_location=given.get("checkpointlocation"),
            query_name=given.get("queryname"),
        )

    def open(self) -> ObjectStorageAdapter:
        """The adapter for ``url`` and the adapter options (ConfigurationError for an ill-formed one), the
        same one for equal options in this process (``load.shared_adapter``)."""
        return shared_adapter(parse_url(self.url, dict(self.adapter_options)))


def _refuse_unknown(url: str, adapter_options: Mapping[str, str]) -> None:
    """ConfigurationError naming every option that is neither the data source's, nor Spark's, nor one the
    URL's backend takes (an unsupported scheme is left to ``open_adapter``, which says so)."""
    backend = backend_for_scheme("file" if url.startswith("/") else urlsplit(url).scheme.lower())
    if backend is None:
        return
    unknown = sorted(set(adapter_options) - set(backend.options))
    if unknown:
        raise ConfigurationError(
            f"unknown option(s) {', '.join(unknown)} for the storage_adapter data source at {url!r}: its own "
            f"options are {', '.join(OWN_OPTIONS.values())}; Spark adds {', '.join(SPARK_OPTIONS.values())}; "
            f"{backend.name} storage takes {', '.join(sorted(backend.options)) or 'none'}",
            key=url,
        )


def _integer(given: Mapping[str, str], name: str, url: str) -> int | None:
    text = given.get(name)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigurationError(f"option {name}={text!r} must be a non-negative integer ({url})", key=url)
    return value


def _boolean(given: Mapping[str, str], name: str, url: str) -> bool:
    text = given.get(name, "false").strip().lower()
    if text not in ("true", "false"):
        raise ConfigurationError(f"option {name}={text!r} must be true or false ({url})", key=url)
    return text == "true"


# replaceWhere: `col = literal` or `col IN (literal, ...)`, joined by AND; a literal is a '...' string
# ('' for a quote), an integer, true, false or NULL.
_LITERAL = r"'(?:[^']|'')*'|-?\d+|true|false|null"
_CLAUSE = re.compile(
    rf"\s*`?(\w+)`?\s*(?:=\s*({_LITERAL})|in\s*\(\s*((?:{_LITERAL})(?:\s*,\s*(?:{_LITERAL}))*)\s*\))\s*",
    re.IGNORECASE,
)
_AND = re.compile(r"\s+and\s+", re.IGNORECASE)


def parse_replace_where(text: str, url: str = "") -> dict[str, list[Any]]:
    """``replaceWhere`` as a partition filter (column -> allowed values). Accepts ``col = 'v'``,
    ``col IN ('a', 'b')`` and integers, booleans and NULL as literals, joined by AND; or a JSON object
    (column -> value or list of values). ConfigurationError for anything else."""
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or not doc or not all(isinstance(k, str) for k in doc):
            raise ConfigurationError(
                f"replaceWhere {text!r} is not a JSON object of column -> values", key=url
            )
        return {col: list(v) if isinstance(v, list) else [v] for col, v in doc.items()}
    where: dict[str, list[Any]] = {}
    # Split on AND outside quotes: literals are matched whole by _CLAUSE, so rejoin pieces that do not match.
    for clause in _clauses(text, url):
        match = _CLAUSE.fullmatch(clause)
        assert match is not None  # _clauses only returns matching clauses
        column, single, many = match.groups()
        literals = [single] if single is not None else re.findall(_LITERAL, many, re.IGNORECASE)
        values = [_literal(v) for v in literals]
        # col = 'a' AND col IN ('a', 'b'): both must hold
        where[column] = [v for v in where[column] if v in values] if column in where else values
    return where


def _clauses(text: str, url: str) -> list[str]:
    pieces, clauses, current = _AND.split(text), [], ""
    for piece in pieces:
        current = f"{current} and {piece}" if current else piece
        if _CLAUSE.fullmatch(current):
            clauses.append(current)
            current = ""
    if current or not clauses:
        raise ConfigurationError(
            f"replaceWhere {text!r} is not supported: write col = 'value', col IN ('a', 'b') joined by AND, "
            "or a JSON object of column -> values",
            key=url,
        )
    return clauses


def _literal(text: str) -> Any:
    lowered = text.lower()
    if text.startswith("'"):
        return text[1:-1].replace("''", "'")
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "null":
        return None
    return int(text)
