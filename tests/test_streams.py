"""Ranged and streamed I/O beyond the contract's clauses (issue 20, item 1): what each costs, measured.

* A 64 KiB range of a 4 MiB object on SeaweedFS is one GET carrying a Range header and about 64 KiB of
  body, counted by a forwarding proxy in front of the server (the wire, not the adapter's own account);
  ``read_ranges`` pins every GET after the first with If-Match.
* A 2 GiB streamed write to local, from a generator of 8 MiB chunks, grows the peak resident set of its
  process by less than 128 MiB (tests/stream_peak_worker.py).
* Local streams stage outside the directory lock: a slow stream does not hold up other writers of its
  directory, and a generator that writes beside its own key does not deadlock.
* A stream killed mid-write (kill -9) leaves nothing visible, and its staging file, whose flock died
  with it, is an orphan remove_orphans reclaims.
* CountingAdapter counts ranged reads as the requests they are.
"""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import pytest
from loopback_http import serving

from contract_tests.counting import CountingAdapter
from storage_adapter import open_adapter
from storage_adapter.protocol import StorageAdapter
from storage_adapter.servers.server import S3Endpoint

KIB, MIB, GIB = 1024, 1024 * 1024, 1024 * 1024 * 1024
WORKER = Path(__file__).with_name("stream_peak_worker.py")
needs_proc = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")

# Headers the proxy answers for itself: it sends each response with its own length.
_HOP = {"connection", "transfer-encoding", "content-length", "keep-alive"}


class _Request(dict[str, Any]):
    """One forwarded request: method, path, Range, If-Match and the response body's length."""


