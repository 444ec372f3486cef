"""Ranged reads and streamed bodies: the parts every adapter shares, whatever its backend.

* :func:`check_ranges` validates byte ranges before any I/O and :func:`clip` applies an object's size to
  one (Python-slice semantics: an ``end`` past the object is clipped, a ``start`` past it is refused).
* :class:`ObjectReader` is the seekable reader ``open_reader`` returns, over a driver's
  :class:`RangeSource`: a source pinned to one version of the object, read lazily by range.
* :func:`body_of` turns a write's body into ``bytes`` (whole bodies) or an iterator of validated chunks
  (streamed bodies), and :func:`joined` into ``bytes`` whatever it is (adapters that cannot stream).
"""

from __future__ import annotations

import inspect
import io
import operator
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeAlias

from storage_adapter.errors import InvalidBodyError, InvalidRangeError

BytesLike: TypeAlias = bytes | bytearray | memoryview


class Readable(Protocol):
    """A binary file object, as far as a write needs it."""

    def read(self, size: int = -1, /) -> bytes: ...


Body: TypeAlias = BytesLike | str | Readable | Iterable[BytesLike]
"""What ``write``, ``write_if_absent`` and ``write_if_match`` accept: bytes-like or ``str`` (UTF-8), a
binary file object (anything with ``read``), or an iterable of bytes-like chunks."""

# A file object is read in chunks of this size: large enough for few system calls and S3 parts of a
# sensible size, small enough that a streamed write holds a bounded amount of memory.
READ_CHUNK = 8 * 1024 * 1024


def _range_error(
    key: str, backend: str, start: object, end: object, why: str, size: int | None = None
) -> Any:
    return InvalidRangeError(
        f"invalid range [{start!r}, {end!r}) of {key!r} on {backend}: {why}",
        key=key,
        backend=backend,
        size=size,
    )


def check_ranges(ranges: object, key: str, backend: str) -> list[tuple[int, int]]:
    """``ranges`` as a list of ``(start, end)`` pairs of ints (not bools) with ``0 <= start <= end``;
    InvalidRangeError naming the first bad one otherwise (TypeError-free: a bad shape is a bad range)."""
    if isinstance(ranges, (str, bytes)) or not isinstance(ranges, Sequence):
        raise _range_error(key, backend, ranges, "", "ranges must be a sequence of (start, end) pairs")
    checked = []
    for pair in ranges:
        if not isinstance(pair, Sequence) or isinstance(pair, (str, bytes)) or len(pair) != 2:
            raise _range_error(key, backend, pair, "", "each range must be a (start, end) pair")
        start, end = pair
        if any(isinstance(v, bool) or not isinstance(v, int) for v in (start, end)):
            raise _range_error(key, backend, start, end, "start and end must be ints")
        if not 0 <= start <= end:
            raise _range_error(key, backend, start, end, "0 <= start <= end does not hold")
        checked.append((start, end))
    return checked


def clip(start: int, end: int, size: int, key: str, backend: str) -> tuple[int, int]:
    """The range ``[start, end)`` of an object of ``size`` bytes as it reads: ``end`` clipped to the size;
    InvalidRangeError naming the size when ``start`` is past the end (``start == size`` reads b"")."""
    if start > size:
        raise _range_error(
            key, backend, start, end, f"starts past the end of the object ({size} bytes)", size
        )
    return start, min(end, size)


class RangeSource(Protocol):
    """One version of one object, open for ranged reads (a driver's ``open_source``): ``size`` and
    ``token`` are that version's. ``read_into(offset, buffer)`` fills ``buffer`` (never past ``size``)
    with that version's bytes from ``offset`` and returns how many it wrote, or raises
    :class:`~storage_adapter.errors.ObjectChangedError` when the version is gone (S3, memory)."""

    @property
    def size(self) -> int: ...
    @property
    def token(self) -> str: ...
    def read_into(self, offset: int, buffer: memoryview) -> int: ...
    def close(self) -> None: ...


class AsyncRangeSource(Protocol):
    """:class:`RangeSource`'s twin for the async reader (an async driver's ``open_source``): the same
    version rules, ``read_into`` and ``close`` awaited."""

    @property
    def size(self) -> int: ...
    @property
    def token(self) -> str: ...
    async def read_into(self, offset: int, buffer: memoryview) -> int: ...
    async def close(self) -> None: ...


