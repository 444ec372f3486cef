"""Issue 46, item 10: the creates the engine makes on the local backend (a key's ledger claim, a table
version, a fragment: ``write_if_absent`` of a new name) against another process that deletes the last
object of the directory and prunes it (vacuum expiring the last ledger entry, say) at the worst moment:
after the create walked to the directory, before it locked it; or, for a directory the create makes,
after it opened the parent, before its mkdir. docs/local.md, "Mutations and pruning": neither surfaces
as an error; the create walks again, makes the directory again and succeeds (no raw OSError, no
NotFoundError). Reproduced with a hook at that step of the create (``storage_adapter.local_files.due``,
the fault-point function every system call passes)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from storage_adapter import local_files, open_adapter
from storage_adapter.faults import FaultKind

# (the step the other process acts before, the key created, the key the other process deletes: the last
# object of the directory that is pruned)
CASES = {
    "lock": ("flock", "__keys/new.json", "__keys/last.json"),
    "mkdir": ("mkdir", "tables/t/_versions/1.json", "tables/last.json"),
}


@pytest.mark.parametrize("how", ["write_if_absent", "write_stream_create", "write"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_create_whose_directory_is_pruned_under_it_walks_again_and_succeeds(
    tmp_path: Path, monkeypatch, case: str, how: str
) -> None:
    step, key, last = CASES[case]
    root = tmp_path / "root"
    ours, theirs = open_adapter(f"file://{root}"), open_adapter(f"file://{root}")
    theirs.write(last, b"the last object")
    pruned: list[bool] = []
    real_due = local_files.due
    creator = threading.current_thread()

    def due(point: str) -> FaultKind | None:
        if point == step and not pruned and threading.current_thread() is creator and armed:
            pruned.append(False)  # before the delete: it passes fault points too
            theirs.delete(last)  # the last object goes, and its now empty directory with it
            pruned[0] = not (root / last).parent.exists()
        return real_due(point)

    monkeypatch.setattr(local_files, "due", due)
    armed = True
    if how == "write_if_absent":
        token = ours.write_if_absent(key, b"created")
    elif how == "write_stream_create":
        token = ours.write_if_absent(key, iter([b"crea", b"ted"]))  # staged outside the lock
    else:
        token = ours.write(key, b"created")
    armed = False
    assert pruned == [True], "the other process's delete did not prune the directory at that step"
    assert token is not None and ours.read_bytes(key) == b"created"
    assert ours.read_versioned(key).token == token and not theirs.exists(last)
