"""A small threaded HTTP server on 127.0.0.1 that serves a directory with Range support and injects faults.

It also adds a fixed latency to every request when asked (``Faults(latency_s=0.02)``), which is how the benchmark
imitates an object store or the Hub. For tests of remote reading (fsspec http://) without the network: connection resets mid-body, 503s, slow
responses and truncated bodies, at configurable rates from a seeded RNG, optionally only on paths matching a
prefix and up to a total budget (or a budget per path: the first N requests of every file fail). Every request is logged, so tests can count requests per file and faults per
kind. The server stops itself after ``lifetime_s`` even if a test forgets to.

    with FaultyServer(root, faults=Faults(reset=0.2, unavailable=0.2, seed=1)) as server:
        url = server.url  # "http://127.0.0.1:PORT"
"""

from __future__ import annotations

import os
import random
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

_CHUNK = 64 * 1024


@dataclass(frozen=True)
class Faults:
    """Per-request fault probabilities (checked in this order; at most one fault per request)."""

    unavailable: float = 0.0  # answer 503 Service Unavailable
    reset: float = 0.0  # send headers and part of the body, then reset the connection (RST)
    truncate: float = 0.0  # send headers and part of the body, then close cleanly (body shorter than promised)
    slow: float = 0.0  # wait ``slow_s`` before answering (client timeouts)
    slow_s: float = 2.0
    cut_delay_s: float = 0.0  # pause between the partial body and the reset/close (lets the client read it first)
    seed: int = 0
    path_prefix: str = ""  # only requests whose path starts with this get faults ("" = all)
    max_faults: int | None = None  # stop injecting after this many faults (None = no limit)
    max_faults_per_path: int | None = None  # at most this many faults on each path (None = no limit)
    latency_s: float = 0.0  # added to every request before it is answered (object-store round trip)
    head: bool = False  # HEAD requests draw faults too (a 503; other kinds cut bodies, and a HEAD has none)


@dataclass
class Request:
    """One logged request."""

    method: str
    path: str
    start: int  # first byte asked for (0 without a Range header)
    status: int
    fault: str | None
    sent: int = 0  # body bytes sent


@dataclass
class _State:
    faults: Faults
    rng: random.Random
    lock: threading.Lock = field(default_factory=threading.Lock)
    log: list[Request] = field(default_factory=list)
    injected: int = 0
    per_path: dict[str, int] = field(default_factory=dict)

    def draw(self, path: str) -> str | None:
        f = self.faults
        with self.lock:
            if not path.startswith(f.path_prefix) or (f.max_faults is not None and self.injected >= f.max_faults):
                return None
            if f.max_faults_per_path is not None and self.per_path.get(path, 0) >= f.max_faults_per_path:
                return None
            u = self.rng.random()
            for kind, p in (("unavailable", f.unavailable), ("reset", f.reset), ("truncate", f.truncate),
                            ("slow", f.slow)):
                if u < p:
                    self.injected += 1
                    self.per_path[path] = self.per_path.get(path, 0) + 1
                    return kind
                u -= p
            return None


class _Handler(BaseHTTPRequestHandler):
    server_version = "roboreel-test"
    root: Path
    state: _State

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet: tests read ``log`` instead
        pass

    def do_HEAD(self) -> None:  # noqa: N802 - http.server naming
        self._guarded(body=False)

    def do_GET(self) -> None:  # noqa: N802
        self._guarded(body=True)

    def _guarded(self, *, body: bool) -> None:
        try:
            self._serve(body=body)
        except (ConnectionError, BrokenPipeError, OSError):  # the client gave up (e.g. after a slow fault)
            self.close_connection = True

    def _serve(self, *, body: bool) -> None:
        rel = self.path.split("?", 1)[0].lstrip("/")
        path = (self.root / rel).resolve()
        start, end = 0, None
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            a, _, b = rng[len("bytes="):].partition("-")
            start, end = int(a or 0), (int(b) if b else None)
        entry = Request(self.command, "/" + rel, start, 200, None)
        with self.state.lock:
            self.state.log.append(entry)
        if self.state.faults.latency_s > 0:
            time.sleep(self.state.faults.latency_s)
        if not path.is_file() or self.root.resolve() not in path.parents:
            entry.status = 404
            self.send_error(404)
            return
        fault = self.state.draw("/" + rel) if body or self.state.faults.head else None
        entry.fault = fault
        if fault == "unavailable":
            entry.status = 503
            self.send_error(503, "injected fault")
            return
        if fault == "slow":
            time.sleep(self.state.faults.slow_s)
        size = path.stat().st_size
        end = size - 1 if end is None else min(end, size - 1)
        length = max(0, end - start + 1)
        partial = rng is not None
        entry.status = 206 if partial else 200
        self.send_response(entry.status)
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        if partial:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if not body:
            return
        cut = length // 2 if fault in ("reset", "truncate") else length
        with open(path, "rb") as f:
            f.seek(start)
            while entry.sent < cut:
                chunk = f.read(min(_CHUNK, cut - entry.sent))
                if not chunk:
                    break
                try:
                    self.wfile.write(chunk)
                except OSError:
                    return
                entry.sent += len(chunk)
        if fault in ("reset", "truncate"):
            self.wfile.flush()
            time.sleep(self.state.faults.cut_delay_s)
        if fault == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
        elif fault == "truncate":  # a clean close (FIN): everything sent arrives, then the body ends early
            self.close_connection = True


class FaultyServer:
    """Serve ``root`` on 127.0.0.1 (a free port) with ``faults``; a context manager that stops by itself."""

    def __init__(self, root: str | os.PathLike[str], *, faults: Faults | None = None, lifetime_s: float = 300.0) -> None:
        self.root = Path(root)
        self.state = _State(faults or Faults(), random.Random((faults or Faults()).seed))
        handler = type("Handler", (_Handler,), {"root": self.root, "state": self.state})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="faulty-http", daemon=True)
        self._timer = threading.Timer(lifetime_s, self.stop)
        self._timer.daemon = True

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def log(self) -> list[Request]:
        with self.state.lock:
            return list(self.state.log)

    def faults_injected(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.log:
            if r.fault:
                out[r.fault] = out.get(r.fault, 0) + 1
        return out

    def set_faults(self, faults: Faults) -> None:
        """Inject ``faults`` from the next request on (e.g. the network failing in the middle of a transfer)."""
        with self.state.lock:
            self.state.faults = faults

    def start(self) -> FaultyServer:
        self._thread.start()
        self._timer.start()
        return self

    def stop(self) -> None:
        with self.state.lock:
            if getattr(self, "_stopped", False):
                return
            self._stopped = True
        self._timer.cancel()
        if self._thread.is_alive():
            self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> FaultyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
