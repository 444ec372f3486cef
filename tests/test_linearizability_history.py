"""HistoryRecorder and History: what is recorded, how outcomes are classified, how histories merge."""

from __future__ import annotations

import pickle

import pytest

from contract_tests.history import Event, EventKind, History, HistoryRecorder, Outcome
from contract_tests.linearizability import KeyVerdict, check_history
from contract_tests.planted_bugs import PLANTED_BUGS, RacyCasAdapter
from storage_adapter import open_adapter
from storage_adapter.errors import (
    BackendUnavailableError,
    InvalidKeyError,
    NotFoundError,
    PermissionDeniedError,
    StorageError,
    UnsupportedOperationError,
)
from storage_adapter.servers.server import free_port


def test_recorder_records_each_register_operation_with_its_result(adapter) -> None:
    recorder = HistoryRecorder(adapter, worker="w")
    token = recorder.write("k", b"one")
    assert recorder.write_if_absent("k", b"two") is None
    assert recorder.read_versioned("k").token == token
    new = recorder.write_if_match("k", "three", token)
    assert recorder.read_text("k") == "three"
    assert recorder.exists("k") is True
    recorder.delete("k")
    assert recorder.read_if_exists("k") is None
    with pytest.raises(NotFoundError):
        recorder.read_bytes("k")
    history = recorder.history()
    assert [(o.op, o.result) for o in history] == [
        ("write", token),
        ("write_if_absent", None),
        ("read_versioned", (b"one", token)),
        ("write_if_match", new),
        ("read", b"three"),
        ("exists", True),
        ("delete", None),
        ("read", None),
        ("read", None),  # NotFoundError on a read is the answer "absent"
    ]
    assert all(o.outcome is Outcome.OK and o.worker == "w" for o in history)
    assert history.operations[3].args == (b"three", token)
    assert all(o.invoke_ns <= o.complete_ns for o in history)  # type: ignore[operator]
    assert check_history(history).ok


def test_events_pickle_and_merge_across_workers(adapter) -> None:
    first, second = HistoryRecorder(adapter, "a"), HistoryRecorder(adapter, "b")
    first.write("k", b"1")
    second.read_if_exists("k")
    events = pickle.loads(pickle.dumps(first.events)) + pickle.loads(pickle.dumps(second.events))
    merged = History.merge(events)
    assert [o.worker for o in merged] == ["a", "b"]
    assert merged.keys() == ["k"]


def test_child_recorders_share_events_and_record_full_keys(adapter) -> None:
    recorder = HistoryRecorder(adapter, "w")
    child = recorder.child("sub")
    child.write("x", b"1")
    child.write("y/z", b"2")
    assert child.delete_prefix("y") == 1  # recorded as one delete per object
    assert [(o.op, o.key) for o in recorder.history()] == [
        ("write", "sub/x"),
        ("write", "sub/y/z"),
        ("delete", "sub/y/z"),
    ]


def test_rename_is_refused_rather_than_left_out_of_the_history(adapter) -> None:
    recorder = HistoryRecorder(adapter)
    recorder.write("a", b"1")
    with pytest.raises(UnsupportedOperationError, match="rename"):
        recorder.rename("a", "b")


def test_recorder_pickles_as_a_fresh_recorder_on_the_same_store(adapter) -> None:
    recorder = HistoryRecorder(adapter, "w")
    recorder.write("k", b"1")
    clone = pickle.loads(pickle.dumps(recorder))
    assert clone.inner == adapter and clone.worker == "w" and clone.events == []


def test_errors_that_change_nothing_are_failed() -> None:
    recorder = HistoryRecorder(open_adapter("memory://history-failed"), "w")
    with pytest.raises(InvalidKeyError):
        recorder.write("../escape", b"x")
    [op] = recorder.history()
    assert op.outcome is Outcome.FAILED and "InvalidKeyError" in (op.error or "")


