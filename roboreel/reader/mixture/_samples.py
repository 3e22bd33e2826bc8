"""Member samples made canonical (_canonical.py): renamed, normalised, padded, missing cameras filled.

Applied to each *pending* sample as the mixture draws it (before decode), so the one pass serves both readers:
``iter(dataset)`` decodes the renamed requests, and ``roboreel.loader`` ships them. A camera's clip is renamed too
(a copy of the episode's ``EpisodeClip`` under the canonical camera, shared by every request of its episode while it
is pooled; the episode's own clips stay as made, since a kept episode serves the next epoch: plan/_episode_cache.py):
decoders, the frames kept of a window, depth and the loader's camera specs then all speak canonical keys. Values a
member has are passed through untouched except for the zero-padding at the end of a 1-D feature (and the
normalisation, when asked for). A missing camera is a
request for the black frame of a blank clip (_blank.py), so it decodes to zeros on either path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from roboreel.formats.manifest import CameraSpec, Manifest
from roboreel.reader.mixture._blank import blank_request
from roboreel.reader.mixture._canonical import Canonical
from roboreel.reader.mixture._normalize import Normalizer
from roboreel.reader.plan import EpisodeClip, PendingSample

_PAD = "_is_pad"


class MemberSamples:
    """Makes member ``index``'s pending samples canonical (see the module doc).

    Args:
        canon: the mixture's canonical features.
        index: the member's position.
        order: canonical value keys in sample order (features, then ``*_is_pad`` in window order, then ``task``).
        blanks: per canonical camera this member lacks, the blank clip it reads (_blank.py).
        windows: canonical key -> window length (a missing camera's window is its blank frame repeated).
        normalizer: the member's own normalisation, or None.
    """

    def __init__(self, canon: Canonical, index: int, *, order: Sequence[str],
                 blanks: Mapping[str, EpisodeClip], windows: Mapping[str, int],
                 normalizer: Normalizer | None) -> None:
        m = canon.members[index]
        self.rename = dict(m.rename)
        self.rename.update({f"{k}{_PAD}": f"{v}{_PAD}" for k, v in m.rename.items()})
        self.sizes = canon.sizes
        self.order = list(order)
        self.blanks = dict(blanks)
        self.windows = dict(windows)
        self.cameras = canon.cameras
        self.normalizer = normalizer
        self.dim_masks = {k: np.arange(n) >= m.pad.get(k, n) for k, n in canon.sizes.items()}
        self.missing = {c: np.array(c in m.missing) for c in canon.missing_cameras}
        self._copies: dict[tuple[str, int, str, int], EpisodeClip] = {}  # pooled clip (own key) -> renamed copy

    def _renamed(self, clip: EpisodeClip, *, last: bool = False) -> EpisodeClip:
        """``clip`` under its canonical camera: one copy per clip while its episode is pooled (the bytes shared),
        dropped with ``last`` (the episode left the pool)."""
        camera = self.rename.get(clip.camera, clip.camera)
        if camera == clip.camera:
            return clip
        copy = self._copies.pop(clip.key, None) if last else self._copies.get(clip.key)
        if copy is None:
            copy = dataclasses.replace(clip, camera=camera)
            if not last:
                self._copies[clip.key] = copy
        return copy

    def __call__(self, p: PendingSample) -> PendingSample:
        values: dict[str, Any] = {}
        norm = self.normalizer
        for k, v in p.sample_values().items():
            k = self.rename.get(k, k)
            if norm is not None and k in norm.modes:
                v = norm(k, v)
            size = self.sizes.get(k)
            if size is not None and v.shape[-1] < size:
                v = np.concatenate([v, np.zeros((*v.shape[:-1], size - v.shape[-1]), dtype=v.dtype)], axis=-1)
            values[k] = v
        for cam in self.blanks:
            if cam in self.windows:
                values[f"{cam}{_PAD}"] = np.ones(self.windows[cam], dtype=bool)  # no real frame in the window
        out = {k: values.pop(k) for k in self.order if k in values}
        out.update(values)
        out.update((f"{k}_dim_is_pad", mask.copy()) for k, mask in self.dim_masks.items())
        out.update((f"{c}_is_missing", flag.copy()) for c, flag in self.missing.items())
        p.values = out
        if p.video or self.blanks:
            video = {}
            for cam, req in p.video.items():
                req.clip = self._renamed(req.clip)  # the request is this sample's own; the clip is the episode's
                video[self.rename[cam]] = req
            for cam, clip in self.blanks.items():
                video[cam] = blank_request(clip, self.windows.get(cam))
            p.video = {c: video[c] for c in self.cameras}  # canonical order: cameras lead a sample
        if p.release:  # the episode left the pool: its clips under the names its requests used
            p.release = tuple(self._renamed(c, last=True) for c in p.release)
        if p.images:
            p.images = {self.rename.get(k, k): v for k, v in p.images.items()}
        return p


def member_samples(ds: Any, i: int) -> MemberSamples:
    """Member ``i``'s ``MemberSamples`` for mixture ``ds`` (a ``MixtureDataset``: its canonical features, windows,
    output dtype and, with ``normalize``, member ``i``'s stats from its meta)."""
    cm = ds.canon.members[i]
    blanks = {c: ds.blank_clips[c] for c in cm.missing}
    order = [*ds.tabular_keys, *(f"{k}_is_pad" for k in ds.window_lengths), "task"]
    norm = Normalizer(ds.normalize, ds.meta.member_stats(i), cm.url) if ds.normalize else None
    return MemberSamples(ds.canon, i, order=order, blanks=blanks, windows=ds.window_lengths, normalizer=norm)


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
