"""Remote faults: a compiled dataset served over http:// from 127.0.0.1 by tests/support/httpserver.py, which
injects connection resets, 503s, slow responses and truncated bodies at a configurable rate (seeded, bounded by
``max_faults``, and the server stops by itself). An epoch through DataLoader workers must either cover every
frame exactly once with samples identical to the reference reader on the source, or end in a clear error once
the retry budget is spent: never a silently short epoch.

``ROBOREEL_SLOW=1`` adds a sweep over more seeds and fault rates.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import aiohttp
import pytest
import torch
from support.datasets import assert_same_sample
from support.httpserver import Faults, FaultyServer

from roboreel.bench.reference import ReferenceDataset
from roboreel.formats.errors import RoboreelError, ShardReadError
from roboreel.reader import CompiledDataset, StreamOptions

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")

CAMERAS = ["observation.images.top", "observation.images.wrist"]
WINDOWS = {"action": [-0.1, 0.0, 0.1], "observation.images.top": [-0.05, 0.0]}
# Stalls far longer than the client's per-read timeout, so "slow" faults are real timeouts, retried: with a stall
# of only twice the timeout, a client process kept off the CPU by a loaded host (the whole suite on 2 cores) could
# find the late answer already there when its timer was processed, and read it without a retry.
TIMEOUTS = {"client_kwargs": {"timeout": aiohttp.ClientTimeout(total=None, sock_connect=5, sock_read=0.3)}}
STALL_S = 2.0
SEED = 5  # the epochs' seed (their plan: planned_frames)
MIXES = {
    "resets": dict(reset=1.0),
    "503s": dict(unavailable=1.0),
    "truncated": dict(truncate=1.0),
    "slow": dict(slow=1.0, slow_s=STALL_S),
    "mixed": dict(reset=0.25, unavailable=0.25, truncate=0.25, slow=0.25, slow_s=STALL_S),
}


@pytest.fixture(scope="module")
def reference(small_source):
    return ReferenceDataset(str(small_source), delta_timestamps=WINDOWS)


def faults(mix: str, rate: float, seed: int, **kw) -> Faults:
    """``rate`` of the requests fault, split between the mix's kinds in its proportions."""
    probs = {k: v * rate if k != "slow_s" else v for k, v in MIXES[mix].items()}
    return Faults(seed=seed, path_prefix="/shards/", **probs, **kw)


def epoch(url: str, *, retries: int, num_workers: int = 2) -> tuple[CompiledDataset, list[dict], list[Exception]]:
    """One shuffled epoch through a DataLoader: every sample served (batches uncollated) and the errors that
    ended workers' streams (the other workers' samples are still collected after one fails)."""
    ds = CompiledDataset(url, delta_timestamps=WINDOWS, episode_pool_size=3, seed=SEED,
                         stream=StreamOptions(backoff_s=0.01, retries=retries, storage_options=TIMEOUTS))
    it = iter(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=num_workers))
    samples: list[dict] = []
    errors: list[Exception] = []
    while True:
        try:
            samples.extend(it)
            return ds, samples, errors
        except ShardReadError as e:
            errors.append(e)
            assert len(errors) <= num_workers, errors


def check_samples(samples: list[dict], reference: ReferenceDataset, *, complete: bool) -> None:
    """At most once per frame (exactly once when ``complete``), every sample identical to the reference
    reader's on the source."""
    indices = [int(s["index"]) for s in samples]
    assert len(set(indices)) == len(indices), "a frame was served twice"
    if complete:
        assert sorted(indices) == list(range(len(reference))), "not exactly-once coverage"
    want = reference.__getitems__([reference.position(i) for i in indices])
    for got, w in zip(samples, want, strict=True):
        assert_same_sample(got, w, CAMERAS)


def run_faulty(compiled, reference, mix: str, rate: float, seed: int, *, retries: int,
               max_faults: int = 12) -> dict[str, int]:
    """An epoch under faults. With ``retries >= max_faults`` the retry budget cannot run out, so the epoch must
    be complete; otherwise it is complete, or short with a ShardReadError that needed more than ``retries``
    faults, names the shard and the episode it lost, and never served the part of it the failing worker held."""
    with FaultyServer(compiled, faults=faults(mix, rate, seed, max_faults=max_faults), lifetime_s=120) as server:
        ds, samples, errors = epoch(server.url, retries=retries)
        injected = server.faults_injected()
    check_samples(samples, reference, complete=not errors)
    if not errors:
        assert ds.stats()["retries"] >= sum(injected.values())
    else:
        assert retries < max_faults and sum(injected.values()) > retries, errors
        pattern = rf"kept failing \({retries + 1} attempts\).*\(file shards/shard-\d+\.tar, episode (\d+)\)"
        lost = {int(re.search(pattern, str(e), re.S).group(1)) for e in errors}
        for e in lost:  # the worker that lost it served none of its part (another may serve the rest of a cut one)
            served = {int(s["frame_index"]) for s in samples if int(s["episode_index"]) == e}
            assert any(part and not part & served for part in planned_frames(compiled, e)), (e, sorted(served))
    return injected


