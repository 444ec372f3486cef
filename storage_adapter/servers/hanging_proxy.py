"""A loopback proxy in front of an S3 server that never answers the requests it is told to hold.

It reproduces a server or gateway that hangs on some requests (one that never answers a conditional PUT,
one that stops answering altogether) in front of a healthy server, so the referee's bounds can be tested
against the real thing: ``storage-adapter check`` must end within its budget, name the hung primitive and
write its reports. Every request the rule does not pick is relayed byte for byte (the signature of a
SigV4 request covers the ``Host`` header, which is relayed unchanged: point the client at the proxy). A
held request is read whole and then left without one byte of answer, its connection open, until the
client gives up.

    with SeaweedFS() as server, HangingProxy(server.endpoint, conditional_puts) as proxy:
        ...  # AWS_ENDPOINT_URL=proxy.endpoint

Only plain HTTP/1.1 with ``Content-Length`` or chunked request bodies is understood, which is what S3
clients send; responses are never parsed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import socketserver
import threading
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import BinaryIO

PREFLIGHT_MARK = "storage-adapter-preflight-"  # the key prefix of `storage-adapter check`'s probe object


@dataclass(frozen=True)
class ProxiedRequest:
    """A request's line, headers (names in lower case) and body, as the client sent them."""

    method: str
    target: str
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""


def conditional_puts(request: ProxiedRequest) -> bool:
    """Hold every conditional PUT (``If-Match`` or ``If-None-Match``): a server whose conditional writes
    never answer."""
    return request.method == "PUT" and ("if-match" in request.headers or "if-none-match" in request.headers)


def everything_after_the_preflight(request: ProxiedRequest) -> bool:
    """Hold every request but those of the check's preflight probe (its key in the path, or in the body
    of a multi-object delete): a server that stops answering as soon as the contract starts."""
    return PREFLIGHT_MARK not in request.target and PREFLIGHT_MARK.encode() not in request.body


class _Handler(socketserver.BaseRequestHandler):
    server: _ProxyServer

    def handle(self) -> None:
        client: socket.socket = self.request
        try:
            upstream = socket.create_connection(self.server.upstream, timeout=10)
        except OSError:
            return
        upstream.settimeout(None)
        self.server.track(client, upstream)
        pump = threading.Thread(target=_relay, args=(upstream, client), daemon=True)
        pump.start()
        reader: BinaryIO = client.makefile("rb")
        try:
            while True:
                head = _read_head(reader)
                if head is None:
                    return
                request, raw = head
                body = _read_body(reader, request)
                if self.server.hang(dataclasses.replace(request, body=body)):
                    self.server.note_held(request)
                    while reader.read(65536):  # hold: never answer, until the client hangs up
                        pass
                    return
                upstream.sendall(raw + body)
        except OSError:
            return
        finally:
            _close(upstream, client)


def _relay(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()


def _read_head(reader: BinaryIO) -> tuple[ProxiedRequest, bytes] | None:
    lines = []
    while True:
        line = reader.readline(65537)
        if not line:
            return None
        lines.append(line)
        if line in (b"\r\n", b"\n"):
            break
    method, target, _ = lines[0].decode("latin-1").split(" ", 2)
    headers = {}
    for line in lines[1:-1]:
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return ProxiedRequest(method, urllib.parse.unquote(target), headers), b"".join(lines)


def _read_body(reader: BinaryIO, request: ProxiedRequest) -> bytes:
    if request.headers.get("transfer-encoding", "").lower() == "chunked":
        parts = []
        while True:
            size_line = reader.readline()
            parts.append(size_line)
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while True:  # trailers, then the blank line
                    trailer = reader.readline()
                    parts.append(trailer)
                    if trailer in (b"\r\n", b"\n", b""):
                        return b"".join(parts)
            parts.append(reader.read(size + 2))
    length = int(request.headers.get("content-length", "0") or 0)
    return reader.read(length) if length else b""


class _ProxyServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, upstream: tuple[str, int], hang: Callable[[ProxiedRequest], bool]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream = upstream
        self.hang = hang
        self.held: list[ProxiedRequest] = []
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()

    def track(self, *sockets: socket.socket) -> None:
        with self._lock:
            self._sockets.extend(sockets)

    def note_held(self, request: ProxiedRequest) -> None:
        with self._lock:
            self.held.append(request)

    def close_all(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, []
        _close(*sockets)


class HangingProxy:
    """The proxy on a free loopback port while the block runs: ``endpoint`` is its URL, ``held`` the
    requests it has held so far. Leaving the block closes every connection, held ones included."""

    def __init__(self, upstream: str, hang: Callable[[ProxiedRequest], bool]) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        if parsed.scheme != "http" or parsed.hostname is None or parsed.port is None:
            raise ValueError(f"upstream must be http://host:port, got {upstream!r}")
        self._server = _ProxyServer((parsed.hostname, parsed.port), hang)
        self._thread = threading.Thread(target=self._server.serve_forever, name="hanging proxy", daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def held(self) -> list[ProxiedRequest]:
        return list(self._server.held)

    def __enter__(self) -> HangingProxy:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.close_all()
        self._server.server_close()
