"""The engine streams fragments: written row group by row group into the adapter's streamed writes (peak
memory about a row group, whatever the fragment's size), read with projection through ``open_reader``.

* An engine append of a 256 MiB RecordBatchReader to local grows the peak resident set of its process by
  less than 96 MiB, and a 2 GiB one (``-m stress``) by less than 128 MiB (tests/engine_append_peak_worker.py).
* A fragment of one row group is one ``write_if_absent`` of bytes, as before; a larger one is a stream:
  ``write_if_absent`` where the backend creates from a stream of any length, else a plain ``write`` (fresh
  ULID keys: the same thing). Its reported rows and bytes are the stored object's.
* A stream that fails leaves no fragment; a reader of the wrong schema is refused before any write.
* A FragmentWriter (a Spark task's) encodes and writes while its rows arrive, and an aborted one leaves
  nothing; dictionary encoding is kept per column only where it pays.
* ``read_fragment(adapter, key, columns)`` fetches the footer and the chunks of those columns only.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from random import Random
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from counted_reads import CountedReads

from storage_adapter import open_adapter
from storage_adapter.engine import Engine, tables
from storage_adapter.engine.errors import SchemaMismatchError
from storage_adapter.protocol import StorageAdapter
from storage_adapter.types import Capabilities

MIB = 1024 * 1024
ROOT = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).with_name("engine_append_peak_worker.py")
needs_proc = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
SCHEMA = pa.schema([("id", pa.int64()), ("payload", pa.binary())])


def batches(count: int, rows: int = 1000, width: int = 100) -> Iterator[pa.RecordBatch]:
    """``count`` batches of ``rows`` rows: an id and ``width`` pseudo-random bytes (Parquet cannot shrink
    them), the same on every call."""
    random = Random(7)
    for index in range(count):
        start = index * rows
        ids = pa.array(range(start, start + rows), pa.int64())
        payload = pa.array([random.randbytes(width) for _ in range(rows)])
        yield pa.record_batch([ids, payload], schema=SCHEMA)


class Recording:
    """The adapter, with the body type of every write and create recorded and, optionally, other
    capabilities declared."""

    def __init__(self, inner: StorageAdapter, capabilities: Capabilities | None = None) -> None:
        self.inner, self.bodies = inner, []  # type: ignore[var-annotated]
        self._capabilities = capabilities or inner.capabilities

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def write(self, key: str, data: Any) -> str:
        self.bodies.append(("write", key, type(data)))
        return self.inner.write(key, data)

    def write_if_absent(self, key: str, data: Any) -> str | None:
        self.bodies.append(("write_if_absent", key, type(data)))
        return self.inner.write_if_absent(key, data)


def fragment_bodies(recording: Recording) -> list[tuple[str, type]]:
    return [(method, kind) for method, key, kind in recording.bodies if "/data/" in key]


def run_worker(size: int, tmp_path: Path) -> dict[str, Any]:
    completed = subprocess.run(
        [sys.executable, str(WORKER), f"file://{tmp_path}", str(size)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert completed.returncode == 0, completed.stderr
    measured: dict[str, Any] = json.loads(completed.stdout)
    print(
        f"\nengine append of {size / MIB:.0f} MiB to local: peak RSS +{measured['peak_growth'] / MIB:.1f} MiB, "
        f"{measured['seconds']:.1f} s"
    )
    assert measured["rows"] == measured["expected_rows"] and measured["bytes"] == measured["stored_bytes"]
    assert measured["bytes"] > size * 0.99  # random payloads: Parquet cannot shrink them
    return measured


@needs_proc
def test_an_engine_append_of_256mib_stays_under_96mib(tmp_path: Path) -> None:
    assert run_worker(256 * MIB, tmp_path)["peak_growth"] < 96 * MIB


@needs_proc
@pytest.mark.stress
def test_an_engine_append_of_2gib_stays_under_128mib(tmp_path: Path) -> None:
    assert run_worker(2048 * MIB, tmp_path)["peak_growth"] < 128 * MIB


def test_a_fragment_streams_row_group_by_row_group(adapter: StorageAdapter, monkeypatch: Any) -> None:
    """On memory, local and SeaweedFS (past one part: a multipart upload): the body is a stream, the
    fragment has many row groups, and its reported rows and bytes are the stored object's."""
    monkeypatch.setattr(tables, "ROW_GROUP_BYTES", 1024 * 1024)
    recording = Recording(adapter)
    engine = Engine.open(recording)  # type: ignore[arg-type]
    engine.create_table("t", SCHEMA)
    ref = engine.write_fragment("t", pa.RecordBatchReader.from_batches(SCHEMA, batches(20, width=600)))
    streamed = "write_if_absent" if tables._creates_streams(adapter.capabilities) else "write"
    assert [method for method, _ in fragment_bodies(recording)] == [streamed]
    assert all(kind is not bytes for _, kind in fragment_bodies(recording))
    stored = pq.ParquetFile(pa.py_buffer(adapter.read_bytes(ref.key)))
    assert stored.metadata.num_row_groups > 5
    assert (ref.rows, ref.bytes) == (20_000, len(adapter.read_bytes(ref.key))) and ref.bytes > 11 * MIB
    engine.commit_fragments({"t": [ref]})
    assert engine.read("t").equals(pa.Table.from_batches(list(batches(20, width=600))))


