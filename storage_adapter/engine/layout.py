"""Where the engine keeps everything under its root. One place, so no module invents a key.

_manifest.json                         the manifest: the single visibility authority (CAS-published)
tables/{table}/_versions/{V:020d}.json table version V (immutable; written with write_if_absent)
tables/{table}/_checkpoints/{V:020d}.json  the resolved fragment list of version V (optional, see tables.py)
tables/{table}/data/[{col}={value}/...]{ulid}.parquet  immutable data fragments (in partition folders
                                       when the table is partitioned)
tables/{table}/data/_staging/{job}/... files another writer (Spark's own Parquet writer) staged for a
                                       commit: only the committed ones are ever referenced; vacuum
                                       reclaims everything else in the folder
__recovery/{operation_id}.json         recovery sidecars of commits in flight (or crashed)
__audit/{operation_id}.json            one audit record per recovered operation (write_if_absent)
__keys/{sha256(key)}.json              the ledger entry of one idempotency key (see key_ledger.py)
__tables/{V:020d}-{operation_id}.json  a table map (every table's pin and schema) a manifest builds on
__history/{V:020d}.json                the commit record of manifest version V, once it left the manifest's
                                       tail (see history.py)

A root may hold what other tools left beside these (a readme in a data folder, a foreign Parquet file,
an old notes.json among the versions, an object in a folder the engine never names). The engine knows its
own objects by the exact shape of their names (:func:`own_key`, one rule for every reader of a listing):
whatever it lists and does not recognise it never reads as metadata and never deletes; vacuum reports it
(``VacuumReport.foreign``).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from storage_adapter.errors import InvalidKeyError

MANIFEST_KEY = "_manifest.json"
TABLES_PREFIX = "tables"
RECOVERY_PREFIX = "__recovery"
AUDIT_PREFIX = "__audit"
KEYS_PREFIX = "__keys"
HISTORY_PREFIX = "__history"
TABLE_MAPS_PREFIX = "__tables"

_TABLE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,127}$")
_VERSION_FILE = re.compile(r"^(\d{20})\.json$")
ENGINE_PREFIXES = (
    TABLES_PREFIX,
    RECOVERY_PREFIX,
    AUDIT_PREFIX,
    KEYS_PREFIX,
    HISTORY_PREFIX,
    TABLE_MAPS_PREFIX,
)


def check_table_name(name: object) -> str:
    """Table names are ``[A-Za-z][A-Za-z0-9_.-]*`` (at most 128 chars): safe as one key segment everywhere."""
    if not isinstance(name, str) or not _TABLE_NAME.match(name):
        raise InvalidKeyError(f"invalid table name {name!r}: must match {_TABLE_NAME.pattern}", key=str(name))
    return name


def table_prefix(table: str) -> str:
    return f"{TABLES_PREFIX}/{table}"


def versions_prefix(table: str) -> str:
    return f"{TABLES_PREFIX}/{table}/_versions"


def version_key(table: str, version: int) -> str:
    return f"{versions_prefix(table)}/{version:020d}.json"


def version_from_key(key: str) -> int | None:
    match = _VERSION_FILE.match(key.rsplit("/", 1)[-1])
    return int(match.group(1)) if match else None


def checkpoints_prefix(table: str) -> str:
    return f"{TABLES_PREFIX}/{table}/_checkpoints"


def checkpoint_key(table: str, version: int) -> str:
    return f"{checkpoints_prefix(table)}/{version:020d}.json"


def data_prefix(table: str) -> str:
    return f"{TABLES_PREFIX}/{table}/data"


def data_key(table: str, fragment_id: str, partition_path: str = "") -> str:
    """A fragment's key; ``partition_path`` (``col=value/...``, see schema.partition_prefix) puts it in its
    partition's folder."""
    folder = f"{data_prefix(table)}/{partition_path}" if partition_path else data_prefix(table)
    return f"{folder}/{fragment_id}.parquet"


STAGING_FOLDER = "_staging"  # no partition folder is named so: theirs are always col=value


def staging_prefix(table: str, job: str) -> str:
    """The folder a writer outside the engine (a Spark job) writes one job's files into, under the table's
    data prefix: files it commits are referenced where they lie (or moved into partition folders), and
    vacuum reclaims every other file in it once past its grace period."""
    return f"{data_prefix(table)}/{STAGING_FOLDER}/{job}"


def table_map_key(version: int, operation_id: str) -> str:
    return f"{TABLE_MAPS_PREFIX}/{version:020d}-{operation_id}.json"


def history_key(version: int) -> str:
    return f"{HISTORY_PREFIX}/{version:020d}.json"


def sidecar_key(operation_id: str) -> str:
    return f"{RECOVERY_PREFIX}/{operation_id}.json"


def audit_key(operation_id: str) -> str:
    return f"{AUDIT_PREFIX}/{operation_id}.json"


