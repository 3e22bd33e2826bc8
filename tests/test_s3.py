"""s3:// for real: moto's S3 server in this process on 127.0.0.1 (an OS-chosen port), read through s3fs.

Compiling a LeRobot source from a bucket gives the shards, rows and meta of compiling the local copy; streaming a
compiled dataset from a bucket gives the local epoch, sample for sample; a connection reset part way through a
shard's GET (a TCP proxy in front of the server) is retried and the epoch is still exact. Credentials come through
fsspec ``storage_options`` in some tests and through the AWS environment variables in another.
"""

from __future__ import annotations

import json
import os

import pytest
import s3fs
import torch
from moto.server import ThreadedMotoServer
from support.compiled import tree
from support.datasets import batch_indices
from support.resume import assert_same_batches
from support.tcpproxy import ResettingProxy
from test_compile import TEST

from roboreel.compile import compile_dataset
from roboreel.formats.manifest import load_manifest
from roboreel.reader import CompiledDataset, StreamOptions

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")
WINDOWS = {"action": [-0.1, 0.0, 0.1], "observation.images.top": [-0.05, 0.0]}
KEY, SECRET, REGION, BUCKET = "roboreel-test-key", "roboreel-test-secret", "eu-west-1", "roboreel-test"


def options(endpoint: str, **kw) -> dict:
    return {"key": KEY, "secret": SECRET, "client_kwargs": {"endpoint_url": endpoint, "region_name": REGION}, **kw}


@pytest.fixture(scope="module")
def endpoint():
    """moto's S3 API on 127.0.0.1; no AWS credentials or config of this machine can leak in (nor reach AWS)."""
    with pytest.MonkeyPatch.context() as mp:
        for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                    "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
            mp.delenv(var, raising=False)
        mp.setenv("AWS_CONFIG_FILE", "/nonexistent/roboreel-aws-config")
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/roboreel-aws-credentials")
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        try:
            yield f"http://{host}:{port}"
        finally:
            server.stop()
            s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture(scope="module")
def bucket(endpoint, small_source, small_compiled):
    """The small source at s3://BUCKET/src and its compiled form at s3://BUCKET/compiled."""
    fs = s3fs.S3FileSystem(**options(endpoint), skip_instance_cache=True)
    fs.mkdir(BUCKET)
    fs.put(f"{small_source}/", f"{BUCKET}/src", recursive=True)
    fs.put(f"{small_compiled}/", f"{BUCKET}/compiled", recursive=True)
    for local, remote in ((small_source, "src"), (small_compiled, "compiled")):  # the upload is complete
        files = {str(p.relative_to(local)): p.stat().st_size for p in local.rglob("*") if p.is_file()}
        listed = fs.find(f"{BUCKET}/{remote}", detail=True)
        assert {k.removeprefix(f"{BUCKET}/{remote}/"): v["size"] for k, v in listed.items()} == files
    return f"s3://{BUCKET}"


def epoch(url, *, num_workers=2, storage_options=None):
    ds = CompiledDataset(url, delta_timestamps=WINDOWS, episode_pool_size=3, seed=9,
                         stream=StreamOptions(backoff_s=0.01, storage_options=storage_options))
    return ds, list(torch.utils.data.DataLoader(ds, batch_size=8, num_workers=num_workers))


def test_compile_from_s3_equals_compiling_the_local_copy(endpoint, bucket, small_compiled, tmp_path):
    """SRC as s3:// with credentials in storage_options: the same shards, rows and meta as compiling the local
    path (compared as tests/test_compile.py compares an http:// source)."""
    out = tmp_path / "from-s3"
    report = compile_dataset(f"{bucket}/src", str(out), settings=TEST, workers=2, storage_options=options(endpoint))
    assert report.finalized
    a, b = tree(small_compiled), tree(out)
    assert sorted(a) == sorted(b)
    assert any(k.startswith("shards/") for k in a)
    differ = [k for k in a if a[k] != b[k]]
    sidecars = [k for k in differ if k.startswith(".roboreel-parts/shard-")]
    assert [k for k in differ if k not in sidecars] == [".roboreel-compile.json", "roboreel.json"]  # name the URL
    for k in sidecars:  # S3 gives ETags and mtimes, not the local files' fingerprints; all else is equal
        local, remote = json.loads(a[k]), json.loads(b[k])
        assert all(fp["episode"] is not None for fp in remote.pop("fingerprints").values())
        local.pop("fingerprints")
        assert local == remote
    want, got = load_manifest(str(small_compiled)), load_manifest(str(out))
    assert got.source["url"] == f"{bucket}/src"
    assert [s.sha256 for s in got.shards] == [s.sha256 for s in want.shards]
    assert got.episodes == want.episodes