def test_a_small_fragment_is_one_create_of_bytes() -> None:
    recording = Recording(open_adapter("memory://engine-streams-small"))
    engine = Engine.open(recording)  # type: ignore[arg-type]
    engine.create_table("t", SCHEMA)
    engine.commit({"t": pa.Table.from_batches(list(batches(2)))})
    ref = engine.write_fragment("t", pa.RecordBatchReader.from_batches(SCHEMA, batches(1)))
    assert fragment_bodies(recording) == [("write_if_absent", bytes), ("write_if_absent", bytes)]
    assert ref.rows == 1000 and ref.bytes == len(recording.inner.read_bytes(ref.key))


def test_a_stream_limited_create_is_a_plain_streamed_write(monkeypatch: Any) -> None:
    """Where a conditional stream is limited to one request (S3), a large fragment is written with
    ``write``: its key is a fresh ULID, so no other writer creates it."""
    monkeypatch.setattr(tables, "ROW_GROUP_BYTES", 64 * 1024)
    inner = open_adapter("memory://engine-streams-limited")
    recording = Recording(inner, dataclasses.replace(inner.capabilities, streamed_conditional_limit=1024))
    engine = Engine.open(recording)  # type: ignore[arg-type]
    engine.create_table("t", SCHEMA)
    ref = engine.write_fragment("t", pa.RecordBatchReader.from_batches(SCHEMA, batches(20)))
    ((method, kind),) = fragment_bodies(recording)
    assert method == "write" and kind is not bytes
    assert ref.bytes == len(inner.read_bytes(ref.key))


