"""A TCP proxy on 127.0.0.1 in front of a server, that resets connections carrying chosen HTTP requests.

``ResettingProxy(upstream_port, match=b"/shards/", faults=1, after=4096)``: every connection is piped both ways to
``127.0.0.1:upstream_port``; the first ``faults`` connections on which the client sends a ``method`` (GET) request
whose request line contains ``match`` are reset (an RST to the client: SO_LINGER 0) once ``after`` bytes of the
response have been passed on, so the client sees a reply that started and then broke. ``faulted`` lists the
request lines cut.
"""

from __future__ import annotations

import contextlib
import re
import selectors
import socket
import struct
import threading

_REQUEST_LINE = re.compile(rb"(?:GET|HEAD|PUT|POST|DELETE) [^ \r\n]+ HTTP/1\.[01]")


class ResettingProxy:
    def __init__(self, upstream_port: int, *, match: bytes, method: bytes = b"GET", faults: int = 1,
                 after: int = 4096) -> None:
        self.upstream_port, self.match, self.method, self.after = upstream_port, match, method, after
        self.faults_left = faults
        self.faulted: list[bytes] = []
        self.connections = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ResettingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() (a close alone does not)
        with contextlib.suppress(OSError):
            self._listener.close()
        self._thread.join(timeout=10)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            with self._lock:
                self.connections += 1
            threading.Thread(target=_Connection(self, client, upstream).run, daemon=True).start()

    def _claim(self, line: bytes) -> bool:
        """Whether the connection that sent request ``line`` is to be reset (spends one fault)."""
        with self._lock:
            if self.faults_left > 0 and line.startswith(self.method + b" ") and self.match in line:
                self.faults_left -= 1
                self.faulted.append(line)
                return True
            return False


class _Connection:
    """One client connection and its upstream, pumped both ways by one thread (so a reset closes sockets that no
    other thread is blocked on: the RST goes out at once)."""

    def __init__(self, proxy: ResettingProxy, client: socket.socket, upstream: socket.socket) -> None:
        self.proxy, self.client, self.upstream = proxy, client, upstream
        self.doomed = False
        self.passed = 0  # response bytes passed on since the connection was doomed

    def run(self) -> None:
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(self.client, selectors.EVENT_READ)
                sel.register(self.upstream, selectors.EVENT_READ)
                while not self.proxy._closed:
                    for key, _ in sel.select(timeout=0.5):
                        if not (self._request() if key.fileobj is self.client else self._response()):
                            return
        except OSError:
            pass
        finally:
            for s in (self.client, self.upstream):
                with contextlib.suppress(OSError):
                    s.close()

    def _request(self) -> bool:  # client -> upstream, watching request lines
        data = self.client.recv(65536)
        if not data:
            return False
        if not self.doomed:
            self.doomed = any(self.proxy._claim(m.group(0)) for m in _REQUEST_LINE.finditer(data))
        self.upstream.sendall(data)
        return True

    def _response(self) -> bool:  # upstream -> client; a doomed connection is reset part way through its reply
        data = self.upstream.recv(65536)
        if not data:
            return False
        if self.doomed:
            room = self.proxy.after - self.passed
            if room <= len(data):
                self.client.sendall(data[: max(room, 0)])
                self.client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return False  # closed with SO_LINGER 0: an RST
            self.passed += len(data)
        self.client.sendall(data)
        return True
