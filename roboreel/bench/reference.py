"""``ReferenceDataset``: a plain, efficient map-style reader over a LeRobot v3 *source* dataset.

It follows the sample contract (``LeRobotDataset.__getitem__``'s, docs/reader.md "What a sample is") the way LeRobot's ``LeRobotDataset`` does, and serves
twice: as the oracle the compiled reader is tested against, and as the baseline in benchmarks. So it is honest
about speed: tabular columns are loaded once into numpy, decoders are torchcodec ``VideoDecoder``\\ s in
``"approximate"`` seek mode kept in a small LRU per mp4 (LeRobot keeps a decoder cache too), and
``__getitems__`` (which DataLoader calls with a whole batch of indices) decodes every frame a batch needs from
one mp4 in a single sorted ``get_frames_at`` call.

Video frames are located as LeRobot does: ``round((from_timestamp + timestamp) * average_fps)`` in the shared
mp4, and the decoded pts must be within ``tolerance_s`` of ``from_timestamp + timestamp``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import cv2
import numpy as np
import torch
from torch.utils.data import Dataset
from torchcodec.decoders import VideoDecoder

from roboreel.formats.errors import FrameTimestampError, SourceError
from roboreel.formats.lerobot_v3 import EpisodeMeta, LeRobotSource
from roboreel.formats.table_features import image_bytes, image_keys
from roboreel.formats.transient import is_local
from roboreel.reader.decode import isolate_inherited_heap
from roboreel.reader.plan import column_array, delta_offsets, window


def _image(data: bytes) -> torch.Tensor:
    """An image feature's encoded frame as LeRobot returns it (float32 [C, H, W], uint8 / 255; 16-bit as is),
    decoded with OpenCV: a decoder independent of the compiled reader's Pillow, so tests hold one against the
    other. 8-bit and 16-bit images only (what LeRobot writes: PNG, TIFF); EXIF orientation is not applied, and a
    JPEG may differ from Pillow's decode by rounding (another libjpeg build and upsampling)."""
    arr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    if arr is None:
        raise ValueError(f"OpenCV cannot decode an image of {len(data)} bytes")
    if arr.ndim == 3:  # OpenCV's BGR(A) -> RGB(A)
        arr = cv2.cvtColor(arr, cv2.COLOR_BGR2RGB if arr.shape[2] == 3 else cv2.COLOR_BGRA2RGBA)
    chw = torch.from_numpy(np.ascontiguousarray(arr.reshape(arr.shape[0], arr.shape[1], -1).transpose(2, 0, 1)))
    return chw.to(torch.float32) / 255.0 if chw.dtype == torch.uint8 else chw.to(torch.float32)


