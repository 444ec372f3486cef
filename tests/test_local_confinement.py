"""Local root confinement: no operation acts outside the root, whatever symlinks exist below it.

Policy (docs/local.md): a symlink below the root is never followed. Every operation naming a key or
prefix whose path meets one raises PermissionDeniedError (naming the key and "symlink") and changes
nothing; listings skip symlink entries, and entries whose names are not valid keys.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from storage_adapter import local_files, open_adapter
from storage_adapter.adapter import ObjectStorageAdapter
from storage_adapter.errors import NotFoundError, PermissionDeniedError
from storage_adapter.local_files import local_token

Operation = Callable[[ObjectStorageAdapter, str], Any]


def followed_token(adapter: ObjectStorageAdapter, key: str) -> str:
    """The token ``key`` would have if its symlinks were followed: a CAS that must still not match."""
    try:
        return local_token(os.stat(Path(adapter.config.location, key)))
    except FileNotFoundError:
        return '"0-0-0"'


def snapshot(top: Path) -> dict[str, bytes | str]:
    """Every entry below ``top`` (not following symlinks): file bytes, link targets, directories."""
    state: dict[str, bytes | str] = {}
    for directory, dirs, files in os.walk(top):
        for name in dirs + files:
            path = Path(directory, name)
            relative = str(path.relative_to(top))
            if path.is_symlink():
                state[relative] = "-> " + os.readlink(path)
            elif path.is_dir():
                state[relative] = "dir"
            else:
                state[relative] = path.read_bytes()
    return state


@pytest.fixture(params=["openat2", "walk"])
def hostile(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> tuple[ObjectStorageAdapter, Path, Path]:
    """A root holding real objects and symlinks to an outside tree: directory links at depth 1 and 3,
    a file link, a dangling file link and a dangling directory link. Reads run both ways: by the one
    ``openat2`` call that refuses every symlink, and by the descriptor walk (kernels without openat2)."""
    if request.param == "walk":
        monkeypatch.setattr(local_files, "_OPENAT2", None)
    elif local_files._OPENAT2 is None:
        pytest.skip("this kernel (or its seccomp filter) has no openat2")
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "f").write_bytes(b"precious")
    (outside / "sub" / "f").write_bytes(b"precious too")
    root = tmp_path / "root"
    adapter = open_adapter(f"file://{root}")
    adapter.write("real", b"mine")
    adapter.write("a/b/real", b"mine too")
    os.symlink(outside, root / "link")
    os.symlink(outside, root / "a" / "b" / "link")
    os.symlink(outside / "f", root / "flink")
    os.symlink(outside / "missing", root / "dangling")
    os.symlink(outside / "missing-dir", root / "dlink")
    return adapter, root, outside


# Keys whose path meets a symlink: as an intermediate directory (at depth 1 and 3, dangling) and as the
# final component (to a file, dangling).
SYMLINKED_KEYS = ["link/f", "link/sub/f", "a/b/link/f", "dlink/f", "flink", "dangling"]

OPERATIONS: dict[str, Operation] = {
    "write": lambda a, k: a.write(k, b"evil"),
    "write_if_absent": lambda a, k: a.write_if_absent(k, b"evil"),
    "write_if_match": lambda a, k: a.write_if_match(k, b"evil", followed_token(a, k)),
    "read_bytes": lambda a, k: a.read_bytes(k),
    "read_versioned": lambda a, k: a.read_versioned(k),
    "exists": lambda a, k: a.exists(k),
    "delete": lambda a, k: a.delete(k),
    "rename_src": lambda a, k: a.rename(k, "moved"),
    "rename_dst": lambda a, k: a.rename("real", k),
    "list": lambda a, k: a.list(k),
    "list_dir": lambda a, k: a.list_dir(k),
    "delete_prefix": lambda a, k: a.delete_prefix(k),
}


@pytest.mark.parametrize("key", SYMLINKED_KEYS)
@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_an_operation_meeting_a_symlink_is_refused_and_changes_nothing(
    hostile: tuple[ObjectStorageAdapter, Path, Path], operation: str, key: str
) -> None:
    adapter, root, outside = hostile
    before_root, before_outside = snapshot(root), snapshot(outside)
    with pytest.raises(PermissionDeniedError) as caught:
        OPERATIONS[operation](adapter, key)
    assert "symlink" in str(caught.value) and repr(key) in str(caught.value)
    assert caught.value.key in (key, "real") and caught.value.backend == "local"  # rename names its src
    assert snapshot(outside) == before_outside
    assert snapshot(root) == before_root


def test_real_keys_beside_symlinks_still_work(hostile: tuple[ObjectStorageAdapter, Path, Path]) -> None:
    adapter, _root, outside = hostile
    before_outside = snapshot(outside)
    token = adapter.write("a/b/new", b"v1")
    assert adapter.write_if_match("a/b/new", b"v2", token) is not None
    assert adapter.read_bytes("a/b/new") == b"v2"
    adapter.rename("a/b/new", "c/d")
    adapter.delete("c/d")
    assert adapter.delete_prefix("a") == 1
    assert snapshot(outside) == before_outside


def test_listings_skip_symlinks_and_never_follow_them(
    hostile: tuple[ObjectStorageAdapter, Path, Path],
) -> None:
    adapter, root, _outside = hostile
    os.symlink(root / "a", root / "inner-dir-link")  # even a link that stays inside the root
    os.symlink(root / "real", root / "inner-file-link")
    assert [i.key for i in adapter.list()] == ["a/b/real", "real"]
    assert [i.key for i in adapter.list("a")] == ["a/b/real"]
    top = adapter.list_dir()
    assert [i.key for i in top.objects] == ["real"] and top.prefixes == ("a",)
    assert adapter.list_dir("a/b").prefixes == ()  # a/b/link leads outside: not a prefix


def test_odd_names_on_disk_are_skipped_by_listings(tmp_path: Path) -> None:
    """Names that no key could produce (not UTF-8, control characters, staging shape) and special files
    are skipped: one odd entry never breaks a listing."""
    adapter = open_adapter(f"file://{tmp_path}")
    adapter.write("d/k", b"v")
    with open(os.path.join(os.fsencode(tmp_path), b"d", b"bad-\xff-name"), "wb") as odd:
        odd.write(b"x")
    os.mkdir(os.path.join(os.fsencode(tmp_path), b"\xfe-dir"))
    (tmp_path / "d" / "ctl\x01").write_bytes(b"x")
    (tmp_path / "d" / "k#123456789012").write_bytes(b"staged")
    os.mkfifo(tmp_path / "d" / "fifo")
    with open(os.path.join(os.fsencode(tmp_path), b"\xfe-dir", b"k"), "wb") as nested:
        nested.write(b"x")
    assert [i.key for i in adapter.list()] == ["d/k"]
    listing = adapter.list_dir("d")
    assert [i.key for i in listing.objects] == ["d/k"] and listing.prefixes == ()
    assert adapter.list_dir().prefixes == ("d",)


def test_the_root_itself_may_be_a_symlink(tmp_path: Path) -> None:
    """The user names the root: it is resolved once when the adapter opens."""
    (tmp_path / "real-root").mkdir()
    os.symlink(tmp_path / "real-root", tmp_path / "root-link")
    adapter = open_adapter(f"file://{tmp_path}/root-link")
    adapter.write("k", b"v")
    assert adapter.read_bytes("k") == b"v"
    assert (tmp_path / "real-root" / "k").read_bytes() == b"v"


def test_remove_orphans_stays_in_its_own_prefix(tmp_path: Path) -> None:
    parent = open_adapter(f"file://{tmp_path}")
    parent.write("mine/k", b"v")
    parent.write("sibling/k", b"v")
    old = time.time() - 7200
    for prefix in ("mine", "sibling"):
        leftover = tmp_path / prefix / "k#123456789012"
        leftover.write_bytes(b"half")
        os.utime(leftover, (old, old))
    assert parent.child("mine").remove_orphans(min_age_s=60) == 1
    assert not (tmp_path / "mine" / "k#123456789012").exists()
    assert (tmp_path / "sibling" / "k#123456789012").exists()


def test_remove_orphans_deletes_only_the_exact_staging_shape(tmp_path: Path) -> None:
    """Valid keys may contain '#': only ``<name>#<12 ASCII digits>`` (what a writer stages) is an orphan."""
    adapter = open_adapter(f"file://{tmp_path}")
    keys = ["a#²", "b#1x", "c#", "d#x1", "#e"]
    for key in keys:
        adapter.write(key, b"user data")
    old = time.time() - 7200
    for key in keys:
        os.utime(tmp_path / key, (old, old))
    assert adapter.remove_orphans(min_age_s=0) == 0
    assert [i.key for i in adapter.list()] == sorted(keys)


