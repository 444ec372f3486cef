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
"""

from __future__ import annotations

import re

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