def writable_bytes(buffer: Any) -> memoryview:
    """``buffer`` as the flat bytes a read fills; TypeError, as io's ``readinto``, before any I/O, for a
    read-only or non-contiguous one."""
    view = memoryview(buffer)
    if view.readonly or not view.c_contiguous:
        raise TypeError("readinto() argument must be a writable, contiguous bytes-like object")
    return view.cast("B")


def seek_position(position: int, size: int, offset: int, whence: int) -> int:
    """Where ``seek(offset, whence)`` moves a reader at ``position`` of an object of ``size`` bytes, as
    io's files do (past the end is allowed; before the start or an unknown whence is a ValueError, an
    offset that is not an integer a TypeError)."""
    offset = operator.index(offset)  # TypeError for a float, as io's files
    base = {io.SEEK_SET: 0, io.SEEK_CUR: position, io.SEEK_END: size}.get(whence)
    if base is None:
        raise ValueError(f"invalid whence ({whence!r})")
    if base + offset < 0:
        raise ValueError(f"negative seek position {base + offset}")
    return base + offset


class ObjectReader(io.RawIOBase):
    """A seekable, read-only binary file object over one version of one object.

    Each ``readinto`` (or ``read(n)``) is one ranged read of the version the reader opened (one ranged
    GET on S3, one ``pread`` on local); ``read()`` / ``readall()`` read the rest in one. It never returns
    bytes of two versions: local keeps the opened file; S3 and memory pin every read to ``token`` and
    raise ObjectChangedError once the object was replaced or deleted. Wrap it in
    ``io.BufferedReader`` for many small reads. ``size`` and ``token`` are the opened version's. A
    closed reader raises ValueError, as every io object does. Use it as a context manager.
    """

    def __init__(self, source: RangeSource) -> None:
        super().__init__()
        self._source = source
        self._position = 0

    @property
    def size(self) -> int:
        return self._source.size

    @property
    def token(self) -> str:
        return self._source.token

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        self._checkClosed()
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._checkClosed()
        self._position = seek_position(self._position, self.size, offset, whence)
        return self._position

    def readinto(self, buffer: Any) -> int:
        self._checkClosed()
        view = writable_bytes(buffer)
        wanted = min(len(view), self.size - self._position)
        if wanted <= 0:
            return 0
        got = self._source.read_into(self._position, view[:wanted])
        self._position += got
        return got

    def readall(self) -> bytes:
        """The rest of the object, from the current position, in one ranged read."""
        buffer = bytearray(max(self.size - self.tell(), 0))
        view, filled = memoryview(buffer), 0
        while filled < len(buffer):
            got = self.readinto(view[filled:])
            if not got:
                break
            filled += got
        del view
        return bytes(buffer[:filled]) if filled < len(buffer) else bytes(buffer)

    def close(self) -> None:
        if not self.closed:
            self._source.close()
        super().close()


class AsyncObjectReader:
    """The async twin of :class:`~storage_adapter.streams.ObjectReader`: a seekable reader over one
    version of one object (the same guarantee: never bytes of two versions), whose reads are
    coroutines, each one ranged read of the async driver's source. ``seek`` and ``tell`` do
    no I/O and stay plain methods; ``size`` and ``token`` are the opened version's. Use it as an async
    context manager (or ``await close()``); a closed reader raises ValueError. Every read and the close run
    inside ``scrubbed`` (the adapter's redaction of its secrets from errors)."""

    def __init__(self, source: AsyncRangeSource, scrubbed: AbstractContextManager[object]) -> None:
        self._source, self._scrubbed = source, scrubbed
        self._position, self._closed = 0, False

    @property
    def size(self) -> int:
        return self._source.size

    @property
    def token(self) -> str:
        return self._source.token

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("I/O operation on closed reader")

    def tell(self) -> int:
        self._check_open()
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._check_open()
        self._position = seek_position(self._position, self.size, offset, whence)
        return self._position

    async def read_at(self, offset: int, buffer: Any) -> int:
        """Fill ``buffer`` with the bytes from ``offset`` on (never past the end); return how many. The
        position does not move."""
        self._check_open()
        offset = seek_position(0, self.size, offset, io.SEEK_SET)  # an int >= 0, as a seek's
        view = writable_bytes(buffer)
        wanted = min(len(view), self.size - offset)
        if wanted <= 0:
            return 0
        with self._scrubbed:
            return await self._source.read_into(offset, view[:wanted])

    async def readinto(self, buffer: Any) -> int:
        got = await self.read_at(self._position, buffer)
        self._position += got
        return got

    async def read(self, size: int = -1) -> bytes:
        """Up to ``size`` bytes from the position (the rest of the object when ``size`` is negative)."""
        self._check_open()
        rest = max(self.size - self._position, 0)
        buffer = bytearray(rest if size < 0 else min(size, rest))
        filled = 0
        while filled < len(buffer):
            got = await self.readinto(memoryview(buffer)[filled:])
            if not got:
                break
            filled += got
        return bytes(buffer[:filled])

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            with self._scrubbed:
                await self._source.close()

    async def __aenter__(self) -> AsyncObjectReader:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class WholeSource:
    """A RangeSource over bytes already read (one version, by construction): for adapters with no ranged
    reads of their own (the fsspec peers)."""

    def __init__(self, data: bytes, token: str) -> None:
        self._data, self.size, self.token = data, len(data), token

    def read_into(self, offset: int, buffer: memoryview) -> int:
        part = self._data[offset : offset + len(buffer)]
        buffer[: len(part)] = part
        return len(part)

    def close(self) -> None:
        """Nothing held open."""


