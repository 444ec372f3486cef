"""The local CAS primitive: token formula, ABA guard, crash leftovers, directory pruning, root safety."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from storage_adapter import NotFoundError, open_adapter
from storage_adapter.local_files import local_token
from storage_adapter.types import DirListing


def test_token_formula_matches_what_obstore_reports(tmp_path: Path) -> None:
    adapter = open_adapter(f"file://{tmp_path}")
    written = adapter.write("a/b", b"hello")
    assert written == local_token(os.stat(tmp_path / "a" / "b"))
    assert adapter.read_versioned("a/b").token == written  # derived by obstore from the open file


def test_new_version_mtime_exceeds_the_previous_even_if_the_clock_lags(tmp_path: Path) -> None:
    """Tokens are inode-mtime-size and inodes are reused: a version must never reuse an older mtime.
    A previous version dated in the future (a lagging clock, a coarse timestamp) forces the bump."""
    adapter = open_adapter(f"file://{tmp_path}")
    first = adapter.write("k", b"same size")
    future_ns = time.time_ns() + 10**10
    os.utime(tmp_path / "k", ns=(future_ns, future_ns))
    stale = local_token(os.stat(tmp_path / "k"))
    second = adapter.write_if_match("k", b"same size", stale)
    assert second is not None and second not in (first, stale)
    assert os.stat(tmp_path / "k").st_mtime_ns // 1000 == future_ns // 1000 + 1
    third = adapter.write("k", b"same size")
    assert os.stat(tmp_path / "k").st_mtime_ns // 1000 == future_ns // 1000 + 2
    assert len({first, stale, second, third}) == 4


def test_crash_leftovers_are_never_listed_and_are_removed(tmp_path: Path) -> None:
    adapter = open_adapter(f"file://{tmp_path}")
    adapter.write("d/k", b"v")
    leftover = tmp_path / "d" / "k#123456789012"  # what a writer killed mid-stage leaves
    leftover.write_bytes(b"half")
    old = time.time() - 7200
    os.utime(leftover, (old, old))
    assert [i.key for i in adapter.list()] == ["d/k"]
    assert adapter.read_bytes("d/k") == b"v"
    assert adapter.remove_orphans(min_age_s=60) == 1
    assert not leftover.exists()
    assert adapter.remove_orphans(min_age_s=60) == 0


def test_remove_orphans_prunes_the_directories_crash_leftovers_leave_empty(tmp_path: Path) -> None:
    """A writer killed in a directory it created leaves the directory behind (with its staging file, or
    empty if it died before staging): remove_orphans prunes it once reclaimed, or once older than
    min_age_s, never a directory a writer may be about to stage in, nor one holding an object, nor the
    root. Only the staging files are counted."""
    adapter = open_adapter(f"file://{tmp_path}")
    adapter.write("keep/k", b"v")
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "k#123456789012").write_bytes(b"half")
    (tmp_path / "empty" / "deeper").mkdir(parents=True)
    old = time.time() - 7200
    for path in ("a/b/k#123456789012", "empty/deeper"):
        os.utime(tmp_path / path, (old, old))
    (tmp_path / "young").mkdir()
    assert adapter.remove_orphans(min_age_s=60) == 1
    assert sorted(os.listdir(tmp_path)) == ["keep", "young"]
    assert adapter.remove_orphans(min_age_s=0) == 0
    assert sorted(os.listdir(tmp_path)) == ["keep"]


def test_fresh_staging_files_are_left_to_their_writer(tmp_path: Path) -> None:
    adapter = open_adapter(f"file://{tmp_path}")
    (tmp_path / "k#000000000001").write_bytes(b"in progress")
    assert adapter.remove_orphans(min_age_s=60) == 0


def test_deletes_prune_emptied_directories_but_not_the_root(tmp_path: Path) -> None:
    root = tmp_path / "root"
    adapter = open_adapter(f"file://{root}")
    adapter.write("a/b/c/d", b"v")
    adapter.write("a/keep", b"v")
    adapter.delete("a/b/c/d")
    assert not (root / "a" / "b").exists()
    assert (root / "a" / "keep").exists()
    adapter.delete("a/keep")
    assert root.exists() and list(root.iterdir()) == []


def test_a_root_that_existed_survives_every_way_of_emptying_it(tmp_path: Path) -> None:
    """The root of a file:// target is the user's directory: deletes, delete_prefix, a rename that moves
    the last object up, a failed rename and remove_orphans never remove it, even when they empty it. (The
    contract cannot see this: its adapters are children, whose directories are pruned like any prefix.)"""
    root = tmp_path / "root"
    root.mkdir()
    adapter = open_adapter(f"file://{root}")

    def failed_rename() -> None:
        adapter.delete("d/e/k")
        with pytest.raises(NotFoundError):
            adapter.rename("d/e/k", "x/y")

    ways: dict[str, Callable[[], object]] = {
        "delete": lambda: adapter.delete("d/e/k"),
        "delete_prefix": lambda: adapter.delete_prefix("d"),
        "rename, then delete": lambda: (adapter.rename("d/e/k", "k"), adapter.delete("k")),
        "failed rename": failed_rename,
    }
    for way, empty in ways.items():
        adapter.write("d/e/k", b"v")
        empty()
        assert root.is_dir() and list(root.iterdir()) == [], way
    (root / "k#123456789012").write_bytes(b"a crash leftover")
    assert adapter.remove_orphans(min_age_s=0) == 1
    assert root.is_dir() and list(root.iterdir()) == []


def test_a_root_removed_under_the_adapter_is_an_empty_root(tmp_path: Path) -> None:
    """An outer adapter that deletes the last object below an inner adapter's root prunes that root (it
    is just a directory to the outer one). The inner adapter then answers as an empty adapter, never with
    an error, and its next write creates the root again."""
    outer = open_adapter(f"file://{tmp_path}")
    inner = open_adapter(f"file://{tmp_path}/inner")
    token = inner.write("k", b"v")
    outer.delete("inner/k")
    assert not (tmp_path / "inner").exists()
    assert inner.list() == [] and inner.list_dir() == DirListing(objects=(), prefixes=())
    assert inner.read_if_exists("k") is None and not inner.exists("k")
    inner.delete("k")
    assert inner.write_if_match("k", b"v2", token) is None
    assert inner.delete_prefix("d") == 0 and inner.remove_orphans(min_age_s=0) == 0
    with pytest.raises(NotFoundError):
        inner.rename("k", "j")
    inner.write("d/k", b"again")
    assert inner.read_bytes("d/k") == b"again" and [i.key for i in outer.list()] == ["inner/d/k"]


def test_adapters_at_different_roots_serialize_on_the_same_file(tmp_path: Path) -> None:
    """The lock is the file's parent directory, so nested roots share it (no per-root lock files)."""
    outer = open_adapter(f"file://{tmp_path}")
    inner = open_adapter(f"file://{tmp_path}/sub")
    token = outer.write("sub/k", b"v1")
    assert inner.write_if_match("k", b"v2", token) is not None
    assert outer.write_if_match("sub/k", b"v3", token) is None
    assert sorted(os.listdir(tmp_path / "sub")) == ["k"]  # no lock or staging files left behind


