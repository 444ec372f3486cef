"""Tables: immutable Parquet fragments and immutable, numbered table versions forming a log.

A table version ``tables/{t}/_versions/{V}.json`` names the version it was built on (``base_version``)
and the operation that wrote it, and holds either the table's whole fragment list (a *full* version:
create, overwrite, restore, and every ``format_version`` 1 file) or only its change to the base (a
*delta*: append adds fragments, compact replaces groups of fragments by one each). Versions are written
with ``write_if_absent`` at the first free number above the head, so each table's versions are gap-free
and a number, once written, never changes. Which version readers see is decided by the manifest alone.

Resolving a delta walks its base chain down to where the content is stored whole: a full version, or a
*checkpoint* ``tables/{t}/_checkpoints/{V}.json`` (the resolved list of version V). Every delta names its
``anchor`` (that starting point, as its writer knew it) and its ``depth`` (deltas above the anchor, itself
included). A committer whose published version is ``checkpoint_interval`` deltas deep writes its
checkpoint after the publish, best effort: checkpoints only shorten walks, correctness never needs one.
So an append writes O(its own fragments) bytes, and a cold read fetches at most about
``checkpoint_interval`` small files, concurrently.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storage_adapter.engine import codec, layout
from storage_adapter.engine.errors import CommitConflictError, CorruptMetadataError
from storage_adapter.engine.parallel import executor, in_pool_thread, settle
from storage_adapter.errors import StorageError
from storage_adapter.protocol import StorageAdapter
from storage_adapter.stored_json import StoredJSONError, expect, field
from storage_adapter.types import Capabilities, Support

VERSION_FORMAT = "storage-adapter-engine/table-version"
CHECKPOINT_FORMAT = "storage-adapter-engine/table-checkpoint"
DEFAULT_CHECKPOINT_INTERVAL = 100
DELTA_KINDS = ("append", "compact")  # every other kind (create, overwrite, restore) is a full version

Fragment = tuple[str, int, int]  # (key, rows, bytes)
Replacement = tuple[tuple[str, ...], Fragment]  # (keys of consecutive base fragments, the one replacing them)


def schema_to_text(schema: pa.Schema) -> str:
    return base64.b64encode(schema.remove_metadata().serialize().to_pybytes()).decode("ascii")


def schema_from_text(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def schema_fingerprint(schema: pa.Schema) -> str:
    """Equal for schemas equal up to metadata (pandas metadata and the like do not matter)."""
    return _fingerprint(schema)


# Every commit fingerprints its tables' schemas twice (the fragment's reference, then the check against
# the table's): serializing and hashing a schema each time cost more than the rest of the commit's CPU.
# Schemas that compare equal (metadata aside) have the same fingerprint, so a cache hit is always right.
@functools.lru_cache(maxsize=256)
def _fingerprint(schema: pa.Schema) -> str:
    return hashlib.sha256(schema.remove_metadata().serialize().to_pybytes()).hexdigest()[:32]


@dataclass(frozen=True)
class FragmentRef:
    """One immutable Parquet file of a table, written but not necessarily committed. Picklable."""

    table: str
    key: str
    rows: int
    bytes: int
    schema_fingerprint: str
    written_at: str  # ISO-8601 UTC, the writer's clock: commits refuse fragments older than the grace rule
    partition: tuple[
        tuple[str, str | None], ...
    ] = ()  # (column, value text) per partition column; () if none


@dataclass(frozen=True)
class DataFile:
    """One Parquet file of a table snapshot, for readers outside the engine (pyarrow.dataset, DuckDB,
    Spark). ``key`` is relative to the engine's adapter root; ``url`` is the adapter's URL joined with it
    (never a credential). ``partition``: (column, value text) per partition column, in ``partition_by``
    order (text None for null). The Parquet file holds the partition columns too."""

    key: str
    url: str
    rows: int
    bytes: int
    partition: tuple[tuple[str, str | None], ...] = ()


# Rows are encoded one row group at a time, each about this many bytes of Arrow data (at most pyarrow's
# default of 1Mi rows): a fragment's writer holds one row group, whatever the fragment's size.
ROW_GROUP_BYTES = 16 * 1024 * 1024
ROW_GROUP_ROWS = 1024 * 1024
# Dictionary encoding is decided per column on a fragment's first rows (see dictionary_columns): about
# a Parquet page of them (1 MiB of Arrow data), at most this many.
DICTIONARY_SAMPLE_BYTES = 1024 * 1024
DICTIONARY_SAMPLE_ROWS = 32 * 1024


def dictionary_columns(sample: pa.Table) -> list[str] | bool:
    """The columns to dictionary-encode in a fragment whose first rows are ``sample`` (pyarrow's
    ``use_dictionary``), by the test Spark's Parquet writer (parquet-mr) makes on a column's first page:
    a dictionary is kept only where it and its indices are smaller than the plain values. pyarrow alone
    builds every column's dictionary up to 1 MiB before giving up on it, which for columns of unique
    values (ids, unique labels) is about half of the encoding's CPU, for a larger file. True (pyarrow's
    default, every column) when a column is nested: its leaves are not judged here."""
    chosen = []
    for column_field, column in zip(sample.schema, sample.columns, strict=True):
        if pa.types.is_nested(column_field.type):
            return True
        if _dictionary_pays(column):
            chosen.append(column_field.name)
    return chosen


def _dictionary_pays(column: pa.ChunkedArray) -> bool:
    """True where a dictionary is smaller than the plain values, or where that cannot be judged (no
    values, a dictionary type, a variable-width type other than strings and binaries)."""
    values = column.drop_null() if column.null_count else column
    plain = _plain_bytes(values)
    if plain is None or len(values) == 0 or pa.types.is_dictionary(values.type):
        return True
    distinct = values.unique()
    index_bytes = len(values) * max(1, len(distinct).bit_length()) / 8
    return (_plain_bytes(distinct) or 0) + index_bytes < plain


_BINARY_KINDS = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary)


def _plain_bytes(values: pa.Array | pa.ChunkedArray) -> int | None:
    """Parquet's PLAIN size of non-null ``values``: strings and binaries with a 4-byte length each,
    fixed-width values at their width; None for other types."""
    kind = values.type
    if any(is_kind(kind) for is_kind in _BINARY_KINDS):
        return int(pc.sum(pc.binary_length(values)).as_py() or 0) + 4 * len(values)
    try:
        width = int(kind.bit_width)
    except ValueError:  # "Non-fixed width type"
        return None
    return len(values) * max(1, width // 8)


def parquet_writer(sink: Any, schema: pa.Schema, first_rows: pa.Table | None) -> pq.ParquetWriter:
    """The Parquet writer of one fragment (every fragment writer's settings are these): dictionary
    encoding chosen on ``first_rows`` (:func:`dictionary_columns`; None: no rows, pyarrow's default)."""
    if first_rows is None or first_rows.num_rows == 0:
        return pq.ParquetWriter(sink, schema)
    rows = first_rows.num_rows * DICTIONARY_SAMPLE_BYTES // max(first_rows.nbytes, 1)
    sample = first_rows.slice(0, max(1, min(DICTIONARY_SAMPLE_ROWS, rows)))
    return pq.ParquetWriter(sink, schema, use_dictionary=dictionary_columns(sample))


def write_fragment(
    adapter: StorageAdapter, table: str, data: pa.Table | pa.RecordBatchReader, fragment_id: str
) -> FragmentRef:
    """Write ``data`` (a table, or a reader of record batches consumed once) as one Parquet file,
    streamed one row group at a time (see ``store_fragment``); the id is a fresh ULID: never taken."""
    return store_fragment(
        adapter, table, data.schema, encode_fragment(data), layout.data_key(table, fragment_id)
    )


def _row_groups(data: pa.Table | pa.RecordBatchReader) -> Iterator[pa.Table]:
    """``data`` in consecutive row groups of about ROW_GROUP_BYTES (a reader's batches are gathered up to
    that size, or sliced down to it): zero-copy slices, one group in memory at a time."""
    batches = data.to_batches() if isinstance(data, pa.Table) else data
    pending: list[pa.RecordBatch] = []
    size = pending_rows = 0
    for batch in batches:
        rows = max(1, min(ROW_GROUP_ROWS, batch.num_rows * ROW_GROUP_BYTES // max(batch.nbytes, 1)))
        for offset in range(0, batch.num_rows, rows):
            part = batch.slice(offset, rows)
            pending.append(part)
            size += part.nbytes
            pending_rows += part.num_rows
            if size >= ROW_GROUP_BYTES or pending_rows >= ROW_GROUP_ROWS:
                yield pa.Table.from_batches(pending, data.schema)
                pending, size, pending_rows = [], 0, 0
    if pending:
        yield pa.Table.from_batches(pending, data.schema)


class _ChunkSink:
    """The file a ParquetWriter writes to: it keeps what was written since it was last drained."""

    closed = False

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._position = 0

    def write(self, data: Any) -> int:
        self._parts.append(bytes(data))
        self._position += len(data)
        return len(data)

    def tell(self) -> int:
        return self._position

    def flush(self) -> None:
        """Nothing buffered below the parts themselves."""

    def close(self) -> None:
        self.closed = True

    def drain(self) -> list[bytes]:
        """What was written since the last drain, in the pieces pyarrow wrote (pages: not joined, which
        would copy a row group once more)."""
        parts, self._parts = self._parts, []
        return parts


class EncodedFragment:
    """A fragment's Parquet file, encoded as it is written. The first row group is encoded at once (by
    ``encode_fragment``, on the caller's thread); when that was all of it, ``whole`` holds the file, else
    ``chunks()`` yields the file one row group at a time, encoding each as it is asked for (one pass: a
    reader is consumed once). ``rows`` and ``size`` count what has been encoded, so they are the
    fragment's once the file was written."""

    def __init__(self, data: pa.Table | pa.RecordBatchReader) -> None:
        self.rows = 0
        self.size = 0
        self._finished = False
        self._encoder = self._encode(data)
        first = next(self._encoder)
        self.whole = b"".join(first) if self._finished else None
        self._head = [] if self._finished else [first]
        if self.whole is not None:
            self.size = len(self.whole)

    def _encode(self, data: pa.Table | pa.RecordBatchReader) -> Iterator[list[bytes]]:
        """The file's bytes, row group by row group (each as the pieces pyarrow wrote), the footer with
        the last: ``_finished`` is set before the last one is yielded."""
        sink = _ChunkSink()
        groups = _row_groups(data)
        group = next(groups, None)
        writer = parquet_writer(sink, data.schema, group)
        try:
            while group is not None:
                writer.write_table(group, row_group_size=group.num_rows)
                self.rows += group.num_rows
                # The next group is gathered before this one's pieces go (a last group is known as such,
                # so a fragment of one row group is whole at once), but not before this one is dropped.
                del group
                group = next(groups, None)
                if group is not None:
                    yield sink.drain()
        finally:
            writer.close()
        self._finished = True
        yield sink.drain()

    def chunks(self) -> Iterator[bytes]:
        """The file's bytes in pieces, each dropped once taken (the body of a streamed write)."""
        while self._head:
            yield from self._pieces(self._head.pop(0))
        for pieces in self._encoder:
            yield from self._pieces(pieces)

    def _pieces(self, pieces: list[bytes]) -> Iterator[bytes]:
        while pieces:
            piece = pieces.pop(0)
            self.size += len(piece)
            yield piece


def encode_fragment(data: pa.Table | pa.RecordBatchReader) -> EncodedFragment:
    """The Parquet body of a fragment of ``data``, its first row group encoded now (CPU only: callers
    encode on one thread and overlap only the PUTs, since encoding in many threads contends for the GIL
    and costs more than it saves), the rest as it is written."""
    return EncodedFragment(data)


class FragmentBody(Protocol):
    """A fragment's Parquet file on its way to storage: ``whole`` when it is all encoded already, else
    ``chunks()`` yields it (once); ``rows`` and ``size`` are the file's once it was written."""

    whole: bytes | None
    rows: int
    size: int

    def chunks(self) -> Iterator[bytes]: ...


# A FragmentWriter whose file passes this many encoded bytes sends them to storage from then on, in a
# thread of its own, while its rows keep coming; smaller fragments are one request when finished.
STREAM_AFTER_BYTES = 1024 * 1024


class FragmentAbortedError(Exception):
    """Raised into a FragmentWriter's streamed write by ``abort``: the write then leaves nothing."""


class FragmentWriter:
    """One fragment written while its rows arrive (a Spark task's input): ``add`` gathers rows and
    encodes a row group as soon as about ``row_group_bytes`` of Arrow data (or ROW_GROUP_ROWS rows) are
    pending, so the encoding keeps pace with the rows instead of following the last one; once the file
    passes STREAM_AFTER_BYTES, its bytes are also written as they are encoded, by a streamed write in a
    thread of its own (a multipart upload on S3, a staged file on local), so neither waits for the
    input's end either. ``finish`` encodes the rest, completes the write and returns the reference; a
    smaller fragment is then one ``write_if_absent``. ``abort`` leaves nothing: a streamed write that
    does not end is never visible (docs/streams.md), nor, on S3, completed. Rows must have ``schema``
    exactly (``conform`` them first). Not thread-safe: one caller adds, finishes or aborts."""

    def __init__(
        self,
        adapter: StorageAdapter,
        table: str,
        schema: pa.Schema,
        key: str,
        partition: tuple[tuple[str, str | None], ...] = (),
        row_group_bytes: int = ROW_GROUP_BYTES,
    ) -> None:
        self._adapter, self._table, self._schema = adapter, table, schema
        self._key, self._partition = key, partition
        self.rows = 0  # rows added
        self.size = 0  # bytes of the file, once finished
        self.whole: bytes | None = None
        self._row_group_bytes = row_group_bytes
        self._sink = _ChunkSink()
        self._encoded: list[bytes] = []  # encoded, not yet handed to the streamed write
        self._encoded_bytes = 0
        self._writer: pq.ParquetWriter | None = None
        self._pending: list[pa.Table] = []
        self._pending_bytes = self._pending_rows = 0
        self._queue: queue.Queue[bytes | BaseException | None] | None = None  # the streamed write's input
        self._queued_bytes = 0  # handed to the streamed write (counted by the caller's thread)
        self._written_bytes = 0  # taken by the streamed write (counted by its thread)
        self._thread: threading.Thread | None = None
        self._outcome: list[FragmentRef | BaseException] = []

    @property
    def held_bytes(self) -> int:
        """What the writer holds in memory: rows pending and encoded bytes not yet written."""
        return self._pending_bytes + self._encoded_bytes + self._queued_bytes - self._written_bytes

    def add(self, rows: pa.Table) -> None:
        self._pending.append(rows)
        self.rows += rows.num_rows
        self._pending_bytes += rows.nbytes
        self._pending_rows += rows.num_rows
        if self._pending_bytes >= self._row_group_bytes or self._pending_rows >= ROW_GROUP_ROWS:
            self._encode()
            self._send()

    def _encode(self) -> None:
        group = pa.concat_tables(self._pending)  # zero-copy: the pieces become the group's chunks
        self._pending, self._pending_bytes, self._pending_rows = [], 0, 0
        if self._writer is None:  # the first group decides the encodings
            self._writer = parquet_writer(self._sink, self._schema, group)
        self._writer.write_table(group, row_group_size=ROW_GROUP_ROWS)
        self._take(self._sink.drain())

    def _take(self, pieces: list[bytes]) -> None:
        self._encoded.extend(pieces)
        self._encoded_bytes += sum(len(p) for p in pieces)
        self.size += sum(len(p) for p in pieces)

    def _send(self) -> None:
        """Hand the encoded bytes to the streamed write, starting it once the file is large enough."""
        if self._queue is None and self.size >= STREAM_AFTER_BYTES:
            self._queue = queue.Queue()
            self._thread = threading.Thread(target=self._stream, name=f"fragment {self._key}", daemon=True)
            self._thread.start()
        if self._queue is not None:
            if self._outcome:  # the write already failed: say so now, not after the last row
                self._ended()
            for piece in self._encoded:
                self._queue.put(piece)
            self._queued_bytes += self._encoded_bytes
            self._encoded, self._encoded_bytes = [], 0

    def _stream(self) -> None:
        try:
            self._outcome.append(
                store_fragment(self._adapter, self._table, self._schema, self, self._key, self._partition)
            )
        except BaseException as exc:  # handed to finish or abort, in the caller's thread
            self._outcome.append(exc)

    def chunks(self) -> Iterator[bytes]:
        """The streamed write's body: the pieces ``add`` and ``finish`` hand over, until the end."""
        assert self._queue is not None
        while (piece := self._queue.get()) is not None:
            if isinstance(piece, BaseException):
                raise piece
            self._written_bytes += len(piece)
            yield piece

    def finish(self) -> FragmentRef:
        """Encode the rest, write what is not written yet and wait for the write; its error, if any."""
        if self._pending or self._writer is None:
            self._encode()
        assert self._writer is not None
        self._writer.close()
        self._take(self._sink.drain())
        if self._queue is None:
            self.whole = b"".join(self._encoded)
            return store_fragment(self._adapter, self._table, self._schema, self, self._key, self._partition)
        self._send()
        self._queue.put(None)
        return self._ended()

    def abort(self) -> None:
        """Write nothing: a streamed write under way fails, so its object never appears."""
        if self._queue is not None:
            self._queue.put(FragmentAbortedError(f"fragment {self._key} aborted"))
            # The write is abandoned: how it ended (aborted, or failed before) no longer matters.
            with contextlib.suppress(FragmentAbortedError, StorageError):
                self._ended()

    def _ended(self) -> FragmentRef:
        assert self._thread is not None
        self._thread.join()
        outcome = self._outcome[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def store_fragment(
    adapter: StorageAdapter,
    table: str,
    schema: pa.Schema,
    body: FragmentBody,
    key: str,
    partition: tuple[tuple[str, str | None], ...] = (),
) -> FragmentRef:
    """Write ``body`` (rows of ``schema``: ``encode_fragment(data)``, or a FragmentWriter's) at ``key``
    (a fresh ``layout.data_key``), created only if absent; ``partition`` is the partition its key names.

    A fragment of one row group is one ``write_if_absent`` of its bytes. A larger one is streamed (peak
    memory: about a row group, whatever the fragment's size): with ``write_if_absent`` where the backend
    creates from a stream of any length (local, memory), else with a plain streamed ``write`` (S3, where a
    conditional stream is limited to one request: ``capabilities.streamed_conditional_limit``). Both are
    the same here: the key holds a fresh ULID, so no other writer ever creates it, and what the engine
    needs of the create (the object appears whole, once) a streamed ``write`` keeps."""
    if body.whole is not None:
        created = adapter.write_if_absent(key, body.whole) is not None
    elif _creates_streams(adapter.capabilities):
        created = adapter.write_if_absent(key, body.chunks()) is not None
    else:
        adapter.write(key, body.chunks())
        created = True
    if not created:
        raise CorruptMetadataError(f"fragment {key} already exists: fragment ids must be fresh", key=key)
    return fragment_ref(table, schema, body, key, partition)


def fragment_ref(
    table: str,
    schema: pa.Schema,
    body: FragmentBody,
    key: str,
    partition: tuple[tuple[str, str | None], ...] = (),
) -> FragmentRef:
    """The reference to ``body`` stored at ``key`` (``rows`` and ``size`` are final once it is encoded
    whole, or written); ``written_at`` is now."""
    return FragmentRef(
        table, key, body.rows, body.size, schema_fingerprint(schema), codec.now_iso(), partition
    )


def _creates_streams(capabilities: Capabilities) -> bool:
    return (
        capabilities.streamed_conditional_write is not Support.UNSUPPORTED
        and capabilities.streamed_conditional_limit is None
    )


# A projection of a fragment up to this size reads it whole (one GET): ranged reads of a small file cost
# more requests and time than the bytes of the columns left out (a 2 KB fragment: 3-4x the time on S3).
WHOLE_READ_BYTES = 1024 * 1024


def read_fragment(
    adapter: StorageAdapter, key: str, columns: Sequence[str] | None = None, size: int | None = None
) -> pa.Table:
    """The fragment's rows; only ``columns`` (in that order) when given. A whole fragment is one GET, and
    so is a projection of one of at most ``WHOLE_READ_BYTES`` (``size``: its size, when known); a larger
    projection reads through ``open_reader`` by range: the footer, then only the chunks of the columns
    asked for (coalesced into few ranged reads), all of one version of the object."""
    if columns is None or (size is not None and size <= WHOLE_READ_BYTES):
        # ParquetFile, not pq.read_table: the dataset machinery of read_table costs ~4x the CPU on small
        # files; over an Arrow BufferReader, not io.BytesIO: pyarrow then reads without calling back into
        # Python (and the GIL) for every read of the footer and each column chunk.
        body = adapter.read_bytes(key)
        whole = pq.ParquetFile(pa.BufferReader(body))
        # A small file decodes on this thread: handing its few column chunks to Arrow's CPU pool costs more
        # than decoding them (1,000 two-KB fragments: ~30% less time); the reads overlap across fragments.
        threads = len(body) > WHOLE_READ_BYTES
        return whole.read(columns=None if columns is None else list(columns), use_threads=threads)
    with adapter.open_reader(key) as reader:
        return pq.ParquetFile(reader, pre_buffer=True).read(columns=list(columns))


@dataclass(frozen=True)
class Delta:
    """What a delta version changes, and where resolving it starts."""

    anchor: int  # a version on the base chain stored whole (full, or with a checkpoint) when this was written
    depth: int  # deltas from the anchor (exclusive) up to this version (inclusive): at least 1
    anchor_checkpointed: bool  # the anchor is a delta with a checkpoint (else a full version)
    replaced: tuple[Replacement, ...] = ()  # compact: each group of base fragments gives way to one fragment


@dataclass(frozen=True)
class TableVersion:
    """The content of one table version file. ``added``: a full version's whole fragment list, or the
    fragments a delta appends to its base's content."""

    table: str
    version: int
    base_version: int | None  # the version this one was built on (None for a table's first version)
    operation_id: str
    kind: str  # "create", "append", "overwrite", "restore" or "compact"
    schema: str  # schema_to_text form
    added: tuple[Fragment, ...]
    delta: Delta | None = None  # None: a full version

    def encode(self) -> bytes:
        body: dict[str, Any] = {
            "table": self.table,
            "version": self.version,
            "base_version": self.base_version,
            "operation_id": self.operation_id,
            "kind": self.kind,
            "schema": self.schema,
        }
        if self.delta is None:
            body["fragments"] = _fragments_json(self.added)
        else:
            body["delta"] = {
                "anchor": self.delta.anchor,
                "depth": self.delta.depth,
                "anchor_checkpointed": self.delta.anchor_checkpointed,
                "added": _fragments_json(self.added),
                "replaced": [
                    {"keys": list(keys), "by": _fragment_json(by)} for keys, by in self.delta.replaced
                ],
            }
        return codec.encode(VERSION_FORMAT, 2, body)

    @classmethod
    def decode(cls, raw: bytes, key: str) -> TableVersion:
        """Format 1 (every version a full list) and 2 (full or delta). CorruptMetadataError for anything
        else, including a delta whose links do not strictly descend (so every walk ends)."""
        doc = codec.decode(raw, key, VERSION_FORMAT, (1, 2), CorruptMetadataError)
        try:
            version = field(doc, "version", int)
            base_version = field(doc, "base_version", int, optional=True)
            delta_doc = field(doc, "delta", dict, optional=True) if doc["format_version"] == 2 else None
            delta: Delta | None = None
            if delta_doc is None:
                added = _fragments_from(field(doc, "fragments", list))
            else:
                added = _fragments_from(field(delta_doc, "added", list))
                delta = Delta(
                    field(delta_doc, "anchor", int),
                    field(delta_doc, "depth", int),
                    field(delta_doc, "anchor_checkpointed", bool),
                    tuple(_replacement_from(r) for r in field(delta_doc, "replaced", list)),
                )
                if base_version is None or not delta.anchor <= base_version < version or delta.depth < 1:
                    raise StoredJSONError("a delta needs anchor <= base_version < version and depth >= 1")
            return cls(
                table=field(doc, "table", str),
                version=version,
                base_version=base_version,
                operation_id=field(doc, "operation_id", str),
                kind=field(doc, "kind", str),
                schema=field(doc, "schema", str),
                added=added,
                delta=delta,
            )
        except StoredJSONError as exc:
            raise codec.malformed(key, CorruptMetadataError, exc) from exc


def _fragment_json(fragment: Fragment) -> dict[str, Any]:
    return {"key": fragment[0], "rows": fragment[1], "bytes": fragment[2]}


def _fragments_json(fragments: Iterable[Fragment]) -> list[dict[str, Any]]:
    return [_fragment_json(f) for f in fragments]


def _fragments_from(docs: list[Any]) -> tuple[Fragment, ...]:
    return tuple((field(f, "key", str), field(f, "rows", int), field(f, "bytes", int)) for f in docs)


def _replacement_from(doc: Any) -> Replacement:
    keys = tuple(expect(k, str, "replaced key") for k in field(doc, "keys", list))
    if not keys:
        raise StoredJSONError("a replacement needs at least one key")
    return keys, _fragments_from([field(doc, "by", dict)])[0]


def encode_checkpoint(table: str, version: int, fragments: tuple[Fragment, ...]) -> bytes:
    return codec.encode(
        CHECKPOINT_FORMAT, 1, {"table": table, "version": version, "fragments": _fragments_json(fragments)}
    )


def decode_checkpoint(raw: bytes, key: str, table: str, version: int) -> tuple[Fragment, ...]:
    """The resolved fragment list a checkpoint holds; CorruptMetadataError unless it is the checkpoint of
    exactly ``table`` at ``version``."""
    doc = codec.decode(raw, key, CHECKPOINT_FORMAT, (1,), CorruptMetadataError)
    try:
        if (field(doc, "table", str), field(doc, "version", int)) != (table, version):
            raise StoredJSONError(f"not the checkpoint of {table!r} version {version}")
        return _fragments_from(field(doc, "fragments", list))
    except StoredJSONError as exc:
        raise codec.malformed(key, CorruptMetadataError, exc) from exc


def apply_delta(base: tuple[Fragment, ...], content: TableVersion) -> tuple[Fragment, ...]:
    """The content of delta ``content`` given its base's content. Each replaced group's fragment takes
    the place of the group's first fragment (row order is kept), added fragments go last.
    CorruptMetadataError when a replaced fragment is not in the base (rows would be lost)."""
    assert content.delta is not None
    if not content.delta.replaced:
        return base + content.added
    group_of = {key: index for index, (keys, _) in enumerate(content.delta.replaced) for key in keys}
    result: list[Fragment] = []
    seen: set[str] = set()
    placed: set[int] = set()
    for fragment in base:
        index = group_of.get(fragment[0])
        if index is None:
            result.append(fragment)
            continue
        seen.add(fragment[0])
        if index not in placed:
            placed.add(index)
            result.append(content.delta.replaced[index][1])
    if len(seen) != len(group_of):
        key = layout.version_key(content.table, content.version)
        raise CorruptMetadataError(
            f"{key}: compaction replaces fragments its base does not have: {sorted(set(group_of) - seen)[:3]}",
            key=key,
        )
    return (*result, *content.added)


class TableVersionStore:
    """Reads, resolves and writes table versions. Versions are immutable, so decoded versions and resolved
    contents are cached for good (bounded LRU caches, one lock). Thread-safe."""

    def __init__(
        self,
        adapter: StorageAdapter,
        cache_size: int = 4096,
        checkpoint_interval: int = DEFAULT_CHECKPOINT_INTERVAL,
        resolved_cache_size: int = 64,
    ) -> None:
        if checkpoint_interval < 1:
            raise ValueError(f"checkpoint_interval must be at least 1, not {checkpoint_interval!r}")
        self._adapter = adapter
        self._cache: OrderedDict[tuple[str, int], TableVersion] = OrderedDict()
        self._cache_size = cache_size
        self._resolved: OrderedDict[tuple[str, int], tuple[Fragment, ...]] = OrderedDict()
        self._resolved_size = resolved_cache_size
        self._checkpointed: OrderedDict[tuple[str, int], None] = OrderedDict()  # known to exist
        self.checkpoint_interval = checkpoint_interval
        self._lock = threading.Lock()

    # -- version files --------------------------------------------------------------------------------
    def read(self, table: str, version: int) -> TableVersion:
        """The version's content. Raises NotFoundError if it was never written (or vacuumed)."""
        cached = self._cache.get((table, version))
        if cached is not None:
            return cached
        key = layout.version_key(table, version)
        return self._remember(TableVersion.decode(self._adapter.read_bytes(key), key))

    def read_if_exists(self, table: str, version: int) -> TableVersion | None:
        cached = self._cache.get((table, version))
        if cached is not None:
            return cached
        key = layout.version_key(table, version)
        raw = self._adapter.read_if_exists(key)
        return None if raw is None else self._remember(TableVersion.decode(raw, key))

    def write_if_absent(self, content: TableVersion) -> bool:
        """Write the version file; False if that number is taken (another writer's head)."""
        key = layout.version_key(content.table, content.version)
        if self._adapter.write_if_absent(key, content.encode()) is None:
            return False
        self._remember(content)
        return True

    def head(self, table: str, at_least: int) -> int:
        """The highest written version, probing upward from ``at_least`` (a version known to exist).
        Versions are gap-free above any pinned version, so the first missing number ends the probe."""
        version = at_least
        while self._adapter.exists(layout.version_key(table, version + 1)):
            version += 1
        return version

    def write_next(
        self,
        make: Callable[[int], TableVersion],
        table: str,
        first_candidate: int,
        on_taken: Callable[[int], object] | None = None,
    ) -> TableVersion:
        """Write ``make(number)`` at the first free number from ``first_candidate`` up; return it.

        ``on_taken(number)`` is called before trying each number after a lost race (the commit uses it to
        record the new pin in its sidecar before the head can advance to it).
        """
        number = first_candidate
        while True:
            content = make(number)
            if self.write_if_absent(content):
                return content
            number = self.head(table, number) + 1
            if on_taken is not None:
                on_taken(number)

    # -- the log: building versions -------------------------------------------------------------------
    def successor(
        self,
        table: str,
        base: int | None,
        operation_id: str,
        kind: str,
        schema: str,
        added: tuple[Fragment, ...],
        replaced: tuple[Replacement, ...] = (),
    ) -> Callable[[int], TableVersion]:
        """The version a commit of ``kind`` writes on ``base``, as a function of the number it lands at.

        Appends and compactions are deltas (O(change) bytes: one GET of the base when it is not cached,
        plus one HEAD every ``checkpoint_interval`` versions to learn whether the base has a checkpoint);
        every other kind is a full version holding ``added``.
        """
        if kind not in DELTA_KINDS:
            return lambda number: TableVersion(table, number, base, operation_id, kind, schema, added)
        if base is None:
            raise ValueError(f"a {kind} needs a base version (table {table!r})")
        below = self.read(table, base)
        if below.delta is None or self._has_checkpoint(table, below):
            delta = Delta(base, 1, below.delta is not None, replaced)
        else:
            delta = Delta(
                below.delta.anchor, below.delta.depth + 1, below.delta.anchor_checkpointed, replaced
            )
        return lambda number: TableVersion(table, number, base, operation_id, kind, schema, added, delta)

    def check_replaceable(self, table: str, version: int, replaced: tuple[Replacement, ...]) -> None:
        """CommitConflictError unless every fragment ``replaced`` names is still in ``version``'s content
        (a compaction rebases over appends, not over an overwrite or another compaction of its fragments)."""
        present = {key for key, _, _ in self.fragments(table, version)}
        missing = sorted({key for keys, _ in replaced for key in keys} - present)
        if missing:
            raise CommitConflictError(
                f"compaction of table {table!r} conflicts with a concurrent commit: table version {version} "
                f"no longer has {len(missing)} of the fragments it rewrites (e.g. {missing[0]})",
                expected=None,
                actual=version,
                table=table,
                key=layout.table_prefix(table),
            )

    def checkpoint_if_due(self, table: str, version: int) -> bool:
        """Write the checkpoint of ``version`` (a published version) when it is a delta at least
        ``checkpoint_interval`` deep and has none yet. True if written. Never needed for correctness:
        callers run it after the publish and ignore its failures."""
        content = self.read(table, version)
        if content.delta is None or content.delta.depth < self.checkpoint_interval:
            return False
        if (table, version) in self._checkpointed:
            return False
        fragments = self.fragments(table, version)
        written = self._adapter.write_if_absent(
            layout.checkpoint_key(table, version), encode_checkpoint(table, version, fragments)
        )
        self._mark_checkpointed(table, version)
        return written is not None

    # -- the log: reading versions --------------------------------------------------------------------
    def fragments(self, table: str, version: int) -> tuple[Fragment, ...]:
        """The whole fragment list of ``version``, in row order: the version itself when full, else the
        content its walk starts from with every delta above applied. Raises NotFoundError when a version
        it needs is missing, CorruptMetadataError for a corrupt one."""
        hit = self._resolved_get(table, version)
        if hit is not None:
            return hit
        content, deltas = self._walk(table, version, use_cache=True)
        for delta in reversed(deltas):
            content = apply_delta(content, delta)
        self._resolved_put(table, version, content)
        return content

    def chain(self, table: str, version: int) -> list[int]:
        """The versions a cold resolution of ``version`` reads, from it down to where its walk starts (the
        checkpoint of that last one, when the walk starts at a checkpoint). Vacuum keeps all of them."""
        _, deltas = self._walk(table, version, use_cache=False)
        below = deltas[-1].base_version if deltas else version
        assert below is not None  # a delta always has a base
        return [*(d.version for d in deltas), below]

    def _walk(
        self, table: str, version: int, use_cache: bool
    ) -> tuple[tuple[Fragment, ...], list[TableVersion]]:
        """The content the walk from ``version`` starts at, and the deltas above it, newest first. Steps
        down ``base_version`` links until a full version, a version with a checkpoint (looked for where
        a delta names its anchor, and at versions ``checkpoint_interval`` deep), or (``use_cache``) a
        version whose content is in the cache."""
        top = self.read(table, version)
        if top.delta is None:
            return top.added, []
        if top.delta.depth >= self.checkpoint_interval:
            found = self._read_checkpoint(table, version)
            if found is not None:
                return found, []
        if use_cache:
            self._prefetch(table, top)
        deltas = [top]
        while True:
            below = deltas[-1].base_version
            assert below is not None  # a delta always has a base (checked by decode)
            if use_cache and (hit := self._resolved_get(table, below)) is not None:
                return hit, deltas
            current = self.read(table, below)
            if current.delta is None:
                return current.added, deltas
            named = deltas[-1].delta is not None and deltas[-1].delta.anchor == below
            if named or current.delta.depth >= self.checkpoint_interval:
                found = self._read_checkpoint(table, below)
                if found is not None:
                    return found, deltas
            deltas.append(current)

    def _prefetch(self, table: str, top: TableVersion) -> None:
        """Fetch, concurrently, the version files between ``top``'s anchor and ``top`` and the anchor's
        checkpoint into the caches, for a walk about to read them one by one (a cold read pays about one
        round trip per ``REQUESTS_IN_FLIGHT`` files instead of one per file). Some may belong to other
        chains (unpublished attempts); failures are left for the walk to meet."""
        assert top.delta is not None and top.base_version is not None
        if top.delta.depth < 2 or self._resolved_get(table, top.base_version) is not None:
            return
        anchor = top.delta.anchor
        numbers = [n for n in range(anchor, top.version) if (table, n) not in self._cache]

        def version_job(number: int) -> TableVersion | None:
            key = layout.version_key(table, number)
            raw = self._adapter.read_if_exists(key)
            return None if raw is None else TableVersion.decode(raw, key)

        if in_pool_thread():  # a prefetch must not wait on the pool it runs in: the walk reads one by one
            return
        pool = executor()
        checkpoint = (
            pool.submit(self._fetch_checkpoint, table, anchor) if top.delta.anchor_checkpointed else None
        )
        futures = [pool.submit(version_job, n) for n in numbers]
        try:
            for future in futures:
                if future.exception() is None and (content := future.result()) is not None:
                    self._remember(content)
            if (
                checkpoint is not None
                and checkpoint.exception() is None
                and (found := checkpoint.result()) is not None
            ):
                self._mark_checkpointed(table, anchor)
                self._resolved_put(table, anchor, found)
        finally:
            settle([*futures, *([checkpoint] if checkpoint is not None else [])])

    def _fetch_checkpoint(self, table: str, version: int) -> tuple[Fragment, ...] | None:
        key = layout.checkpoint_key(table, version)
        raw = self._adapter.read_if_exists(key)
        return None if raw is None else decode_checkpoint(raw, key, table, version)

    def _read_checkpoint(self, table: str, version: int) -> tuple[Fragment, ...] | None:
        """The checkpoint's content (from the cache when this process wrote or read it), else None."""
        if (table, version) in self._checkpointed and (hit := self._resolved_get(table, version)) is not None:
            return hit
        content = self._fetch_checkpoint(table, version)
        if content is not None:
            self._mark_checkpointed(table, version)
            self._resolved_put(table, version, content)
        return content

    def _has_checkpoint(self, table: str, content: TableVersion) -> bool:
        """Whether delta ``content`` has a checkpoint (only versions ``checkpoint_interval`` deep get one)."""
        assert content.delta is not None
        if content.delta.depth < self.checkpoint_interval:
            return False
        if (table, content.version) in self._checkpointed:
            return True
        if not self._adapter.exists(layout.checkpoint_key(table, content.version)):
            return False
        self._mark_checkpointed(table, content.version)
        return True

    # -- caches ---------------------------------------------------------------------------------------
    def _remember(self, content: TableVersion) -> TableVersion:
        self._put(self._cache, (content.table, content.version), content, self._cache_size)
        return content

    def _resolved_get(self, table: str, version: int) -> tuple[Fragment, ...] | None:
        with self._lock:
            hit = self._resolved.get((table, version))
            if hit is not None:
                self._resolved.move_to_end((table, version))
            return hit

    def _resolved_put(self, table: str, version: int, content: tuple[Fragment, ...]) -> None:
        self._put(self._resolved, (table, version), content, self._resolved_size)

    def _mark_checkpointed(self, table: str, version: int) -> None:
        self._put(self._checkpointed, (table, version), None, self._cache_size)

    def _put(self, cache: OrderedDict[Any, Any], key: Any, value: Any, size: int) -> None:
        """Insert into a bounded LRU dict, dropping the least recently used entries when full."""
        with self._lock:
            cache[key] = value
            cache.move_to_end(key)
            while len(cache) > size:
                cache.popitem(last=False)
