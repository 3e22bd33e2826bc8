"""Property tests of the delta-window arithmetic (reader/plan/_windows.py) against a brute-force model of the sample
contract (``LeRobotDataset.__getitem__``'s, docs/reader.md), over random fps, deltas and episode bounds, and end to end on a compiled
dataset: every window the reader serves is the one the model predicts, by pixel code and exact values."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from roboreel.reader import CompiledDataset
from roboreel.reader.plan._windows import delta_offsets, window
from roboreel.synth import read
from roboreel.synth.content import action_row

from .fuzz import budget

KEYS = ["action", "observation.state", "observation.images.top"]


def model_offset(dt: float, fps: int, tolerance_s: float) -> int | None:
    """The contract by brute force: the integer k whose k/fps is within tolerance_s of dt (None if none)."""
    near = [k for k in range(math.floor(dt * fps) - 1, math.ceil(dt * fps) + 2) if abs(dt - k / fps) <= tolerance_s]
    return near[0] if len(near) == 1 else None


def model_window(i: int, start: int, end: int, d: int) -> tuple[int, bool]:
    """Frame read and padding flag for offset d: outside [start, end) reads the nearest edge frame, padded."""
    if i + d < start:
        return start, True
    if i + d >= end:
        return end - 1, True
    return i + d, False


@st.composite
def exact_deltas(draw):
    """(fps, tolerance, deltas, expected offsets): deltas k/fps + noise well inside the tolerance, some written
    as float sums the way configs build them (start + n * step)."""
    fps = draw(st.integers(1, 1000))
    tol = draw(st.sampled_from([1e-4, 1e-6]) | st.floats(1e-7, 0.4 / fps))
    ks = draw(st.lists(st.integers(-3000, 3000), min_size=1, max_size=12))
    deltas = []
    for k in ks:
        how = draw(st.sampled_from(["exact", "noisy", "sum"]))
        if how == "exact":
            deltas.append(k / fps)
        elif how == "noisy":
            deltas.append(k / fps + draw(st.floats(-0.9, 0.9)) * tol)
        else:
            deltas.append(sum([1 / fps] * abs(k)) * (1 if k >= 0 else -1) if abs(k) < 400 else k * (1 / fps))
    return fps, tol, deltas, ks


@budget(300)
@given(exact_deltas())
def test_offsets_are_the_nearest_frame(case):
    fps, tol, deltas, ks = case
    for dt in deltas:
        assume(model_offset(dt, fps, tol) is not None)  # float sums may drift past a tiny tolerance
    got = delta_offsets({"action": deltas}, fps=fps, tolerance_s=tol, keys=KEYS)["action"]
    assert got.dtype == np.int64
    assert got.tolist() == [model_offset(dt, fps, tol) for dt in deltas] == ks


@budget(300)
@given(fps=st.integers(1, 1000), k=st.integers(-3000, 3000), frac=st.floats(0.02, 0.48), data=st.data())
def test_offsets_between_frames_are_refused(fps, k, frac, data):
    tol = data.draw(st.floats(1e-7, 0.01 / fps))
    dt = (k + frac * data.draw(st.sampled_from([1, -1]))) / fps
    assume(model_offset(dt, fps, tol) is None)
    with pytest.raises(ValueError, match=r"not multiples of 1/fps"):
        delta_offsets({"observation.state": [0.0, dt]}, fps=fps, tolerance_s=tol, keys=KEYS)


@budget(500)
@given(st.integers(-10**6, 10**6), st.integers(1, 500), st.data())
def test_window_matches_the_brute_force_model(start, length, data):
    end = start + length
    i = data.draw(st.integers(start, end - 1))
    offsets = np.array(data.draw(st.lists(st.integers(-2 * length - 3, 2 * length + 3), min_size=1, max_size=16)),
                       dtype=np.int64)
    query, pad = window(i, start, end, offsets)
    want = [model_window(i, start, end, int(d)) for d in offsets]
    assert query.tolist() == [q for q, _ in want]
    assert pad.tolist() == [p for _, p in want]
    # the same window in episode-relative numbering (the compiled reader) and global numbering (the reference)
    rel_q, rel_pad = window(i - start, 0, length, offsets)
    assert (rel_q + start).tolist() == query.tolist() and rel_pad.tolist() == pad.tolist()


@budget(60)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.just(1e300), min_size=1, max_size=4)
       | st.floats() | st.none())
def test_any_delta_value_gives_offsets_or_a_clear_value_error(deltas):
    try:
        out = delta_offsets({"action": deltas}, fps=30, tolerance_s=1e-4, keys=KEYS)
    except ValueError as e:
        assert "action" in str(e), e
    else:
        assert out["action"].dtype == np.int64


# -- end to end ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def compiled_lengths(small_compiled):
    return {e.index: (e.from_index, e.to_index) for e in CompiledDataset(str(small_compiled)).manifest.episodes}


@budget(6)
@given(action=st.lists(st.integers(-45, 45), min_size=1, max_size=6),
       camera=st.lists(st.integers(-30, 30), min_size=1, max_size=3), episode=st.integers(0, 7))
def test_served_windows_match_the_model(small_compiled, compiled_lengths, action, camera, episode):
    """Random windows (crossing both episode ends) on one episode: every served action row and camera frame is
    the one the model names, padding flags included."""
    fps = 20
    ds = CompiledDataset(str(small_compiled), episodes=[episode], seed=episode, episode_pool_size=1,
                         delta_timestamps={"action": [d / fps for d in action],
                                           "observation.images.top": [d / fps for d in camera]})
    start, end = compiled_lengths[episode]
    n = 0
    for s in ds:
        i = int(s["index"])
        want = [model_window(i, start, end, d) for d in action]
        assert s["action_is_pad"].tolist() == [p for _, p in want]
        expected = torch.from_numpy(np.stack([action_row(q, s["action"].shape[-1]) for q, _ in want]))
        assert torch.equal(s["action"], expected)
        cams = [model_window(i, start, end, d) for d in camera]
        assert s["observation.images.top_is_pad"].tolist() == [p for _, p in cams]
        frames = s["observation.images.top"]
        stack = frames if frames.ndim == 4 else frames[None]
        assert [(read(f).index, read(f).episode) for f in stack] == [(q, episode) for q, _ in cams]
        n += 1
    assert n == end - start
