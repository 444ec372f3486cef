"""Local mutations are durable by default: each syncs in the order that survives power loss. A power cut
cannot be simulated here, so the syscalls are recorded and their order is checked, per mutation path."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from storage_adapter import StorageAdapter, local_files, open_adapter


class Syscalls:
    """Records fsync (as the synced file or directory, relative to the root), utime of a descriptor (as
    "file"), rename, link, unlink and mkdir."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.events: list[tuple[str, str]] = []
        for name in ("fsync", "utime", "rename", "link", "unlink", "mkdir"):
            monkeypatch.setattr(os, name, self._recording(name, getattr(os, name)))

    def _where(self, fd: int) -> str:
        st = os.fstat(fd)
        if not stat.S_ISDIR(st.st_mode):
            return "file"
        for path in [self.root, *self.root.rglob("*")]:
            if path.is_dir() and os.stat(path).st_ino == st.st_ino:
                return f"dir:{path.relative_to(self.root)}"
        return "dir:?"

    def _recording(self, name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(*args: Any, **kwargs: Any) -> Any:
            if name == "fsync":
                self.events.append(("fsync", self._where(args[0])))
            elif name == "utime" and isinstance(args[0], int):
                self.events.append(("utime", "file"))
            else:
                target = str(args[1] if name in ("rename", "link") else args[0])
                self.events.append((name, target.split("#")[0] + ("#staging" if "#" in target else "")))
            return call(*args, **kwargs)

        return recorded

    def index(self, event: tuple[str, str]) -> int:
        assert event in self.events, f"{event} not in {self.events}"
        return self.events.index(event)

    def syncs(self) -> list[str]:
        return [where for op, where in self.events if op == "fsync"]


@pytest.fixture
def local(tmp_path: Path) -> StorageAdapter:
    return open_adapter(f"file://{tmp_path}")


def test_write_syncs_the_file_before_publishing_then_every_changed_directory(
    local: StorageAdapter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = Syscalls(tmp_path, monkeypatch)
    local.write("a/b/k", b"v")
    published = calls.index(("rename", "k"))
    assert calls.index(("fsync", "file")) < published
    after = calls.syncs()[calls.syncs().index("file") + 1 :]
    # the new name, then the entries of the two directories this write created
    assert after == ["dir:a/b", "dir:a", "dir:."], calls.events


def test_replacing_in_an_existing_directory_syncs_file_then_that_directory_only(
    local: StorageAdapter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = local.write("a/k", b"v1")
    calls = Syscalls(tmp_path, monkeypatch)
    assert local.write_if_match("a/k", b"v2", token) is not None
    assert calls.index(("fsync", "file")) < calls.index(("rename", "k")) < len(calls.events) - 1
    assert calls.syncs() == ["file", "dir:a"]
    assert calls.events[-1] == ("fsync", "dir:a")


def test_create_links_a_synced_file_then_syncs_the_directory(
    local: StorageAdapter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a").mkdir()
    calls = Syscalls(tmp_path, monkeypatch)
    assert local.write_if_absent("a/k", b"v") is not None
    assert calls.index(("fsync", "file")) < calls.index(("link", "k")) < calls.index(("unlink", "k#staging"))
    assert calls.events[-1] == ("fsync", "dir:a")


def test_delete_syncs_the_directory_after_the_unlink(
    local: StorageAdapter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local.write("a/k", b"v")
    local.write("a/other", b"v")  # keeps a/ from being pruned
    calls = Syscalls(tmp_path, monkeypatch)
    local.delete("a/k")
    assert calls.index(("unlink", "k")) < calls.index(("fsync", "dir:a"))


def test_rename_syncs_the_destination_before_the_source(
    local: StorageAdapter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local.write("src/k", b"v")
    local.write("src/keep", b"v")
    (tmp_path / "dst").mkdir()
    calls = Syscalls(tmp_path, monkeypatch)
    local.rename("src/k", "dst/k")
    moved = calls.index(("rename", "k"))
    assert calls.syncs() == ["dir:dst", "dir:src"]
    assert moved < calls.index(("fsync", "dir:dst")) < calls.index(("fsync", "dir:src"))


def test_durable_false_opts_out_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scratch = open_adapter(f"file://{tmp_path}", durable=False)
    assert scratch.capabilities.durable is False
    assert open_adapter(f"file://{tmp_path}").capabilities.durable is True
    calls = Syscalls(tmp_path, monkeypatch)
    token = scratch.write("a/k", b"v")
    scratch.write_if_absent("a/j", b"v")
    scratch.write_if_match("a/k", b"w", token)
    scratch.rename("a/k", "b/k")
    scratch.delete("b/k")
    assert calls.syncs() == []
    assert scratch.read_bytes("a/j") == b"v"


@pytest.mark.parametrize("how", ["write", "write_if_absent"])
def test_a_streamed_write_syncs_created_directories_then_the_file_before_publishing(
    local: StorageAdapter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """Staged outside the directory lock: the directories it created are synced in their parents when the
    staging file is made, the file before the name points at it (one fsync: the token's mtime is set
    first), and the directory after."""
    calls = Syscalls(tmp_path, monkeypatch)
    assert getattr(local, how)("a/b/k", iter([b"one", b"two"])) is not None
    published = calls.index(("rename" if how == "write" else "link", "k"))
    syncs_before = [where for op, where in calls.events[:published] if op == "fsync"]
    assert syncs_before == ["dir:a/b", "dir:a", "dir:.", "file"], calls.events
    assert calls.index(("utime", "file")) < calls.index(("fsync", "file"))
    assert calls.events.count(("utime", "file")) == 1
    assert [where for op, where in calls.events[published:] if op == "fsync"] == ["dir:a/b"], calls.events
    assert local.read_bytes("a/b/k") == b"onetwo"


def microseconds(token: str) -> int:
    """The mtime (microseconds) a local token carries (``"<ino>-<mtime>-<size>"``, hex)."""
    return int(token.strip('"').split("-")[1], 16)


@pytest.mark.parametrize("ahead", [False, True])
def test_a_streamed_replace_is_dated_after_the_version_it_replaces_and_synced_so(
    local: StorageAdapter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ahead: bool
) -> None:
    """The stream is dated when its last byte is staged and synced once; a version found at the publish
    dated as late or later (here: a clock an hour ahead) makes it date itself after that one and sync
    again before the rename, so the key's tokens still increase and the durable mtime is the token's."""
    previous = local.write("a/k", b"v1")
    if ahead:
        later = time.time_ns() + 3600 * 10**9
        os.utime(tmp_path / "a" / "k", ns=(later, later))
        previous = local.read_versioned("a/k").token
    calls = Syscalls(tmp_path, monkeypatch)
    token = local.write_if_match("a/k", iter([b"v", b"2"]), previous)
    assert token is not None
    published = calls.index(("rename", "k"))
    before = [event for event in calls.events[:published] if event[1] == "file"]
    expected = [("utime", "file"), ("fsync", "file")] * (2 if ahead else 1)
    assert before == expected, calls.events
    assert microseconds(token) > microseconds(previous)
    assert local.read_versioned("a/k").token == token


def test_a_durable_stream_starts_the_writeback_of_every_mebibyte_it_stages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each full WRITEBACK_BYTES staged is handed to the kernel's writeback as it is written (the fsync
    before the publish then waits for the rest only); a scratch root (durable=False) asks for none."""
    asked: list[tuple[str, int, int]] = []

    def recorded(fd: int, offset: int, length: int, flags: int) -> int:
        asked.append((os.readlink(f"/proc/self/fd/{fd}").rsplit("/", 1)[1].split("#")[0], offset, length))
        return 0

    monkeypatch.setattr(local_files, "_START_WRITEBACK", recorded)
    step = local_files.WRITEBACK_BYTES
    piece = b"x" * (64 * 1024)
    pieces = 3 * step // len(piece) + 5  # three whole mebibytes and a bit
    durable = open_adapter(f"file://{tmp_path}/durable")
    assert durable.write_if_absent("a/k", iter([piece] * pieces)) is not None
    assert asked == [("k", 0, step), ("k", step, step), ("k", 2 * step, step)]
    assert durable.read_bytes("a/k") == piece * pieces
    asked.clear()
    scratch = open_adapter(f"file://{tmp_path}/scratch", durable=False)
    assert scratch.write_if_absent("a/k", iter([piece] * pieces)) is not None
    assert asked == []
