"""Remote reading over http:// from a local server (127.0.0.1 only): one GET per shard, the same epoch as a
local read, and complete, exactly-once epochs while the server resets, 503s, truncates and stalls."""

from __future__ import annotations

import aiohttp
import pytest
import torch
from support.datasets import batch_indices, compiled_pair
from support.httpserver import Faults, FaultyServer
from support.resume import assert_same_batches

from roboreel.formats.errors import ShardReadError
from roboreel.reader import CompiledDataset, StreamOptions
from roboreel.reader.plan._epoch import World

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")
WINDOWS = {"action": [-0.1, 0.0, 0.1], "observation.images.top": [-0.05, 0.0]}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):  # 4 shards
    return compiled_pair(tmp_path_factory, episodes_per_shard=2)[1]


def run(url, *, num_workers=2, storage_options=None, **kw):
    ds = CompiledDataset(url, delta_timestamps=WINDOWS, episode_pool_size=3, seed=9,
                         stream=StreamOptions(backoff_s=0.01, storage_options=storage_options), **kw)
    return ds, list(torch.utils.data.DataLoader(ds, batch_size=8, num_workers=num_workers))


def shard_gets(server):
    return [r for r in server.log if r.method == "GET" and r.path.startswith("/shards/")]


def test_remote_epoch_equals_local_with_one_request_per_shard(compiled):
    _, local = run(str(compiled))
    with FaultyServer(compiled) as server:
        ds, remote = run(server.url)
        gets = shard_gets(server)
        slices = [s for w in range(2) for s in ds._slices(World(0, 1, w, 2), 0)]  # (reads the index)
        shards = ds.manifest.shards
    assert_same_batches(remote, local)
    # one GET per slice: every shard once, a shard cut between the two workers once by each
    assert sorted(r.path for r in gets) == sorted(f"/{shards[s.shard].path}" for s in slices)
    assert {r.path for r in gets} == {f"/{s.path}" for s in shards}
    assert len(slices) <= len(shards) + 1
    assert not [r for r in server.log if r.method == "HEAD" and r.path.startswith("/shards/")]
    assert ds.stats()["requests"] == len(slices)


def test_faulty_server_still_gives_complete_exactly_once_epochs(compiled):
    """Faults on every shard, at most 4 on one (the reader's default budget is 5 retries in a row at one byte: with
    10 faults and no per-shard cap, DataLoader workers' timing could put 6 in a row on one read, which must fail,
    and did once)."""
    _, local = run(str(compiled))
    faults = Faults(unavailable=0.25, reset=0.25, truncate=0.25, seed=3, path_prefix="/shards/", max_faults=10,
                    max_faults_per_path=4)
    with FaultyServer(compiled, faults=faults) as server:
        ds, remote = run(server.url)
        injected = server.faults_injected()
        gets = shard_gets(server)
    assert_same_batches(remote, local)
    total = ds.manifest.total_frames
    assert sorted(i for b in remote for i in batch_indices(b)) == list(range(total))
    assert set(injected) == {"unavailable", "reset", "truncate"}, injected
    assert ds.stats()["retries"] == sum(injected.values())  # every fault cost exactly one retry
    assert all(r.status == 206 for r in gets if r.start > 0 and r.fault != "unavailable")


def test_short_bodies_resume_at_the_next_byte(compiled):
    """A body cut short after some bytes arrived is continued with a Range request from the next byte. (The
    server pauses before closing so the client has read those bytes: aiohttp drops data still buffered when it
    sees the short body, and then the retry rightly starts where delivery stopped.)"""
    _, local = run(str(compiled), num_workers=0)
    faults = Faults(truncate=1.0, path_prefix="/shards/", max_faults=3, cut_delay_s=0.5)
    with FaultyServer(compiled, faults=faults) as server:
        ds, remote = run(server.url, num_workers=0)
        gets = shard_gets(server)
    assert_same_batches(remote, local)
    cut = [r for r in gets if r.fault == "truncate"]
    assert len(cut) == 3 and ds.stats()["retries"] == 3
    for r in cut:  # the next request for that path starts where the cut one stopped
        after = [g for g in gets[gets.index(r) + 1 :] if g.path == r.path]
        assert r.start < after[0].start <= r.start + r.sent and after[0].status == 206


def test_stalled_responses_time_out_and_retry(compiled):
    _, local = run(str(compiled), num_workers=0)
    timeout = {"client_kwargs": {"timeout": aiohttp.ClientTimeout(total=None, sock_read=0.3)}}
    # each stall 2 s, over 6x the read timeout, so a loaded machine cannot read through one before timing out
    faults = Faults(slow=1.0, slow_s=2.0, path_prefix="/shards/", max_faults=2)
    with FaultyServer(compiled, faults=faults) as server:
        ds, remote = run(server.url, num_workers=0, storage_options=timeout)
        injected = server.faults_injected()
    assert_same_batches(remote, local)
    assert injected == {"slow": 2}
    assert ds.stats()["retries"] >= 2  # the two stalls (a starved machine may add a slow read of its own)


def test_manifest_fetch_is_retried(compiled):
    with FaultyServer(compiled, faults=Faults(unavailable=1.0, path_prefix="/roboreel.json", max_faults=2)) as srv:
        ds = CompiledDataset(srv.url, stream=StreamOptions(backoff_s=0.01))
    assert ds.manifest.num_episodes == 8


def test_index_fetches_are_retried(compiled):
    """Index files (the shard table at construction, episode rows when a worker plans) retry like shards."""
    _, local = run(str(compiled), num_workers=0)
    with FaultyServer(compiled, faults=Faults(unavailable=0.5, reset=0.5, path_prefix="/index/", max_faults=4)) as srv:
        ds, remote = run(srv.url, num_workers=0)
        injected = srv.faults_injected()
    assert sum(injected.values()) == 4
    assert_same_batches(remote, local)


def test_persistent_failure_names_the_shard(compiled):
    with FaultyServer(compiled, faults=Faults(unavailable=1.0, path_prefix="/shards/")) as server:
        ds = CompiledDataset(server.url, stream=StreamOptions(retries=2, backoff_s=0.01), shuffle=False)
        with pytest.raises(ShardReadError, match=r"3 attempts\): HTTP 503.*shards/shard-000000\.tar"):
            list(ds)
        assert len(shard_gets(server)) == 3  # 1 + 2 retries, then give up


def test_episode_level_split_reads_only_its_part(compiled):
    """4 shards over 3 workers: the split cuts shards; each worker range-requests its own run."""
    with FaultyServer(compiled) as server:
        ds, remote = run(server.url, num_workers=3)
        gets = shard_gets(server)
        episodes = ds.manifest.episodes
    assert sorted(i for b in remote for i in batch_indices(b)) == list(range(ds.manifest.total_frames))
    starts = {r.start for r in gets}
    assert all(s % 512 == 0 for s in starts)  # every request starts at a record's tar header
    assert len(gets) > len(ds.manifest.shards)  # some shard was read in parts, by two workers
    # nothing is fetched twice but the (at most two) episodes cut between two workers: both read them whole
    record = max(sum(x.size + 512 for x in e.members) + 512 for e in episodes)
    assert sum(r.sent for r in gets) <= sum(s.size for s in ds.manifest.shards) + 2 * record
