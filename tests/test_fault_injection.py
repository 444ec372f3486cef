"""storage_adapter.faults: injected faults fire where planned, in the planning thread only, and are
translated exactly as the real errors they imitate."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from storage_adapter import open_adapter
from storage_adapter.errors import BackendUnavailableError, PermissionDeniedError, StorageError
from storage_adapter.faults import FaultKind, FaultPlan, injected


@pytest.fixture(params=["memory", "local"])
def adapter(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    url = f"memory://faults-{id(request)}" if request.param == "memory" else f"file://{tmp_path}"
    return open_adapter(url)


@pytest.mark.parametrize(
    ("kind", "error"),
    [
        (FaultKind.UNAVAILABLE, BackendUnavailableError),
        (FaultKind.DENIED, PermissionDeniedError),
        (FaultKind.BROKEN, StorageError),
        (FaultKind.PANIC, StorageError),
    ],
)
def test_a_fault_surfaces_as_its_typed_error_naming_key_and_backend(adapter, kind, error) -> None:  # type: ignore[no-untyped-def]
    with injected(FaultPlan(kind)) as plan, pytest.raises(error) as info:
        adapter.write("dir/k", b"x")
    assert plan.fired and "dir/k" in str(info.value) and adapter.backend in str(info.value)
    assert not adapter.exists("dir/k")


def test_the_plan_counts_steps_and_fires_only_where_planned(adapter) -> None:  # type: ignore[no-untyped-def]
    recorder = FaultPlan(FaultKind.BROKEN, skip=1000)
    with injected(recorder):
        adapter.write("k", b"v1")
    assert recorder.passed and not recorder.fired
    last = FaultPlan(FaultKind.BROKEN, skip=len(recorder.passed) - 1)
    with injected(last), pytest.raises(StorageError):
        adapter.write("k", b"v2")
    assert last.fired == recorder.passed[-1:]


def test_other_threads_are_not_affected(adapter) -> None:  # type: ignore[no-untyped-def]
    seen: list[bytes] = []
    with injected(FaultPlan(FaultKind.BROKEN, times=1000)):
        worker = threading.Thread(
            target=lambda: seen.append(adapter.write("k", b"v") and adapter.read_bytes("k"))
        )
        worker.start()
        worker.join()
    assert seen == [b"v"]


def test_plans_are_validated_and_not_nested() -> None:
    with pytest.raises(ValueError):
        FaultPlan(FaultKind.BROKEN, skip=-1)
    with pytest.raises(ValueError):
        FaultPlan(FaultKind.BROKEN, times=0)
    with pytest.raises(TypeError):
        FaultPlan("broken")  # type: ignore[arg-type]
    with (
        injected(FaultPlan(FaultKind.BROKEN)),
        pytest.raises(RuntimeError),
        injected(FaultPlan(FaultKind.BROKEN)),
    ):
        pass


@pytest.mark.parametrize("operation", ["write", "write_if_absent", "write_if_match"])
def test_a_failed_local_write_leaves_nothing_on_disk(tmp_path: Path, operation: str) -> None:
    """Whatever step of a local write fails, nothing it made stays on disk: no staging file, no directory
    it created (readers could not see them, but the disk could fill up with them)."""
    adapter = open_adapter(f"file://{tmp_path}")
    token = adapter.write("keep", b"x")
    calls = {
        "write": lambda: adapter.write("new/dir/k", b"v"),
        "write_if_absent": lambda: adapter.write_if_absent("new/dir/k", b"v"),
        "write_if_match": lambda: adapter.write_if_match("keep", b"v", token),
    }
    recorder = FaultPlan(FaultKind.BROKEN, skip=1000)
    with injected(recorder):
        calls[operation]()
    adapter.delete("new/dir/k")
    token = adapter.write("keep", b"x")
    for step, point in enumerate(recorder.passed):
        if point in ("fsync", "unlink", "rmdir"):
            continue  # after the publish (the effect stays) or a failed cleanup itself
        with injected(FaultPlan(FaultKind.BROKEN, skip=step)), pytest.raises(StorageError):
            calls[operation]()
        left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
        assert left == ["keep"], (step, point, left)
        assert adapter.read_bytes("keep") == b"x"
