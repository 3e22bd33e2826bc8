"""The default sample order (plan/_shuffled.py): every frame once, no near-duplicates within ``spread`` picks,
each run forward on its own decoder lane, seeded and replayable; and through roboreel.loader, batches with fewer
near-duplicate pairs than uniform sampling gives."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from support.datasets import compiled_pair

import roboreel
from roboreel.reader import CompiledDataset
from roboreel.reader.options import DecodeOptions
from roboreel.reader.plan._pool import ScheduleKey
from roboreel.reader.plan._shuffled import MAX_RUNS, ShuffledSchedule, make_schedule

LENGTHS = np.random.default_rng(1).integers(5, 160, 40).tolist()
EPISODES = [7 + 2 * i for i in range(len(LENGTHS))]


def schedule(**kw) -> ShuffledSchedule:
    key = {"seed": 0, "epoch": 0, "rank": 0, "worker": 0}
    key.update((k, kw.pop(k)) for k in list(key) if k in kw)
    args = {"pool_size": 8, "shuffle": True, "spread": 12, "near": 9, "gop": 10, **kw}
    s = make_schedule(EPISODES, LENGTHS, frame_order="shuffled", key=ScheduleKey(**key), **args)
    assert isinstance(s, ShuffledSchedule)
    return s


def picks_of(s: ShuffledSchedule) -> list[tuple[int, int, bool, int]]:
    return [(p, f, last, s.lane) for p, f, last in s]


def near_pairs(picks, spread: int, near: int) -> list[int]:
    """Indices of picks with a frame of their episode within ``near`` frames among the ``spread - 1`` before."""
    return [i for i, (p, f, *_) in enumerate(picks)
            if any(q == p and abs(g - f) <= near for q, g, *_ in picks[max(0, i - spread + 1):i])]


@pytest.mark.parametrize("kw", [{}, {"pool_size": 1}, {"pool_size": 40, "spread": 3}, {"gop": 1},
                                {"gop": 7, "near": 0}, {"spread": 64}])
def test_every_frame_exactly_once_pool_bounded_lanes_bounded(kw):
    s = schedule(**kw)
    picks = picks_of(s)
    assert sorted((p, f) for p, f, _, _ in picks) == [(p, f) for p, n in enumerate(LENGTHS) for f in range(n)]
    final = {p: i for i, (p, *_) in enumerate(picks)}  # each episode's last pick is the one flagged last
    assert sorted(i for i, (_, _, last, _) in enumerate(picks) if last) == sorted(final.values())
    live: set[int] = set()
    for p, _, last, lane in picks:
        assert 0 <= lane < MAX_RUNS
        live.add(p)
        assert len(live) <= s.pool_size
        if last:
            live.discard(p)


@pytest.mark.parametrize("kw", [{}, {"gop": 7}, {"pool_size": 3}])
def test_each_lane_moves_forward_one_run_at_a_time(kw):
    """The decoder promise: on one (episode, lane), frames come one after another inside a run of ``gop``
    frames (aligned to the clips' GOPs); a lane jumps only to the first frame of another run."""
    seg = kw.get("gop", 10)
    last_on: dict[tuple[int, int], int] = {}
    for p, f, _, lane in picks_of(schedule(**kw)):
        prev = last_on.get((p, lane))
        assert f % seg == 0 or f == prev + 1, (p, lane, prev, f)  # a run's first frame, or the next one
        last_on[(p, lane)] = f


@pytest.mark.parametrize("kw", [{}, {"gop": 7}, {"pool_size": 3}, {"spread": 64}])
def test_run_end_promises_exactly_the_lanes_next_frames(kw):
    """The run cache's promise (decode/_runs.py): after a pick, ``run_end`` names the frames the same (episode,
    lane) gives next, in order, before that lane gives any other frame."""
    s = schedule(**kw)
    promised: dict[tuple[int, int], list[int]] = {}
    for p, f, _ in s:
        lane = s.lane
        left = promised.get((p, lane))
        if left:
            assert left[0] == f, (p, lane, left, f)  # the promise is kept before anything else on the lane
        end = s.run_end(f, int(s.stops[p]))
        assert end is not None and f < end <= int(s.stops[p]) and (end - 1) // s.gop == f // s.gop
        promised[(p, lane)] = list(range(f + 1, end))
    assert not any(promised.values())  # every promised frame came


def test_no_two_near_frames_of_an_episode_within_spread_picks_until_the_pool_drains():
    """With enough open runs (pool x runs >= 2 x spread), a near pair inside any ``spread`` consecutive picks
    appears only in the epoch's last picks, where the draining pool holds too few runs."""
    for seed in range(3):
        s = schedule(seed=seed, pool_size=8, spread=12, near=9)
        picks = picks_of(s)
        bad = near_pairs(picks, 12, 9)
        assert not bad or len(picks) - bad[0] <= 2 * 12 * 10, (seed, len(picks) - bad[0])
    segments = [(p, f) for p, f, _ in make_schedule(EPISODES, LENGTHS, frame_order="segments", pool_size=8,
                                                      shuffle=True, key=ScheduleKey(0, 0))]
    assert len(near_pairs(segments, 12, 9)) > len(segments) // 2  # the old order: mostly neighbours


def test_order_is_seeded_and_replays_exactly():
    base = picks_of(schedule())
    assert base == picks_of(schedule())
    for change in ({"seed": 1}, {"epoch": 1}, {"worker": 1}, {"spread": 11}):
        assert picks_of(schedule(**change)) != base, change
    for n in (0, 1, 123, len(base) - 1, len(base)):
        s = schedule()
        s.skip(n)
        assert picks_of(s) == base[n:], n
        s2 = schedule()
        s2.skip(n)
        needed = list(s2.needed_positions())
        assert needed == sorted({p for p, *_ in base[n:]}), n


def test_cut_episodes_and_file_order():
    """Frame ranges cut by the split (plan/_epoch.py) are honoured; shuffle=False is file order as for every order."""
    ranges = [(min(3, n - 1), n) for n in LENGTHS]
    s = schedule(ranges=ranges)
    assert sorted((p, f) for p, f, _ in s) == [(p, f) for p, (a, b) in enumerate(ranges) for f in range(a, b)]
    plain = make_schedule(EPISODES, LENGTHS, frame_order="shuffled", pool_size=8, shuffle=False,
                          key=ScheduleKey(0, 0))
    assert [(p, f) for p, f, _ in plain] == [(p, f) for p, n in enumerate(LENGTHS) for f in range(n)]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return compiled_pair(tmp_path_factory, episodes=12, min_length=60, max_length=60, fps=30)[1]


def test_the_default_loader_batches_hold_fewer_near_duplicates_than_uniform_sampling(compiled):
    """roboreel.loader at its defaults, 2 workers mixed: every sample once, and per batch about as many episodes as
    uniform sampling and fewer near-duplicate pairs (the segments order holds several times as many)."""
    figures = {}
    for order in ("shuffled", "segments"):
        ds = CompiledDataset(str(compiled), return_uint8=True, frame_order=order)
        ld = roboreel.loader(ds, batch_size=16, num_workers=2)
        seen = [(int(e), int(f)) for b in ld for e, f in zip(b["episode_index"], b["frame_index"], strict=True)]
        assert sorted(seen) == [(e, f) for e in range(12) for f in range(60)]
        figures[order] = ld.stats()["order"]
        ld.close()
    new, old = figures["shuffled"], figures["segments"]
    assert new["near_duplicate_pairs_per_batch"] <= new["uniform_near_duplicate_pairs_per_batch"]
    assert new["distinct_episodes_per_batch"] >= 0.9 * new["uniform_distinct_episodes_per_batch"]
    assert old["near_duplicate_pairs_per_batch"] > 2 * new["uniform_near_duplicate_pairs_per_batch"]


def test_the_default_order_decodes_runs_whole_and_gives_the_same_pixels_without_the_run_cache(compiled):
    """The default order's runs decode in one call each where the run cache has room, and the batches are the
    same, pixel for pixel, as with the run cache off (every frame its own call)."""
    out = {}
    for mb in (0.0, 64.0):
        ds = CompiledDataset(str(compiled), return_uint8=True, decode=DecodeOptions(cache_mb=mb))
        ld = roboreel.loader(ds, batch_size=16, num_workers=2)
        out[mb] = (list(ld), ld.stats())
        ld.close()
    (off, st_off), (on, st_on) = out[0.0], out[64.0]
    assert st_off["frames_decoded"] == st_on["frames_decoded"] == 12 * 60 * 2
    assert st_off["decode_calls"] > 0.95 * st_off["frames_decoded"]  # a call per frame (two at the epoch's end)
    assert st_on["decode_calls"] <= st_on["frames_decoded"] // 4  # runs of 10 frames, nearly all cached
    assert len(off) == len(on)
    for a, b in zip(off, on, strict=True):
        assert a.keys() == b.keys()
        for k in a:
            if isinstance(a[k], torch.Tensor):
                assert torch.equal(a[k], b[k]), k
            else:
                assert a[k] == b[k], k


def test_a_mixing_loader_sets_an_unset_spread_to_its_batch_share(compiled):
    """Each worker gives a mixed batch B / W samples, so that is the spread the default order needs; a spread or
    batch_size given to the dataset is kept, and unmixed batches keep the dataset's (DataLoader's) order."""
    cases = [({}, {}, 8), ({"spread": 12}, {}, 12), ({"batch_size": 16}, {}, 16), ({}, {"mix_workers": False}, 32)]
    for ds_kw, ld_kw, want in cases:
        ds = CompiledDataset(str(compiled), **ds_kw)
        ld = roboreel.loader(ds, batch_size=16, num_workers=2, **ld_kw)
        assert ds.spread == want, (ds_kw, ld_kw)
        ld.close()


def test_the_automatic_run_cache_holds_one_call_of_every_open_run():
    from roboreel.reader.decode import DECODE_CALL_BYTES, DEFAULT_RUN_CACHE_BYTES, auto_run_cache_bytes

    big, small = 3 * 480 * 640, 3 * 224 * 224  # a call holds 4 frames of the first, a whole GOP of the second
    assert auto_run_cache_bytes([big], open_runs=64, gop=10, call_bytes=DECODE_CALL_BYTES) == 64 * DECODE_CALL_BYTES
    assert auto_run_cache_bytes([small] * 3, open_runs=64, gop=10, call_bytes=DECODE_CALL_BYTES) == 64 * 3 * 10 * small
    assert auto_run_cache_bytes([small], open_runs=2, gop=10, call_bytes=0) == DEFAULT_RUN_CACHE_BYTES  # the floor
