"""``CompiledDataset``: a compiled roboreel dataset as a ``torch.utils.data.IterableDataset``.

Per consumer (a rank's DataLoader worker): plan the epoch (plan/) -> stream the consumer's shard slices in a
background thread (fetch/_source.py) -> episode pool picks frames (plan/_pool.py) -> pending samples decoded
on exit in small batches (decode/) -> LeRobot-shaped sample dicts. Every step is a pure function of (seed,
epoch, rank, worker) and the manifest, so ``state_dict`` is a handful of scalars and resuming replays
positions without decoding.

This module holds what decides the stream: options and their checks, epochs and sizes, the consumer's plan and
resume point, ``state_dict`` and stats. Running the planned stream (threads, decoders, counters, teardown) is
consumer.py's, so the dataset's contract reads apart from the machinery that fulfils it.

GPU decode (``decode=DecodeOptions(device="cuda")``) stops before the decode: ``iter_pending`` yields the compressed
pending samples and ``roboreel.loader`` (reader/loader/_loader.py) decodes whole batches on the GPU in the main process.
"""
from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
import torch

from roboreel.formats.depth import OUTPUT_UNIT, is_depth
from roboreel.formats.errors import ShardReadError
from roboreel.formats.index import FileIndex
from roboreel.formats.manifest import Manifest, load_manifest
from roboreel.formats.transient import retrying
from roboreel.reader.consumer import Records, run_consumer
from roboreel.reader.decode import (
    IdlePolicy,
    ImageClips,
    camera_lanes,
    idle_bytes_needed,
    resolve_decode_device,
)
from roboreel.reader.depth import depth_cameras
from roboreel.reader.fetch import Store
from roboreel.reader.meta import DatasetMeta
from roboreel.reader.mixture import MIXTURE_ONLY, build_mixture
from roboreel.reader.options import DecodeOptions, StreamOptions, resolve_options
from roboreel.reader.order import near_offsets
from roboreel.reader.plan import (
    DEFAULT_SPREAD,
    FRAME_ORDERS,
    MAX_RUNS,
    EpisodeCache,
    FrameOrder,
    ScheduleKey,
    Selection,
    Slice,
    SplitOptions,
    World,
    auto_budget,
    consumer_slices,
    delta_offsets,
    frame_offsets,
    make_schedule,
    selection,
    stream_arrays,
    uneven_split_message,
)
from roboreel.reader.random_access import RandomAccess
from roboreel.reader.stats import SharedCounters
from roboreel.reader.stream import StreamCore

logger = logging.getLogger(__name__)

DEFAULT_POOL_SIZE = 32
_FLAG_UNEVEN = 0
MAX_KEEP = 32


def _check_transforms(image_transforms: Any) -> None:
    if image_transforms is not None and not callable(image_transforms):
        raise ValueError("image_transforms must be callable or None")


def _positive_or_none(name: str, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"{name} must be a positive integer or None, got {value!r}")


def _check_arguments(*, batch_size: Any, episode_pool_size: Any, image_transforms: Any, frame_order: Any,
                     spread: Any) -> None:
    _positive_or_none("batch_size", batch_size)
    _positive_or_none("spread", spread)
    if frame_order not in FRAME_ORDERS:
        raise ValueError(f"frame_order must be one of {FRAME_ORDERS}, got {frame_order!r}")
    if not isinstance(episode_pool_size, int) or episode_pool_size < 1:
        raise ValueError(f"episode_pool_size must be an integer >= 1, got {episode_pool_size!r}")
    _check_transforms(image_transforms)


def _offsets(m: Manifest, delta_timestamps: Mapping[str, Sequence[float]] | None,
             delta_indices: Mapping[str, Sequence[int]] | None, *, tolerance_s: float) -> dict[str, np.ndarray]:
    """The windows, ``{key: int64 frame offsets}``, of ``delta_timestamps`` (seconds) or ``delta_indices``."""
    if delta_indices is not None and delta_timestamps is not None:
        raise ValueError("give delta_timestamps (seconds) or delta_indices (frames), not both")
    if delta_indices is not None:
        return frame_offsets(delta_indices, keys=list(m.features))
    return delta_offsets(delta_timestamps, fps=m.fps, tolerance_s=tolerance_s, keys=list(m.features))