def test_remove_orphans_never_follows_symlinks(hostile: tuple[ObjectStorageAdapter, Path, Path]) -> None:
    adapter, _root, outside = hostile
    old = time.time() - 7200
    for leftover in (outside / "k#123456789012", outside / "sub" / "k#123456789012"):
        leftover.write_bytes(b"not ours")
        os.utime(leftover, (old, old))
    before_outside = snapshot(outside)
    assert adapter.remove_orphans(min_age_s=0) == 0
    assert snapshot(outside) == before_outside


def test_a_read_is_one_openat2_call_when_nothing_below_the_root_is_a_symlink(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hot path: a read, a versioned read and exists resolve the whole path with one openat2 call
    (no descriptor per directory), bytes and token from that one open file."""
    if local_files._OPENAT2 is None:
        pytest.skip("this kernel (or its seccomp filter) has no openat2")
    adapter = open_adapter(f"file://{tmp_path}")
    token = adapter.write("a/b/c", b"v")
    opened: list[object] = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda *a, **k: opened.append(a) or real_open(*a, **k))
    assert adapter.read_bytes("a/b/c") == b"v"
    assert adapter.read_versioned("a/b/c").token == token == local_token(os.stat(tmp_path / "a/b/c"))
    assert adapter.exists("a/b/c") and not adapter.exists("a/b/nope") and not adapter.exists("a/b")
    assert adapter.read_if_exists("a/x/y") is None
    with pytest.raises(NotFoundError):
        adapter.read_bytes("a/b")  # a directory is a prefix, not an object
    assert opened == []


def test_a_root_whose_path_became_a_symlink_is_still_read(tmp_path: Path) -> None:
    """The root's own path is the user's: when a directory above it is swapped for a symlink after the
    adapter opened, openat2 (which refuses every symlink) gives way to the walk, which follows it."""
    (tmp_path / "p").mkdir()
    adapter = open_adapter(f"file://{tmp_path}/p/root")
    token = adapter.write("k/v", b"bytes")
    (tmp_path / "p").rename(tmp_path / "q")
    os.symlink(tmp_path / "q", tmp_path / "p")
    assert adapter.read_versioned("k/v").data == b"bytes" and adapter.exists("k/v")
    assert adapter.read_versioned("k/v").token == token
