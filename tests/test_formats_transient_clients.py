"""formats/transient_errors.py on the real errors of the HTTP clients remote sources are read with.

hf:// reads go through huggingface_hub, whose HTTP layer is httpx2 in the installed version: HfFileSystemFile
fetches each block with ``http_backoff`` and ``hf_raise_for_status`` (and the streaming file the same way), so
the errors here come from those two functions pointed at the fault-injecting server (tests/support), with
huggingface_hub's own retries off: a reset, a body cut short, a stall past the read timeout, a refused
connection. None of them carries an HTTP status; they must be retried, while a 404, a 401, a certificate that
fails verification, offline mode and undecodable content must not. requests (and urllib3 under it) is checked
alongside: other fsspec backends use it.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator

import httpx2  # huggingface_hub's HTTP client (a dependency of the declared huggingface_hub)
import huggingface_hub.constants as hub_constants
import huggingface_hub.utils as hub_http
import pytest
import requests
from support.httpserver import Faults, FaultyServer

from roboreel.formats.transient import is_transient
from roboreel.formats.transient_errors import causes

TIMEOUT_S = 0.3


@pytest.fixture()
def online(monkeypatch):
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)  # what the hub's request hook checks


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    (root / "f.bin").write_bytes(bytes(range(256)) * 400)  # 100 KiB: the server cuts bodies half way
    return root


def _raised(fn) -> BaseException:
    try:
        fn()
    except Exception as e:
        return e
    raise AssertionError("no error raised")


def hub_get(url: str) -> bytes:
    """What HfFileSystemFile._fetch_range does, without the hub's own retries (roboreel retries instead)."""
    r = hub_http.http_backoff("GET", url, max_retries=0, timeout=TIMEOUT_S)
    hub_http.hf_raise_for_status(r)
    return r.content


def requests_get(url: str) -> bytes:
    r = requests.get(url, timeout=TIMEOUT_S)
    r.raise_for_status()
    return r.content


@contextlib.contextmanager
def _refusing_port() -> Iterator[int]:
    """A port bound but not listening, held while in use: connections to it are refused, and no other process can
    take it meanwhile (a port closed after binding could be reused before the test connects)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


@pytest.mark.parametrize("fault", ["reset", "truncate", "slow", "refused"])
def test_transport_faults_without_a_status_are_transient(served, online, fault):
    faults = Faults(reset=1.0) if fault == "reset" else Faults(truncate=1.0) if fault == "truncate" else \
        Faults(slow=1.0, slow_s=6 * TIMEOUT_S) if fault == "slow" else Faults()
    with FaultyServer(served, faults=faults) as server, _refusing_port() as port:
        url = f"http://127.0.0.1:{port}/f.bin" if fault == "refused" else f"{server.url}/f.bin"
        hub, req = _raised(lambda: hub_get(url)), _raised(lambda: requests_get(url))
    assert isinstance(hub, httpx2.TransportError), repr(hub)  # the hub raises the client's error as it is
    assert isinstance(req, requests.RequestException), repr(req)
    assert getattr(hub, "response", None) is None and req.response is None  # nothing to judge by status
    assert is_transient(hub) and is_transient(req)


def test_a_body_cut_short_is_transient_in_every_client_wrapping(served, online):
    """The case no OSError sits under: h11's "peer closed connection without sending complete message body" and
    http.client's IncompleteRead, wrapped by httpcore2/httpx2 and by urllib3/requests."""
    with FaultyServer(served, faults=Faults(truncate=1.0)) as server:
        hub = _raised(lambda: hub_get(f"{server.url}/f.bin"))
        req = _raised(lambda: requests_get(f"{server.url}/f.bin"))
    assert isinstance(hub, httpx2.RemoteProtocolError) and "complete message body" in str(hub)
    assert isinstance(req, requests.exceptions.ChunkedEncodingError) and "IncompleteRead" in str(req)
    for e in (hub, req, hub.__cause__, req.__context__ or req.__cause__):
        assert is_transient(e), repr(e)