class ReferenceDataset(Dataset):
    """Map-style samples of a LeRobot v3 source; ``ds[i]`` is the i-th frame of the selected episodes.

    Args:
        root_or_url: source dataset root (local path or fsspec URL).
        delta_timestamps, episodes, image_transforms, return_uint8, tolerance_s: as ``CompiledDataset``.
        decoder_cache_size: open decoders kept (least recently used closed beyond it).
        storage_options: passed to fsspec.
    """

    def __init__(
        self,
        root_or_url: str,
        *,
        delta_timestamps: Mapping[str, Sequence[float]] | None = None,
        episodes: Iterable[int] | None = None,
        image_transforms: Callable[[torch.Tensor], torch.Tensor] | None = None,
        return_uint8: bool = False,
        tolerance_s: float = 1e-4,
        decoder_cache_size: int = 16,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        self.source = LeRobotSource(str(root_or_url), storage_options=storage_options)
        info = self.source.info
        self.fps = info.fps
        self.camera_keys = info.camera_keys
        self.tabular_keys = info.tabular_keys
        self.tasks = self.source.tasks
        all_eps = {e.index: e for e in self.source.episodes}
        if episodes is None:
            chosen = sorted(all_eps)
        else:
            chosen = sorted({int(e) for e in episodes})
            unknown = [e for e in chosen if e not in all_eps]
            if unknown:
                raise ValueError(f"episodes {unknown[:10]} are not in {self.source.url}")
        self.episodes = [all_eps[e] for e in chosen]
        self.windows = delta_offsets(delta_timestamps, fps=self.fps, tolerance_s=tolerance_s, keys=list(info.features))
        self.image_transforms, self.return_uint8, self.tolerance_s = image_transforms, return_uint8, tolerance_s
        self.decoder_cache_size = decoder_cache_size
        # Rows of the selected episodes, concatenated in episode order; row r of episode e is frame r - start[e].
        starts, parts = [], []
        n = 0
        for ep in self.episodes:
            starts.append(n)
            parts.append(self.source.episode_rows(ep).select(self.tabular_keys))
            n += ep.length
        self._starts = np.array(starts, dtype=np.int64)
        self._ep_row = {ep.index: s for ep, s in zip(self.episodes, starts, strict=True)}
        self.num_frames = n
        self.columns: dict[str, np.ndarray | list] = {}
        self.image_keys = image_keys(info.features)
        for key in self.tabular_keys:
            if key in self.image_keys:  # encoded, decoded per sample (_image)
                self.columns[key] = sum((image_bytes(p.column(key)) for p in parts), [])
                continue
            cols = [column_array(p.column(key), p.num_rows, key) for p in parts]
            self.columns[key] = np.concatenate(cols) if isinstance(cols[0], np.ndarray) else sum(cols, [])
        self._tensors = {k: torch.from_numpy(v) for k, v in self.columns.items() if isinstance(v, np.ndarray)}
        self._timestamps = np.asarray(self.columns["timestamp"], dtype=np.float64).reshape(n)
        self._decoders: OrderedDict[str, Any] = OrderedDict()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_decoders"] = OrderedDict()  # decoders hold native state: each worker opens its own
        return state

    def __len__(self) -> int:
        return self.num_frames

    def __getitem__(self, idx: int) -> dict[str, Any]:
        return self.__getitems__([idx])[0]

    def position(self, index: int) -> int:
        """The dataset position (``ds[pos]``) of global frame ``index`` (they differ when episodes are selected)."""
        for ep in self.episodes:
            if ep.from_index <= index < ep.to_index:
                return self._ep_row[ep.index] + index - ep.from_index
        raise KeyError(f"frame {index} is not in the selected episodes")

    # -- decoding ---------------------------------------------------------------------------------------
    def _decoder(self, rel: str) -> Any:
        dec = self._decoders.get(rel)
        if dec is not None:
            self._decoders.move_to_end(rel)
            return dec
        src = self.source
        target = src.path(rel) if is_local(src.fs) else src.open(rel)
        dec = VideoDecoder(target, seek_mode="approximate")
        self._decoders[rel] = dec
        while len(self._decoders) > self.decoder_cache_size:
            self._decoders.popitem(last=False)
        return dec

    def _decode(self, rel: str, episode: int, queries: dict[float, None]) -> dict[float, torch.Tensor]:
        """Decode the frames shown at timestamps ``queries`` (seconds in the mp4), one sorted call."""
        try:
            dec = self._decoder(rel)
        except (RuntimeError, ValueError, OSError) as e:  # torchcodec: missing, truncated or not a video
            raise SourceError(f"cannot open video: {e}", file=rel, episode=episode) from e
        fps = dec.metadata.average_fps
        ts = list(queries)
        index_of = {t: round(t * fps) for t in ts}
        idx = sorted(set(index_of.values()))
        try:
            batch = dec.get_frames_at(idx)
        except (RuntimeError, IndexError) as e:
            raise SourceError(f"cannot decode frames {idx}: {e}", file=rel, episode=episode) from e
        pos = {f: i for i, f in enumerate(idx)}
        pts = batch.pts_seconds.tolist()
        out = {}
        for t in ts:
            i = pos[index_of[t]]
            if not abs(pts[i] - t) < self.tolerance_s:
                raise FrameTimestampError(video=rel, episode=episode, queried_s=t, loaded_s=pts[i],
                                          tolerance_s=self.tolerance_s)
            out[t] = batch.data[i]
        return out

    # -- samples ----------------------------------------------------------------------------------------
    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Samples for a batch of indices; all frames needed from one mp4 are decoded in one call."""
        isolate_inherited_heap()  # first thing in a forked DataLoader worker: see reader/decode/_forksafe.py
        plans = []
        wanted: dict[tuple[str, int], dict[float, None]] = {}
        for idx in indices:
            i = int(idx)
            if not 0 <= i < self.num_frames:
                raise IndexError(f"index {idx} out of range for {self.num_frames} frames")
            k = int(np.searchsorted(self._starts, i, side="right")) - 1
            ep: EpisodeMeta = self.episodes[k]
            base = int(self._starts[k])
            frame = i - base
            cams = {}
            for cam in self.camera_keys:
                off = self.windows.get(cam)
                q = np.array([frame]) if off is None else window(frame, 0, ep.length, off)[0]
                span = ep.videos[cam]
                shown = [span.from_timestamp + float(self._timestamps[base + int(f)]) for f in q]
                wanted.setdefault((span.path, ep.index), {}).update(dict.fromkeys(shown))
                cams[cam] = (span.path, shown, off is not None and len(off) > 1)
            plans.append((ep, base, frame, cams))
        frames = {key: self._decode(key[0], key[1], qs) for key, qs in wanted.items()}
        return [self._sample(ep, base, frame, cams, frames) for ep, base, frame, cams in plans]

    def _sample(self, ep: EpisodeMeta, base: int, frame: int, cams: dict, frames: dict) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for cam, (path, shown, stacked) in cams.items():
            stack = torch.stack([frames[(path, ep.index)][t] for t in shown])
            img = stack if stacked else stack[0]
            img = img if self.return_uint8 else img.to(torch.float32) / 255.0
            out[cam] = self.image_transforms(img) if self.image_transforms is not None else img
        pads = {}
        for key, col in self.columns.items():
            off = self.windows.get(key)
            if key in self.image_keys:
                q, pad = (np.array([frame]), None) if off is None else window(frame, 0, ep.length, off)
                imgs = torch.stack([_image(col[base + int(f)]) for f in q])
                out[key] = imgs[0] if off is None else imgs
                out[key] = self.image_transforms(out[key]) if self.image_transforms is not None else out[key]
                if pad is not None:
                    pads[key] = torch.from_numpy(pad)
            elif off is None:
                out[key] = self._tensors[key][base + frame].clone() if key in self._tensors else col[base + frame]
            else:
                q, pad = window(frame, 0, ep.length, off)
                rows = base + q
                out[key] = self._tensors[key][torch.from_numpy(rows)] if key in self._tensors else [col[r] for r in rows]
                pads[key] = torch.from_numpy(pad)
        for key, off in self.windows.items():
            if key in self.camera_keys:
                pads[key] = torch.from_numpy(window(frame, 0, ep.length, off)[1])
            out[f"{key}_is_pad"] = pads[key]
        out["task"] = self.tasks[int(self.columns["task_index"][base + frame])]
        return out
