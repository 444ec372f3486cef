"""Measures the peak memory of one large read in a fresh process (run by test_adapter_read_memory.py).

``python read_peak_worker.py URL OPTIONS_JSON SIZE WRITE`` writes SIZE bytes at ``big`` first when WRITE is
1 (memory stores live in their process), then for read_bytes and read_versioned prints, as JSON, the
growth of the peak resident set during the read over the resident set before it, in bytes. Linux only:
the peak is reset through /proc/self/clear_refs before each read.
"""

from __future__ import annotations

import gc
import json
import sys

from storage_adapter import open_adapter


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _peak_growth(read: object) -> int:
    gc.collect()
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # reset VmHWM to the current resident set
    before = _status_bytes("VmRSS")
    result = read()  # type: ignore[operator]
    data = result if isinstance(result, bytes) else result.data
    assert type(data) is bytes and len(data) == SIZE, (type(data), len(data))
    growth = _status_bytes("VmHWM") - before
    del result, data
    return growth


if __name__ == "__main__":
    url, options, SIZE, write = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
    adapter = open_adapter(url, **options)
    if write:
        adapter.write("big", b"0123456789abcdef" * (SIZE // 16))
    print(json.dumps({
        "read_bytes": _peak_growth(lambda: adapter.read_bytes("big")),
        "read_versioned": _peak_growth(lambda: adapter.read_versioned("big")),
    }))  # fmt: skip