def operation_id_from_key(key: str) -> str:
    return key.rsplit("/", 1)[-1].removesuffix(".json")


# -- the engine's own objects, by the exact shape of their names --------------------------------------------
# A ULID as python-ulid prints it (operation and fragment ids: commit.py, engine.py, schema.fragment_key):
# 26 upper-case letters and digits. Crockford's base32 is a subset; any upper-case letter is accepted so
# that a hand-made id of that length and case (tests, tools) still names the engine's own object.
_ULID = r"[0-9A-Z]{26}"
_TABLE = r"(?P<table>[A-Za-z][A-Za-z0-9_.-]{0,127})"
_VERSION = r"(?P<version>\d{20})"
# A partition folder (schema.partition_prefix): ``col=value``, both quoted, so neither holds a "/".
_PARTITION_FOLDER = r"[^/=]+=[^/]*"
# Spark's name for a task's file: part-<task>-<job uuid>[.c<n>][.<codec>].parquet. The native path
# (spark/native.py) keeps that name when it moves a file into its partition folder.
SPARK_FILE = re.compile(r"^part-\d{5}-([0-9a-f]{8}-(?:[0-9a-f]{4}-){3}[0-9a-f]{12})[^/]*\.parquet$")
# A staging job's folder name: the native path's ``uuid.uuid4().hex``.
_STAGING_JOB = r"[0-9a-f]{32}"


class OwnKind(enum.Enum):
    """What an object the engine wrote is, known from its name alone (:func:`own_key`)."""

    MANIFEST = "manifest"
    TABLE_VERSION = "table version"
    CHECKPOINT = "checkpoint"
    FRAGMENT = "fragment"
    STAGED = "staged"  # a file in a staging job's folder: a Spark job's, data or not
    TABLE_MAP = "table map"
    HISTORY = "commit record"
    KEY_ENTRY = "key ledger entry"
    SIDECAR = "recovery sidecar"
    AUDIT = "audit record"


@dataclass(frozen=True)
class OwnKey:
    """An object name of the engine's: its kind, and the table and version number the name holds (None
    where it holds none)."""

    kind: OwnKind
    table: str | None = None
    version: int | None = None


_OWN_SHAPES = tuple(
    (kind, re.compile(pattern))
    for kind, pattern in (
        (OwnKind.MANIFEST, re.escape(MANIFEST_KEY)),
        (OwnKind.TABLE_VERSION, rf"{TABLES_PREFIX}/{_TABLE}/_versions/{_VERSION}\.json"),
        (OwnKind.CHECKPOINT, rf"{TABLES_PREFIX}/{_TABLE}/_checkpoints/{_VERSION}\.json"),
        (  # an engine fragment anywhere in the table's folders; Spark's files only in partition folders
            OwnKind.FRAGMENT,
            rf"{TABLES_PREFIX}/{_TABLE}/data/(?:{_ULID}\.parquet"
            rf"|(?:{_PARTITION_FOLDER}/)+(?:{_ULID}\.parquet|{SPARK_FILE.pattern[1:-1]}))",
        ),
        (OwnKind.STAGED, rf"{TABLES_PREFIX}/{_TABLE}/data/{STAGING_FOLDER}/{_STAGING_JOB}/.+"),
        (OwnKind.TABLE_MAP, rf"{TABLE_MAPS_PREFIX}/{_VERSION}-{_ULID}\.json"),
        (OwnKind.HISTORY, rf"{HISTORY_PREFIX}/{_VERSION}\.json"),
        (OwnKind.KEY_ENTRY, rf"{KEYS_PREFIX}/[0-9a-f]{{64}}\.json"),  # key_ledger.entry_key: a sha256
        (OwnKind.SIDECAR, rf"{RECOVERY_PREFIX}/{_ULID}\.json"),
        (OwnKind.AUDIT, rf"{AUDIT_PREFIX}/{_ULID}\.json"),
    )
)


def own_key(key: str) -> OwnKey | None:
    """What the object ``key`` is if the engine wrote it, known by the exact shape of its name (the
    module's table: a ULID for operation and fragment ids, 20 digits for version numbers, a sha256 for
    ledger entries, a uuid4 hex for a Spark staging job); None for any other name, which is another
    tool's: the engine never reads it as metadata and never deletes it. The name alone decides, never
    the content: corrupt bytes at one of these names are the engine's and are refused as corrupt."""
    for kind, shape in _OWN_SHAPES:
        match = shape.fullmatch(key)
        if match is not None:
            groups = match.groupdict()
            version = groups.get("version")
            return OwnKey(kind, groups.get("table"), None if version is None else int(version))
    return None


def is_own_key(key: str, kind: OwnKind | None = None) -> bool:
    """Whether ``key`` names an object the engine wrote (of ``kind``, when given): :func:`own_key`."""
    found = own_key(key)
    return found is not None and (kind is None or found.kind is kind)
