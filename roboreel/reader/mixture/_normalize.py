"""Normalising each sample with its own member's statistics, in the reader (LeRobot's MEAN_STD and MIN_MAX).

Robots differ in units and ranges (joint angles of one arm, end-effector metres of another): pooled statistics
blur them, so multi-robot loaders (openpi, GR00T, Octo) normalise each dataset or embodiment with its own. Here a
sample of member ``i`` is normalised with member ``i``'s ``meta/stats.json`` before it is padded, so padded
dimensions stay exactly 0. The arithmetic is LeRobot 0.6.1's ``NormalizerProcessorStep`` (eps 1e-8):

- ``mean_std``: ``(x - mean) / (std + eps)``
- ``min_max``: ``2 * (x - min) / d - 1`` with ``d = max - min``, ``eps`` where ``d == 0``

A policy trained on such samples must not normalise them again: give it ``NormalizationMode.IDENTITY`` for those
features (docs/mixtures.md), and un-normalise its actions with the member's own stats (``meta.member_stats(i)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

NormMode = Literal["mean_std", "min_max"]
NORM_MODES = ("mean_std", "min_max")
EPS = 1e-8


def check_modes(normalize: Mapping[str, str] | None, keys: list[str]) -> dict[str, str]:
    """``normalize`` (``{canonical key: mode}``) checked against the mixture's numeric features ``keys``."""
    if normalize is None:
        return {}
    if not isinstance(normalize, Mapping):
        raise ValueError(f"normalize must be a dict {{key: 'mean_std' | 'min_max'}}, got {type(normalize).__name__}")
    for k, mode in normalize.items():
        if k not in keys:
            raise ValueError(f"normalize names {k!r}, not a numeric feature of the mixture; features: {keys}")
        if mode not in NORM_MODES:
            raise ValueError(f"normalize[{k!r}] = {mode!r}: expected one of {list(NORM_MODES)}")
    return dict(normalize)


class Normalizer:
    """One member's normalisation: per canonical key, float32 ``(shift, scale)`` computed once from its stats:
    ``(x - shift) / scale``, or ``2 * (x - shift) / scale - 1`` (``min_max``), LeRobot's order of operations."""

    def __init__(self, modes: Mapping[str, str], stats: Mapping[str, Mapping[str, Any]] | None, url: str) -> None:
        self.modes = dict(modes)
        self.params: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for key, mode in self.modes.items():
            s = (stats or {}).get(key)
            need = ("mean", "std") if mode == "mean_std" else ("min", "max")
            if s is None or any(n not in s for n in need):
                raise ValueError(f"{url} has no {'/'.join(need)} stats of {key!r} to normalise it ({mode})")
            a, b = (np.asarray(s[n], dtype=np.float32) for n in need)
            if mode == "mean_std":
                self.params[key] = (a, b + np.float32(EPS))
            else:
                d = b - a
                self.params[key] = (a, np.where(d == 0, np.float32(EPS), d).astype(np.float32))

    def __call__(self, key: str, x: np.ndarray) -> np.ndarray:
        shift, scale = self.params[key]
        x = x.astype(np.float32, copy=False)
        if self.modes[key] == "min_max":
            return np.float32(2) * (x - shift) / scale - np.float32(1)
        return (x - shift) / scale
