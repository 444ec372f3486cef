"""The one rule for what a listing shows, the same on every backend: an entry is listed as an object only
if its name is a key the adapter can address; everything else a store holds is skipped and reported.

Drivers list what their store holds by its exact name (a raw listing where a library would rename or
refuse names: S3 and Azure), relative to the adapter's root; they report entries that are not objects
at all (local: a symlink, a FIFO) as :class:`~storage_adapter.types.SkippedObject` themselves. Every
listing of the adapter (``list``, ``list_pages``, ``iter_list``, ``list_dir``, ``skipped``, sync and
async) passes each page through :func:`sort_listed`, so:

* a listing never fails because of a name it cannot address, and never shows it under another name (no
  aliasing: ``a//b`` is not ``a/b``; no phantom: the folder marker ``dir/`` is not an object ``dir``);
* a key a listing shows reads back, by the same name;
* what was left out is not silently invisible: ``StorageAdapter.skipped(prefix)`` and
  ``DirListing.skipped`` name each entry, with the rule it breaks.

A **folder marker** is a zero-byte object whose name ends in ``/`` (the AWS console's "Create folder",
rclone, Hadoop s3a): it is never an object, never read, never counted as data, and it does not make its
prefix a directory. A prefix is a directory only while an object lives under it, on every backend (as
an empty directory on local is none), so a prefix holding only a marker is not listed by ``list_dir``
and does not exist for the fsspec face.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterable

from storage_adapter.keys import is_plain_key, key_problem
from storage_adapter.types import ObjectInfo, SkippedObject, SkipReason

Listed = ObjectInfo | SkippedObject


def skip_reason(name: str, size: int | None) -> tuple[SkipReason, str] | None:
    """Why a listing leaves out the object ``name`` (relative to the root) of ``size`` bytes, with the
    broken rule; None if it is an addressable object. ``""`` is the root's own marker."""
    if is_plain_key(name):
        return None
    if (name == "" or name.endswith("/")) and size == 0:
        return SkipReason.FOLDER_MARKER, "a zero-byte object whose name ends in '/' marks a folder"
    problem = key_problem(name)
    return None if problem is None else (SkipReason.INVALID_KEY, problem)


def sort_listed(entries: Iterable[Listed]) -> tuple[builtins.list[ObjectInfo], builtins.list[SkippedObject]]:
    """The objects among a driver's listed ``entries`` (in their order) and the entries skipped by the
    module's rule. Costs one compiled match per entry where every name is a plain ASCII key."""
    objects: builtins.list[ObjectInfo] = []
    skipped: builtins.list[SkippedObject] = []
    for entry in entries:
        if type(entry) is ObjectInfo:
            reason = skip_reason(entry.key, entry.size)
            if reason is None:
                objects.append(entry)
            else:
                skipped.append(SkippedObject(entry.key, entry.size, *reason))
        else:
            assert isinstance(entry, SkippedObject)
            skipped.append(entry)
    return objects, skipped


def is_listed_prefix(name: str) -> bool:
    """Whether a child prefix named ``name`` (relative to the root) can hold an addressable object: every
    key below it starts with it, so a name that is no key holds none."""
    return skip_reason(name, None) is None
