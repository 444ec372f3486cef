"""Compaction: rewrite runs of small fragments into larger ones, published as one commit.

Policy (:func:`plan`): a fragment is *small* when it is under ``target_bytes``. Nothing is done unless
the table has at least ``min_fragments`` small fragments. Then each run of consecutive small fragments
(in row order) is cut greedily into groups whose sizes add up to at most ``target_bytes``; each group of
two or more becomes one new fragment holding the group's rows in order (a group of one is left alone).

The rewrite is a ``compact`` commit (a delta: each group's keys and the fragment replacing them), so
readers see all of it or none of it; rows and their order are unchanged. It rebases over concurrent
appends, and raises CommitConflictError once a fragment it rewrites is gone (a concurrent overwrite, or
another compaction of the same fragments). The replaced fragments stay readable by every retained
version that lists them; vacuum reclaims them once no retained version does.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import pyarrow as pa

from storage_adapter.engine.tables import Fragment, FragmentRef, Replacement
from storage_adapter.errors import ConfigurationError

DEFAULT_TARGET_BYTES = 64 * 1024 * 1024
DEFAULT_MIN_FRAGMENTS = 16


def plan(
    fragments: Sequence[Fragment],
    target_bytes: int,
    min_fragments: int,
    partition_of: Callable[[str], Hashable] = lambda key: (),
) -> list[list[Fragment]]:
    """The groups of consecutive small fragments to rewrite as one fragment each (see the module
    docstring); empty when the policy does not call for a compaction. ConfigurationError (a ValueError)
    for bounds below 1 or 2. A group never spans two partitions (``partition_of`` a fragment key): a
    fragment holds one partition."""
    if target_bytes < 1 or min_fragments < 2:
        raise ConfigurationError(
            f"need target_bytes >= 1 and min_fragments >= 2, not {target_bytes!r}, {min_fragments!r}"
        )
    if sum(1 for f in fragments if f[2] < target_bytes) < min_fragments:
        return []
    groups: list[list[Fragment]] = []
    current: list[Fragment] = []
    size = 0
    for fragment in fragments:
        small = fragment[2] < target_bytes
        moved = bool(current) and partition_of(current[-1][0]) != partition_of(fragment[0])
        if current and (not small or moved or size + fragment[2] > target_bytes):
            groups.append(current)
            current, size = [], 0
        if small:
            current.append(fragment)
            size += fragment[2]
    if current:
        groups.append(current)
    return [group for group in groups if len(group) > 1]


def rewrite(
    groups: list[list[Fragment]],
    schema: pa.Schema,
    read: Callable[[str], pa.Table],
    write: Callable[[pa.Table, str], FragmentRef],
) -> tuple[Replacement, ...]:
    """Write one fragment per group with the group's rows, in order, cast to the table's ``schema``
    (``write(data, key of the group's first fragment)``: the new fragment goes to that one's partition);
    return the replacements a compact commit publishes. The new fragments are invisible until then."""
    replaced: list[Replacement] = []
    for group in groups:
        data = pa.concat_tables([read(key).cast(schema) for key, _, _ in group])
        ref = write(data, group[0][0])
        replaced.append((tuple(key for key, _, _ in group), (ref.key, ref.rows, ref.bytes)))
    return tuple(replaced)
