"""Member samples made canonical (reader/canonical.py): renamed, normalised, padded, missing cameras filled.

Applied to each *pending* sample as the mixture draws it (before decode), so the one pass serves both readers:
``iter(dataset)`` decodes the renamed requests, and ``roboreel.loader`` ships them. A camera's clip is renamed too
(``Clip.camera``, shared by every request of its episode): decoders, the frames kept of a window, depth and the
loader's camera specs then all speak canonical keys. Values a member has are passed through untouched except
for the zero-padding at the end of a 1-D feature (and the normalisation, when asked for).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from roboreel.formats.manifest import CameraSpec, Manifest
from roboreel.reader.canonical import Canonical
from roboreel.reader.decode.requests import PendingSample
from roboreel.reader.normalize import Normalizer

_PAD = "_is_pad"


def frame_shape(feature: Mapping[str, Any], spec: CameraSpec) -> tuple[int, int, int]:
    """``[C, H, W]`` of a camera's decoded frame (LeRobot's feature shape is ``[H, W, C]``, its names say so)."""
    shape, names = list(feature.get("shape") or []), feature.get("names")
    channels = shape[0] if isinstance(names, list) and names and str(names[0]).startswith("channel") else shape[-1]
    return int(channels), spec.height, spec.width


class MemberSamples:
    """Makes member ``index``'s pending samples canonical (see the module doc).

    Args:
        canon: the mixture's canonical features.
        index: the member's position.
        order: canonical value keys in sample order (features, then ``*_is_pad`` in window order, then ``task``).
        zeros: per canonical camera this member lacks, the shape and dtype of its zero frame(s).
        normalizer: the member's own normalisation, or None.
    """

    def __init__(self, canon: Canonical, index: int, *, order: Sequence[str],
                 zeros: Mapping[str, tuple[tuple[int, ...], np.dtype]], normalizer: Normalizer | None) -> None:
        m = canon.members[index]
        self.rename = dict(m.rename)
        self.rename.update({f"{k}{_PAD}": f"{v}{_PAD}" for k, v in m.rename.items()})
        self.sizes = canon.sizes
        self.order = list(order)
        self.zeros = dict(zeros)
        self.normalizer = normalizer
        self.dim_masks = {k: np.arange(n) >= m.pad.get(k, n) for k, n in canon.sizes.items()}
        self.missing = {c: np.array(c in m.missing) for c in canon.missing_cameras}

    def __call__(self, p: PendingSample) -> PendingSample:
        values: dict[str, Any] = {}
        norm = self.normalizer
        for k, v in p.values.items():
            k = self.rename.get(k, k)
            if norm is not None and k in norm.modes:
                v = norm(k, v)
            size = self.sizes.get(k)
            if size is not None and v.shape[-1] < size:
                v = np.concatenate([v, np.zeros((*v.shape[:-1], size - v.shape[-1]), dtype=v.dtype)], axis=-1)
            values[k] = v
        for cam, (shape, dtype) in self.zeros.items():
            values[cam] = np.zeros(shape, dtype=dtype)
            if len(shape) == 4 or f"{cam}{_PAD}" in self.order:
                values[f"{cam}{_PAD}"] = np.ones(shape[0] if len(shape) == 4 else 1, dtype=bool)
        out = {k: values.pop(k) for k in self.order if k in values}
        out.update(values)
        out.update((f"{k}_dim_is_pad", mask.copy()) for k, mask in self.dim_masks.items())
        out.update((f"{c}_is_missing", flag.copy()) for c, flag in self.missing.items())
        p.values = out
        if p.video:
            video = {}
            for cam, req in p.video.items():
                req.clip.camera = self.rename[cam]  # the same Clip object for every sample of the episode
                video[self.rename[cam]] = req
            p.video = video
        if p.images:
            p.images = {self.rename.get(k, k): v for k, v in p.images.items()}
        return p


def with_cameras_first(samples: Iterator[dict[str, Any]], cameras: Sequence[str], filled: Sequence[str],
                       image_transforms: Any) -> Iterator[dict[str, Any]]:
    """Decoded samples with the canonical cameras first, in canonical order (a filled-in zero frame rode among
    the values), ``image_transforms`` applied to the filled ones (so a resizing transform keeps shapes alike)."""
    try:
        for s in samples:
            out = {}
            for c in cameras:
                x = s[c]
                if c in filled and image_transforms is not None and bool(s[f"{c}_is_missing"]):
                    x = torch.stack([image_transforms(f) for f in x]) if x.ndim == 4 else image_transforms(x)
                out[c] = x
            out.update((k, v) for k, v in s.items() if k not in out)
            yield out
    finally:
        close = getattr(samples, "close", None)
        if close is not None:
            close()


def member_samples(ds: Any, i: int) -> MemberSamples:
    """Member ``i``'s ``MemberSamples`` for mixture ``ds`` (a ``MixtureDataset``: its canonical features, windows,
    output dtype and, with ``normalize``, member ``i``'s stats from its meta)."""
    cm = ds.canon.members[i]
    specs = {s.key: s for s in ds.manifest.cameras}
    zeros = {}
    for c in cm.missing:
        shape = frame_shape(ds.canon.features[c], specs[c])
        t = ds.window_lengths.get(c, 1)
        uint8 = ds.return_uint8 and c not in ds.depth and c not in ds.image_clips
        zeros[c] = ((t, *shape) if t > 1 else shape, np.dtype(np.uint8 if uint8 else np.float32))
    order = [*ds.tabular_keys, *(f"{k}_is_pad" for k in ds.window_lengths), "task"]
    norm = Normalizer(ds.normalize, ds.meta.member_stats(i), cm.url) if ds.normalize else None
    return MemberSamples(ds.canon, i, order=order, zeros=zeros, normalizer=norm)


class CanonicalManifest:
    """A member's manifest seen with the canonical camera specs (what ``roboreel.loader`` sizes batches by);
    everything else is the first member's."""

    def __init__(self, base: Manifest, cameras: list[CameraSpec]) -> None:
        self._base, self.cameras = base, cameras

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._base, name)


def canonical_specs(canon: Canonical, manifests: Sequence[Manifest]) -> list[CameraSpec]:
    """One ``CameraSpec`` per canonical camera: the first member holding it, under the canonical key."""
    specs = []
    for c in canon.cameras:
        for m, man in zip(canon.members, manifests, strict=True):
            own = m.own.get(c)
            spec = next((s for s in man.cameras if s.key == own), None) if own is not None else None
            if spec is not None:
                specs.append(dataclasses.replace(spec, key=c))
                break
    return specs
