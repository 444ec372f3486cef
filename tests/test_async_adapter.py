"""The async twin, used directly from asyncio (``asyncio.run``; no pytest-asyncio): concurrency from one
loop, the local CAS under many tasks without blocking the loop, validation before any I/O, typed and
scrubbed errors, faults, identity, and the async twin a third-party driver gets for free. The contract
itself runs against the twin in tests/test_contract_async.py."""

from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import io
import json
import os
import pickle
import threading
import time
import traceback
import uuid
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from storage_adapter import (
    AsyncObjectStorageAdapter,
    AsyncStorageAdapter,
    open_adapter,
    open_async_adapter,
)
from storage_adapter.builtin_backends import LOCAL
from storage_adapter.errors import (
    BackendUnavailableError,
    InvalidBodyError,
    InvalidKeyError,
    InvalidRangeError,
    NotFoundError,
    PermissionDeniedError,
    StorageError,
)
from storage_adapter.faults import FaultKind, FaultPlan, injected
from storage_adapter.local_driver import LocalDriver
from storage_adapter.registry import Backend, register_backend, unregister_backend
from storage_adapter.threaded import THREAD_WORKERS, ThreadedAsyncDriver


@pytest.fixture(params=["memory", "local"])
def twin(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncObjectStorageAdapter:
    url = f"memory://async-{uuid.uuid4().hex[:8]}" if request.param == "memory" else f"file://{tmp_path}"
    return open_async_adapter(url)


class Ticker:
    """A task that ticks every ``period`` s: the largest gap between ticks shows how long the loop was
    blocked."""

    def __init__(self, period: float = 0.005) -> None:
        self.period, self.ticks, self.max_gap = period, 0, 0.0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(self.period)
            now = time.perf_counter()
            self.max_gap, last, self.ticks = max(self.max_gap, now - last), now, self.ticks + 1

    def __enter__(self) -> Ticker:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


def test_the_twin_implements_the_written_protocol(twin: AsyncObjectStorageAdapter) -> None:
    assert isinstance(twin, AsyncStorageAdapter)
    assert isinstance(twin.child("p"), AsyncObjectStorageAdapter)


def test_round_trip_and_every_method(twin: AsyncObjectStorageAdapter) -> None:
    async def scenario() -> None:
        token = await twin.write("d/a", b"one")
        assert await twin.read_versioned("d/a") == type(await twin.read_versioned("d/a"))(b"one", token)
        assert await twin.read_text("d/a") == "one"
        assert await twin.read_if_exists("d/none") is None
        assert await twin.exists("d/a") and not await twin.exists("d")
        assert await twin.write_if_absent("d/a", b"two") is None
        assert await twin.write_if_match("d/a", b"x", "stale-token") is None
        moved = await twin.write_if_match("d/a", b"three", token)
        assert moved and await twin.read_bytes("d/a") == b"three"
        await twin.write("d/e/f", "text")
        assert [i.key for i in await twin.list("d")] == ["d/a", "d/e/f"]
        assert [i.key async for i in twin.iter_list("d")] == ["d/a", "d/e/f"]
        pages = [page async for page in twin.list_pages("d")]
        assert [i.key for page in pages for i in page] == ["d/a", "d/e/f"]
        listing = await twin.list_dir("d")
        assert ([o.key for o in listing.objects], listing.prefixes) == (["d/a"], ("d/e",))
        await twin.rename("d/a", "d/b")
        assert not await twin.exists("d/a") and await twin.read_bytes("d/b") == b"three"
        assert await twin.delete_many(["d/b", "d/b", "d/missing"]) == 2
        await twin.delete("d/missing")
        assert await twin.delete_prefix("d") == 1
        assert await twin.list() == []
        assert await twin.remove_orphans(0) == 0
        with pytest.raises(NotFoundError):
            await twin.read_bytes("d/a")
        with pytest.raises(NotFoundError):
            await twin.rename("d/a", "d/z")
        with pytest.raises(StorageError):
            await twin.delete_prefix("")

    asyncio.run(scenario())


def test_many_concurrent_calls_from_one_loop(twin: AsyncObjectStorageAdapter) -> None:
    """500 writes, then 500 reads and a listing, all in flight at once from one event loop."""

    async def scenario() -> None:
        tokens = await asyncio.gather(*(twin.write(f"k/{i:03}", f"v{i}") for i in range(500)))
        assert len(set(tokens)) == 500
        bodies = await asyncio.gather(*(twin.read_bytes(f"k/{i:03}") for i in range(500)), twin.list("k"))
        assert bodies[:500] == [f"v{i}".encode() for i in range(500)]
        assert [i.token for i in bodies[500]] == tokens  # type: ignore[union-attr]

    asyncio.run(scenario())


def test_validation_before_any_io(twin: AsyncObjectStorageAdapter) -> None:
    """A bad key, prefix, body or token raises a typed error naming it, and no request is made (a fault
    plan that fails the first I/O step never fires)."""
    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: twin.read_bytes("a//b"),
        lambda: twin.read_versioned("../x"),
        lambda: twin.exists("/abs"),
        lambda: twin.write("a/b#123", b"x"),
        lambda: twin.write_if_absent("", b"x"),
        lambda: twin.write_if_match("a\x00b", b"x", "t"),
        lambda: twin.delete("a/./b"),
        lambda: twin.delete_many(["ok", "a//b"]),
        lambda: twin.rename("ok", "a\\b"),
        lambda: twin.list("a//"),
        lambda: twin.list_dir("/a"),
        lambda: twin.delete_prefix("../"),
    ]
    with injected(FaultPlan(FaultKind.BROKEN)) as plan:
        for call in calls:
            with pytest.raises(InvalidKeyError) as info:
                asyncio.run(call())
            assert twin.backend in str(info.value)
        with pytest.raises(InvalidKeyError):
            twin.list_pages("a//")  # at the call, not at the first anext
        with pytest.raises(InvalidKeyError):
            twin.iter_list("a//")
        with pytest.raises(TypeError):
            asyncio.run(twin.write("k", 42))  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            asyncio.run(twin.write_if_match("k", b"x", ""))
        with pytest.raises(TypeError):
            asyncio.run(twin.delete_many("one-str"))
    assert plan.fired == [] and plan.passed == []