def _chunks(items: Iterable[Any], key: str, backend: str) -> Iterator[BytesLike]:
    """``items``, each checked to be bytes-like (InvalidBodyError naming the key otherwise, which aborts
    the write in progress: nothing becomes visible). Empty chunks are dropped."""
    for chunk in items:
        if not isinstance(chunk, (bytes, bytearray, memoryview)):
            raise InvalidBodyError(
                f"write of {key!r} on {backend}: a chunk of the body is {type(chunk).__name__}, not bytes",
                key=key,
                backend=backend,
            )
        if len(chunk):
            yield chunk


def _file_chunks(stream: Readable) -> Iterator[Any]:
    """What ``stream.read`` returns until its end, ``b""``. Anything else is passed on for :func:`_chunks`
    to refuse, never taken for the end: a non-blocking stream with no data ready returns None, and a body
    cut short there would be published truncated."""
    while (chunk := stream.read(READ_CHUNK)) != b"":
        yield chunk


def body_of(data: object, key: str, backend: str) -> bytes | Iterator[BytesLike]:
    """A write's body: ``bytes`` for a whole one (bytes-like, or ``str`` as UTF-8), else an iterator of
    checked chunks read lazily from the file object or iterable. InvalidBodyError naming the key, before
    any I/O, for anything else: a str that is not text (a lone surrogate), an awaitable, a closed file
    object, one in text mode or not open for reading; a chunk that is not bytes-like raises it while the
    body is being read."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        try:
            return data.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate: no UTF-8 text holds it
            raise InvalidBodyError(
                f"write of {key!r} on {backend}: the str body is not valid text ({exc.reason} at {exc.start})",
                key=key,
                backend=backend,
            ) from None
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    if inspect.isawaitable(data):
        # A future or a coroutine is iterable through its __await__, and would be written as an empty body.
        raise InvalidBodyError(
            f"write of {key!r} on {backend}: the body is an awaitable ({type(data).__name__}); await it and "
            "write its result",
            key=key,
            backend=backend,
        )
    if isinstance(data, io.TextIOBase):
        raise InvalidBodyError(
            f"write of {key!r} on {backend}: the body's stream is in text mode; open it in binary mode",
            key=key,
            backend=backend,
        )
    if getattr(data, "closed", False) is True:
        raise InvalidBodyError(
            f"write of {key!r} on {backend}: the body's stream is closed", key=key, backend=backend
        )
    if callable(getattr(data, "read", None)):
        readable = getattr(data, "readable", None)
        if callable(readable) and not readable():
            raise InvalidBodyError(
                f"write of {key!r} on {backend}: the body's stream is not open for reading",
                key=key,
                backend=backend,
            )
        return _chunks(_file_chunks(data), key, backend)  # type: ignore[arg-type]
    if isinstance(data, Iterable) and not isinstance(data, (dict, set, frozenset)):
        return _chunks(data, key, backend)
    raise InvalidBodyError(
        f"write of {key!r} on {backend}: the body must be bytes, str, a binary file object or an iterable "
        f"of bytes, not {type(data).__name__}",
        key=key,
        backend=backend,
    )


def joined(data: object, key: str, backend: str) -> bytes:
    """The whole body as ``bytes``, streamed ones read to the end (for adapters that cannot stream)."""
    body = body_of(data, key, backend)
    return body if isinstance(body, bytes) else b"".join(body)
