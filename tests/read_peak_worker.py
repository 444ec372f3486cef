"""Measures the peak memory of one large read in a fresh process (run by test_adapter_read_memory.py).

``python read_peak_worker.py URL OPTIONS_JSON SIZE WRITE`` writes SIZE bytes at ``big`` first when WRITE is
1 (memory stores live in their process), then for read_bytes and read_versioned prints, as JSON, the
growth of the peak resident set during the read over the resident set before it, in bytes. Linux only:
the peak is reset through /proc/self/clear_refs before each read.
"""

from __future__ import annotations

import json
import sys

from peak_rss import peak_growth

from storage_adapter import open_adapter


def _peak_growth(read: object) -> int:
    result, growth = peak_growth(read)  # type: ignore[arg-type]
    data = result if isinstance(result, bytes) else result.data
    assert type(data) is bytes and len(data) == SIZE, (type(data), len(data))
    del result, data
    return growth


if __name__ == "__main__":
    url, options, SIZE, write = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
    adapter = open_adapter(url, **options)
    if write:
        adapter.write("big", b"0123456789abcdef" * (SIZE // 16))
    print(
        json.dumps(
            {
                "read_bytes": _peak_growth(lambda: adapter.read_bytes("big")),
                "read_versioned": _peak_growth(lambda: adapter.read_versioned("big")),
            }
        )
    )
