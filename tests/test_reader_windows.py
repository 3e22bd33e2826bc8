"""Delta windows follow the sample contract: round(dt * fps) offsets, clamping, _is_pad, clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from roboreel.reader.plan._windows import delta_offsets, window

KEYS = ["action", "observation.state", "observation.images.top", "timestamp"]


def test_offsets_round_like_lerobot():
    got = delta_offsets({"action": [k / 20 for k in range(8)], "observation.images.top": [-0.1, 0.0]},
                        fps=20, tolerance_s=1e-4, keys=KEYS)
    assert got["action"].tolist() == list(range(8))
    assert got["observation.images.top"].tolist() == [-2, 0]
    # 3.3 + 0.05 falls just below a frame boundary in floats; rounding still gives the frame
    assert delta_offsets({"action": [3.3 + 0.05]}, fps=20, tolerance_s=1e-4, keys=KEYS)["action"].tolist() == [67]
    assert delta_offsets(None, fps=20, tolerance_s=1e-4, keys=KEYS) == {}


def test_contract_facts_episode_end_and_start():
    # fps 20, episode 0 = indices 0..39: i=39 with action deltas [0..7]/20 pads all but the first, clamped to 39
    q, pad = window(39, 0, 40, np.arange(8))
    assert pad.tolist() == [False] + [True] * 7 and q.tolist() == [39] * 8
    # i=40 (first of episode 1 = [40, 80)), camera deltas [-0.1, 0]: is_pad [T, F], both frames are 40
    q, pad = window(40, 40, 80, np.array([-2, 0]))
    assert pad.tolist() == [True, False] and q.tolist() == [40, 40]
    q, pad = window(5, 0, 10, np.array([-7, -1, 0, 4, 6]))
    assert q.tolist() == [0, 4, 5, 9, 9] and pad.tolist() == [True, False, False, False, True]


@pytest.mark.parametrize(
    ("delta", "match"),
    [
        ({"action": [0.0, 0.07]}, r"not multiples of 1/fps"),
        ({"actions": [0.0]}, r"'actions' is not a feature"),
        ({"action": []}, r"is empty"),
    ],
)
def test_bad_windows_name_the_problem(delta, match):
    with pytest.raises(ValueError, match=match):
        delta_offsets(delta, fps=20, tolerance_s=1e-4, keys=KEYS)


def test_tolerance_is_honoured():
    # 0.0501 s is 0.0001 s from a frame: inside tolerance_s=2e-4, outside 5e-5
    assert delta_offsets({"action": [0.0501]}, fps=20, tolerance_s=2e-4, keys=KEYS)["action"].tolist() == [1]
    with pytest.raises(ValueError):
        delta_offsets({"action": [0.0501]}, fps=20, tolerance_s=5e-5, keys=KEYS)
