"""Which read errors are transient: a fault a later attempt can fix (a busy server, a dropped connection, a
stalled or cut-short transfer), as opposed to one that repeating would only delay (a missing file, a refused
credential, bad bytes, a bug).

Remote sources are read through several HTTP clients, and each reports a transport fault its own way: aiohttp
(fsspec's http(s)://), httpx2 (huggingface_hub's client, behind hf://; httpx, its original, for other versions),
requests/urllib3 (other fsspec backends). A fault with an HTTP status is judged by the status. One without a
status (a reset, a read timeout, a body that ends early) is judged by its type, and since libraries wrap one
another's errors (httpx2 wraps httpcore2, which wraps the socket's OSError; fsspec raises FileNotFoundError
from a failed GET), the chain of causes (``__cause__``, else ``__context__``) is walked until an error decides.
A client library is consulted only if it is already imported: one that was never loaded raised nothing.
"""

from __future__ import annotations

import asyncio
import errno
import http.client
import ssl
import sys
from collections.abc import Iterator

TRANSIENT_ERRNOS = frozenset({errno.ECONNRESET, errno.ECONNABORTED, errno.EPIPE, errno.ETIMEDOUT, errno.ECONNREFUSED,
                              errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENETRESET})
_MAX_CHAIN = 16  # causes looked at: real chains are 2-5 deep; this only bounds a pathological one

# Transport faults without an HTTP status, by client: (module, class names). httpx2/httpx: what huggingface_hub
# itself retries (timeouts, network errors, a server closing mid-body: "peer closed connection without sending
# complete message body" is a RemoteProtocolError); httpcore: what httpx wraps. requests: connection errors,
# timeouts, and ChunkedEncodingError ("Connection broken: IncompleteRead"); urllib3: what requests wraps.
# Not here, so never transient by type: a malformed request (LocalProtocolError), an unsupported URL scheme,
# undecodable content (httpx's DecodingError, requests' ContentDecodingError), too many redirects.
_TRANSPORT_TYPES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("aiohttp", ("ClientPayloadError", "ClientConnectionError")),
    ("httpx2", ("TimeoutException", "NetworkError", "RemoteProtocolError")),
    ("httpx", ("TimeoutException", "NetworkError", "RemoteProtocolError")),
    ("httpcore2", ("TimeoutException", "NetworkError", "RemoteProtocolError")),
    ("httpcore", ("TimeoutException", "NetworkError", "RemoteProtocolError")),
    ("requests.exceptions", ("ConnectionError", "Timeout", "ChunkedEncodingError")),
    ("urllib3.exceptions", ("ProtocolError", "TimeoutError", "IncompleteRead")),
)
# Never transient, even where a transient type wraps them: huggingface_hub's offline mode is a ConnectionError
# raised before any request; a certificate that fails verification (httpx2's ConnectError, requests' SSLError and
# aiohttp's ClientConnectorCertificateError all wrap it) fails the same way every time.
_PERMANENT_TYPES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("huggingface_hub.errors", ("OfflineModeIsEnabled",)),
    ("aiohttp", ("ClientConnectorCertificateError",)),
)


class Truncated(OSError):
    """The stream ended before the bytes asked for: treated like a reset."""


def _loaded(table: tuple[tuple[str, tuple[str, ...]], ...]) -> tuple[type[BaseException], ...]:
    """The classes of ``table`` whose module is imported (no import here: it costs time and proves nothing)."""
    out: list[type[BaseException]] = []
    for module, names in table:
        mod = sys.modules.get(module)
        if mod is not None:
            out += [t for n in names if isinstance(t := getattr(mod, n, None), type) and issubclass(t, BaseException)]
    return tuple(out)


def _http_status(exc: BaseException) -> int | None:
    """The HTTP status an error carries: aiohttp's ``status``, or ``response.status_code`` (requests, httpx and
    huggingface_hub's errors, which hf:// raises)."""
    status = getattr(exc, "status", None)
    if isinstance(status, int):
        return status
    status = getattr(getattr(exc, "response", None), "status_code", None)
    return status if isinstance(status, int) else None


def causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then what it was raised from (``__cause__``), or else during (``__context__``), and so on."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen and len(seen) < _MAX_CHAIN:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def _verdict(exc: BaseException, transport: tuple[type[BaseException], ...],
             permanent: tuple[type[BaseException], ...]) -> bool | None:
    """True (transient) or False (permanent) when ``exc`` itself decides; None to ask what it was raised from."""
    if isinstance(exc, FileNotFoundError) and exc.__cause__ is not None:
        # fsspec's HTTP info() (behind size() and open() without a size) answers a failed HEAD and GET with a
        # FileNotFoundError raised from the GET's error: a 503 there is a busy server, not a missing file.
        return None
    if isinstance(exc, permanent):
        return False
    if isinstance(exc, Truncated | TimeoutError | asyncio.TimeoutError | ConnectionError):
        return True
    status = _http_status(exc)
    if status is not None:
        return status >= 500 or status in (408, 429)
    if isinstance(exc, transport):
        return True
    if isinstance(exc, OSError) and exc.errno in TRANSIENT_ERRNOS:
        return True
    return None


def is_transient(exc: BaseException) -> bool:
    """Whether a read error is worth retrying: timeouts, resets, server errors (5xx, 429, 408), short bodies."""
    chain = list(causes(exc))
    if any(isinstance(e, ssl.SSLCertVerificationError) for e in chain):
        return False
    transport = (*_loaded(_TRANSPORT_TYPES), http.client.IncompleteRead)
    permanent = (*_loaded(_PERMANENT_TYPES), FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)
    for e in chain:
        verdict = _verdict(e, transport, permanent)
        if verdict is not None:
            return verdict
    return False


def describe(exc: BaseException) -> str:
    """A short description of a read error (aiohttp's reprs run to several lines of headers). fsspec's
    FileNotFoundError raised from a failed GET is described by that GET's error, which is what was retried."""
    exc = next((e for e in causes(exc) if not (isinstance(e, FileNotFoundError) and e.__cause__ is not None)), exc)
    status = getattr(exc, "status", None)
    if isinstance(status, int):
        return f"HTTP {status} {getattr(exc, 'message', '')}".strip()
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__
