"""``MixtureDataset``: several compiled datasets read as one stream, what ``CompiledDataset([a, b], ...)`` returns.

Built from member ``CompiledDataset``s (made with the same arguments, by ``CompiledDataset.__new__``), it keeps
each member's whole machinery (selection, episode pool, slice reader) and adds only the choice of member per
draw (_plan.py, a seeded int array): one consumer (rank x DataLoader worker) runs one ``MemberStream`` per
member (consumer.py) and takes its next sample from the member the draw names. So everything that holds for one
dataset holds here: the order is a pure function of (seed, epoch, rank, worker), ranks take equal steps, workers
emit whole batches, and ``state_dict`` is the same handful of scalars (a resumed consumer skips, in each member's
pool, as many picks as the draws before its position name that member).

Every sample carries ``dataset_index`` (int64, the member's position) and the merged ``task_index``
(``meta.tasks``). Members with other keys, sizes, cameras or fps are made canonical (``remap``, ``pad``,
``delta_indices``: _canonical.py, _samples.py, _windows.py; docs/mixtures.md); a non-camera
feature some member lacks is left out (named in a warning).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from os import PathLike
from typing import Any

import numpy as np

from roboreel.formats.merge import MixtureMismatch, merge_tasks
from roboreel.reader.consumer import MemberStream, run_members
from roboreel.reader.decode import IdlePolicy, ImageClips
from roboreel.reader.mixture._blank import blank_clip
from roboreel.reader.mixture._canonical import canonical as canonical_features
from roboreel.reader.mixture._meta import MixtureMeta
from roboreel.reader.mixture._normalize import check_modes
from roboreel.reader.mixture._plan import MixturePlan, member_slices, skip_counts
from roboreel.reader.mixture._samples import (
    CanonicalManifest,
    MemberSamples,
    canonical_specs,
    member_samples,
)
from roboreel.reader.mixture._windows import member_windows
from roboreel.reader.order import near_offsets
from roboreel.reader.plan import PendingSample, ScheduleKey, World, make_schedule, stream_arrays
from roboreel.reader.stats import SharedCounters
from roboreel.reader.stream import StreamCore

logger = logging.getLogger(__name__)
_NOT_NUMERIC = ("video", "image", "string")


MIXTURE_ONLY = ("remap", "pad", "normalize")  # keywords only a mixture takes (CompiledDataset refuses them alone)


@dataclass(frozen=True)
class CanonicalOptions:
    """How members with other keys, sizes and cameras become one batchable stream (_canonical.py).

    Args:
        remap: one ``{own key: canonical key or None}`` per member (None: keep its keys); None drops a key.
        pad: "max": 1-D features whose sizes differ are zero-padded to the largest (``<key>_dim_is_pad``);
            None: they must match.
        normalize: ``{canonical key: "mean_std" | "min_max"}``: normalise each sample with its own member's stats
            (_normalize.py).
    """

    remap: tuple[Mapping[str, str | None] | None, ...] | None = None
    pad: str | None = None
    normalize: Mapping[str, str] | None = None


def build_mixture(make: Callable[..., Any], paths: Sequence[Any], *, weights: Sequence[float] | str | None,
                  samples_per_epoch: int | None, episodes: Any = None, remap: Any = None, pad: str | None = None,
                  normalize: Mapping[str, str] | None = None, delta_timestamps: Any = None, delta_indices: Any = None,
                  **kwargs: Any) -> MixtureDataset:
    """``CompiledDataset([a, b, ...], ...)``: each member made by ``make(path, episodes=..., **kwargs)`` (every
    argument as for one dataset), then mixed. ``episodes`` is one entry per dataset (None or episode indices) or
    ``{position: [episodes]}``; windows are set per member on its own frame grid (_windows.py)."""
    paths = list(paths)
    if not paths or not all(isinstance(p, str | PathLike) for p in paths):
        raise ValueError(f"a mixture is a non-empty list of dataset paths or URLs, got {paths!r:.200}")
    if weights is not None and not isinstance(weights, str) and len(list(weights)) != len(paths):
        raise ValueError(f"weights has {len(list(weights))} values for {len(paths)} datasets")
    members = [make(str(p), episodes=e, **kwargs) for p, e in zip(paths, _per_member(episodes, len(paths)),
                                                                  strict=True)]
    options = CanonicalOptions(None if remap is None else tuple(remap), pad, normalize)
    return MixtureDataset(members, weights=weights, samples_per_epoch=samples_per_epoch, canonical=options,
                          delta_timestamps=delta_timestamps, delta_indices=delta_indices)


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


class MixtureDataset(StreamCore):
    """Several compiled datasets as one stream of samples (see the module doc and docs/reader.md, "Mixtures").

    Args:
        members: the member ``CompiledDataset``s, made with the same arguments (``CompiledDataset([...])`` does).
        weights: each draw's member with these probabilities (any positive scale); None: every frame of every
            member once per epoch, shuffled together.
            "frames": in proportion to each member's selected frames (Octo's balance).
        samples_per_epoch: draws per epoch with weights (default: the members' frames together).
        canonical: how members with other keys, sizes and cameras become one stream (remap, pad, normalize).
        delta_timestamps, delta_indices: windows by canonical key, in seconds or in frames of each member's own
            grid (``set_windows``); both None: the members' own.
    """

    def __init__(self, members: Sequence[Any], *, weights: Sequence[float] | str | None = None,
                 samples_per_epoch: int | None = None, canonical: CanonicalOptions | None = None,
                 delta_timestamps: Mapping[str, Sequence[float]] | None = None,
                 delta_indices: Mapping[str, Sequence[int]] | None = None) -> None:
        super().__init__()
        if not members:
            raise ValueError("a mixture needs at least one dataset")
        self.members = list(members)
        m0 = self.members[0]
        self.urls = [m.url for m in self.members]
        self.seed, self.shuffle, self.rank, self.world_size = m0.seed, m0.shuffle, m0.rank, m0.world_size
        self.split_options, self.fps = m0.split_options, m0.fps
        self.member_fps = [m.fps for m in self.members]
        self.stream_options, self.decode_options = m0.stream_options, m0.decode_options
        # the members were made with the same arguments: the first one's decode device, output form and order
        self.decode_device, self.frame_order, self.spread = m0.decode_device, m0.frame_order, m0.spread
        self.spread_is_default = m0.spread_is_default
        self.image_transforms, self.return_uint8 = m0.image_transforms, m0.return_uint8
        self.options = opts = canonical or CanonicalOptions()
        self.canon = canon = canonical_features(self.urls, [m.manifest.features for m in self.members],
                                                [m.camera_keys for m in self.members], opts.remap, opts.pad)
        for url, dropped in canon.dropped.items():
            logger.warning("%s: features %s are not in every dataset of the mixture and are left out of its "
                           "samples", url, dropped)
        self.features = list(canon.features)
        self.camera_keys = list(canon.cameras)
        self.image_clips = ImageClips.of(canon.features, self.camera_keys)
        self.tabular_keys = [k for k in self.features if k not in canon.cameras]
        # depth cameras decode through their quantiser, per camera key: members must agree on it (decode/_depth.py)
        self.depth = {}
        held = [(m, cm) for m, cm in zip(self.members, canon.members, strict=True)]
        for k in self.camera_keys:
            quants = {m.url: m.depth.get(cm.own[k]) for m, cm in held if k in cm.own}
            if len(set(quants.values())) > 1:
                raise MixtureMismatch(f"camera {k!r} is depth in some datasets of the mixture, or quantised "
                                      f"differently: {quants}; a mixture decodes one camera key one way")
            q = next(iter(quants.values()))
            if q is not None:
                self.depth[k] = q
                if k in canon.missing_cameras:
                    raise MixtureMismatch(f"depth camera {k!r} is missing from some datasets of the mixture "
                                          f"{self.urls}: a missing camera reads black RGB frames; drop it (remap "
                                          "to None) or map a depth camera of every dataset onto it")
        # image features decode per sample from each member's own rows (MemberStream keeps the ones it maps)
        self.image_keys = {cm.rename[k]: v for m, cm in reversed(held) for k, v in m.image_keys.items()
                           if k in cm.rename}
        self.transformed_images = [cm.rename[k] for m, cm in held for k in m.transformed_images if k in cm.rename]
        if self.decode_device != "cpu":
            codecs = {(cm.rename[c.key], c.codec) for m, cm in held for c in m.manifest.cameras if c.key in cm.rename}
            if len(codecs) != len({k for k, _ in codecs}):
                raise MixtureMismatch(f"the datasets {self.urls} encode a camera with different codecs: decode "
                                      "them on the CPU (DecodeOptions(device='cpu')), or compile them alike")
        # what roboreel.loader reads of it (camera sizes, codecs), under the canonical keys
        self.manifest = m0.manifest if canon.identity else CanonicalManifest(
            m0.manifest, canonical_specs(canon, [m.manifest for m in self.members]))
        self._samples: list[MemberSamples] | None = None  # made where samples are (workers), from the meta's stats
        self.set_windows(delta_timestamps=delta_timestamps, delta_indices=delta_indices)
        # a camera some member lacks reads a blank clip's black frame there (_blank.py), encoded once, here
        specs = {c.key: c for c in self.manifest.cameras}
        self.blank_clips = {c: blank_clip(c, specs[c].height, specs[c].width) for c in canon.missing_cameras}
        self.task_names, self.task_remaps = merge_tasks([m.manifest.tasks for m in self.members])
        self.normalize = check_modes(opts.normalize, [k for k in self.tabular_keys
                                                      if canon.features[k].get("dtype") not in _NOT_NUMERIC])
        if isinstance(weights, str):
            if weights != "frames":
                raise ValueError(f"weights={weights!r}: give one number per dataset, \"frames\" (in proportion to "
                                 "each member's frames, Octo's balance) or None (every frame once per epoch)")
            weights = [m.num_frames for m in self.members]
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

    def set_windows(self, *, delta_timestamps: Mapping[str, Sequence[float]] | None = None,
                    delta_indices: Mapping[str, Sequence[int]] | None = None) -> None:
        """Windows by canonical key, set on each member's own frame grid (reader/mixture/_windows.py):
        ``delta_indices`` in frames, or ``delta_timestamps`` in seconds (on every member's grid). Both None: the
        members' own windows (a mixture made of members built with theirs). lerobot-train's integration sets a policy's
        ``*_delta_indices`` here once the canonical features are known."""
        canon, m0 = self.canon, self.members[0]
        if delta_timestamps is not None or delta_indices is not None:  # each member on its own frame grid
            windows, seconds, self.window_lengths = member_windows(
                canon, self.member_fps, delta_timestamps=delta_timestamps, delta_indices=delta_indices,
                tolerance_s=self.decode_options.tolerance_s)
            for m, w, sec in zip(self.members, windows, seconds, strict=True):
                m._set_windows(w, sec)
        else:  # members made with their windows (MixtureDataset(members)): the first one's, by canonical key
            rename = canon.members[0].rename
            self.window_lengths = {rename[k]: len(o) for k, o in m0.windows.items() if k in rename}
        self.delta_timestamps = dict(delta_timestamps) if delta_timestamps is not None else (
            m0.delta_timestamps if delta_indices is None else None)
        self.delta_indices = None if delta_indices is None else {k: list(v) for k, v in delta_indices.items()}
        self.keep_frames: dict[str, int] = {}
        for m, cm in zip(self.members, canon.members, strict=True):
            for k, n in m.keep_frames.items():
                c = cm.rename.get(k)
                if c is not None:
                    self.keep_frames[c] = max(n, self.keep_frames.get(c, 0))
        self.idle_policy = IdlePolicy(self.decode_options.idle_decoders_bytes,
                                      partial(_needed, [m.idle_policy for m in self.members]))
        self._samples = None

    def __repr__(self) -> str:
        w = "None" if self.plan.weights is None else list(self.plan.weights)
        return f"MixtureDataset({self.urls}, weights={w}, samples_per_epoch={self.plan.size})"

    # -- epochs and sizes -------------------------------------------------------------------------------
    @property
    def meta(self) -> MixtureMeta:
        """The merged metadata: common features, aggregated stats, merged tasks (reader/mixture/_meta.py)."""
        if self._meta is None:
            self._meta = MixtureMeta([m.meta for m in self.members], keys=self.features, tasks=self.task_names,
                                     canon=self.canon)
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

    def _epoch_samples(self) -> int:
        return self.plan.size

    def __getitem__(self, i: int) -> dict[str, Any]:
        """Refused: a mixture's samples are weighted draws, with no file order to index; index a member."""
        raise TypeError("a mixture has no map-style access (its samples are weighted draws from its members): "
                        "index one member, CompiledDataset(path)[i], or iterate the mixture")

    # -- iteration --------------------------------------------------------------------------------------
    def member_samples_maker(self, k: int) -> MemberSamples | None:
        """What makes member ``k``'s samples canonical (None: nothing to do), made once per process."""
        if self._samples is None:
            self._samples = ([] if self.canon.identity and not self.normalize else
                             [member_samples(self, i) for i in range(len(self.members))])
        return self._samples[k] if self._samples else None

    def _consume(self, epoch: int, world: World, skip: int, row: int, *, deferred: bool) -> Iterator[Any]:
        draws, before = self.plan.consumer_draws(epoch, world, self.split_options)
        position = self._start(epoch, world, skip, len(draws))
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
            schedule = make_schedule(order, sizes, ranges=np.stack([starts, stops], axis=1),
                                     pool_size=int(self.pool_sizes[i]), shuffle=self.shuffle,
                                     key=ScheduleKey(self.plan.member_seed(i), epoch, world.rank, world.worker),
                                     frame_order=self.frame_order,
                                     gop=ds.gop, spread=self.spread, near=near_offsets(ds.fps))
            schedule.skip(int(done[i]))
            cm = self.canon.members[i]
            records = ds._records(tabular_keys=cm.tabular, camera_keys=cm.cameras)
            streams.append(MemberStream(records, schedule, slices, stream=world.consumer, stride=world.consumers,
                                        shard_prefix=f"{ds.url.rstrip('/')}/"))
        live = [s for s in streams if s is not None]
        return run_members(self._decoding(), live, self._draw(draws[skip:], streams), position, row,
                           self._counters, deferred=deferred)

    def _draw(self, draws: np.ndarray, streams: list[MemberStream | None]) -> Iterator[PendingSample]:
        """The pending samples in draw order, each canonical (_samples.py) and tagged with its member and
        the merged task_index."""
        makers = [self.member_samples_maker(k) for k in range(len(self.members))]
        for k in draws.tolist():
            p = next(streams[k].pending)  # type: ignore[union-attr]  # a member drawn has a stream
            make = makers[k]
            if make is not None:
                p = make(p)
            v = p.sample_values()
            ti = v.get("task_index")
            if isinstance(ti, np.ndarray):
                v["task_index"] = np.asarray(self.task_remaps[k][ti], dtype=ti.dtype)  # 0-d stays an array
            v["dataset_index"] = np.array(k, dtype=np.int64)
            yield p

    # -- resume -----------------------------------------------------------------------------------------
    def _stream_fingerprint(self) -> dict[str, Any]:
        members = json.dumps([m._stream_id for m in self.members], sort_keys=True, default=str)
        return {
            "mixture": hashlib.sha256(members.encode()).hexdigest()[:16],
            "weights": None if self.plan.weights is None else list(self.plan.weights),
            "samples_per_epoch": self.plan.size, "seed": self.seed, "shuffle": self.shuffle,
            "pool_sizes": self.pool_sizes.tolist(), "frame_order": self.frame_order,
            "spread": self.spread,
            "equal_steps": self.split_options.equal_steps, "batch_size": self.split_options.batch_size,
        }
