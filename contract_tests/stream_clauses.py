"""Clauses on ranged reads and streamed writes: ``read_range``, ``read_ranges``, ``open_reader``,
``read_buffer``, and ``write`` / ``write_if_absent`` / ``write_if_match`` from a file object or an
iterable of chunks.

Mixed into :class:`contract_tests.clauses.AdapterContract`, whose ``adapter`` fixture they use. What they
pin down, on every backend:

* Ranges have Python-slice semantics at the edges (``0``, ``size - 1``, ``size``, an ``end`` past the
  object), an empty range reads ``b""`` (a missing object is still NotFoundError), a ``start`` past the
  end is InvalidRangeError naming the size, and a malformed range (negative, reversed, not an int, a
  bool) is InvalidRangeError naming the key before any I/O step.
* ``read_ranges`` and a reader never mix versions: racing a writer that replaces the object, every
  answer is one version's bytes or ObjectChangedError; and no read (``read_buffer`` included) serves a
  version that a write, rename or delete which returned before it replaced.
* A streamed write (MULTI_PART bytes: several S3 parts) is visible only complete: a reader polling while
  a slow generator runs sees the previous object or the complete new one, and ``remove_orphans`` never
  touches it in flight. A stream that raises, or yields a chunk that is not bytes (a file's read that
  returns None included), wherever that happens, leaves nothing visible (the previous object stays) and
  nothing to reclaim, and its failure comes out of the write. A body of the wrong type, or a closed file, is
  InvalidBodyError before any I/O.
* A streamed ``write_if_absent`` has one winner among racers, or is refused with
  UnsupportedOperationError (before any I/O) where ``capabilities.streamed_conditional_write`` says so;
  a stream past ``capabilities.streamed_conditional_limit`` is refused, writing nothing.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from contract_tests.bodies import describe, make_body
from contract_tests.bulk_clauses import UNLIMITED_STEPS
from contract_tests.verdicts import Violation
from storage_adapter.errors import (
    InvalidBodyError,
    InvalidRangeError,
    NotFoundError,
    ObjectChangedError,
    UnsupportedOperationError,
)
from storage_adapter.faults import FaultKind, FaultPlan, injected
from storage_adapter.protocol import StorageAdapter
from storage_adapter.types import Support

# A streamed body of several S3 parts (5 MiB each), sent in chunks smaller than a part.
CHUNK = 2 * 1024 * 1024
MULTI_PART = 6 * CHUNK
# Racing writers and readers of one object: enough to overlap on every backend, few enough for a server.
RACERS = 4
RACE_ROUNDS = 12
SIZE = 64 * 1024

BAD_RANGES: tuple[tuple[Any, Any], ...] = (
    (-1, 2),
    (3, 2),
    (True, 2),
    (0, False),
    (1.0, 2),
    ("0", 1),
    (0, None),
)


def _chunks(body: bytes, pause_s: float = 0.0) -> Iterator[bytes]:
    """``body`` in CHUNK pieces, with a pause before each: a slow producer."""
    for offset in range(0, len(body), CHUNK):
        time.sleep(pause_s)
        yield body[offset : offset + CHUNK]


def _aborted(body: bytes, error: BaseException) -> Iterator[bytes]:
    """The first half of ``body`` (several chunks), then ``error``."""
    yield from _chunks(body[: len(body) // 2])
    raise error


class ProducerError(Exception):
    """What a failing producer raises: the error a write must let out."""


class _FailingFile(io.RawIOBase):
    """A binary file object that reads one chunk, then fails: its read raises OSError (``ends='raise'``),
    or returns None (``ends='none'``: a non-blocking stream with nothing ready yet, which is no end)."""

    def __init__(self, ends: str) -> None:
        super().__init__()
        self._ends, self._left = ends, [_SMALL_CHUNK]

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        if self._left:
            chunk = self._left.pop()
            buffer[: len(chunk)] = chunk
            return len(chunk)
        if self._ends == "raise":
            raise ProducerError("the producer's read failed")
        return None


def _raising(chunks: int) -> Iterator[bytes]:
    """``chunks`` small chunks, then ProducerError."""
    for _ in range(chunks):
        yield _SMALL_CHUNK
    raise ProducerError("the producer failed")


_SMALL_CHUNK = make_body("small-chunk", 1024)
# How a small streamed body fails, the error the write must raise, and a maker of a fresh such body.
_FAILING_BODIES: tuple[tuple[str, type[Exception], Callable[[], object]], ...] = (
    ("raises before its first chunk", ProducerError, lambda: _raising(0)),
    ("raises after a chunk", ProducerError, lambda: _raising(1)),
    ("yields a str first", InvalidBodyError, lambda: iter(["text"])),
    ("yields a str after a chunk", InvalidBodyError, lambda: iter([_SMALL_CHUNK, "text"])),
    ("is a file whose read raises after a chunk", ProducerError, lambda: _FailingFile("raise")),
    ("is a file whose read returns None after a chunk", InvalidBodyError, lambda: _FailingFile("none")),
)


def _io_steps(call: Callable[[], object]) -> list[str]:
    """The I/O steps (fault points) ``call()`` passes before it raises."""
    recorder = FaultPlan(FaultKind.BROKEN, skip=UNLIMITED_STEPS)
    with injected(recorder), pytest.raises(Exception):  # noqa: B017 - the caller checks the type
        call()
    return recorder.passed


def _version(tag: str) -> bytes:
    """A body of SIZE bytes that is the same byte throughout (its tag), so any mix of two is visible."""
    return tag.encode() * SIZE


class StreamClauses:
    """Ranged reads, readers, no-copy reads and streamed writes."""

    # -- ranges ---------------------------------------------------------------------------------------------
    def test_read_range_at_the_edges(self, adapter: StorageAdapter) -> None:
        """Slice semantics: [0, size), the last byte, [size, size) and [size, size + 5) (b""), an end past
        the object (clipped); a start past the end is InvalidRangeError naming the size. An empty
        object reads b"" from 0 and refuses 1."""
        body = make_body("edges", 1000)
        adapter.write("r", body)
        size = len(body)
        for start, end in (
            (0, size),
            (0, 1),
            (size - 1, size),
            (size, size),
            (size, size + 5),
            (5, size + 100),
            (3, 3),
            (0, 0),
            (17, 514),
        ):
            assert adapter.read_range("r", start, end) == body[start:end], (start, end)
        with pytest.raises(InvalidRangeError) as caught:
            adapter.read_range("r", size + 1, size + 2)
        assert caught.value.key == "r" and caught.value.size == size and str(size) in str(caught.value)
        adapter.write("empty", b"")
        assert adapter.read_range("empty", 0, 0) == b"" and adapter.read_range("empty", 0, 10) == b""
        with pytest.raises(InvalidRangeError):
            adapter.read_range("empty", 1, 1)
        assert adapter.read_ranges("r", [(0, 2), (size - 1, size + 9), (size, size), (4, 4)]) == [
            body[:2],
            body[-1:],
            b"",
            b"",
        ]
        assert adapter.read_ranges("r", []) == []
        for empty in ([], [(0, 0)]):  # no bytes asked for, but the object is: a missing one is still missing
            with pytest.raises(NotFoundError):
                adapter.read_ranges("missing", empty)

    @pytest.mark.parametrize("bad", BAD_RANGES, ids=repr)
    def test_a_malformed_range_is_refused_before_any_io(self, adapter: StorageAdapter, bad: Any) -> None:
        """InvalidRangeError (a ValueError) naming the key and the range, before any I/O step, from
        read_range and from read_ranges (one bad range among good ones)."""
        adapter.write("r", b"0123456789")
        calls: tuple[Callable[[], object], ...] = (
            lambda: adapter.read_range("r", *bad),
            lambda: adapter.read_ranges("r", [(0, 1), bad]),
        )
        for call in calls:
            steps = _io_steps(call)
            with pytest.raises(InvalidRangeError) as caught:
                call()
            assert isinstance(caught.value, ValueError) and caught.value.key == "r", caught.value
            assert steps == [], f"I/O before the refusal of {bad!r}: {steps}"

    def test_ranges_of_a_missing_object_are_not_found(self, adapter: StorageAdapter) -> None:
        """Even an empty range, and an empty list of ranges' neighbours: NotFoundError."""
        for call in (
            lambda: adapter.read_range("missing", 0, 0),
            lambda: adapter.read_range("missing", 0, 10),
            lambda: adapter.read_ranges("missing", [(0, 1), (2, 3)]),
            lambda: adapter.open_reader("missing"),
            lambda: adapter.read_buffer("missing"),
        ):
            with pytest.raises(NotFoundError):
                call()

    def test_read_ranges_come_from_one_version(self, adapter: StorageAdapter) -> None:
        """While writers replace the object with versions of one repeated byte each, every read_ranges
        answer is all one version's bytes, or ObjectChangedError: never parts of two."""
        adapter.write("v", _version("a"))
        stop = threading.Event()
        mixed: list[set[int]] = []
        answers = 0

        def replace() -> None:
            for round_ in range(RACE_ROUNDS):
                adapter.write("v", _version("bcdefghijklmnop"[round_ % 15]))
            stop.set()

        def read() -> int:
            seen = 0
            # Until the writer is done and this reader has had one answer (once the writes stop, a read
            # cannot meet a change): a loaded machine may let every read during the race meet one.
            while not stop.is_set() or not seen:
                try:
                    parts = adapter.read_ranges("v", [(0, 8), (SIZE // 2, SIZE // 2 + 8), (SIZE - 8, SIZE)])
                except ObjectChangedError:
                    continue
                if len(set(b"".join(parts))) != 1:
                    mixed.append(set(b"".join(parts)))
                seen += 1
            return seen

        with ThreadPoolExecutor(RACERS + 1) as pool:
            readers = [pool.submit(read) for _ in range(RACERS)]
            pool.submit(replace).result()
            answers = sum(r.result() for r in readers)
        assert not mixed, f"read_ranges mixed versions: byte sets {mixed[:5]}"
        assert answers > 0

    # -- readers and buffers -----------------------------------------------------------------------------
    def test_a_reader_reads_seeks_and_closes_like_a_file(self, adapter: StorageAdapter) -> None:
        """readinto/read/seek/tell, size and token (read_versioned's), read past the end gives b"",
        io.BufferedReader works over it, and a closed reader raises ValueError."""
        body = make_body("reader", 10_000)
        token = adapter.write("f", body)
        reader = adapter.open_reader("f")
        with reader:
            assert reader.size == len(body) and reader.token == token == adapter.read_versioned("f").token
            assert reader.readable() and reader.seekable() and reader.tell() == 0
            buffer = bytearray(100)
            assert reader.readinto(buffer) == 100 and bytes(buffer) == body[:100]
            assert reader.read(50) == body[100:150] and reader.tell() == 150
            assert reader.seek(-10, io.SEEK_END) == len(body) - 10 and reader.read() == body[-10:]
            assert reader.read(10) == b"" and reader.readinto(buffer) == 0
            reader.seek(5000)
            assert reader.seek(7, io.SEEK_CUR) == 5007 and reader.read(3) == body[5007:5010]
            reader.seek(len(body) + 50)
            assert reader.read() == b""
        assert reader.closed
        with pytest.raises(ValueError):
            reader.read(1)
        with pytest.raises(ValueError):
            reader.seek(0)
        with io.BufferedReader(adapter.open_reader("f"), buffer_size=4096) as buffered:
            assert buffered.read(3) == body[:3] and buffered.read() == body[3:]

    def test_a_reader_racing_a_replace_never_mixes_versions(self, adapter: StorageAdapter) -> None:
        """A reader opened on one version, read in halves around a replace (and after a delete): the
        second half is the opened version's bytes or ObjectChangedError, never the new version's."""
        adapter.write("v", _version("a"))
        for replace in (lambda: adapter.write("v", _version("b")), lambda: adapter.delete("v")):
            adapter.write("v", _version("a"))
            with adapter.open_reader("v") as reader:
                first = reader.read(SIZE // 2)
                replace()
                try:
                    second = reader.read()
                except ObjectChangedError:
                    second = None
            assert first == _version("a")[: SIZE // 2]
            assert second is None or second == _version("a")[SIZE // 2 :], "the reader mixed two versions"

    def test_read_buffer_is_the_object_without_a_copy(self, adapter: StorageAdapter) -> None:
        """A read-only buffer (memoryview, format B) of exactly the object's bytes."""
        body = make_body("buffer", 100_000)
        adapter.write("b", body)
        view = adapter.read_buffer("b")
        assert isinstance(view, memoryview) and view.readonly and view.format == "B"
        assert view.nbytes == len(body) and bytes(view) == body
        adapter.write("e", b"")
        assert bytes(adapter.read_buffer("e")) == b""

    def test_reads_never_serve_a_replaced_or_deleted_version(self, adapter: StorageAdapter) -> None:
        """Once a write, a rename onto the key or a delete has returned, every read started after it
        serves what it left: read_bytes, read_versioned, read_range, read_ranges, read_buffer and a reader
        opened after it give the new version's bytes (NotFoundError once deleted or renamed away), never
        the bytes of the version before; and a buffer taken earlier still holds its own version's bytes."""
        problems: list[str] = []
        reads: dict[str, Callable[[], bytes]] = {
            "read_bytes": lambda: adapter.read_bytes("k"),
            "read_versioned": lambda: adapter.read_versioned("k").data,
            "read_range": lambda: adapter.read_range("k", 0, SIZE),
            "read_ranges": lambda: b"".join(adapter.read_ranges("k", [(0, SIZE // 2), (SIZE // 2, SIZE)])),
            "read_buffer": lambda: bytes(adapter.read_buffer("k")),
            "open_reader": lambda: _read_whole(adapter, "k"),
        }

        def expect(step: str, body: bytes | None) -> None:
            for name, read in reads.items():
                try:
                    got: bytes | None = read()
                except NotFoundError:
                    got = None
                if got != body:
                    seen = "absent" if got is None else describe(got)
                    wanted = "absent" if body is None else describe(body)
                    problems.append(f"after {step}: {name} served {seen}, not {wanted}")

        adapter.write("k", _version("a"))
        expect("write a", _version("a"))
        kept = adapter.read_buffer("k")
        adapter.write("k", _version("b"))
        expect("write b over a", _version("b"))
        adapter.delete("k")
        expect("delete", None)
        adapter.write("k", _version("c"))
        expect("write c after the delete", _version("c"))
        adapter.write("other", _version("d"))
        adapter.rename("other", "k")
        expect("rename of d onto k", _version("d"))
        adapter.rename("k", "moved")
        expect("rename of k away", None)
        if bytes(kept) != _version("a"):
            problems.append("a buffer read before the replace no longer holds its own version's bytes")
        if problems:
            raise Violation("a read served a replaced or deleted version", "\n".join(problems))

    # -- streamed writes -----------------------------------------------------------------------------------
    def test_a_streamed_write_is_visible_only_complete(self, adapter: StorageAdapter) -> None:
        """A slow generator of MULTI_PART bytes replaces an object while a reader polls: it sees the old
        object or the complete new one, never a part, and remove_orphans(0) never touches the write in
        flight. The token returned is the one read_versioned reports; a file object streams the same."""
        old, new = make_body("old", 1000), make_body("new", MULTI_PART)
        adapter.write("s", old)
        seen: list[bytes | None] = []
        reclaimed = []
        done = threading.Event()

        def poll() -> None:
            while not done.is_set():
                seen.append(adapter.read_if_exists("s"))
                reclaimed.append(adapter.remove_orphans(0.0))

        with ThreadPoolExecutor(1) as pool:
            polling = pool.submit(poll)
            try:
                token = adapter.write("s", _chunks(new, pause_s=0.05))
            finally:
                done.set()
            polling.result()
        torn = [len(data or b"") for data in seen if data not in (old, new)]
        assert not torn, f"a reader saw a part of a streamed write: sizes {torn[:5]}"
        assert not any(reclaimed), f"remove_orphans reclaimed a write in flight: {reclaimed}"
        current = adapter.read_versioned("s")
        assert current.data == new, (
            f"after a streamed write the object holds {len(current.data)} bytes, not its {len(new)}"
        )
        assert current.token == token, (
            "a streamed write returned a token that is not the written object's\n"
            f"write returned {token!r}; read_versioned reports {current.token!r}"
        )
        assert adapter.write("file", io.BytesIO(new)) == adapter.read_versioned("file").token
        assert adapter.read_bytes("file") == new
        assert adapter.write("chunks", [bytearray(b"ab"), memoryview(b"cd"), b"", b"e"])
        assert adapter.read_bytes("chunks") == b"abcde"
        assert adapter.write("nothing", iter([])) and adapter.read_bytes("nothing") == b""

    @pytest.mark.parametrize("how", ["raises", "bad-chunk"])
    def test_an_aborted_stream_leaves_nothing_visible(self, adapter: StorageAdapter, how: str) -> None:
        """A stream that raises after several parts (its own error comes out) or yields a chunk that is
        not bytes (InvalidBodyError naming the key): a new key stays absent, an existing one keeps its
        bytes and token, listings show nothing new, and nothing is left to reclaim."""
        body = make_body("aborted", MULTI_PART)
        expected: type[BaseException] = RuntimeError if how == "raises" else InvalidBodyError
        kept = adapter.write("kept", b"previous")
        before = adapter.list()
        for key in ("fresh/key", "kept"):
            error = RuntimeError("the producer failed")
            bad_chunk: list[Any] = [*_chunks(body[: CHUNK * 3]), "text"]
            stream = _aborted(body, error) if how == "raises" else iter(bad_chunk)
            with pytest.raises(expected) as caught:
                adapter.write(key, stream)
            if how == "raises":
                assert caught.value is error or error in _causes(caught.value), caught.value
            else:
                assert getattr(caught.value, "key", None) == key
        assert not adapter.exists("fresh/key")
        assert adapter.read_versioned("kept").token == kept and adapter.read_bytes("kept") == b"previous"
        assert adapter.list() == before
        assert adapter.remove_orphans(0.0) == 0

    def test_a_stream_failing_anywhere_leaves_nothing_visible(self, adapter: StorageAdapter) -> None:
        """Every way a small streamed body can fail - raising before its first chunk or after one,
        yielding something that is not bytes first or after a chunk, a file object whose read raises, or
        whose read returns None (a non-blocking stream with nothing ready: not its end) - makes write,
        write_if_absent and write_if_match raise (the producer's own error, InvalidBodyError for what is
        not bytes, or UnsupportedOperationError where capabilities refuse streamed conditional writes),
        never return as if the body had ended: nothing new is visible, the existing object keeps its
        bytes and token, and nothing is left to reclaim."""
        kept = adapter.write("kept", b"previous")
        before = [(info.key, info.token) for info in adapter.list()]
        refused = adapter.capabilities.streamed_conditional_write is Support.UNSUPPORTED
        problems = []
        calls: dict[str, Callable[[Any], object]] = {
            "write('fresh/w')": lambda body: adapter.write("fresh/w", body),
            "write('kept')": lambda body: adapter.write("kept", body),
            "write_if_absent('fresh/c')": lambda body: adapter.write_if_absent("fresh/c", body),
            "write_if_match('kept')": lambda body: adapter.write_if_match("kept", body, kept),
        }
        for how, expected, make in _FAILING_BODIES:
            for name, call in calls.items():
                conditional = not name.startswith("write(")
                try:
                    result = call(make())
                except Exception as exc:  # judged: the body's own failure must come out
                    wanted = UnsupportedOperationError if refused and conditional else expected
                    if not any(isinstance(e, wanted) for e in (exc, *_causes(exc))):
                        problems.append(f"{name}, a body that {how}: raised {exc!r}, not {wanted.__name__}")
                else:
                    problems.append(
                        f"{name}, a body that {how}: returned {result!r}, as if the body had ended"
                    )
            after = [(info.key, info.token) for info in adapter.list()]
            if after != before or adapter.read_bytes("kept") != b"previous":
                problems.append(f"after the bodies that {how}: listed {after}, before {before}")
                before = after
        if adapter.remove_orphans(0.0):
            problems.append("failed streams left something for remove_orphans(0) to reclaim")
        if problems:
            raise Violation("a failed stream was published or misreported", "\n".join(problems))

    # ids by type for the object(): its repr holds an address, which would differ between the processes
    # of a distributed run (pytest-xdist refuses to start when their collections differ).
    @pytest.mark.parametrize(
        "body",
        [3, None, object(), {"a": b"b"}, "closed-file", "text-file"],
        ids=lambda body: "object" if type(body) is object else repr(body),
    )
    def test_a_bad_body_is_refused_before_any_io(self, adapter: StorageAdapter, body: Any) -> None:
        """Not bytes, str, a file object or an iterable of bytes, a closed file object or one in text mode:
        InvalidBodyError (a TypeError) naming the key, before any I/O step, from every write."""
        if body == "closed-file":
            body = io.BytesIO(b"x")
            body.close()
        elif body == "text-file":
            body = io.StringIO("text")
        adapter.write("present", b"p")
        token = adapter.read_versioned("present").token
        calls: tuple[Callable[[], object], ...] = (
            lambda: adapter.write("k", body),
            lambda: adapter.write_if_absent("k", body),
            lambda: adapter.write_if_match("present", body, token),
        )
        for call in calls:
            steps = _io_steps(call)
            with pytest.raises(InvalidBodyError) as caught:
                call()
            assert isinstance(caught.value, TypeError) and caught.value.key in ("k", "present")
            assert steps == [], f"I/O before the refusal: {steps}"
        assert not adapter.exists("k") and adapter.read_bytes("present") == b"p"

    def test_a_streamed_create_has_one_winner_or_is_refused(self, adapter: StorageAdapter) -> None:
        """As ``capabilities.streamed_conditional_write`` declares: UNSUPPORTED refuses a streamed
        write_if_absent / write_if_match with UnsupportedOperationError before any I/O, writing nothing;
        otherwise racers creating one key from streams get exactly one winner (its bytes stored), and a
        streamed CAS succeeds on the current token and returns None on a stale one. A stream past
        ``streamed_conditional_limit`` is refused, writing nothing."""
        caps = adapter.capabilities
        if caps.streamed_conditional_write is Support.UNSUPPORTED:
            refused: tuple[Callable[[], object], ...] = (
                lambda: adapter.write_if_absent("c", _chunks(b"x")),
                lambda: adapter.write_if_match("c", _chunks(b"x"), '"t"'),
            )
            for call in refused:
                assert _io_steps(call) == []
                with pytest.raises(UnsupportedOperationError):
                    call()
            assert not adapter.exists("c")
            return
        bodies = [make_body(f"racer-{i}", 3 * CHUNK // 2) for i in range(RACERS)]
        barrier = threading.Barrier(RACERS)

        def create(i: int) -> str | None:
            barrier.wait()
            return adapter.write_if_absent("c", _chunks(bodies[i], pause_s=0.01))

        with ThreadPoolExecutor(RACERS) as pool:
            tokens = list(pool.map(create, range(RACERS)))
        winners = [i for i, token in enumerate(tokens) if token is not None]
        assert len(winners) == 1, f"{len(winners)} winners"
        current = adapter.read_versioned("c")
        assert current.data == bodies[winners[0]] and current.token == tokens[winners[0]], (
            "the winner of a streamed create does not hold the object\n"
            f"winner's token {tokens[winners[0]]!r}; read_versioned reports {current.token!r}"
        )
        replaced = adapter.write_if_match("c", io.BytesIO(b"next"), current.token)
        assert replaced is not None, (
            "a streamed CAS with the current token was refused\n"
            f"token {current.token!r} (read_versioned's own) answered None"
        )
        after = adapter.read_versioned("c").token
        assert after == replaced, (
            "a streamed CAS returned a token that is not the written object's\n"
            f"write_if_match returned {replaced!r}; read_versioned reports {after!r}"
        )
        assert adapter.write_if_match("c", _chunks(b"stale"), current.token) is None
        assert adapter.read_bytes("c") == b"next"
        if caps.streamed_conditional_limit is not None:
            too_long = make_body("too-long", caps.streamed_conditional_limit + 1)
            with pytest.raises(UnsupportedOperationError):
                adapter.write_if_absent("long", _chunks(too_long))
            assert not adapter.exists("long")


def _read_whole(adapter: StorageAdapter, key: str) -> bytes:
    """``key``'s bytes through a reader opened now."""
    with adapter.open_reader(key) as reader:
        return reader.read()


def _causes(error: BaseException) -> list[BaseException]:
    """``error``'s chain of causes and contexts."""
    chain: list[BaseException] = []
    while (error := error.__cause__ or error.__context__) is not None and error not in chain:  # type: ignore[assignment]
        chain.append(error)
    return chain
