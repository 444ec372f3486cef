"""Measures the peak memory of one large engine append in a fresh process (run by test_engine_streams.py).

``python engine_append_peak_worker.py URL SIZE`` opens an engine at URL, creates table ``t`` and appends
SIZE bytes of rows to it (an int64 id and 1,000 random bytes per row, so Parquet cannot shrink them),
generated batch by batch behind a ``pyarrow.RecordBatchReader``: ``Engine.write_fragment`` then
``commit_fragments``. It prints, as JSON, the growth of the peak resident set during the append over the
resident set before it (bytes; after a first small append, so the libraries' code paths are already paged in), the append's duration (seconds), and the fragment's reported and stored
rows and bytes. Linux only: the peak is reset through /proc/self/clear_refs first.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from peak_rss import peak_growth

from storage_adapter.engine import Engine
from storage_adapter.engine.tables import FragmentRef

WIDTH = 1000
BATCH_ROWS = 8192  # 8 MiB of rows per batch, as a producer would hand them over
SCHEMA = pa.schema([("id", pa.int64()), ("payload", pa.binary(WIDTH))])


def _batches(rows: int) -> Iterator[pa.RecordBatch]:
    random = np.random.default_rng(7)
    for start in range(0, rows, BATCH_ROWS):
        n = min(BATCH_ROWS, rows - start)
        payload = pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(WIDTH), n, [None, pa.py_buffer(random.bytes(n * WIDTH))]
        )
        yield pa.record_batch([pa.array(np.arange(start, start + n, dtype=np.int64)), payload], schema=SCHEMA)


if __name__ == "__main__":
    url, size = sys.argv[1], int(sys.argv[2])
    rows = size // (WIDTH + 8)
    engine = Engine.open(url)
    engine.create_table("t", SCHEMA)
    engine.commit({"t": pa.Table.from_batches(_batches(BATCH_ROWS))})  # warm up: the code paths' own pages
    reader = pa.RecordBatchReader.from_batches(SCHEMA, _batches(rows))

    def append() -> FragmentRef:
        ref = engine.write_fragment("t", reader)
        engine.commit_fragments({"t": [ref]})
        return ref

    started = time.perf_counter()
    ref, growth = peak_growth(append)
    elapsed = time.perf_counter() - started
    stored = next(info.size for info in engine.adapter.list("tables/t/data") if info.key == ref.key)
    print(
        json.dumps(
            {
                "peak_growth": growth,
                "seconds": elapsed,
                "rows": ref.rows,
                "expected_rows": rows,
                "bytes": ref.bytes,
                "stored_bytes": stored,
            }
        )
    )