class _Forwarding(BaseHTTPRequestHandler):
    """Forwards every request unchanged (Host included, so signatures hold) to ``target`` and records it."""

    protocol_version = "HTTP/1.1"
    target: ClassVar[tuple[str, int]]
    seen: ClassVar[list[_Request]]

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        upstream = http.client.HTTPConnection(*self.target, timeout=60)
        try:
            upstream.request(self.command, self.path, body=body, headers=dict(self.headers.items()))
            response = upstream.getresponse()
            data = response.read()
            headers = response.getheaders()
        finally:
            upstream.close()
        self.seen.append(
            _Request(
                method=self.command,
                path=self.path,
                range=self.headers.get("Range"),
                if_match=self.headers.get("If-Match"),
                status=response.status,
                body_bytes=len(data),
            )
        )
        self.send_response(response.status)
        for name, value in headers:
            if name.lower() not in _HOP:
                self.send_header(name, value)
        announced = response.getheader("Content-Length") if self.command == "HEAD" else None
        self.send_header("Content-Length", announced or str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def through_proxy(embedded_seaweedfs: S3Endpoint) -> Iterator[tuple[StorageAdapter, list[_Request]]]:
    """An adapter on the embedded SeaweedFS whose every request goes through a recording proxy."""
    parts = urlsplit(embedded_seaweedfs.endpoint)
    seen: list[_Request] = []
    handler = type("Forward", (_Forwarding,), {"target": (parts.hostname, parts.port), "seen": seen})
    with serving(handler) as proxy:
        options = {**embedded_seaweedfs.adapter_options(), "endpoint": proxy}
        adapter = open_adapter(embedded_seaweedfs.url("streams-wire"), **options)
        yield adapter, seen
        adapter.delete_prefix("t")


def test_a_64k_range_of_a_4mib_object_is_one_small_request(
    through_proxy: tuple[StorageAdapter, list[_Request]],
) -> None:
    adapter, seen = through_proxy
    body = bytes(range(256)) * (4 * MIB // 256)
    adapter.write("t/big", body)
    seen.clear()
    assert adapter.read_range("t/big", MIB, MIB + 64 * KIB) == body[MIB : MIB + 64 * KIB]
    print(f"\n64 KiB range of a 4 MiB object on SeaweedFS: {len(seen)} request(s): {seen}")
    assert len(seen) == 1, seen
    (get,) = seen
    assert get["method"] == "GET" and get["range"] == f"bytes={MIB}-{MIB + 64 * KIB - 1}"
    assert get["body_bytes"] == 64 * KIB

    seen.clear()
    ranges = [(0, 10), (2 * MIB, 2 * MIB + 10), (4 * MIB - 10, 4 * MIB + 50)]
    assert adapter.read_ranges("t/big", ranges) == [body[s:e] for s, e in ranges]
    assert [r["method"] for r in seen] == ["GET"] * 3 and sum(r["body_bytes"] for r in seen) == 30
    assert seen[0]["if_match"] is None and seen[1]["if_match"] == seen[2]["if_match"] is not None

    seen.clear()
    with adapter.open_reader("t/big") as reader:
        reader.seek(3 * MIB)
        assert reader.read(100) == body[3 * MIB : 3 * MIB + 100]
    assert [r["method"] for r in seen] == ["HEAD", "GET"] and seen[1]["if_match"] is not None


def test_a_streamed_write_to_s3_is_one_put_or_a_multipart_upload(
    through_proxy: tuple[StorageAdapter, list[_Request]],
) -> None:
    """A stream that fits one part is one PUT; a longer one a multipart upload (create, parts,
    complete), never a PUT of the whole body."""
    adapter, seen = through_proxy
    adapter.write("t/small", iter([b"a" * KIB] * 3))
    assert [r["method"] for r in seen] == ["PUT"]
    seen.clear()
    body = b"m" * (12 * MIB + 1)
    token = adapter.write("t/multi", (body[i : i + MIB] for i in range(0, len(body), MIB)))
    methods = [r["method"] for r in seen]
    assert methods[0] == "POST" and methods[-1] == "POST" and methods.count("PUT") == 3, methods
    assert adapter.read_versioned("t/multi").token == token and adapter.read_bytes("t/multi") == body


@needs_proc
def test_a_2gib_streamed_write_to_local_stays_under_128mib(tmp_path: Path) -> None:
    root = str(Path(__file__).parent.parent)
    completed = subprocess.run(
        [sys.executable, str(WORKER), f"file://{tmp_path}", json.dumps({}), str(2 * GIB), str(8 * MIB)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=root,
        env={"PYTHONPATH": root, "PATH": "/usr/bin:/bin"},
    )
    assert completed.returncode == 0, completed.stderr
    measured = json.loads(completed.stdout)
    print(
        f"\n2 GiB streamed write to local: peak RSS +{measured['peak_growth'] / MIB:.1f} MiB, "
        f"{measured['seconds']:.1f} s"
    )
    assert measured["peak_growth"] < 128 * MIB, measured


def test_a_slow_local_stream_holds_up_no_other_writer(tmp_path: Path) -> None:
    """While a stream waits in its generator, another writer of the same directory completes, and the
    generator itself may write beside its own key (it would deadlock under the directory lock)."""
    adapter = open_adapter(f"file://{tmp_path}")
    waiting, release = threading.Event(), threading.Event()

    def slow() -> Iterator[bytes]:
        yield b"first,"
        adapter.write("d/beside", b"written from inside the stream")
        waiting.set()
        assert release.wait(30)
        yield b"last"

    with_stream = threading.Thread(target=adapter.write, args=("d/streamed", slow()))
    with_stream.start()
    try:
        assert waiting.wait(30)
        adapter.write("d/other", b"not held up")
        assert not adapter.exists("d/streamed") and adapter.read_bytes("d/other") == b"not held up"
        assert adapter.remove_orphans(0.0) == 0  # the staging file is in flight
    finally:
        release.set()
        with_stream.join(30)
    assert adapter.read_bytes("d/streamed") == b"first,last"
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["beside", "other", "streamed"]


def test_counting_adapter_counts_ranged_reads(adapter: StorageAdapter) -> None:
    counting = CountingAdapter(adapter)
    adapter.write("k", b"0123456789")
    assert counting.read_range("k", 2, 4) == b"23"
    assert counting.read_ranges("k", [(0, 1), (5, 6)]) == [b"0", b"5"]
    assert bytes(counting.read_buffer("k")) == b"0123456789"
    with counting.open_reader("k") as reader:
        assert reader.read() == b"0123456789"
    assert counting.counts == {"read_range": 1, "read_ranges": 2, "read_buffer": 1, "open_reader": 1}


_DYING_WRITER = """
import os, sys, time
from storage_adapter import open_adapter

def chunks():
    yield b"staged before the crash"
    print("staging", flush=True)
    time.sleep(60)
    yield b"never"

open_adapter(sys.argv[1]).write("d/k", chunks())
"""


def test_a_stream_killed_mid_write_leaves_an_orphan_remove_orphans_reclaims(tmp_path: Path) -> None:
    """kill -9 of a process in the middle of a streamed write: nothing visible, and its staging file,
    whose flock died with it, is an ordinary orphan that remove_orphans reclaims."""
    root = str(Path(__file__).parent.parent)
    writer = subprocess.Popen(
        [sys.executable, "-c", _DYING_WRITER, f"file://{tmp_path}"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=root,
        env={"PYTHONPATH": root, "PATH": "/usr/bin:/bin"},
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "staging"
        adapter = open_adapter(f"file://{tmp_path}")
        assert adapter.remove_orphans(0.0) == 0  # in flight: its flock is held
    finally:
        writer.kill()
        writer.wait(30)
    assert not adapter.exists("d/k") and adapter.list() == []
    assert adapter.remove_orphans(0.0) == 1
    assert not (tmp_path / "d").exists()
