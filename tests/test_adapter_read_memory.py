"""A large read holds one copy of the object: peak memory at most 1.3x its size (issue 12 #10).

Each read runs in a fresh process (tests/read_peak_worker.py) that measures the growth of its peak
resident set, which counts obstore's Rust buffers as well as Python's (tracemalloc would see only the
latter).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from storage_adapter import open_adapter
from storage_adapter.protocol import StorageAdapter
from storage_adapter.servers.server import S3Endpoint
from storage_adapter.types import Versioned

SIZE = 200 * 1024 * 1024
LIMIT = 1.3
WORKER = Path(__file__).with_name("read_peak_worker.py")

needs_proc = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")


def _peaks(url: str, options: dict[str, Any], write: bool) -> dict[str, float]:
    root = str(Path(__file__).parent.parent)
    completed = subprocess.run(
        [sys.executable, str(WORKER), url, json.dumps(options), str(SIZE), "1" if write else "0"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
        env={"PYTHONPATH": root, "PATH": "/usr/bin:/bin"},
    )
    assert completed.returncode == 0, completed.stderr
    return {read: growth / SIZE for read, growth in json.loads(completed.stdout).items()}


@needs_proc
def test_memory_read_holds_one_copy() -> None:
    peaks = _peaks("memory://big-read", {}, write=True)
    assert max(peaks.values()) <= LIMIT, peaks


@needs_proc
def test_s3_read_holds_one_copy(embedded_seaweedfs: S3Endpoint) -> None:
    url = embedded_seaweedfs.url("big-read")
    open_adapter(url, **embedded_seaweedfs.adapter_options()).write("big", b"0123456789abcdef" * (SIZE // 16))
    peaks = _peaks(url, embedded_seaweedfs.adapter_options(), write=False)
    assert max(peaks.values()) <= LIMIT, peaks


def test_multi_chunk_reads_are_exact(adapter: StorageAdapter) -> None:
    """Bodies around the streaming chunk size (one chunk, several, an empty one) read back exactly."""
    for size in (0, 1, (1 << 20) - 1, 1 << 20, 3 * (1 << 20) + 1):
        body = os.urandom(size)
        token = adapter.write(f"sized/{size}", body)
        assert adapter.read_bytes(f"sized/{size}") == body
        assert adapter.read_versioned(f"sized/{size}") == Versioned(data=body, token=token)
