"""Measures the peak memory of one large streamed write in a fresh process (run by test_streams.py).

``python stream_peak_worker.py URL OPTIONS_JSON SIZE CHUNK`` writes SIZE bytes at ``big`` from a generator
of CHUNK-byte chunks (each a fresh ``bytes``, as a producer would make them), checks the size written,
and prints, as JSON, the growth of the peak resident set during the write over the resident set before
it (bytes) and the write's duration (seconds). Linux only: the peak is reset through
/proc/self/clear_refs first.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator

from peak_rss import peak_growth

from storage_adapter import open_adapter


def _chunks(size: int, chunk: int) -> Iterator[bytes]:
    for offset in range(0, size, chunk):
        yield bytes([offset // chunk % 251]) * min(chunk, size - offset)


if __name__ == "__main__":
    url, options, size, chunk = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    adapter = open_adapter(url, **options)
    started = time.perf_counter()
    _, growth = peak_growth(lambda: adapter.write("big", _chunks(size, chunk)))
    elapsed = time.perf_counter() - started
    written = next(info.size for info in adapter.list() if info.key == "big")
    assert written == size, (written, size)
    print(json.dumps({"peak_growth": growth, "seconds": elapsed}))