def planned_frames(compiled: Path, episode: int, num_workers: int = 2) -> list[set[int]]:
    """The frames of ``episode`` each DataLoader worker of ``epoch`` was to serve: an episode may be cut between
    consumers (``Slice.ranges``, plan/_epoch.py), so the one a worker lost can still be served in part. Planned on
    the local copy (the server is gone): the plan depends on the manifest and epoch()'s seed only."""
    ds = CompiledDataset(str(compiled), seed=SEED)
    out = []
    for w in range(num_workers):
        frames: set[int] = set()
        for s in ds._slices(ds._world(w, num_workers), 0):
            for i, e in enumerate(s.episodes):
                if int(e) == episode:
                    a, b = s.ranges[i] if s.ranges is not None else (0, ds.manifest.lengths[episode])
                    frames |= set(range(a, b))
        out.append(frames)
    return out


@pytest.mark.parametrize("mix", list(MIXES))
def test_epoch_under_faults_is_complete_and_identical(mix, small_compiled, reference):
    injected = run_faulty(small_compiled, reference, mix, rate=0.5, seed=11, retries=12)
    assert sum(injected.values()) > 0, "no fault was injected: the test proved nothing"
    assert set(injected) <= set(MIXES[mix]) - {"slow_s"}


def test_spent_retry_budget_fails_loudly_never_short(small_compiled, reference):
    """One shard resets on every request after half its body: the reader resumes at the byte it reached (each
    record it completes is verified and served) until a request brings no progress, then gives up after
    ``retries`` more attempts and the epoch raises naming the shard. What was served is still exact.

    (In-process: through DataLoader workers the same error arrives wrapped with the worker's traceback, see
    test_error_types.py; torch then takes 5 s per worker to shut the loader down, whatever the dataset.)"""
    bad = CompiledDataset(str(small_compiled)).manifest.shards[1]
    seen: list[dict] = []
    with FaultyServer(small_compiled, faults=Faults(reset=1.0, path_prefix="/" + bad.path), lifetime_s=120) as srv:
        ds = CompiledDataset(srv.url, delta_timestamps=WINDOWS, episode_pool_size=2,
                             stream=StreamOptions(retries=2, backoff_s=0.001, storage_options=TIMEOUTS))
        with pytest.raises(ShardReadError, match=rf"kept failing \(3 attempts\).*\(file {bad.path}, episode") as err:
            for sample in ds:
                seen.append(sample)
        requests = [r for r in srv.log if r.path == "/" + bad.path and r.method == "GET"]
    assert len(seen) < len(reference)  # short, and it said so, naming the episode it could not deliver
    assert err.value.episode in bad.episodes
    assert err.value.episode not in {int(s["episode_index"]) for s in seen}
    indices = [int(s["index"]) for s in seen]
    assert len(set(indices)) == len(indices)
    for got, want in zip(seen, reference.__getitems__([reference.position(i) for i in indices]), strict=True):
        assert_same_sample(got, want, CAMERAS)
    assert len(requests) >= 3 and all(r.fault == "reset" for r in requests)
    assert [r.start for r in requests] == sorted(r.start for r in requests)  # resumed forward, never restarted


def test_unreachable_manifest_is_a_clear_error(small_compiled):
    with FaultyServer(small_compiled, faults=Faults(unavailable=1.0), lifetime_s=60) as server, \
            pytest.raises(ShardReadError, match=r"kept failing \(3 attempts\).*503"):
        CompiledDataset(server.url, stream=StreamOptions(retries=2, backoff_s=0.001))


def test_missing_remote_shard_is_not_retried_and_names_it(small_compiled, copy_of):
    root = copy_of(small_compiled, "out")
    gone = CompiledDataset(str(root)).manifest.shards[2]
    (root / gone.path).unlink()
    with FaultyServer(root, lifetime_s=60) as server:
        ds = CompiledDataset(server.url, shuffle=False, stream=StreamOptions(backoff_s=0.001))
        with pytest.raises(RoboreelError, match=gone.path):
            list(ds)
        gets = [r for r in server.log if r.path == "/" + gone.path and r.method == "GET"]
    assert len(gets) == 1  # a 404 is final: retrying cannot help


@pytest.mark.slow
@pytest.mark.parametrize("mix", list(MIXES))
def test_fault_sweep(mix, small_compiled, reference):
    """More seeds and rates for every mix (one test each: the slow stage runs them side by side), with a retry
    budget that cannot run out (must complete) and one that can (must complete, or fail loudly naming shard and
    episode)."""
    injected = [run_faulty(small_compiled, reference, mix, rate, seed, retries=retries)
                for rate, seed, retries in itertools.product((0.2, 0.8), range(3), (12, 3))]
    assert sum(n for i in injected for n in i.values()) > 0, mix  # (a 0.2 run may draw no fault)