@pytest.mark.parametrize("backend", ["memory", "local"])
def test_a_failed_stream_leaves_no_fragment(backend: str, tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(tables, "ROW_GROUP_BYTES", 64 * 1024)
    url = "memory://engine-streams-failed" if backend == "memory" else f"file://{tmp_path}"
    engine = Engine.open(url)
    engine.create_table("t", SCHEMA)

    def failing() -> Iterator[pa.RecordBatch]:
        yield from batches(10)
        raise RuntimeError("the producer fails")

    with pytest.raises(RuntimeError, match="the producer fails"):
        engine.write_fragment("t", pa.RecordBatchReader.from_batches(SCHEMA, failing()))
    assert engine.adapter.list("tables/t/data") == []
    wrong = pa.schema([("id", pa.int32())])
    with pytest.raises(SchemaMismatchError):
        engine.write_fragment("t", pa.RecordBatchReader.from_batches(wrong, iter([])))
    assert engine.adapter.list("tables/t/data") == []


def test_a_projection_reads_only_the_chunks_of_its_columns(adapter: StorageAdapter) -> None:
    """On memory, local and SeaweedFS."""
    engine = Engine.open(adapter)
    engine.create_table("t", SCHEMA)
    data = pa.Table.from_batches(list(batches(4, rows=2000, width=1000)))
    ref = engine.write_fragment("t", data)
    counted = CountedReads(adapter)
    projected = tables.read_fragment(counted, ref.key, columns=["id"])  # type: ignore[arg-type]
    assert projected.column_names == ["id"] and projected.column("id").equals(data.column("id"))
    assert 0 < sum(counted.read) < ref.bytes / 20, (counted.read, ref.bytes)
    assert tables.read_fragment(adapter, ref.key).equals(data)
    assert tables.read_fragment(adapter, ref.key, ["payload", "id"]).column_names == ["payload", "id"]


def test_a_fragment_writer_writes_while_its_rows_arrive(adapter: StorageAdapter, monkeypatch: Any) -> None:
    """On memory, local and SeaweedFS: a FragmentWriter encodes a row group whenever enough rows are
    pending and, past STREAM_AFTER_BYTES, hands its bytes to a streamed write before its last row has
    come (a Spark task's upload overlaps its input); a small one is one create of bytes at ``finish``."""
    monkeypatch.setattr(tables, "STREAM_AFTER_BYTES", 256 * 1024)
    recording = Recording(adapter)
    engine = Engine.open(recording)  # type: ignore[arg-type]
    engine.create_table("t", SCHEMA)
    rows = list(batches(20, width=600))
    writer = tables.FragmentWriter(recording, "t", SCHEMA, "tables/t/data/streamed.parquet", (), 128 * 1024)  # type: ignore[arg-type]
    for batch in rows[:10]:
        writer.add(pa.Table.from_batches([batch]))
    streamed = "write_if_absent" if tables._creates_streams(adapter.capabilities) else "write"
    deadline = time.monotonic() + 30  # the write runs in a thread of its own: it starts soon, not at once
    while not fragment_bodies(recording) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [method for method, _ in fragment_bodies(recording)] == [streamed]  # started before the end
    for batch in rows[10:]:
        writer.add(pa.Table.from_batches([batch]))
    ref = writer.finish()
    assert writer.held_bytes == 0  # every byte went to the write
    assert (ref.rows, ref.bytes) == (20_000, len(adapter.read_bytes(ref.key)))
    assert pq.ParquetFile(pa.py_buffer(adapter.read_bytes(ref.key))).metadata.num_row_groups > 10
    small = tables.FragmentWriter(recording, "t", SCHEMA, "tables/t/data/small.parquet")  # type: ignore[arg-type]
    small.add(pa.Table.from_batches(rows[:1]))
    small_ref = small.finish()
    assert fragment_bodies(recording)[-1] == ("write_if_absent", bytes)
    engine.commit_fragments({"t": [ref, small_ref]})
    assert engine.read("t").equals(pa.Table.from_batches(rows + rows[:1]))


@pytest.mark.parametrize("backend", ["memory", "local"])
def test_an_aborted_fragment_writer_leaves_nothing(backend: str, tmp_path: Path, monkeypatch: Any) -> None:
    """Aborted mid-stream (a Spark task whose rows stopped fitting, or that failed), nothing is visible."""
    monkeypatch.setattr(tables, "STREAM_AFTER_BYTES", 64 * 1024)
    adapter = open_adapter("memory://engine-streams-aborted" if backend == "memory" else f"file://{tmp_path}")
    writer = tables.FragmentWriter(adapter, "t", SCHEMA, "tables/t/data/aborted.parquet", (), 64 * 1024)
    for batch in batches(5):
        writer.add(pa.Table.from_batches([batch]))
    writer.abort()
    assert adapter.list("tables/t") == []
    assert adapter.remove_orphans(min_age_s=0) == 0  # nor a local staging file left behind


def test_dictionary_encoding_is_kept_only_where_it_pays() -> None:
    """Judged per column on a fragment's first rows, as Spark's Parquet writer judges a first page: a
    repetitive column keeps its dictionary, a column of unique values is written plain (smaller, and
    cheaper to encode than a dictionary pyarrow would build up to 1 MiB and drop)."""
    rows = 100_000
    data = pa.table(
        {
            "day": pa.array([f"2026-11-{i % 3 + 1:02d}" for i in range(rows)]),
            "id": pa.array(range(rows), pa.int64()),
            "label": pa.array([f"row-{i}" for i in range(rows)]),
            "code": pa.array([i % 500 for i in range(rows)], pa.int32()),
        }
    )
    assert tables.dictionary_columns(data) == ["day", "code"]
    stored = pq.ParquetFile(pa.py_buffer(tables.encode_fragment(data).whole)).metadata.row_group(0)
    encodings = {stored.column(i).path_in_schema: stored.column(i).encodings for i in range(4)}
    assert "RLE_DICTIONARY" in encodings["day"] and "RLE_DICTIONARY" in encodings["code"]
    assert "RLE_DICTIONARY" not in encodings["id"] and "RLE_DICTIONARY" not in encodings["label"]
    nested = pa.table({"tags": pa.array([["a"]] * 10), "id": pa.array(range(10))})
    assert tables.dictionary_columns(nested) is True  # nested leaves are not judged: pyarrow's default