def test_stream_from_s3_with_aws_environment_equals_local_epoch(endpoint, bucket, small_compiled, monkeypatch):
    """No storage_options: s3fs finds the credentials and endpoint in the usual AWS environment variables (as
    DataLoader workers do: they inherit them). Every sample of the epoch equals the local read, in order."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    s3fs.S3FileSystem.clear_instance_cache()  # an instance built before the variables were set must not be reused
    _, local = epoch(str(small_compiled))
    ds, remote = epoch(f"{bucket}/compiled")
    assert ds.store.kind == "other" and ds.manifest.source == load_manifest(str(small_compiled)).source
    assert_same_batches(remote, local)
    assert sorted(i for b in remote for i in batch_indices(b)) == list(range(ds.manifest.total_frames))
    assert {"observation.images.top", "action", "index", "episode_index"} <= set(remote[0])


def test_stream_from_s3_with_storage_options_equals_local_epoch(endpoint, bucket, small_compiled):
    _, local = epoch(str(small_compiled))
    _, remote = epoch(f"{bucket}/compiled", storage_options=options(endpoint))
    assert_same_batches(remote, local)


@pytest.mark.parametrize("s3fs_retries", [None, 1], ids=["s3fs-retries", "roboreel-retries"])
def test_connection_reset_mid_shard_is_retried_and_the_epoch_is_exact(endpoint, bucket, small_compiled,
                                                                      s3fs_retries, monkeypatch):
    """The first GET of a shard is reset (an RST) after 4 KiB of its reply. With s3fs's own retries (the default,
    5 attempts) s3fs reads again; with one attempt (``S3FileSystem.retries``, a class attribute: no init option)
    s3fs raises aiohttp's ClientPayloadError and roboreel's reader reopens the shard. Either way the epoch is
    exact."""
    _, local = epoch(str(small_compiled), num_workers=0)
    if s3fs_retries is not None:
        monkeypatch.setattr(s3fs.S3FileSystem, "retries", s3fs_retries)
    port = int(endpoint.rsplit(":", 1)[1])
    with ResettingProxy(port, match=f"/{BUCKET}/compiled/shards/".encode(), faults=1, after=4096) as proxy:
        ds, remote = epoch(f"{bucket}/compiled", num_workers=0,
                           storage_options=options(proxy.url, skip_instance_cache=True))
    assert proxy.faulted and proxy.faulted[0].startswith(b"GET "), proxy.faulted
    assert len(proxy.faulted) == 1
    assert_same_batches(remote, local)
    assert sorted(i for b in remote for i in batch_indices(b)) == list(range(ds.manifest.total_frames))
    # the reset reached roboreel, which retried it once, only when s3fs did not retry it itself
    assert ds.stats()["retries"] == (1 if s3fs_retries == 1 else 0)


@pytest.mark.slow  # ~16 s: CI's slow stage runs it, beside the local bench's own test
def test_bench_read_over_s3_beside_local(small_source, small_compiled, tmp_path):
    """``roboreel bench read --s3``: the compiled readers also read from a loopback S3 server of the bench's own
    (the source readers stay local), in isolated processes that reach it through the AWS variables, and the table
    has an ``s3`` row beside the local one with the same samples and order figures. The host's environment is
    left as it was."""
    from roboreel.cli import main

    env = dict(os.environ)
    out = tmp_path / "bench"
    assert main(["bench", "read", str(small_compiled), "--source", str(small_source), "--readers",
                 "loader_readme,reference", "--modes", "single", "--s3", "--no-ceiling", "--batches", "3",
                 "--warmup-batches", "1", "--batch-size", "4", "--num-workers", "1", "--repeats", "1",
                 "--out", str(out)]) == 0
    assert dict(os.environ) == env
    runs = json.loads((out / "runs.json").read_text())
    runs = runs["runs"] if isinstance(runs, dict) else runs
    got = {(r["where"], r["reader"]): r for r in runs}
    assert set(got) == {("local", "loader_readme"), ("local", "reference"), ("s3", "loader_readme")}
    local, remote = got["local", "loader_readme"], got["s3", "loader_readme"]
    assert remote["samples"] == local["samples"] == 12 and remote["samples_per_s"] > 0
    assert remote["distinct_episodes_per_batch"] == local["distinct_episodes_per_batch"]
    assert remote["reader_stats"]["fetch_seconds"] > 0
    assert "| s3 | single | loader_readme |" in (out / "summary.md").read_text()
