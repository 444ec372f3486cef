"""Bad input to the entry points of issue 20 (ranges, readers, bodies, tokens, S3 URLs, the fsspec
filesystem), found by an adversarial review: each gets a typed error before any I/O, and nothing
partial or wrong becomes visible. Memory and local, sync and async."""

from __future__ import annotations

import asyncio
import io
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from storage_adapter import open_adapter, open_async_adapter
from storage_adapter.errors import (
    ConfigurationError,
    InvalidArgumentError,
    InvalidBodyError,
    InvalidKeyError,
    InvalidRangeError,
    InvalidTokenError,
    NotFoundError,
    StorageError,
)
from storage_adapter.protocol import StorageAdapter

BODY = b"0123456789"


@pytest.fixture(params=["memory", "local"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return f"memory://bad-input-{id(request)}" if request.param == "memory" else tmp_path.as_uri()


@pytest.fixture
def adapter(url: str) -> Iterator[StorageAdapter]:
    adapter = open_adapter(url)
    adapter.write("obj", BODY)
    yield adapter


@pytest.mark.parametrize("end", [2**63, 2**64, 2**70])
def test_a_range_end_past_any_size_is_clipped(adapter: StorageAdapter, url: str, end: int) -> None:
    assert adapter.read_range("obj", 0, end) == BODY
    assert adapter.read_range("obj", 4, end) == BODY[4:]
    assert adapter.read_ranges("obj", [(0, 1), (0, end)]) == [BODY[:1], BODY]
    with pytest.raises(InvalidRangeError) as refused:
        adapter.read_range("obj", end, end + 1)
    assert refused.value.size == len(BODY)

    async def twin() -> None:
        twin = open_async_adapter(url)
        assert await twin.read_range("obj", 3, end) == BODY[3:]
        with pytest.raises(InvalidRangeError):
            await twin.read_range("obj", end, end + 1)

    asyncio.run(twin())


def test_readers_refuse_offsets_and_buffers_io_refuses(adapter: StorageAdapter, url: str) -> None:
    with adapter.open_reader("obj") as reader:
        for offset in (1.5, float("nan"), "1"):
            with pytest.raises(TypeError):
                reader.seek(offset)  # type: ignore[arg-type]
        assert reader.tell() == 0
        for buffer in (bytes(4), memoryview(bytearray(8))[::2]):
            with pytest.raises(TypeError):
                reader.readinto(buffer)
        assert reader.read(3) == BODY[:3]

    async def twin() -> None:
        async with await open_async_adapter(url).open_reader("obj") as reader:
            with pytest.raises(ValueError):
                await reader.read_at(-3, bytearray(2))
            with pytest.raises(TypeError):
                await reader.read_at(1.5, bytearray(2))  # type: ignore[arg-type]
            with pytest.raises(TypeError):
                await reader.read_at(0, bytes(2))
            with pytest.raises(TypeError):
                reader.seek(2.5)  # type: ignore[arg-type]
            assert await reader.read_at(2, buf := bytearray(3)) == 3 and buf == BODY[2:5]

    asyncio.run(twin())


def _write_only(tmp_path: Path) -> Any:
    return open(tmp_path / "write-only", "wb")


@pytest.mark.parametrize("kind", ["surrogate str", "write-only file", "finished future", "anext awaitable"])
def test_bodies_that_are_not_bodies_are_refused_and_write_nothing(
    adapter: StorageAdapter, url: str, tmp_path: Path, kind: str
) -> None:
    """A finished future and an async generator's pending ``__anext__()`` are iterable (their
    ``__await__``): before this fix they were written as an empty body, replacing the object."""

    async def gen() -> Any:
        yield b"zz"

    def body(loop: asyncio.AbstractEventLoop) -> Any:
        if kind == "surrogate str":
            return "\udc80"
        if kind == "write-only file":
            return _write_only(tmp_path)
        if kind == "finished future":
            future = loop.create_future()
            future.set_result(b"zz")
            return future
        return gen().__anext__()

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        twin = open_async_adapter(url)
        for write in (adapter.write, adapter.write_if_absent, twin.write, twin.write_if_absent):
            for key in ("obj", "new"):
                data = body(loop)
                try:
                    with pytest.raises(InvalidBodyError, match=key):
                        result = write(key, data)
                        if asyncio.iscoroutine(result):
                            await result
                finally:
                    if hasattr(data, "close"):
                        data.close()
        assert adapter.read_bytes("obj") == BODY and not adapter.exists("new")

    asyncio.run(scenario())


@pytest.mark.parametrize("token", [None, 7, b"x", "", "*", '"a\nb"', "\x00", '"\udc80"', '"é"', "t" * 1025])
def test_malformed_tokens_are_typed_errors_before_any_io(adapter: StorageAdapter, token: Any) -> None:
    token_now = adapter.read_versioned("obj").token
    with pytest.raises(InvalidTokenError, match="obj") as refused:
        adapter.write_if_match("obj", b"new", token)
    assert isinstance(refused.value, (StorageError, TypeError, ValueError))
    assert refused.value.backend == adapter.backend
    assert adapter.read_versioned("obj").token == token_now


@pytest.mark.parametrize(
    ("url", "endpoint"),
    [
        ("s3://bu ck et/p", None),
        ("s3://b:99999/p", None),
        ("s3://-bucket/p", None),
        ("s3://ok/p", "http://999.999.999.999"),
        ("s3://ok/p", "http://a..b:9000"),
        ("s3://ok/p", "http://[1::2::3]"),
    ],
)
def test_s3_bucket_and_endpoint_hosts_obstore_would_panic_on_are_refused(
    url: str, endpoint: str | None
) -> None:
    options = {"endpoint": endpoint} if endpoint else {}
    with pytest.raises(ConfigurationError):
        open_adapter(url, access_key_id="k", secret_access_key="s", **options)


def test_a_listing_limit_past_sys_maxsize_is_no_limit(adapter: StorageAdapter) -> None:
    assert [info.key for info in adapter.iter_list("", limit=2**70)] == ["obj"]


def test_fsspec_refuses_what_would_truncate_or_misreport(adapter: StorageAdapter) -> None:
    fs = adapter.to_fsspec()
    for block_size in (-1, 0, "x", True):
        with pytest.raises(InvalidArgumentError):
            fs.open("obj", "rb", block_size=block_size)
        with pytest.raises(InvalidArgumentError):
            adapter.to_fsspec(block_size=block_size)
    with pytest.raises(InvalidArgumentError):
        fs.open("obj", "rb", cache_type="bogus")
    for start, end in ((5, 3), (None, 0), (0, 0)):
        with pytest.raises(NotFoundError):
            fs.cat_file("missing", start, end)
        assert fs.cat_file("obj", start, end) == b""
    with pytest.raises(InvalidRangeError):
        fs.cat_file("obj", start="1")
    with pytest.raises(InvalidArgumentError):
        fs.pipe_file("other", b"x", mode="bogus")
    with pytest.raises(StorageError):
        fs.pipe({"ok1": b"a", "../bad": b"b"})
    assert not adapter.exists("ok1") and not adapter.exists("other")
    fs.cp_file("obj", "copy")
    fs.mv("copy", "moved")
    assert adapter.read_bytes("moved") == BODY and not adapter.exists("copy")
    with fs.open("obj", "rb", block_size=3, cache_type="readahead") as f:
        assert f.read() == BODY
    assert isinstance(io.BytesIO(fs.cat_file("obj")).read(), bytes)


def test_other_arguments_are_typed_errors_before_any_io(adapter: StorageAdapter, url: str) -> None:
    for keys in (None, 5, "abc", b"ab"):
        with pytest.raises(InvalidArgumentError, match=adapter.backend):
            adapter.delete_many(keys)  # type: ignore[arg-type]
    for min_age in ("x", -1, float("nan"), float("inf"), 10**400, True):
        with pytest.raises(InvalidArgumentError):
            adapter.remove_orphans(min_age)  # type: ignore[arg-type]
    for encoding in ("no-such-codec", "base64", None):
        with pytest.raises(InvalidArgumentError):
            adapter.read_text("obj", encoding)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):
            adapter.read_text("missing", encoding)  # type: ignore[arg-type]
    assert adapter.read_text("obj", "latin-1") == BODY.decode()

    async def twin() -> None:
        twin = open_async_adapter(url)
        with pytest.raises(InvalidArgumentError):
            await twin.remove_orphans(-1)
        with pytest.raises(InvalidArgumentError):
            await twin.read_text("obj", "no-such-codec")
        with pytest.raises(InvalidArgumentError):
            await twin.delete_many(None)  # type: ignore[arg-type]

    asyncio.run(twin())
    assert adapter.read_bytes("obj") == BODY


@pytest.mark.parametrize(
    "bad", ["file:///tmp/d/a\nb", "file:///tmp/d/a\tb", "memory://x\udc80", "memory://a\x7fb"]
)
def test_urls_with_characters_urlsplit_would_drop_are_refused(bad: str) -> None:
    """urlsplit drops tabs and newlines: "file:///tmp/d/a\\nb" opened /tmp/d/ab."""
    with pytest.raises(ConfigurationError):
        open_adapter(bad)


def test_printing_the_options_never_shows_a_secret() -> None:
    """The config's options are a public tuple: a secret's value prints masked, and is still the value."""
    secret = "not-for-printing-1234"
    adapter = open_adapter(
        "s3://bucket/p", access_key_id="AKIAEXAMPLE", secret_access_key=secret, endpoint="http://127.0.0.1:1"
    )
    options = adapter.config.options
    for shown in (repr(options), str(options), repr(dict(options)), repr(adapter.config), repr(adapter)):
        assert secret not in shown
    assert dict(options)["secret_access_key"] == secret
    assert pickle.loads(pickle.dumps(adapter)) == adapter


@pytest.mark.parametrize(
    "declared",
    [
        {"backend": "my\nback"},
        {"backend": ""},
        {"backend": None},
        {"write_if_absent": "yes"},
        {"durable": 1},
        {"compatibility_modes": ["unquoted-if-match"]},
        {"streamed_conditional_limit": -1},
        {"streamed_conditional_limit": True},
    ],
    ids=repr,
)
def test_ill_typed_declared_capabilities_are_refused(declared: dict[str, Any]) -> None:
    """The declaration is checked by the contract for what it promises, and here for its form: every
    message names the declared backend, and a wrong type would pass as a promise (``"yes"``)."""
    import dataclasses

    from obstore.store import MemoryStore

    from storage_adapter.builtin_backends import MEMORY

    with pytest.raises(ConfigurationError, match=next(iter(declared))):
        open_adapter(store=MemoryStore(), capabilities=dataclasses.replace(MEMORY.capabilities, **declared))


def test_fsspec_moves_removes_and_copies_check_every_path_first(adapter: StorageAdapter) -> None:
    """An fsspec ``mv`` onto another spelling of the same key deleted the object; ``rm`` of the root
    emptied it before refusing; a bad path in a list came after the good ones were deleted or written;
    a recursive ``mv`` failed on the directory entries its copy lists."""
    fs = adapter.to_fsspec()
    adapter.write("d/a", b"1")
    adapter.write("d/e/b", b"2")
    for same in ("sa://obj", "obj/", "storage-adapter://obj", "sa://obj/"):
        fs.mv("obj", same)
        assert adapter.read_bytes("obj") == BODY
    for root in ("", "/", "sa://", ["d/a", ""]):
        with pytest.raises(InvalidKeyError):
            fs.rm(root, recursive=True)
    with pytest.raises(InvalidKeyError):
        fs.rm(["d/a", "../bad"])
    with pytest.raises(InvalidKeyError):
        fs.rm(["d/a", None])
    with pytest.raises(InvalidKeyError):
        fs.copy(["d/a", "d/a"], ["c1", "../bad"])
    assert not adapter.exists("c1") and adapter.read_bytes("d/a") == b"1"
    fs.mv("d", "moved", recursive=True)
    assert sorted(i.key for i in adapter.list()) == ["moved/a", "moved/e/b", "obj"]
    fs.rm("moved", recursive=True)
    assert [i.key for i in adapter.list()] == ["obj"]
