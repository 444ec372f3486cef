"""Local races and bounds: symlink swaps mid-operation, directory creation against pruning, orphan removal
against writes in flight, the memory a large read holds. Each test is bounded in time (a few seconds) and
works in its own tmp dir."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from test_local_confinement import snapshot

from storage_adapter import open_adapter
from storage_adapter.adapter import ObjectStorageAdapter
from storage_adapter.errors import StorageError


def run_until(deadline: float, step: Callable[[int], None]) -> None:
    i = 0
    while time.monotonic() < deadline:
        step(i)
        i += 1


def test_swapping_a_directory_for_a_symlink_mid_operation_never_escapes(tmp_path: Path) -> None:
    """One thread keeps replacing root/d by a symlink to an outside tree (and back) while another runs
    every operation on keys under d: operations may fail with typed errors, the outside never changes."""
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "k").write_bytes(b"precious")
    (outside / "sub" / "k").write_bytes(b"precious too")
    before = snapshot(outside)
    root = tmp_path / "root"
    adapter = open_adapter(f"file://{root}")
    adapter.write("d/keep", b"v")
    d, parked = root / "d", root / "parked"
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):  # d was pruned by a delete, or parked is in use
                os.rename(d, parked)
            try:
                os.symlink(outside, d)
            except FileExistsError:  # a writer re-created d meanwhile
                continue
            time.sleep(0.0002)
            os.unlink(d)
            try:
                os.rename(parked, d)
            except FileNotFoundError:  # parked was pruned
                pass
            except OSError:  # a writer re-created d meanwhile
                shutil.rmtree(parked, ignore_errors=True)  # a delete may prune it meanwhile

    operations: list[Callable[[ObjectStorageAdapter], object]] = [
        lambda a: a.write("d/k", b"evil"),
        lambda a: a.write("d/sub/k", b"evil"),
        lambda a: a.write_if_absent("d/sub/k", b"evil"),
        lambda a: a.write_if_match("d/k", b"evil", a.read_versioned("d/k").token),
        lambda a: a.read_bytes("d/sub/k"),
        lambda a: a.exists("d/k"),
        lambda a: a.list("d"),
        lambda a: a.list(),
        lambda a: a.list_dir("d/sub"),
        lambda a: a.rename("d/k", "d/sub/k"),
        lambda a: a.rename("d/sub/k", "e/k"),
        lambda a: a.delete("d/k"),
        lambda a: a.delete("d/sub/k"),
        lambda a: a.delete_prefix("d"),
        lambda a: a.remove_orphans(0),
    ]
    outcomes: Counter[str] = Counter()

    def step(i: int) -> None:
        try:
            operations[i % len(operations)](adapter)
            outcomes["ok"] += 1
        except StorageError as exc:  # refused or absent: typed errors are fine, escaping is not
            outcomes[type(exc).__name__ if type(exc) is not StorageError else str(exc)[:90]] += 1

    swapper = threading.Thread(target=swap)
    swapper.start()
    try:
        run_until(time.monotonic() + 3.0, step)
    finally:
        stop.set()
        swapper.join()
    print(outcomes)
    assert snapshot(outside) == before
    assert outcomes["ok"] > 0


WRITE_DELETE_WORKER = """
import json, sys, time
from storage_adapter import open_adapter
from storage_adapter.errors import StorageError
adapter, worker, seconds = open_adapter(sys.argv[1]), sys.argv[2], float(sys.argv[3])
errors, cycles, deadline = {}, 0, time.monotonic() + seconds
while time.monotonic() < deadline:
    cycles += 1
    # Fresh subdirectories shared with the other workers: created by writes, pruned by deletes.
    here, there = f"s/{cycles % 3}/x/{worker}", f"t/{cycles % 2}/y/{worker}"
    for step in (
        lambda: adapter.write(here, b"v"),
        lambda: adapter.write_if_absent(here + "-c", b"v"),
        lambda: adapter.write_if_match(here, b"w", adapter.read_versioned(here).token),
        lambda: adapter.rename(here, there),
        lambda: adapter.delete(there),
        lambda: adapter.delete(here + "-c"),
    ):
        try:
            step()
        except StorageError as exc:
            name = f"{type(exc).__name__}: {exc}"[:160]
            errors[name] = errors.get(name, 0) + 1
print(json.dumps({"cycles": cycles, "errors": errors}))
"""


def test_directory_creation_never_loses_to_pruning_across_processes(tmp_path: Path) -> None:
    """4 processes write, CAS, rename and delete keys in subdirectories that the others' deletes prune:
    every mutation succeeds (no spurious EEXIST, no NotFoundError naming a source that exists)."""
    adapter = open_adapter(f"file://{tmp_path}")
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WRITE_DELETE_WORKER, adapter.url, f"w{n}", "8"], stdout=subprocess.PIPE
        )
        for n in range(4)
    ]
    reports = [json.loads(worker.communicate(timeout=120)[0]) for worker in workers]
    cycles = sum(r["cycles"] for r in reports)
    errors: Counter[str] = Counter()
    for report in reports:
        errors.update(report["errors"])
    print(f"{cycles} cycles, errors: {json.dumps(errors, indent=1)}")
    assert cycles > 100  # about 600-3,000 on 2 shared cores
    assert errors == {}
    assert adapter.list() == [] and sorted(os.listdir(tmp_path)) == []


def test_remove_orphans_never_breaks_a_write_in_flight(tmp_path: Path) -> None:
    """remove_orphans(min_age_s=0) in a loop while large writes stage their bodies: every write lands."""
    adapter = open_adapter(f"file://{tmp_path}")
    body = b"x" * (16 * 1024 * 1024)
    failures: list[BaseException] = []
    done = threading.Event()

    def write() -> None:
        try:
            for i in range(12):
                adapter.write(f"d/big{i % 2}", body)
                assert adapter.read_bytes(f"d/big{i % 2}") == body
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)
        finally:
            done.set()

    writer = threading.Thread(target=write)
    writer.start()
    removed = 0
    while not done.is_set():
        removed += adapter.remove_orphans(min_age_s=0)
    writer.join()
    assert failures == [] and removed == 0
    assert sorted(os.listdir(tmp_path / "d")) == ["big0", "big1"]


PEAK_READ = """
import os, resource, sys
from storage_adapter import open_adapter
root, size = sys.argv[1], int(sys.argv[2])
with open(os.path.join(root, "big"), "wb") as f:
    for _ in range(size >> 20):
        f.write(os.urandom(1 << 20))
adapter = open_adapter("file://" + root)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
version = adapter.read_versioned("big")
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
assert len(version.data) == size and adapter.exists("big")
print(grown)
"""


def test_a_large_read_holds_one_copy(tmp_path: Path) -> None:
    """Reading a 200 MiB object raises the peak RSS by at most 1.3x its size (no second copy)."""
    size = 200 << 20
    grown = int(subprocess.check_output([sys.executable, "-c", PEAK_READ, str(tmp_path), str(size)]))
    print(f"peak RSS growth: {grown / size:.3f}x the object")
    assert grown <= 1.3 * size
