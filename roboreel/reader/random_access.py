"""Map-style access to a compiled dataset: ``CompiledDataset[i]``, as ``LeRobotDataset[i]``.

Why: training streams (the episode pool), but LeRobot users also index a dataset: a look at one frame, a
visualisation, an evaluation subset, a check against ``LeRobotDataset``. ``i`` counts the selected frames in file
order (episodes by index, frames in order: the order of ``shuffle=False``, and of LeRobotDataset's rows), so
``ds[i]`` is the sample ``LeRobotDataset(..., episodes=...)[i]`` returns, windows and transforms included.

How: the episode holding ``i`` is found from the index's lengths (nothing read), its record comes from one ranged
read of its shard (fetch/_source.py), checksums checked, and the last few episodes are kept with their clips'
decoders, so frames asked in order decode forward as the stream does; a jump costs a seek to the keyframe before
it (at most ``gop - 1`` extra frames). Frames decode on the CPU of the calling process whatever
``DecodeOptions.device`` says: one frame at a time gains nothing from NVDEC. Calls from several threads take
turns (its decoders are stateful); it is not pickled with its dataset (another process makes its own).
"""

from __future__ import annotations

import operator
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from roboreel.reader.consumer import check_record
from roboreel.reader.decode import ClipDecoders, materialize
from roboreel.reader.fetch import SliceReader
from roboreel.reader.plan import EpisodeSpec, LoadedEpisode, Slice

KEEP_EPISODES = 8  # episodes (records and open decoders) kept between calls


class RandomAccess:
    """Sample ``i`` of a ``CompiledDataset``'s selection (see the module doc); ``len()`` is the selection's frames."""

    def __init__(self, ds: Any, keep: int = KEEP_EPISODES) -> None:
        self.ds, self.keep = ds, max(1, keep)
        lengths = ds.manifest.index.lengths  # episode ids ascending: the index's (and the shards') file order
        rows = np.arange(len(lengths.ids)) if ds.episodes is None else np.nonzero(
            np.isin(lengths.ids, np.asarray(ds.episodes, dtype=np.int64)))[0]
        self.rows = rows
        self.starts = np.concatenate([[0], np.cumsum(lengths.array[rows])]).astype(np.int64)
        opts = ds.stream_options
        self.reader = SliceReader(ds.store, ds.manifest, verify=opts.verify_checksums, retry=opts.retry)
        self.decoders = ClipDecoders(device="cpu", keep=ds.keep_frames, depth=ds.depth, run_cache_bytes=0)
        self.live: OrderedDict[int, LoadedEpisode] = OrderedDict()  # selection position -> episode, LRU order
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return int(self.starts[-1])

    def position(self, i: Any) -> tuple[int, int]:
        """``(k, frame)``: sample ``i`` is frame ``frame`` of the selection's ``k``-th episode."""
        try:
            i = operator.index(i)  # ints, numpy integers, 0-dim integer tensors; not floats or slices
        except TypeError:
            raise TypeError(f"a CompiledDataset is indexed by an integer (a frame of its selection), got "
                            f"{type(i).__name__}") from None
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"index {i} is out of range: the dataset has {n} frames")
        k = int(np.searchsorted(self.starts, i, side="right")) - 1
        return k, i - int(self.starts[k])

    def sample(self, i: Any) -> dict[str, Any]:
        """The sample dict of frame ``i`` (as an iteration yields it)."""
        k, frame = self.position(i)
        d = self.ds._decoding()  # read per call: set_image_transforms reaches ``ds[i]`` at once
        with self._lock:
            pending = self._episode(k).pending(frame, last=False)
            return materialize([pending], self.decoders, tolerance_s=d.options.tolerance_s,
                               return_uint8=d.return_uint8, image_transforms=d.image_transforms,
                               image_clips=d.image_clips)[0]

    def _episode(self, k: int) -> LoadedEpisode:
        ep = self.live.get(k)
        if ep is not None:
            self.live.move_to_end(k)
            return ep
        ds, ix = self.ds, self.ds.manifest.index
        row = int(self.rows[k])
        episode, length = int(ix.lengths.ids[row]), int(ix.lengths.array[row])
        shard = int(np.searchsorted(ix.shards["first"], row, side="right")) - 1
        name = ix.shards["path"][shard]
        ((_, rec),) = self.reader.records([Slice(shard, (episode,))])
        check_record(rec, length, ds.manifest.fps, name)
        spec = EpisodeSpec(ds.tabular_keys, ds.camera_keys, ds.windows, ds.manifest.tasks, ds.image_keys,
                           ds.transformed_images)
        ep = LoadedEpisode(rec, shard=name, spec=spec)
        self.live[k] = ep
        while len(self.live) > self.keep:
            _, gone = self.live.popitem(last=False)
            for clip in gone.clips.values():
                self.decoders.release(clip)
        return ep

    def close(self) -> None:
        """Close every decoder and drop the kept episodes."""
        with self._lock:
            self.decoders.close()
            self.live.clear()