@pytest.mark.parametrize("kind", [FaultKind.UNAVAILABLE, FaultKind.DENIED, FaultKind.PANIC])
def test_faults_follow_the_call_and_are_typed(twin: AsyncObjectStorageAdapter, kind: FaultKind) -> None:
    """A fault injected in the caller's thread reaches the async driver (on the loop or in a worker
    thread), and comes back as the typed error the sync adapter raises for it (a panic included)."""
    expected = {
        FaultKind.UNAVAILABLE: BackendUnavailableError,
        FaultKind.DENIED: PermissionDeniedError,
        FaultKind.PANIC: StorageError,
    }[kind]
    asyncio.run(twin.write("k", b"v"))
    for call in (lambda: twin.read_bytes("k"), lambda: twin.write("k", b"w"), lambda: twin.list("")):
        with injected(FaultPlan(kind)) as plan, pytest.raises(expected) as info:
            asyncio.run(call())
        assert plan.fired, "the fault plan did not reach the async driver"
        assert twin.backend in str(info.value)
    assert asyncio.run(twin.read_bytes("k")) == b"v"


def test_identity_pickling_and_equality(twin: AsyncObjectStorageAdapter) -> None:
    clone = pickle.loads(pickle.dumps(twin))
    assert clone == twin and hash(clone) == hash(twin) and isinstance(clone, AsyncObjectStorageAdapter)
    assert twin.child("a").child("b") == twin.child("a/b")
    sync = open_adapter(twin.url)
    assert sync != twin  # a sync adapter is not its async twin
    assert twin.capabilities == sync.capabilities
    asyncio.run(twin.write("shared", b"both"))
    assert sync.read_bytes("shared") == b"both"


def test_errors_never_quote_a_secret() -> None:
    """An S3 twin whose endpoint refuses connections: the transient error names key and backend, and
    neither it nor its traceback quotes the secret key."""
    secret = "s3cr3t-VALUE-that-must-not-leak"
    twin = open_async_adapter(
        "s3://bucket/p",
        endpoint="http://127.0.0.1:9",
        access_key_id="AKIDEXAMPLE",
        secret_access_key=secret,
        allow_http=True,
        max_retries=0,
        connect_timeout_s=1,
        retry_timeout_s=1,
    )
    assert secret not in repr(twin) and secret not in twin.url
    with pytest.raises(BackendUnavailableError) as info:
        asyncio.run(twin.read_bytes("k"))
    assert "'k'" in str(info.value) and "s3" in str(info.value)
    assert secret not in "".join(traceback.format_exception(info.value))


