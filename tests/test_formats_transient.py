"""formats/transient.py: which errors are retried."""

from __future__ import annotations

import errno

import aiohttp
import pytest

from roboreel.formats.transient import is_transient

_INFO = aiohttp.RequestInfo(url="http://x", method="GET", headers={}, real_url="http://x")


def _raised_from(cause: BaseException) -> FileNotFoundError:
    """What fsspec's HTTP info() raises when its HEAD and GET both fail: FileNotFoundError from the GET's error."""
    try:
        try:
            raise cause
        except Exception as e:
            raise FileNotFoundError("http://x/file") from e
    except FileNotFoundError as e:
        return e


def test_a_file_not_found_raised_from_a_server_error_is_transient_but_from_a_404_is_not():
    assert is_transient(_raised_from(aiohttp.ClientResponseError(_INFO, (), status=503)))
    assert is_transient(_raised_from(aiohttp.ServerDisconnectedError()))
    assert not is_transient(_raised_from(aiohttp.ClientResponseError(_INFO, (), status=404)))
    assert not is_transient(FileNotFoundError(errno.ENOENT, "gone"))


def test_http_errors_of_other_clients_are_classified_by_status():
    """hf:// raises huggingface_hub's HfHubHTTPError (an OSError carrying an httpx response); requests' errors
    carry a response the same way."""
    import requests

    def requests_error(status: int) -> requests.HTTPError:
        response = requests.Response()
        response.status_code = status
        return requests.HTTPError(f"{status}", response=response)

    assert is_transient(requests_error(503)) and is_transient(requests_error(429))
    assert not is_transient(requests_error(404)) and not is_transient(requests_error(403))
    hub = pytest.importorskip("huggingface_hub.errors")
    httpx = pytest.importorskip("httpx2") if hub.HfHubHTTPError.__mro__[1].__module__ == "httpx2" else None
    if httpx is not None:
        request = httpx.Request("GET", "https://huggingface.co/x")
        assert is_transient(hub.HfHubHTTPError("busy", response=httpx.Response(503, request=request)))
        assert not is_transient(hub.HfHubHTTPError("gone", response=httpx.Response(404, request=request)))