def test_nothing_outside_the_root_is_touched(tmp_path: Path) -> None:
    (tmp_path / "outside").write_bytes(b"precious")
    adapter = open_adapter(f"file://{tmp_path}/root")
    adapter.write("k", b"v")
    adapter.delete("k")
    adapter.delete_prefix("x")
    assert (tmp_path / "outside").read_bytes() == b"precious"
    assert (tmp_path / "root").is_dir()


KILL_LOOP = """
import sys
from contract_tests.bodies import make_body
from storage_adapter import open_adapter
adapter = open_adapter(sys.argv[1])
token = adapter.read_versioned("hot").token
i = 0
print("ready", flush=True)
while True:
    i += 1
    body = make_body(f"w{i}", 2 * 1024 * 1024)
    if i % 2:
        adapter.write("hot", body)
    else:
        token = adapter.write_if_match("hot", body, adapter.read_versioned("hot").token) or token
"""


def test_kill_9_mid_write_leaves_a_whole_object_and_only_inert_leftovers(tmp_path: Path) -> None:
    """SIGKILL a process while it writes and CASes 2 MiB bodies, many times: the object is always whole,
    nothing but the key lists, the directory lock is released by the kernel, leftovers are reclaimed."""
    import random
    import signal
    import subprocess
    import sys

    from contract_tests.bodies import body_is_whole, make_body

    adapter = open_adapter(f"file://{tmp_path}")
    adapter.write("hot", make_body("initial", 2 * 1024 * 1024))
    rng = random.Random(7)
    for _ in range(12):
        proc = subprocess.Popen([sys.executable, "-c", KILL_LOOP, adapter.url], stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        time.sleep(rng.uniform(0.01, 0.3))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert body_is_whole(adapter.read_bytes("hot"))
        assert [i.key for i in adapter.list()] == ["hot"]
        # The killed process may have held the directory lock: the kernel released it.
        current = adapter.read_versioned("hot")
        assert adapter.write_if_match("hot", make_body("after-kill", 1024), current.token) is not None
        adapter.write("hot", make_body("reset", 2 * 1024 * 1024))
    adapter.remove_orphans(min_age_s=0)
    assert sorted(os.listdir(tmp_path)) == ["hot"]


def test_a_failed_rename_leaves_no_destination_directory(tmp_path: Path) -> None:
    """rename creates the destination's directories only to publish into them: when the source turns out
    to be absent they are pruned again, so a failed rename leaves nothing on disk (the contract cannot
    see an empty directory: list_dir shows only prefixes holding objects)."""
    adapter = open_adapter(f"file://{tmp_path}")
    adapter.write("keep", b"x")
    with pytest.raises(NotFoundError):
        adapter.rename("absent", "new/deeper/k")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep"]