class CompiledDataset(StreamCore):
    """Stream a compiled roboreel dataset into training; samples match ``LeRobotDataset.__getitem__``.

    Args:
        path_or_url: compiled dataset root: a local directory or any fsspec URL (file://, http(s)://, s3://, hf://).
            A list of them makes a mixture (a ``MixtureDataset``, reader/mixture/; docs/reader.md "Mixtures"),
            every other argument as for one dataset; ``episodes`` then has one entry per dataset.
        weights, samples_per_epoch: a mixture's member probabilities (None: every frame of every member once per
            epoch) and draws per epoch (default: the members' frames together); refused for one path.
        delta_timestamps: ``{key: [seconds, ...]}`` windows (tabular or camera keys), as in LeRobot.
        delta_indices: ``{key: [frames, ...]}`` the same windows in frame offsets (LeRobot policies'
            ``*_delta_indices``); a mixture applies them at each member's own fps. Not with ``delta_timestamps``.
        remap, pad, normalize: a mixture's canonical keys (docs/mixtures.md; reader/mixture/_canonical.py).
        episodes: only these episode indices (default: all).
        episode_pool_size: whole episodes each consumer keeps (compressed) and draws frames across. Default 32.
        seed: base of every random decision. Order is a pure function of (seed, epoch, rank, worker).
        shuffle: False reads in file order (episodes in order, frames in order).
        frame_order: the order frames leave the pool (docs/reader.md, "Order and randomness"):
            "shuffled" (default): several GOP runs of each pooled episode open at once, each decoded forward on a
            decoder of its own (~1 decoded frame per sample), and no two frames of one episode less than 0.2 s
            apart within ``spread`` samples, so a batch holds about as few near-duplicates as uniform sampling;
            "segments": one run per episode at a time, the fastest, but a batch holds runs of consecutive
            frames; "random": every frame independent, ~GOP/2 decoded frames per sample.
        spread: with "shuffled", the samples of a consumer (a DataLoader worker) among which no two frames of one
            episode are near-duplicates: at least the samples one worker gives a batch (``batch_size``, or
            ``batch_size / num_workers`` where ``roboreel.loader`` mixes workers). None (default): ``batch_size``
            where given, else ``batch_size / num_workers`` in a ``roboreel.loader`` that mixes workers (it sets
            it), else 32.
        image_transforms: callable applied to every camera tensor.
        return_uint8: camera tensors as uint8 instead of float32 in [0, 1].
        rank, world_size: distributed position; default from torch.distributed, else RANK/WORLD_SIZE, else (0, 1).
        equal_steps: every rank emits the same number of samples (default: True when world_size > 1).
        batch_size: the DataLoader's batch size: workers then emit whole batches, so ``len(DataLoader)`` is exact.
        stream: transport knobs (readahead, retries, backoff_s, verify_checksums, storage_options), a
            ``roboreel.StreamOptions``.
        decode: decode knobs (device: the decode device, fallback, batch, cache_mb: the run cache, gpu_cache_mb,
            tolerance_s, idle_decoders_mb), a ``roboreel.DecodeOptions``.

    ``meta`` is the dataset's LeRobot-shaped metadata (features, fps, stats, tasks, episodes; read on first use),
    ``num_frames`` / ``num_episodes`` count the whole selection (all ranks), like LeRobotDataset; ``len()`` is
    this rank's share.

    Call ``set_epoch(epoch)`` at the start of every epoch (as with DistributedSampler); see docs/reader.md.
    """

    def __new__(cls, path_or_url: Any = None, *args: Any, weights: Sequence[float] | str | None = None,
                samples_per_epoch: int | None = None, **kwargs: Any) -> Any:
        """A list of paths makes a ``MixtureDataset`` (reader/mixture/_dataset.py); one path, this class."""
        if isinstance(path_or_url, list | tuple):
            return build_mixture(cls, path_or_url, weights=weights, samples_per_epoch=samples_per_epoch, **kwargs)
        if weights is not None or samples_per_epoch is not None or any(
                kwargs.get(k) is not None for k in MIXTURE_ONLY):
            raise ValueError(f"weights=, samples_per_epoch= and {'=, '.join(MIXTURE_ONLY)}= mix several "
                             "datasets: pass a list of paths, "
                             f"CompiledDataset([a, b], weights=[...]); got one: {path_or_url!r}")
        return super().__new__(cls)

    def __init__(
        self,
        path_or_url: str,
        *,
        weights: Sequence[float] | None = None,
        samples_per_epoch: int | None = None,
        delta_timestamps: Mapping[str, Sequence[float]] | None = None,
        delta_indices: Mapping[str, Sequence[int]] | None = None,
        episodes: Iterable[int] | None = None,
        episode_pool_size: int = DEFAULT_POOL_SIZE,
        seed: int = 0,
        shuffle: bool = True,
        frame_order: FrameOrder = "shuffled",
        spread: int | None = None,
        image_transforms: Callable[[torch.Tensor], torch.Tensor] | None = None,
        return_uint8: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
        equal_steps: bool | None = None,
        batch_size: int | None = None,
        stream: StreamOptions | None = None,
        decode: DecodeOptions | None = None,
    ) -> None:
        super().__init__()
        del weights, samples_per_epoch  # __new__'s (a mixture never reaches this __init__)
        _check_arguments(batch_size=batch_size, episode_pool_size=episode_pool_size, image_transforms=image_transforms,
                         frame_order=frame_order, spread=spread)
        stream, decode = resolve_options(stream, decode)
        self.stream_options, self.decode_options = stream, decode
        decode_device = resolve_decode_device(decode.device, fallback=decode.fallback)
        self.url = str(path_or_url)
        self.manifest: Manifest = self._open(stream)
        m = self.manifest
        self.fps = m.fps
        self._set_features(m)
        self.episodes: list[int] | None = self._known_episodes(episodes)
        self.episode_pool_size, self.seed, self.shuffle = episode_pool_size, int(seed), bool(shuffle)
        # where frames decode: DecodeOptions.device resolved ("cuda" -> "cuda:0", or "cpu" by its fallback)
        self.decode_device, self.image_transforms, self.return_uint8 = decode_device, image_transforms, return_uint8
        self.frame_order = frame_order
        self.spread = spread or batch_size or DEFAULT_SPREAD  # plan/_shuffled.py
        self.spread_is_default = not (spread or batch_size)  # roboreel.loader sets it (use_batch_share)
        self.rank, self.world_size = rank, world_size
        self.split_options = SplitOptions(equal_steps=equal_steps, batch_size=batch_size)
        self._meta: DatasetMeta | None = None
        gops = [c.gop for c in m.cameras if c.gop]
        self.gop = min(gops) if gops else int(m.settings.get("gop") or 10)
        self._selection: Selection | None = None
        _ = self.selection  # shard-level (O(shards)): known from construction, like the shard table
        keep = stream.keep_episodes_mb
        self.episode_cache = EpisodeCache(auto_budget(self._selected_shard_bytes()) if keep is None
                                          else int(keep * 2**20))  # episodes kept across epochs, per process
        self._set_windows(_offsets(m, delta_timestamps, delta_indices, tolerance_s=decode.tolerance_s),
                          delta_timestamps)
        self._stream_id = self._stream_fingerprint()
        self._counters = SharedCounters()
        self._access: RandomAccess | None = None  # ``ds[i]``'s kept episodes and decoders, made on first use
        self._init_epochs()  # epoch, resume point, the board persistent workers read (epochs.py)

    def _open(self, stream: StreamOptions) -> Manifest:
        """The manifest and shard table of ``self.url`` (``self.store``), read with ``stream``'s retries."""
        self.store = Store(self.url, dict(stream.storage_options) if stream.storage_options is not None else None)
        opts = self.store.storage_options
        retried = partial(retrying, name=self.url, retry=stream.retry, error=ShardReadError)  # like shard reads
        m = retried(lambda: load_manifest(self.url, storage_options=opts))
        if isinstance(m.index, FileIndex):  # index reads retry transient faults like shard reads
            m.index.retry = retried
        retried(lambda: m.index.shards)  # the shard table
        return m

    def _set_features(self, m: Manifest) -> None:
        """Which features are clips (cameras), table columns, encoded images, depth."""
        clipped = set(m.camera_keys)  # features stored as clips: video ones, and images compiled as clips
        self.camera_keys = [k for k in m.features if k in clipped]
        self.tabular_keys = [k for k in m.features if k not in clipped]
        self.image_clips = ImageClips.of(m.features, self.camera_keys)  # images compiled as clips (decode/_images.py)
        self.depth = depth_cameras(m)  # camera -> quantiser: decoded to LeRobot's depth values (decode/_depth.py)
        # image features kept encoded: decoded per sample from the record rows (depth in metres -> mm, untransformed)
        self.image_keys = {k: is_depth(f) and (f.get("info") or {}).get("depth_unit") == "m"
                           for k, f in m.features.items() if f.get("dtype") == "image" and k not in clipped}
        self.transformed_images = [k for k in self.image_keys if not is_depth(m.features[k])]

    def _known_episodes(self, episodes: Iterable[int] | None) -> list[int] | None:
        """``episodes`` sorted, once each; a ValueError naming those the dataset does not have."""
        if episodes is None:
            return None
        episodes = sorted({int(e) for e in episodes})
        known = self.manifest.lengths  # the episode ids (loaded only when a selection asks for them)
        unknown = [e for e in episodes if e not in known]
        if unknown:
            ids = known.ids
            raise ValueError(f"episodes {unknown[:10]} are not in {self.url} (it has {len(ids)} episodes"
                             + (f", {ids[0]}..{ids[-1]})" if len(ids) else ")"))
        return episodes

    def _set_windows(self, windows: dict[str, np.ndarray],
                     delta_timestamps: Mapping[str, Sequence[float]] | None = None) -> None:
        """The windows (``{key: int64 frame offsets}``) and what follows from them; a mixture sets each member's
        on its own frame grid (reader/mixture/_canonical.py)."""
        self.windows = windows
        self.delta_timestamps = ({k: list(v) for k, v in delta_timestamps.items()} if delta_timestamps else
                                 {k: (o / self.fps).tolist() for k, o in windows.items()}) or None
        runs = MAX_RUNS if self.frame_order == "shuffled" else 1
        self.idle_policy = IdlePolicy(self.decode_options.idle_decoders_bytes, partial(
            idle_bytes_needed, self.manifest, self.episodes, camera_lanes(self.windows, self.camera_keys, runs=runs)),
            whole_pool=self._fits_one_pool)
        # Decoded frames kept per clip of a windowed camera: the window's span, at most MAX_KEEP (memory).
        self.keep_frames = {k: min(MAX_KEEP, int(o.max() - o.min()) + 1) for k, o in self.windows.items()
                            if k in self.camera_keys and len(o) > 1}

    def _fits_one_pool(self) -> bool:
        """Every selected episode fits one episode pool: all its clips are live at once in any consumer."""
        n = self.manifest.index.num_episodes if self.episodes is None else len(self.episodes)
        return n <= self.episode_pool_size

    # -- epochs and sizes -------------------------------------------------------------------------------
    @property
    def meta(self) -> DatasetMeta:
        """LeRobot-shaped metadata (``LeRobotDatasetMetadata``'s fields), read from meta/ on first use."""
        if self._meta is None:
            self._meta = DatasetMeta(self.url, storage_options=self.store.storage_options,
                                     retry=self.stream_options.retry,
                                     checksums=self.manifest.meta_files)
        return self._meta

    @property
    def features(self) -> dict[str, dict]:
        """The features of info.json (``LeRobotDataset.features``: ``meta.features``)."""
        return self.meta.features

    @property
    def depth_output_unit(self) -> str:
        """The unit depth maps and their stats come in: millimetres, LeRobotDataset's default (the only one)."""
        return OUTPUT_UNIT

    def set_image_transforms(self, image_transforms: Callable[[torch.Tensor], torch.Tensor] | None) -> None:
        """Replace the camera transform (``LeRobotDataset.set_image_transforms``), for the next iteration and
        ``ds[i]``; persistent DataLoader workers keep the copy they were started with, as LeRobot's do."""
        _check_transforms(image_transforms)
        self.image_transforms = image_transforms

    def clear_image_transforms(self) -> None:
        """No camera transform (``LeRobotDataset.clear_image_transforms``)."""
        self.image_transforms = None

    @property
    def num_frames(self) -> int:
        """Frames of the selected episodes, all ranks together (LeRobotDataset.num_frames); ``len()`` is this
        rank's share of an epoch."""
        return self.selection.total

    def episode_lengths(self) -> np.ndarray:
        """Frames of each selected episode (all ranks): the population uniform sampling draws from (order.py)."""
        lengths = self.manifest.lengths
        if self.episodes is None:
            return np.asarray(lengths.array, dtype=np.int64)
        return np.array([lengths[e] for e in self.episodes], dtype=np.int64)

    @property
    def num_episodes(self) -> int:
        """Selected episodes (LeRobotDataset.num_episodes)."""
        return self.manifest.num_episodes if self.episodes is None else len(self.episodes)

    @property
    def selection(self) -> Selection:
        """The shards and frames this dataset reads (shard-level arrays; computed once per process)."""
        if self._selection is None:
            self._selection = selection(self.manifest, self.episodes)
        return self._selection

    def _selected_shard_bytes(self) -> int:
        sizes = np.asarray(self.manifest.index.shards["size"], dtype=np.int64)
        return int(sizes[self.selection.shards].sum())

    def __getstate__(self) -> dict[str, Any]:
        # recomputed where needed: pickles stay O(1); open decoders stay in the process that opened them
        return {**self.__dict__, "_selection": None, "_access": None}

    def _slices(self, world: World, epoch: int) -> list[Slice]:
        return consumer_slices(self.manifest, world, seed=self.seed, epoch=epoch, shuffle=self.shuffle,
                               episodes=self.episodes, split_options=self.split_options, sel=self.selection)

    def _epoch_samples(self) -> int:
        return self.selection.total

    # -- map-style access -------------------------------------------------------------------------------
    def __getitem__(self, i: int) -> dict[str, Any]:
        """Sample ``i`` of the selection (0 <= i < ``num_frames``, negative from the end), in file order:
        ``LeRobotDataset[i]``'s sample, decoded on the CPU of this process (random_access.py). For a look, an
        evaluation subset or a check; training reads faster by iterating (the episode pool)."""
        if self._access is None:
            self._access = RandomAccess(self)
        return self._access.sample(i)

    # -- iteration --------------------------------------------------------------------------------------
    def _consume(self, epoch: int, world: World, skip: int, row: int, *, deferred: bool) -> Iterator[Any]:
        slices = self._slices(world, epoch)
        if world.consumer == 0:
            msg = uneven_split_message(len(self.selection.shards), world)
            if msg and self._counters.first_time(_FLAG_UNEVEN):
                logger.warning(msg)
        order, sizes, starts, stops = stream_arrays(slices, self.manifest.lengths)
        schedule = make_schedule(order, sizes, ranges=np.stack([starts, stops], axis=1),
                                 pool_size=self.episode_pool_size,
                                 shuffle=self.shuffle, key=ScheduleKey(self.seed, epoch, world.rank, world.worker),
                                 frame_order=self.frame_order,
                                 gop=self.gop, spread=self.spread, near=near_offsets(self.fps))
        position = self._start(epoch, world, skip, schedule.total)
        schedule.skip(skip)
        return run_consumer(self._records(), self._decoding(), schedule, slices, position, row, self._counters,
                            deferred=deferred)

    def _records(self, *, tabular_keys: Sequence[str] | None = None,
                 camera_keys: Sequence[str] | None = None) -> Records:
        """Where this dataset's episodes come from and what they are made into, as a consumer reads them
        (consumer.Records); a mixture names the keys it keeps of them."""
        return Records(self.store, self.manifest, self.stream_options,
                       tuple(self.tabular_keys if tabular_keys is None else tabular_keys),
                       tuple(self.camera_keys if camera_keys is None else camera_keys), self.image_keys,
                       tuple(self.transformed_images), self.windows, self.episode_cache)

    # -- resume -----------------------------------------------------------------------------------------
    def _stream_fingerprint(self) -> dict[str, Any]:
        return {
            "seed": self.seed, "shuffle": self.shuffle, "episode_pool_size": self.episode_pool_size,
            "frame_order": self.frame_order, "gop": self.gop, "spread": self.spread,
            "episodes": hashlib.sha256(json.dumps(self.episodes).encode()).hexdigest()[:16],
            "equal_steps": self.split_options.equal_steps, "batch_size": self.split_options.batch_size,
            "layout": self.manifest.fingerprint(),
        }
