"""formats/transient.py: which errors are retried, and RetryingFile reading through real HTTP faults (the
fault-injecting server of tests/support) to the same bytes, decoded frames and parquet tables as a local read."""

from __future__ import annotations

import errno
import io

import aiohttp
import av
import fsspec
import numpy as np
import pyarrow.parquet as pq
import pytest
from support.httpserver import Faults, FaultyServer

from roboreel.formats.errors import SourceError
from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.formats.transient import (
    DEFAULT_BACKOFF_S,
    DEFAULT_RETRIES,
    MAX_DELAY_S,
    Retry,
    RetryingFile,
    is_transient,
)

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


def test_retry_checks_its_budget_and_doubles_its_delay_up_to_the_cap():
    assert Retry() == Retry(DEFAULT_RETRIES, DEFAULT_BACKOFF_S)
    for bad, match in (((-1, 0.1), "retries must be an integer >= 0, got -1"),
                       ((True, 0.1), "retries must be an integer >= 0, got True"),
                       ((2.0, 0.1), "retries must be an integer >= 0, got 2.0"),
                       ((2, -0.1), "backoff_s must be a number >= 0, got -0.1"),
                       ((2, float("nan")), "backoff_s must be a number >= 0, got nan"),
                       ((2, "0.1"), "backoff_s must be a number >= 0")):
        with pytest.raises(ValueError, match=match):
            Retry(*bad)
    retry = Retry(retries=3, backoff_s=0.5)
    assert [retry.delay(k) for k in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 4.0]
    assert Retry(backoff_s=1.0).delay(30) == MAX_DELAY_S
    assert Retry(0, 0).delay(1) == 0


def _files(root) -> tuple[str, str]:
    src = LeRobotSource(str(root))
    ep = src.episodes[0]
    return next(iter(ep.videos.values())).path, ep.data_path


def _opener(url: str, *, block_size: int = 512):
    fs = fsspec.filesystem("http")
    return lambda: fs.open(url, "rb", block_size=block_size)


def test_retrying_file_resumes_at_its_byte_after_resets_truncations_and_503s(small_source):
    mp4, _ = _files(small_source)
    want = (small_source / mp4).read_bytes()
    faults = Faults(reset=0.3, truncate=0.3, unavailable=0.2, seed=3, max_faults=8, path_prefix=f"/{mp4}")
    with FaultyServer(small_source, faults=faults) as server:
        f = RetryingFile(_opener(f"{server.url}/{mp4}"), rel=mp4, retry=Retry(8, 0.001), error=SourceError)
        got = bytearray()
        while chunk := f.read(700):
            got += chunk
        assert bytes(got) == want
        f.seek(-100, io.SEEK_END)
        assert f.read() == want[-100:]
        f.close()
        gets = [r for r in server.log if r.method == "GET"]
    assert sum(r.fault is not None for r in gets) >= 4
    starts = [r.start for r in gets][: -1]  # the last GET is the seek back near the end
    assert starts == sorted(starts) and starts[-1] > 0  # read on from where it was, never from the start again


def test_decoder_and_parquet_reader_pulling_through_faults_get_what_a_local_read_gives(small_source):
    mp4, parquet = _files(small_source)
    with av.open(str(small_source / mp4)) as c:
        want_frames = [f.to_ndarray() for f in c.decode(video=0)]
    want_table = pq.read_table(small_source / parquet)
    faults = Faults(reset=0.4, unavailable=0.4, seed=5, max_faults=10)
    with FaultyServer(small_source, faults=faults) as server:
        with RetryingFile(_opener(f"{server.url}/{mp4}", block_size=1024), rel=mp4, retry=Retry(10, 0.001),
                          error=SourceError) as f, av.open(f) as c:
            frames = [fr.to_ndarray() for fr in c.decode(video=0)]
        with RetryingFile(_opener(f"{server.url}/{parquet}", block_size=256), rel=parquet, retry=Retry(10, 0.001),
                          error=SourceError) as f:
            table = pq.read_table(f)
        faulted = {r.path for r in server.log if r.fault}
    assert len(frames) == len(want_frames) and all(np.array_equal(a, b) for a, b in zip(frames, want_frames, strict=True))
    assert table.equals(want_table)
    assert faulted == {f"/{mp4}", f"/{parquet}"}


def test_retrying_file_gives_up_after_its_budget_naming_file_and_episode(small_source):
    mp4, _ = _files(small_source)
    with FaultyServer(small_source, faults=Faults(unavailable=1.0, path_prefix=f"/{mp4}")) as server:
        f = RetryingFile(_opener(f"{server.url}/{mp4}"), rel=mp4, retry=Retry(2, 0.001), error=SourceError,
                         episode=3)
        with pytest.raises(SourceError, match=r"reading at byte 0 kept failing \(3 attempts\): HTTP 503") as err:
            f.read(100)
        assert (err.value.file, err.value.episode) == (mp4, 3)
        with pytest.raises(SourceError) as again:  # sticky: a demuxer that swallowed it cannot read on
            f.read(100)
        assert again.value is err.value is f.failed
        assert sum(r.method == "GET" for r in server.log) == 3


def test_retrying_file_does_not_retry_a_missing_file(small_source):
    with FaultyServer(small_source) as server:
        with pytest.raises(FileNotFoundError):
            RetryingFile(_opener(f"{server.url}/videos/nope.mp4"), rel="videos/nope.mp4",
                         retry=Retry(5, 5.0), error=SourceError)
        assert sum(r.method == "GET" for r in server.log) == 1  # fsspec's HEAD, then one GET: both 404
