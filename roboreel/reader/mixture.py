"""``MixtureDataset``: several compiled datasets read as one stream, what ``CompiledDataset([a, b], ...)`` returns.

Built from member ``CompiledDataset``s (made with the same arguments, by ``CompiledDataset.__new__``), it keeps
each member's whole machinery (selection, episode pool, slice reader) and adds only the choice of member per
draw (plan/mixture.py, a seeded int array): one consumer (rank x DataLoader worker) runs one ``MemberStream`` per
member (consumer.py) and takes its next sample from the member the draw names. So everything that holds for one
dataset holds here: the order is a pure function of (seed, epoch, rank, worker), ranks take equal steps, workers
emit whole batches, and ``state_dict`` is the same handful of scalars (a resumed consumer skips, in each member's
pool, as many picks as the draws before its position name that member).

Every sample carries ``dataset_index`` (int64, the member's position) and the merged ``task_index``
(``meta.tasks``); only the features every member has are kept (the others are named in a warning).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from os import PathLike
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset, get_worker_info

from roboreel.formats.merge import MixtureMismatch, common_features, merge_tasks
from roboreel.reader.consumer import MemberStream, Position, run_members
from roboreel.reader.decode.forksafe import isolate_inherited_heap
from roboreel.reader.decode.heap import pin_mmap_threshold
from roboreel.reader.decode.idle_policy import IdlePolicy
from roboreel.reader.decode.images import ImageClips
from roboreel.reader.decode.requests import PendingSample
from roboreel.reader.epochs import EpochState
from roboreel.reader.mixture_meta import MixtureMeta
from roboreel.reader.plan.epoch import (
    World,
    detect_rank,
    detect_worker,
    rank_samples,
    stream_arrays,
    worker_quotas,
)
from roboreel.reader.plan.mixture import MixturePlan, member_slices, skip_counts
from roboreel.reader.plan.pool import PoolSchedule
from roboreel.reader.stats import SharedCounters

logger = logging.getLogger(__name__)


def build_mixture(make: Callable[..., Any], paths: Sequence[Any], *, weights: Sequence[float] | None,
                  samples_per_epoch: int | None, episodes: Any = None, **kwargs: Any) -> MixtureDataset:
    """``CompiledDataset([a, b, ...], ...)``: each member made by ``make(path, episodes=..., **kwargs)`` (every
    argument as for one dataset), then mixed. ``episodes`` is one entry per dataset (None or episode indices) or
    ``{position: [episodes]}``."""
    paths = list(paths)
    if not paths or not all(isinstance(p, str | PathLike) for p in paths):
        raise ValueError(f"a mixture is a non-empty list of dataset paths or URLs, got {paths!r:.200}")
    if weights is not None and len(list(weights)) != len(paths):
        raise ValueError(f"weights has {len(list(weights))} values for {len(paths)} datasets")
    return MixtureDataset([make(str(p), episodes=e, **kwargs) for p, e in zip(paths, _per_member(episodes, len(paths)),
                                                                              strict=True)],
                          weights=weights, samples_per_epoch=samples_per_epoch)


def _per_member(episodes: Any, n: int) -> list[Any]:
    if episodes is None:
        return [None] * n
    if isinstance(episodes, Mapping):
        bad = [k for k in episodes if not isinstance(k, int) or not 0 <= k < n]
        if bad:
            raise ValueError(f"episodes= of a mixture of {n} datasets is keyed by dataset position 0..{n - 1}, got "
                             f"keys {bad}")
        return [episodes.get(i) for i in range(n)]
    eps = list(episodes)
    if len(eps) != n or not all(e is None or isinstance(e, Iterable) for e in eps):
        raise ValueError(f"episodes= of a mixture of {n} datasets takes one entry per dataset (None: all, or a "
                         "list of episode indices) or {position: [episodes]}, got " f"{episodes!r:.200}")
    return eps


def _needed(policies: Sequence[IdlePolicy], *, budget: int) -> int:
    """The idle-decoder estimate of a mixture: its members' together (picklable, unlike a lambda)."""
    return sum(int(p.need(budget=budget)) for p in policies)