class _Failing:
    """An adapter stand-in whose mutations raise ``error`` and whose reads of ``gone`` are absent."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def write(self, key: str, data: bytes) -> str:
        raise self.error

    def delete(self, key: str) -> None:
        raise self.error

    def read_bytes(self, key: str) -> bytes:
        raise NotFoundError("absent", key=key)


@pytest.mark.parametrize(
    "error",
    [
        StorageError("failed: write 'k' on local: [Errno 17] File exists: 'd'"),
        PermissionDeniedError("denied"),
        NotFoundError("not found: 'k'"),  # no mutation has it as an outcome
        FileExistsError(17, "File exists"),  # untranslated: not even a StorageError
    ],
    ids=lambda e: type(e).__name__,
)
def test_an_error_that_is_no_outcome_of_the_call_is_undeclared_and_a_violation(error: Exception) -> None:
    """A mutation raising anything but a refusal of the call or a transient failure is UNDECLARED, and the
    checker reports the history as a violation naming the error, however linearizable the rest is."""
    recorder = HistoryRecorder(_Failing(error), "w")
    for call in (lambda: recorder.write("k", b"x"), lambda: recorder.delete("k")):
        with pytest.raises(type(error)):
            call()
    with pytest.raises(NotFoundError):
        recorder.read_bytes("k")  # a read's NotFoundError stays the answer "absent"
    write, delete, read = recorder.history()
    assert write.outcome is delete.outcome is Outcome.UNDECLARED and read.outcome is Outcome.OK
    assert write.complete_ns is not None and type(error).__name__ in (write.error or "")
    result = check_history(recorder.history())
    assert result.verdict is KeyVerdict.VIOLATION
    report = result.report()
    assert "not a declared outcome" in report and type(error).__name__ in report and "write(" in report


def test_backend_unavailable_is_an_unknown_outcome() -> None:
    unreachable = open_adapter(
        "s3://bucket",
        endpoint=f"http://127.0.0.1:{free_port()}",
        allow_http=True,
        access_key_id="x",
        secret_access_key="y",
        max_retries=0,
        connect_timeout_s=0.5,
        retry_timeout_s=1.0,
    )
    recorder = HistoryRecorder(unreachable, "w")
    with pytest.raises(BackendUnavailableError):
        recorder.write("k", b"maybe")
    [op] = recorder.history()
    assert op.ambiguous and op.complete_ns is None and op.result is None
    assert "BackendUnavailableError" in (op.error or "")


def _event(kind: EventKind, op_id: str, host: str, mono: int, wall: int, **extra: object) -> Event:
    return Event(kind, op_id, "w", host, mono, wall, "write", "k", (b"x",), **extra)  # type: ignore[arg-type]


def test_an_invoke_without_completion_is_unknown() -> None:
    [op] = History.from_events([_event(EventKind.INVOKE, "1", "h", 5, 5)])
    assert op.ambiguous and op.complete_ns is None


def test_histories_from_several_hosts_use_wall_clock_widened_by_the_skew() -> None:
    events = [
        _event(EventKind.INVOKE, "1", "h1", 10, 1_000),
        _event(EventKind.COMPLETE, "1", "h1", 20, 1_010, result="t", outcome=Outcome.OK),
        _event(EventKind.INVOKE, "2", "h2", 999_999, 2_000),
        _event(EventKind.COMPLETE, "2", "h2", 1_000_009, 2_010, result="u", outcome=Outcome.OK),
    ]
    first, second = History.from_events(events, cross_host_skew_ns=100)
    assert (first.invoke_ns, first.complete_ns) == (900, 1_110)
    assert (second.invoke_ns, second.complete_ns) == (1_900, 2_110)
    single = History.from_events(events[:2])
    assert (single.operations[0].invoke_ns, single.operations[0].complete_ns) == (10, 20)


def test_malformed_event_lists_are_refused() -> None:
    invoke = _event(EventKind.INVOKE, "1", "h", 1, 1)
    with pytest.raises(ValueError, match="two invoke"):
        History.from_events([invoke, invoke])
    with pytest.raises(ValueError, match="without an invoke"):
        History.from_events([_event(EventKind.COMPLETE, "9", "h", 1, 1, outcome=Outcome.OK)])


@pytest.mark.parametrize("bug", sorted(PLANTED_BUGS))
def test_planted_bug_adapters_pickle_delegate_and_keep_their_kind(adapter, bug: str) -> None:
    broken = PLANTED_BUGS[bug](adapter.url, bug_window_s=0.0, **dict(adapter.config.options))
    assert broken.capabilities == adapter.capabilities
    child = broken.child("sub")
    assert type(child) is type(broken) and child.url == adapter.child("sub").url
    assert pickle.loads(pickle.dumps(child)) == child
    child.write("k", b"v")  # single-caller behaviour is unchanged
    assert child.write_if_absent("k", b"w") is None
    token = child.read_versioned("k").token
    assert child.write_if_match("k", b"x", token) is not None
    assert child.read_bytes("k") == b"x"
    assert isinstance(PLANTED_BUGS["racy_cas"](adapter.url, **dict(adapter.config.options)), RacyCasAdapter)
