"""Episode index -> length for a whole dataset, as two sorted int64 arrays (the index's core columns)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np


class Lengths:
    """Episode index -> length over two sorted arrays (a dict would cost ~100 bytes an episode). Reads like a
    mapping (``[e]``, ``in``, ``len``, ``keys()``/``values()``/``items()``); ``ids`` and ``array`` are the arrays."""

    def __init__(self, ids: np.ndarray, lengths: np.ndarray) -> None:
        self.ids, self.array = ids, lengths

    def row(self, episode: int) -> int:
        i = int(np.searchsorted(self.ids, episode))
        if i >= len(self.ids) or self.ids[i] != episode:
            raise KeyError(episode)
        return i

    def __getitem__(self, episode: int) -> int:
        return int(self.array[self.row(episode)])

    def __contains__(self, episode: object) -> bool:
        try:
            self.row(int(episode))  # type: ignore[call-overload]
        except (KeyError, TypeError, ValueError):
            return False
        return True

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[int]:
        return iter(self.ids.tolist())

    def keys(self) -> list[int]:
        return self.ids.tolist()

    def values(self) -> list[int]:
        return self.array.tolist()

    def items(self) -> Iterator[tuple[int, int]]:
        return zip(self.ids.tolist(), self.array.tolist(), strict=True)

    def get(self, episode: int, default: Any = None) -> Any:
        try:
            return self[episode]
        except KeyError:
            return default