class MixtureDataset(EpochState, IterableDataset):
    """Several compiled datasets as one stream of samples (see the module doc and docs/reader.md, "Mixtures").

    Args:
        members: the member ``CompiledDataset``s, made with the same arguments (``CompiledDataset([...])`` does).
        weights: each draw's member with these probabilities (any positive scale); None: every frame of every
            member once per epoch, shuffled together.
        samples_per_epoch: draws per epoch with weights (default: the members' frames together).
    """

    def __init__(self, members: Sequence[Any], *, weights: Sequence[float] | None = None,
                 samples_per_epoch: int | None = None) -> None:
        super().__init__()
        if not members:
            raise ValueError("a mixture needs at least one dataset")
        self.members = list(members)
        m0 = self.members[0]
        self.urls = [m.url for m in self.members]
        self.seed, self.shuffle, self.rank, self.world_size = m0.seed, m0.shuffle, m0.rank, m0.world_size
        self.split_options, self.fps = m0.split_options, m0.fps
        self.delta_timestamps = m0.delta_timestamps
        self.stream_options, self.decode_options = m0.stream_options, m0.decode_options
        for name in ("decode_device", "image_transforms", "return_uint8", "tolerance_s", "frame_order",
                     "decode_batch", "decode_cache_bytes", "idle_decoder_bytes"):
            setattr(self, name, getattr(m0, name))
        keys, extra = common_features(self.urls, [m.manifest.features for m in self.members],
                                      [m.fps for m in self.members])
        for url, dropped in extra.items():
            logger.warning("%s: features %s are not in every dataset of the mixture and are left out of its "
                           "samples", url, dropped)
        unknown = [k for k in (self.delta_timestamps or {}) if k not in keys]
        if unknown:
            raise MixtureMismatch(f"delta_timestamps keys {unknown} are not features of every dataset of the "
                                  f"mixture {self.urls}")
        self.features = keys
        self.camera_keys = [k for k in m0.camera_keys if k in keys]
        for k in keys:  # an image feature is a clip in every member, or in none (compile --images)
            stored = {m.url: k in m.camera_keys for m in self.members}
            if len(set(stored.values())) > 1:
                raise MixtureMismatch(f"feature {k!r} is stored as clips in some datasets of the mixture and as "
                                      f"encoded images in others: {stored}; compile them with the same --images")
        self.image_clips = ImageClips.of({k: m0.manifest.features[k] for k in keys}, self.camera_keys)
        self.tabular_keys = [k for k in m0.tabular_keys if k in keys]
        # depth cameras decode through their quantiser, per camera key: members must agree on it (decode/depth.py)
        self.depth = {}
        for k in self.camera_keys:
            quants = {m.url: m.depth.get(k) for m in self.members}
            if len(set(quants.values())) > 1:
                raise MixtureMismatch(f"camera {k!r} is depth in some datasets of the mixture, or quantised "
                                      f"differently: {quants}; a mixture decodes one camera key one way")
            if quants[m0.url] is not None:
                self.depth[k] = quants[m0.url]
        # image features decode per sample from each member's own rows (MemberStream keeps the shared ones)
        self.image_keys = {k: v for k, v in m0.image_keys.items() if k in keys}
        self.transformed_images = [k for k in m0.transformed_images if k in self.image_keys]
        if self.decode_device != "cpu":
            codecs = {(c.key, c.codec) for m in self.members for c in m.manifest.cameras if c.key in keys}
            if len(codecs) != len({k for k, _ in codecs}):
                raise MixtureMismatch(f"the datasets {self.urls} encode a camera with different codecs: decode "
                                      "them on the CPU (decode_device='cpu'), or compile them alike")
        self.manifest = m0.manifest  # what roboreel.loader reads of it (camera sizes, codecs) is common
        self.keep_frames = {k: max(m.keep_frames.get(k, 0) for m in self.members) for k in self.camera_keys
                            if any(k in m.keep_frames for m in self.members)}
        self.idle_policy = IdlePolicy(self.idle_decoder_bytes, partial(_needed, [m.idle_policy for m in self.members]))
        self.task_names, self.task_remaps = merge_tasks([m.manifest.tasks for m in self.members])
        wts = None if weights is None else tuple(float(w) for w in weights)
        self.plan = MixturePlan(tuple(m.num_frames for m in self.members), wts, samples_per_epoch, self.seed,
                                self.shuffle)
        self.pool_sizes = self.plan.pool_sizes(m0.episode_pool_size)  # one pool size split between members
        empty = [u for u, n, q in zip(self.urls, self.plan.totals, self.plan.quotas.tolist(), strict=True)
                 if q and not n]
        if empty:
            raise ValueError(f"{empty} select no frames but the weights draw from them")
        self._meta: MixtureMeta | None = None
        self._stream_id = self._stream_fingerprint()
        self._counters = SharedCounters()
        self._init_epochs()  # epoch, resume point, the board persistent workers read (epochs.py)

    def __repr__(self) -> str:
        w = "None" if self.plan.weights is None else list(self.plan.weights)
        return f"MixtureDataset({self.urls}, weights={w}, samples_per_epoch={self.plan.size})"

    # -- epochs and sizes -------------------------------------------------------------------------------
    @property
    def meta(self) -> MixtureMeta:
        """The merged metadata: common features, aggregated stats, merged tasks (mixture_meta.py)."""
        if self._meta is None:
            self._meta = MixtureMeta([m.meta for m in self.members], keys=self.features, tasks=self.task_names)
        return self._meta

    @property
    def num_frames(self) -> int:
        """Frames of every member's selection together (one epoch with ``weights=None``)."""
        return sum(m.num_frames for m in self.members)

    @property
    def num_episodes(self) -> int:
        return sum(m.num_episodes for m in self.members)

    @property
    def samples_per_epoch(self) -> int:
        """Draws per epoch, all ranks together."""
        return self.plan.size

    def member_samples(self) -> list[int]:
        """Draws of each member per epoch (all ranks together)."""
        return [int(q) for q in self.plan.quotas]

    def _world(self, worker: int = 0, num_workers: int = 1) -> World:
        rank, world_size = detect_rank(self.rank, self.world_size)
        return World(rank, world_size, worker, num_workers)

    def __len__(self) -> int:
        """Samples this rank emits per epoch (all its workers together)."""
        return self.rank_samples()[self._world().rank]

    def rank_samples(self, *, epoch: int | None = None) -> list[int]:
        """Samples every rank emits per epoch: equal with ``equal_steps`` (the default when world_size > 1)."""
        return rank_samples(self.plan.size, self._world().world_size, self.split_options)

    def dropped_samples(self) -> int:
        return self.plan.size - sum(self.rank_samples())

    def worker_samples(self, num_workers: int, *, epoch: int | None = None) -> list[int]:
        return worker_quotas(len(self), max(1, num_workers), batch_size=self.split_options.batch_size)

    # -- iteration --------------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self.decode_device != "cpu":
            raise RuntimeError(f"a mixture with decode_device={self.decode_device!r} decodes on the GPU in the main "
                               "process: read it with roboreel.loader(dataset, batch_size=..., ...) (docs/gpu.md)")
        return self._iterate(deferred=False)

    def iter_pending(self) -> Iterator[PendingSample]:
        """The same stream, undecoded (for ``roboreel.loader``), as ``CompiledDataset.iter_pending``."""
        return self._iterate(deferred=True)

    def _iterate(self, *, deferred: bool) -> Iterator[Any]:
        isolate_inherited_heap()
        if not deferred:
            pin_mmap_threshold()
        epoch = self._next_epoch()
        worker, num_workers = detect_worker()
        world = self._world(worker, num_workers)
        skip, stream = self._take_resume(world, epoch)
        proc_worker = world.worker
        world = World(world.rank, world.world_size, stream, world.num_workers)
        draws, before = self.plan.consumer_draws(epoch, world, self.split_options)
        if skip > len(draws):
            raise ValueError(f"resume position {skip} is past this worker's {len(draws)} samples")
        counts = np.bincount(draws, minlength=len(self.members))
        done = skip_counts(draws, skip, len(self.members))
        streams: list[MemberStream | None] = []
        for i, ds in enumerate(self.members):
            if not counts[i]:
                streams.append(None)
                continue
            lo = int(before[i])
            slices = member_slices(self.plan, i, ds.manifest, ds.selection, epoch, lo, lo + int(counts[i]))
            order, sizes, starts, stops = stream_arrays(slices, ds.manifest.lengths)
            schedule = PoolSchedule(order, sizes, ranges=np.stack([starts, stops], axis=1),
                                    pool_size=int(self.pool_sizes[i]), shuffle=self.shuffle,
                                    seed=self.plan.member_seed(i), epoch=epoch, rank=world.rank,
                                    worker=world.worker, frame_order=self.frame_order, segment=ds.segment)
            schedule.skip(int(done[i]))
            streams.append(MemberStream(ds, schedule, slices, stream=world.consumer, stride=world.consumers,
                                        shard_prefix=f"{ds.url.rstrip('/')}/", tabular_keys=self.tabular_keys,
                                        camera_keys=self.camera_keys))
        self._position = position = Position(epoch, world, skip)
        row = 1 + proc_worker if get_worker_info() is not None else 0
        live = [s for s in streams if s is not None]
        return run_members(self, live, self._draw(draws[skip:], streams), position, row, self._counters,
                           deferred=deferred)

    def _draw(self, draws: np.ndarray, streams: list[MemberStream | None]) -> Iterator[PendingSample]:
        """The pending samples in draw order, each tagged with its member and the merged task_index."""
        for k in draws.tolist():
            p = next(streams[k].pending)  # type: ignore[union-attr]  # a member drawn has a stream
            v = p.values
            ti = v.get("task_index")
            if isinstance(ti, np.ndarray):
                v["task_index"] = self.task_remaps[k][ti].astype(ti.dtype)
            v["dataset_index"] = np.array(k, dtype=np.int64)
            yield p

    # -- resume -----------------------------------------------------------------------------------------
    def _stream_fingerprint(self) -> dict[str, Any]:
        members = json.dumps([m._stream_id for m in self.members], sort_keys=True, default=str)
        return {
            "mixture": hashlib.sha256(members.encode()).hexdigest()[:16],
            "weights": None if self.plan.weights is None else list(self.plan.weights),
            "samples_per_epoch": self.plan.size, "seed": self.seed, "shuffle": self.shuffle,
            "pool_sizes": self.pool_sizes.tolist(),
            "equal_steps": self.split_options.equal_steps, "batch_size": self.split_options.batch_size,
        }

    # -- observability ----------------------------------------------------------------------------------
    def stats(self) -> dict[str, float | int]:
        """Counters summed over this process and every DataLoader worker so far, as ``CompiledDataset.stats``."""
        return {**self._counters.totals(), "dropped_samples": self.dropped_samples()}

    def reset_stats(self) -> None:
        self._counters.reset()