def test_errors_raised_from_or_during_a_transport_fault_are_judged_by_it(served, online):
    with FaultyServer(served, faults=Faults(truncate=1.0)) as server:
        cut = _raised(lambda: hub_get(f"{server.url}/f.bin"))

    def wrapped() -> None:
        raise OSError("unreadable parquet") from cut  # errno None: says nothing itself

    def during() -> None:
        try:
            raise cut
        except httpx2.RemoteProtocolError:
            raise RuntimeError("stream ended") from None  # a context, even one hidden from the traceback

    assert is_transient(_raised(wrapped)) and is_transient(_raised(during))
    assert not is_transient(RuntimeError("a bug"))


def test_a_404_or_401_is_permanent_whatever_it_was_raised_during(served, online):
    """HfFileSystemStreamFile reconnects once after a broken stream: a 404 then has the broken read as its
    context, and must not inherit its verdict; HfFileSystem reports a missing repo as FileNotFoundError."""
    from huggingface_hub.hf_file_system import _raise_file_not_found

    with FaultyServer(served) as server:
        missing = _raised(lambda: hub_get(f"{server.url}/nope.bin"))
        with FaultyServer(served, faults=Faults(reset=1.0)) as faulty:
            reset = _raised(lambda: hub_get(f"{faulty.url}/f.bin"))

        def reconnect_after_reset() -> None:
            try:
                raise reset
            except httpx2.ReadError:
                hub_get(f"{server.url}/nope.bin")

        after = _raised(reconnect_after_reset)
    request = httpx2.Request("GET", "https://huggingface.co/api/datasets/private/x")
    refused = _raised(lambda: hub_http.hf_raise_for_status(httpx2.Response(401, request=request)))
    as_missing = _raised(lambda: _raise_file_not_found("datasets/private/x/meta/info.json", refused))
    assert missing.response.status_code == 404 and refused.response.status_code == 401
    assert reset in list(causes(after)) and is_transient(reset)
    for e in (missing, after, refused, as_missing):
        assert not is_transient(e), repr(e)


def test_offline_mode_and_undecodable_content_are_permanent(served, monkeypatch):
    import urllib3

    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    with FaultyServer(served) as server:
        offline = _raised(lambda: hub_get(f"{server.url}/f.bin"))
        assert server.log == []  # refused before any request
    assert type(offline).__name__ == "OfflineModeIsEnabled" and isinstance(offline, ConnectionError)
    request = httpx2.Request("GET", "https://huggingface.co/x")
    garbled = _raised(lambda: httpx2.Response(200, headers={"Content-Encoding": "gzip"},
                                              stream=httpx2.ByteStream(b"not gzip"), request=request).read())
    r = requests.Response()
    r.status_code = 200
    r.raw = urllib3.HTTPResponse(body=io.BytesIO(b"not gzip"), headers={"content-encoding": "gzip"},
                                 preload_content=False)
    garbled_requests = _raised(lambda: r.content)
    assert isinstance(garbled, httpx2.DecodingError)
    assert isinstance(garbled_requests, requests.exceptions.ContentDecodingError)
    for e in (offline, garbled, garbled_requests):
        assert not is_transient(e), repr(e)


@pytest.fixture(scope="module")
def untrusted_tls(tmp_path_factory):
    """An https server on 127.0.0.1 whose self-signed certificate no client trusts."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem"), "-days", "1",
                    "-subj", "/CN=127.0.0.1"], check=True, capture_output=True)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(d / "cert.pem", d / "key.pem")
    srv = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            try:
                ctx.wrap_socket(conn, server_side=True).close()
            except OSError:  # the client rejects the certificate mid-handshake
                conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield f"https://127.0.0.1:{srv.getsockname()[1]}/f.bin"
    srv.close()


def test_a_certificate_that_fails_verification_is_permanent_though_its_wrapper_is_a_connection_error(
        untrusted_tls, online):
    import fsspec

    hub = _raised(lambda: hub_get(untrusted_tls))
    req = _raised(lambda: requests_get(untrusted_tls))
    aio = _raised(lambda: fsspec.filesystem("http", skip_instance_cache=True).cat_file(untrusted_tls))
    assert isinstance(hub, httpx2.ConnectError) and isinstance(req, requests.exceptions.SSLError)
    for e in (hub, req, aio):
        assert not is_transient(e), repr(e)
