"""The pool schedule: every frame exactly once, bounded pool, seeded order, replayable for resume."""

from __future__ import annotations

import numpy as np
import pytest

from roboreel.reader.plan._pool import PoolSchedule, ScheduleKey, episode_frame_order

LENGTHS = np.random.default_rng(0).integers(5, 61, 40).tolist()
EPISODES = [100 + 3 * i for i in range(len(LENGTHS))]  # stream order need not be index order


def schedule(**kw) -> PoolSchedule:
    key = {"seed": 0, "epoch": 0, "rank": 0, "worker": 0}
    key.update((k, kw.pop(k)) for k in list(key) if k in kw)
    args = {"pool_size": 8, "shuffle": True, **kw}
    return PoolSchedule(EPISODES, LENGTHS, key=ScheduleKey(**key), **args)


@pytest.mark.parametrize("frame_order", ["segments", "random"])
def test_every_frame_exactly_once_and_pool_bounded(frame_order):
    picks = list(schedule(frame_order=frame_order))
    assert sorted((p, f) for p, f, _ in picks) == [(p, f) for p, n in enumerate(LENGTHS) for f in range(n)]
    lasts = [(p, f) for p, f, last in picks if last]
    assert len(lasts) == len(LENGTHS)
    live: set[int] = set()
    finished = 0
    for p, _, last in picks:
        assert p < finished + 8  # episodes enter in stream order, at most pool_size ahead of the finished ones
        live.add(p)
        assert len(live) <= 8
        if last:
            live.discard(p)
            finished += 1


def test_order_is_a_pure_function_of_seed_epoch_rank_worker():
    base = list(schedule())
    assert base == list(schedule())
    for change in ({"seed": 1}, {"epoch": 1}, {"rank": 1}, {"worker": 1}):
        assert list(schedule(**change)) != base, change


def test_no_shuffle_is_file_order():
    picks = [(p, f) for p, f, _ in schedule(shuffle=False)]
    assert picks == [(p, f) for p, n in enumerate(LENGTHS) for f in range(n)]


def test_segments_leave_gop_runs_front_to_back():
    order = episode_frame_order(range(47), episode=5, seed=0, epoch=0, order="segments", gop=10)
    assert sorted(order) == list(range(47)) and order != list(range(47))
    pos = 0
    while pos < 47:  # each run is one aligned GOP, in order
        s = order[pos]
        assert s % 10 == 0
        n = min(10, 47 - s)
        assert order[pos : pos + n] == list(range(s, s + n))
        pos += n
    assert episode_frame_order(range(47), episode=5, seed=0, epoch=1, order="segments", gop=10) != order


@pytest.mark.parametrize("kw", [{}, {"shuffle": False}, {"frame_order": "random"}, {"gop": 7}])
def test_run_end_names_the_frames_each_episode_emits_next(kw):
    """The decoder's promise (decode.ClipDecoders run cache): after frame f, its episode emits f+1 .. run_end-1
    next, in order; the runs are whole GOPs in GOP order and single frames in random order."""
    sched = schedule(**kw)
    picks = list(sched)
    per_episode: dict[int, list[int]] = {}
    for p, f, _ in picks:
        per_episode.setdefault(p, []).append(f)
    ahead = 0
    for p, frames in per_episode.items():
        for i, f in enumerate(frames):
            end = sched.run_end(f, LENGTHS[p])
            assert frames[i:i + end - f] == list(range(f, end))
            ahead += end - f - 1
    assert ahead == 0 if kw.get("frame_order") == "random" else ahead > sum(LENGTHS) // 2


@pytest.mark.parametrize("n", [0, 1, 37, 200, 700, sum(LENGTHS)])
def test_skip_replays_and_names_the_records_still_needed(n):
    full = list(schedule())
    s = schedule()
    s.skip(n)
    needed = s.needed_positions()
    rest = list(s)
    assert rest == full[n:]
    assert set(needed) == {p for p, _, _ in rest} and needed == sorted(needed)


def test_batches_mix_episodes():
    """Uniform draws from P live episodes put P(1 - (1 - 1/P)^B) distinct episodes in a batch of B on average;
    the epoch's tail (the pool draining) costs a little, so ask for 80% of that, and far more than file order."""
    batch, pool = 16, 8
    ideal = pool * (1 - (1 - 1 / pool) ** batch)
    for frame_order in ("segments", "random"):
        picks = [p for p, _, _ in schedule(frame_order=frame_order, pool_size=pool)]
        distinct = [len(set(picks[i : i + batch])) for i in range(0, len(picks), batch)]
        assert np.mean(distinct) >= 0.8 * ideal, (np.mean(distinct), ideal)
    ordered = [p for p, _, _ in schedule(shuffle=False)]
    assert np.mean([len(set(ordered[i : i + batch])) for i in range(0, len(ordered), batch)]) < 2


def test_bad_arguments():
    with pytest.raises(ValueError, match="episode_pool_size"):
        schedule(pool_size=0)
    with pytest.raises(ValueError, match="frame_order"):
        schedule(frame_order="gop")
