"""When a process keeps its decoders across epochs (_decoder_cache.py) without being told: ``IdlePolicy``.

Why a policy and not a fixed budget: parking decoders stops the per-open leak (_decoder_cache.py) but costs ~1.5 MB
per idle decoder at 224x224, ~+150-180 MB per worker on the soak's dataset (docs/reliability.md). That price buys
a flat RSS only when every clip x lane the process will meet fits the cache: a cache holding a fraction of them
hits on that fraction only, so the creep slows in proportion while the memory is paid in full. And it buys
nothing in a process that reads the dataset once (a DataLoader worker without ``persistent_workers`` is a new
process every epoch). So the automatic mode (``DecodeOptions(idle_decoders_mb=None)``, the default) parks
decoders only

- when the whole selection fits ``AUTO_BUDGET_BYTES`` by the cache's own estimate (``decoder_bytes`` per decoder
  plus the clip's bytes, per lane): every worker ends up reading every clip, since shards are dealt afresh each
  epoch (plan/_epoch.py); and
- from this process's second iteration of the dataset on: its first epoch opens and closes decoders as without
  the cache, the second parks them, the third and later take them back (opens per epoch: n, n, 0, 0, ...).

A dataset whose every episode fits one episode pool (``whole_pool``) has every clip x lane open at once while an
epoch runs, so parking them between epochs adds next to nothing to the peak: it parks them whatever their
estimate (8 ALOHA episodes at 480x640 in the default order keep 64 decoders, ~270 MB by the estimate, and
reopened them every epoch: ~0.25 ms of CPU a sample).

An explicit ``idle_decoders_mb`` is obeyed as given, from the first iteration (0: never). The bound is per
process: 8 persistent workers may hold 8 x ``AUTO_BUDGET_BYTES``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

from roboreel.formats.manifest import Manifest
from roboreel.formats.shard import clip_member
from roboreel.reader.decode._decoder_cache import IdleDecoders, decoder_bytes, process_cache
from roboreel.reader.plan import window_lanes

AUTO_BUDGET_BYTES = 256 << 20


def camera_lanes(windows: Mapping[str, Sequence[float]], camera_keys: Sequence[str], *,
                 runs: int = 1) -> dict[str, int]:
    """Decoders per clip of each camera: the lanes ``decode.window_lanes`` gives its window (one without one), for
    each of the ``runs`` a pooled episode may keep open at once (plan/_shuffled.py)."""
    return {k: runs * (int(window_lanes(len(windows[k])).max()) + 1 if k in windows else 1) for k in camera_keys}


def idle_bytes_needed(manifest: Manifest, episodes: Sequence[int] | None, lanes: Mapping[str, int], *,
                      budget: int = AUTO_BUDGET_BYTES) -> int:
    """The cache's estimate for every clip x lane of ``episodes`` (None: all) parked at once.

    Cheap: when the decoders alone exceed ``budget`` (known from the episode count), that lower bound is returned
    without reading any episode's detail; otherwise the selection is at most a few hundred episodes, and their
    clip sizes come from the index's member table (one row group per 1,024 episodes)."""
    cams = [c for c in manifest.cameras if c.key in lanes]
    ix = manifest.index
    n = ix.num_episodes if episodes is None else len(episodes)
    total = n * sum(lanes[c.key] * decoder_bytes(c.width, c.height) for c in cams)
    if total > budget or not cams:
        return total
    entries = ix.rows(0, n) if episodes is None else [ix.entry(int(e)) for e in episodes]
    for entry in entries:
        sizes = {m.name: m.size for m in entry.members}
        total += sum(lanes[c.key] * sizes.get(clip_member(entry.index, c.key), 0) for c in cams)
    return total


class IdlePolicy:
    """Which idle-decoder cache this process's next decoding iteration of a dataset uses (see the module doc).

    Args:
        max_bytes: an explicit bound (0: off), or None for the automatic mode.
        need: the dataset's estimate, ``need(budget=...)`` (``idle_bytes_needed``), called at most once.
        budget: the automatic mode's bound.

    Iterations are counted per process (keyed by pid): a forked DataLoader worker inherits its parent's policy,
    counts included, and must start from zero."""

    def __init__(self, max_bytes: int | None, need: Callable[..., int], *, budget: int = AUTO_BUDGET_BYTES,
                 whole_pool: Callable[[], bool] | None = None) -> None:
        if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0):
            raise ValueError(f"max_bytes must be an integer >= 0 or None, got {max_bytes!r}")
        self.max_bytes, self.need, self.budget, self.whole_pool = max_bytes, need, budget, whole_pool
        self._needed: int | None = None
        self._whole = False
        self._iterations = (0, 0)  # (pid, iterations that pid began)

    @property
    def fits(self) -> bool:
        """Automatic mode: every clip x lane of the dataset fits ``budget`` (estimated once, then remembered), or
        the dataset fits one episode pool."""
        return self._bound() > 0

    def _bound(self) -> int:
        """The automatic mode's cache bound: ``budget`` where every clip x lane fits it, the estimate itself where
        the dataset fits one episode pool, else 0."""
        if self._needed is None:
            whole = self.whole_pool is not None and self.whole_pool()
            self._needed = int(self.need(budget=1 << 62 if whole else self.budget))
            self._whole = whole
        if self._needed <= self.budget:
            return self.budget
        return self._needed if self._whole else 0

    def begin(self) -> IdleDecoders | None:
        """Count an iteration of this process and return the cache it parks decoders in (None: close them).
        Call once per iteration, where the decoders are made."""
        pid, n = self._iterations
        n = n if pid == os.getpid() else 0
        self._iterations = (os.getpid(), n + 1)
        if self.max_bytes is not None:
            return process_cache(self.max_bytes)
        bound = self._bound() if n >= 1 else 0
        return process_cache(bound) if bound else None
