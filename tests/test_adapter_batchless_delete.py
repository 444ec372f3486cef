"""Servers without the multi-object delete (``POST /bucket?delete`` answered 501): ``delete``,
``delete_prefix`` and ``rename`` still work (issue 12 #11).

object_store 0.13 (under obstore 0.12) deletes even one key with ``POST ?delete``; the S3 driver falls
back to one DeleteObject per key once the server refuses it.
"""

from __future__ import annotations

import http.client
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.error import HTTPError
from urllib.parse import urlsplit

import pytest
from loopback_http import serving

from storage_adapter import open_adapter
from storage_adapter.builtin_backends import LOCAL, MEMORY, S3
from storage_adapter.servers.server import S3Endpoint

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade"}


def _proxy_to(upstream: str, seen: list[str]) -> type[BaseHTTPRequestHandler]:
    target = urlsplit(upstream)

    class NoBatchDelete(BaseHTTPRequestHandler):
        """Forwards every request to ``upstream`` except the multi-object delete, answered 501."""

        protocol_version = "HTTP/1.1"

        def _relay(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            query = urlsplit(self.path).query
            seen.append(f"{self.command} {urlsplit(self.path).path}{'?' + query if query else ''}")
            if self.command == "POST" and "delete" in query.split("&"):
                self._send(
                    501, [("Content-Type", "application/xml")], b"<Error><Code>NotImplemented</Code></Error>"
                )
                return
            upstream_conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
            try:
                # The Host header is passed on as sent: SeaweedFS without identities checks no signature.
                upstream_conn.request(self.command, self.path, body=body or None, headers=dict(self.headers))
                response = upstream_conn.getresponse()
                data = response.read()
                self._send(response.status, response.getheaders(), data)
            finally:
                upstream_conn.close()

        def _send(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
            self.send_response(status)
            for name, value in headers:
                if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return NoBatchDelete


@pytest.fixture
def no_batch_delete(embedded_seaweedfs: S3Endpoint) -> Iterator[tuple[S3Endpoint, list[str]]]:
    """SeaweedFS behind a proxy that refuses ``POST ?delete`` with 501; and the requests it saw."""
    seen: list[str] = []
    with serving(_proxy_to(embedded_seaweedfs.endpoint, seen)) as url:
        yield replace(embedded_seaweedfs, endpoint=url), seen


def test_delete_and_delete_prefix_without_batch_delete(no_batch_delete: tuple[S3Endpoint, list[str]]) -> None:
    endpoint, seen = no_batch_delete
    request = urllib.request.Request(f"{endpoint.endpoint}/{endpoint.bucket}?delete", data=b"<Delete/>")
    with pytest.raises(HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 501  # the proxy really refuses the multi-object delete

    adapter = open_adapter(endpoint.url("no-batch-delete"), **endpoint.adapter_options())
    adapter.write("k", b"v")
    adapter.delete("k")
    assert not adapter.exists("k")
    adapter.delete("k")  # idempotent
    for key in ("p/1", "p/2/3", "pq"):
        adapter.write(key, b"x")
    assert adapter.delete_prefix("p") == 2
    assert [i.key for i in adapter.list()] == ["pq"]
    adapter.rename("pq", "moved")  # copy, then a single delete
    assert [i.key for i in adapter.list()] == ["moved"]
    # Refused once (object_store retries the 501 first), the driver never sends POST ?delete again.
    first_single = next(i for i, line in enumerate(seen) if line.startswith("DELETE "))
    assert not [line for line in seen[first_single:] if line.startswith("POST") and "delete" in line]
    assert sum(line.startswith("DELETE ") for line in seen) == 5  # k twice, p/1, p/2/3, pq


def test_every_builtin_backend_says_how_it_deletes_one_key() -> None:
    for backend in (LOCAL, S3, MEMORY):
        peer = backend.fsspec_peer
        for capabilities in (backend.capabilities, peer.capabilities if peer else None):
            if capabilities is not None:
                assert capabilities.single_delete.strip(), capabilities
    assert "never the multi-object POST ?delete" in S3.capabilities.single_delete