@pytest.fixture
def held_directory_lock(tmp_path: Path) -> Iterator[threading.Event]:
    """The local mutation lock of ``tmp_path/d`` held by a foreign thread until the event is set."""
    (tmp_path / "d").mkdir()
    release, held = threading.Event(), threading.Event()

    def hold() -> None:
        fd = os.open(tmp_path / "d", os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held.set()
            release.wait(30)
        finally:
            os.close(fd)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    held.wait(10)
    yield release
    release.set()
    holder.join(10)


def test_a_local_write_waiting_on_its_lock_does_not_block_the_loop(
    tmp_path: Path, held_directory_lock: threading.Event
) -> None:
    """While another holder keeps the directory lock, 40 local mutations wait for it (in worker
    threads, more than the pool's size) and the loop keeps ticking; once the lock is released they all
    finish, with exactly one winner of the create."""
    twin = open_async_adapter(f"file://{tmp_path}")

    async def scenario() -> tuple[Ticker, list[str | None]]:
        with Ticker() as ticker:
            racers = [asyncio.ensure_future(twin.write_if_absent("d/k", f"r{i}")) for i in range(40)]
            await asyncio.sleep(0.5)
            assert not any(r.done() for r in racers), "a mutation went through a held directory lock"
            ticks_while_blocked = ticker.ticks
            asyncio.get_running_loop().call_soon(held_directory_lock.set)
            outcomes = await asyncio.gather(*racers)
        assert ticks_while_blocked >= 20, f"the loop ticked {ticks_while_blocked} times in 0.5 s"
        return ticker, outcomes

    ticker, outcomes = asyncio.run(scenario())
    assert THREAD_WORKERS < 40 and sum(o is not None for o in outcomes) == 1
    assert ticker.max_gap < 0.25, f"the loop stalled for {ticker.max_gap:.3f} s"


def test_local_cas_one_winner_and_exact_increments_with_many_tasks(tmp_path: Path) -> None:
    """64 tasks race write_if_absent on each of 5 keys (one winner each), then 32 tasks increment one
    counter by CAS (no update lost), while a ticker task keeps ticking."""
    twin = open_async_adapter(f"file://{tmp_path}")

    async def increment(times: int) -> int:
        done = attempts = 0
        while done < times:
            attempts += 1
            current = await twin.read_versioned("counter")
            n = json.loads(current.data)["n"]
            if await twin.write_if_match("counter", json.dumps({"n": n + 1}), current.token):
                done += 1
        return attempts

    async def scenario() -> Ticker:
        with Ticker() as ticker:
            for r in range(5):
                outcomes = await asyncio.gather(
                    *(twin.write_if_absent(f"race/{r}", f"t{i}") for i in range(64))
                )
                winners = [i for i, o in enumerate(outcomes) if o is not None]
                assert len(winners) == 1, f"race/{r}: winners {winners}"
                assert await twin.read_text(f"race/{r}") == f"t{winners[0]}"
            await twin.write("counter", json.dumps({"n": 0}))
            await asyncio.gather(*(increment(5) for _ in range(32)))
            assert json.loads(await twin.read_bytes("counter")) == {"n": 160}
        assert ticker.ticks > 0
        return ticker

    ticker = asyncio.run(scenario())
    assert ticker.max_gap < 0.5, f"the loop stalled for {ticker.max_gap:.3f} s"


class _RecordingDriver(LocalDriver):
    """A third-party driver with no async twin of its own: records the thread of each read."""

    threads: set[str] = set()

    def get(self, key: str) -> bytes:
        _RecordingDriver.threads.add(threading.current_thread().name)
        return super().get(key)


def test_a_third_party_driver_gets_an_async_twin_in_worker_threads(tmp_path: Path) -> None:
    backend = Backend(
        name="recording",
        scheme="recording",
        capabilities=dataclasses.replace(LOCAL.capabilities, backend="recording"),
        locate=lambda parts, url: (str(tmp_path), ""),
        driver=_RecordingDriver,
    )
    register_backend(backend)
    try:
        twin = open_async_adapter("recording://x")
        assert isinstance(twin._async, ThreadedAsyncDriver)

        async def scenario() -> list[bytes]:
            await twin.write("a", b"1")
            return await asyncio.gather(*(twin.read_bytes("a") for _ in range(8)))

        assert asyncio.run(scenario()) == [b"1"] * 8
        assert _RecordingDriver.threads and all(
            name.startswith("storage-adapter-async") for name in _RecordingDriver.threads
        )
        with pytest.raises(NotFoundError, match="recording"):
            asyncio.run(twin.read_bytes("missing"))
    finally:
        unregister_backend("recording")


def test_ranged_reads_reader_and_buffer(twin: AsyncObjectStorageAdapter) -> None:
    body = bytes(range(256)) * 64  # 16 KiB

    async def scenario() -> None:
        token = await twin.write("obj", body)
        assert await twin.read_range("obj", 10, 20) == body[10:20]
        assert await twin.read_range("obj", 16000, 10**9) == body[16000:]  # the end is clipped
        assert await twin.read_range("obj", len(body), len(body) + 5) == b""
        assert await twin.read_ranges("obj", [(0, 3), (100, 103), (5, 5)]) == [body[:3], body[100:103], b""]
        buffer = await twin.read_buffer("obj")
        assert isinstance(buffer, memoryview) and buffer.readonly and bytes(buffer) == body
        async with await twin.open_reader("obj") as reader:
            assert (reader.size, reader.token) == (len(body), token)
            assert await reader.read(4) == body[:4] and reader.tell() == 4
            reader.seek(-8, 2)
            assert await reader.read() == body[-8:]
            into = bytearray(6)
            assert await reader.read_at(1000, into) == 6 and bytes(into) == body[1000:1006]
        assert reader.closed
        with pytest.raises(ValueError):
            await reader.read(1)
        with pytest.raises(InvalidRangeError, match="16384 bytes"):
            await twin.read_range("obj", len(body) + 1, len(body) + 2)
        with pytest.raises(NotFoundError):
            await twin.open_reader("missing")
        with pytest.raises(NotFoundError):
            await twin.read_buffer("missing")

    asyncio.run(scenario())


def test_bad_ranges_and_bodies_are_refused_before_any_io(twin: AsyncObjectStorageAdapter) -> None:
    closed = io.BytesIO(b"x")
    closed.close()
    with injected(FaultPlan(FaultKind.BROKEN)) as plan:
        for ranges in ([(5, 2)], [(-1, 3)], [(True, 3)], "ab", [(1,)]):
            with pytest.raises(InvalidRangeError):
                asyncio.run(twin.read_ranges("obj", ranges))  # type: ignore[arg-type]
        with pytest.raises(InvalidRangeError):
            asyncio.run(twin.read_range("obj", 3, 1))
        for bad in (42, closed, {"a": b"b"}):
            with pytest.raises(InvalidBodyError, match="'k'"):
                asyncio.run(twin.write("k", bad))  # type: ignore[arg-type]
    assert plan.fired == [] and plan.passed == []


def test_streamed_writes_are_read_off_the_loop_and_atomic(twin: AsyncObjectStorageAdapter) -> None:
    """A slow generator body (each chunk 20 ms) is consumed in a worker thread while the loop ticks; a
    failing one leaves the previous object; a bad chunk is InvalidBodyError and writes nothing."""

    def slow_chunks() -> Iterator[bytes]:
        for i in range(10):
            time.sleep(0.02)
            yield bytes([i]) * 1000

    def failing() -> Iterator[bytes]:
        yield b"partial"
        raise RuntimeError("the producer failed")

    async def scenario() -> Ticker:
        with Ticker() as ticker:
            token = await twin.write("s", slow_chunks())
            assert await twin.read_bytes("s") == b"".join(bytes([i]) * 1000 for i in range(10))
            assert (await twin.read_versioned("s")).token == token
            assert (
                await twin.write("f", io.BytesIO(b"from a file"))
                and await twin.read_bytes("f") == b"from a file"
            )
            with pytest.raises(RuntimeError, match="producer failed"):
                await twin.write("s", failing())
            with pytest.raises(InvalidBodyError):
                await twin.write("s", iter([b"ok", "not bytes"]))  # type: ignore[list-item]
            assert (await twin.read_versioned("s")).token == token
        return ticker

    ticker = asyncio.run(scenario())
    assert ticker.ticks >= 10 and ticker.max_gap < 0.25, (ticker.ticks, ticker.max_gap)


def test_the_async_protocol_mirrors_the_sync_one_method_for_method() -> None:
    """Every member of StorageAdapter is in AsyncStorageAdapter with the same parameters (a method added to
    one protocol and not the other fails here), and the async adapter has each of them."""
    import inspect

    from storage_adapter import StorageAdapter

    def members(protocol: type) -> dict[str, object]:
        return {
            name: value
            for name, value in vars(protocol).items()
            if not name.startswith("_") and (callable(value) or isinstance(value, property))
        }

    sync, twin = members(StorageAdapter), members(AsyncStorageAdapter)
    assert sorted(sync) == sorted(twin)
    for name, member in sync.items():
        if isinstance(member, property):
            assert isinstance(twin[name], property), name
            continue
        assert list(inspect.signature(member).parameters) == list(  # type: ignore[arg-type]
            inspect.signature(twin[name]).parameters  # type: ignore[arg-type]
        ), name
        assert callable(getattr(AsyncObjectStorageAdapter, name)), name


def test_whole_reads_of_every_size_in_one_await() -> None:
    """read_bytes is one ranged GET past any end; the empty object (which no range can name, so the
    store refuses it) is read by the plain GET instead. Every size reads back exactly, and a missing key
    stays NotFoundError (on S3: the async contract on SeaweedFS)."""
    from obstore.store import MemoryStore

    from storage_adapter.builtin_backends import MEMORY

    twin = open_async_adapter(store=MemoryStore(), capabilities=MEMORY.capabilities)
    bodies = {
        f"k{size}": bytes(range(256)) * (size // 256) + b"x" * (size % 256)
        for size in (0, 1, 1024, 1024 * 1024 + 3)
    }

    async def scenario() -> None:
        for key, body in bodies.items():
            await twin.write(key, body)
        assert [await twin.read_bytes(key) for key in bodies] == list(bodies.values())
        assert [bytes(await twin.read_buffer(key)) for key in bodies] == list(bodies.values())
        with pytest.raises(NotFoundError):
            await twin.read_bytes("missing")
        with pytest.raises(NotFoundError):
            await twin.read_buffer("missing")

    asyncio.run(scenario())


def test_ranged_reads_of_an_obstore_store_are_awaited_on_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """On memory and S3 the twin's ranged reads, its reader and its no-copy read are obstore's async
    calls, awaited on the caller's loop: not one of them goes to a worker thread. They follow the sync
    driver's read plan (one version, sizes applied): a reader whose object is replaced mid-read raises
    ObjectChangedError, ranges past the end are clipped or named, a missing key is NotFoundError (on S3:
    the async contract on SeaweedFS)."""
    from obstore.store import MemoryStore

    from storage_adapter import threaded
    from storage_adapter.builtin_backends import MEMORY
    from storage_adapter.errors import InvalidRangeError, ObjectChangedError

    offloaded: list[object] = []

    class CountingPool(ThreadPoolExecutor):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            offloaded.append(fn)
            return super().submit(fn, *args, **kwargs)

    monkeypatch.setattr(threaded, "_POOL", CountingPool(max_workers=2))
    twin = open_async_adapter(store=MemoryStore(), capabilities=MEMORY.capabilities)
    body = bytes(range(256)) * 64

    async def scenario() -> None:
        await twin.write("obj", body)
        assert await twin.read_range("obj", 10, 20) == body[10:20]
        assert await twin.read_range("obj", len(body), len(body) + 5) == b""
        assert await twin.read_ranges("obj", [(0, 3), (16000, 10**9), (5, 5)]) == [
            body[:3],
            body[16000:],
            b"",
        ]
        with pytest.raises(InvalidRangeError, match=str(len(body))):
            await twin.read_range("obj", len(body) + 1, len(body) + 2)
        with pytest.raises(NotFoundError):
            await twin.read_range("missing", 0, 1)
        assert bytes(await twin.read_buffer("obj")) == body
        async with await twin.open_reader("obj") as reader:
            assert reader.size == len(body)
            assert await reader.read(100) == body[:100]
            await twin.write("obj", b"replaced")
            with pytest.raises(ObjectChangedError):
                await reader.read(100)

    asyncio.run(scenario())
    assert offloaded == []


def test_an_abandoned_local_listing_closes_cleanly_at_loop_shutdown(tmp_path: Path) -> None:
    """A listing left after its first item or page is closed by the loop's shutdown (and by its
    finalizer): once, with nothing logged. Its close used to await a worker thread, so the second close
    found it "already running" and the pending close task was destroyed with the loop."""
    import subprocess
    import sys

    code = f"""
import asyncio
from storage_adapter import open_async_adapter
async def main():
    twin = open_async_adapter({tmp_path.as_uri()!r})
    for i in range(5):
        await twin.write(f"p/{{i}}", b"x")
    items = twin.iter_list("p")
    await anext(items)
    pages = twin.list_pages("p")
    await anext(pages)
asyncio.run(main())
print("done")
"""
    ran = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0 and ran.stdout.strip() == "done", ran.stderr
    assert ran.stderr == "", ran.stderr
