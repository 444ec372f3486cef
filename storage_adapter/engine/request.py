"""What one commit carries besides its data: :class:`CommitRequest`, validated once, when it is made.

The model is delta-rs's ``CommitProperties`` (with its ``Transaction``, the application watermark): one
immutable value handed to every commit entry point (``Engine.commit``, ``Engine.commit_fragments``,
``Engine.precheck``), instead of the same eight parameters on each. Everything about a request that can
be checked without storage is checked in its constructor, before any I/O; the engine checks the rest
against the manifest (the tables, ``replace_where``'s columns and values, the key's window).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from storage_adapter.engine.commit import check_app
from storage_adapter.engine.key_ledger import check_key
from storage_adapter.engine.schema import PartitionFilter
from storage_adapter.errors import ConfigurationError


class CommitMode(enum.StrEnum):
    """How a commit changes the tables it names: ``APPEND`` adds its fragments, ``OVERWRITE`` replaces
    each table's content with them (or, with ``replace_where``, the matching partitions' content).
    ``CommitMode("append")`` and ``CommitMode("overwrite")`` are the same members (and equal to those
    strings); any other value is a ValueError naming the modes."""

    APPEND = "append"
    OVERWRITE = "overwrite"

    @classmethod
    def _missing_(cls, value: object) -> CommitMode:
        raise ConfigurationError(f"mode must be one of {MODES}, not {value!r}")


MODES = tuple(mode.value for mode in CommitMode)


@dataclass(frozen=True)
class CommitRequest:
    """The options of one commit, for ``Engine.commit``, ``commit_fragments`` and ``precheck``. Frozen and
    validated once, here: a request that exists is well formed, so no entry point checks these again.
    Each refusal named below as a ValueError is a ConfigurationError: a StorageError, and a ValueError.

    * ``mode``: a :class:`CommitMode`, or its value ``"append"``/``"overwrite"`` (stored as the member).
      ValueError for any other.
    * ``expected_version``: the manifest version the commit must build on (CommitConflictError at commit
      time otherwise), or None for any. ValueError unless None or an int >= 0.
    * ``idempotency_key``: with a key that already landed, the commit returns that commit
      (``replayed=True``) and writes nothing (docs/engine.md, "Idempotency keys"). ValueError unless
      None or a non-empty str of at most ``key_ledger.MAX_KEY_CHARS`` characters.
    * ``actor``: who commits, recorded in the commit record (None: the engine's own actor). ValueError
      unless None or a non-empty str.
    * ``key_issued_at``: when the key was first used; lets the engine refuse a key whose ledger entry may
      already be gone (KeyWindowExpiredError, raised by the engine, which knows its key window). ValueError
      unless None or a timezone-aware datetime given with an ``idempotency_key``.
    * ``replace_where``: table -> partition filter (column -> values): an overwrite of only the matching
      partitions of that table (Delta's replaceWhere). ValueError unless None or a mapping, or when the
      mode is not ``overwrite``; the engine checks its tables, columns and values against the commit
      (ValueError, SchemaMismatchError). Stored read-only (mapping proxies, value lists as tuples).
    * ``app_id``/``app_version``: the application watermark (Delta's txnAppId/txnVersion), both or
      neither: a commit whose ``app_version`` is at or below the watermark of ``app_id`` is a replay;
      otherwise the commit sets the watermark to ``app_version``. ValueError unless ``app_id`` is
      non-empty plain text of at most ``commit.MAX_APP_ID_CHARS`` characters and ``app_version`` an int
      in [0, 2**63).

    ``precheck`` ignores ``actor``. Equal requests compare equal; ``replace_where`` is left out of the
    hash (a mapping is not hashable), so equal requests still hash alike. A request pickles (and copies)
    as the arguments that make it, validated again when it is rebuilt.
    """

    mode: CommitMode | str = CommitMode.APPEND
    expected_version: int | None = None
    idempotency_key: str | None = None
    actor: str | None = None
    key_issued_at: datetime | None = None
    replace_where: Mapping[str, PartitionFilter] | None = field(default=None, hash=False)
    app_id: str | None = None
    app_version: int | None = None

    def __post_init__(self) -> None:
        key = self.idempotency_key
        if key is not None:
            check_key(key)
        issued_at = self.key_issued_at
        if issued_at is not None and (
            key is None or not isinstance(issued_at, datetime) or issued_at.tzinfo is None
        ):
            raise ConfigurationError(
                f"key_issued_at must be a timezone-aware datetime given with an idempotency_key, not "
                f"{issued_at!r} (key {key!r})"
            )
        check_app(self.app_id, self.app_version)
        mode = CommitMode(self.mode)
        object.__setattr__(self, "mode", mode)
        if self.replace_where is not None:
            if not isinstance(self.replace_where, Mapping):
                raise ConfigurationError(
                    f"replace_where must be a mapping table -> partition filter, not {self.replace_where!r}"
                )
            if mode is not CommitMode.OVERWRITE:
                raise ConfigurationError(f"replace_where needs mode='overwrite', not {mode.value!r}")
            frozen = {table: _frozen_filter(where) for table, where in self.replace_where.items()}
            object.__setattr__(self, "replace_where", MappingProxyType(frozen))
        version = self.expected_version
        if version is not None and (type(version) is not int or version < 0):
            raise ConfigurationError(f"expected_version must be None or an int >= 0, not {version!r}")
        if self.actor is not None and (not isinstance(self.actor, str) or not self.actor):
            raise ConfigurationError(f"actor must be None or a non-empty str, not {self.actor!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        # The read-only mappings do not pickle; the plain ones they were made from do.
        where = self.replace_where
        plain = None if where is None else {table: _plain(f) for table, f in where.items()}
        return (
            CommitRequest,
            (
                self.mode,
                self.expected_version,
                self.idempotency_key,
                self.actor,
                self.key_issued_at,
                plain,
                self.app_id,
                self.app_version,
            ),
        )

    @property
    def mode_name(self) -> str:
        """The mode's value (``"append"`` or ``"overwrite"``), as commit records store it."""
        return CommitMode(self.mode).value

    @property
    def app(self) -> tuple[str, int] | None:
        """The (app_id, app_version) watermark the commit sets, or None."""
        if self.app_id is None or self.app_version is None:
            return None
        return self.app_id, self.app_version


def _frozen_filter(where: Any) -> Any:
    """A read-only copy of one partition filter: its mapping as a proxy, each list of values as a tuple
    and each set as a frozenset. Anything else is kept as given, for the engine to refuse naming the
    table (a filter that is not a mapping, values that are not a sequence)."""
    if not isinstance(where, Mapping):
        return where
    return MappingProxyType({column: _frozen_values(values) for column, values in where.items()})


def _plain(where: Any) -> Any:
    """A frozen partition filter as the plain mapping it was made from."""
    return dict(where) if isinstance(where, Mapping) else where


def _frozen_values(values: Any) -> Any:
    if isinstance(values, list):
        return tuple(values)
    if isinstance(values, set):
        return frozenset(values)
    return values


DEFAULT_REQUEST = CommitRequest()  # an append with no options: the entry points' default
