"""The readers a benchmark compares, each built the way a training script would build it.

- ``compiled``: ``DataLoader(CompiledDataset(...))`` over the compiled shards: workers decode, decoded samples
  cross to the main process. With ``decode_device="cuda"`` it is read through ``roboreel.loader`` instead.
- ``loader``: ``roboreel.loader(CompiledDataset(...))``, the recommended way to train: workers ship compressed
  clips and frame requests, a pool of decode threads in the main process decodes into the batch tensors.
- ``loader_cl``: the same with ``channels_last=True``: frames keep the decoder's memory order, no transposing copy
  on the CPU (what the loader's CPU work is when batches go to a GPU, which transposes them there).
- ``loader_inproc``: ``loader`` with ``num_workers=0``: the training process also reads shards and plans samples
  (records on a prefetch thread, planning on the decode stage's thread): no worker processes, no pickling, no IPC.
- ``loader_readme``: ``roboreel.loader(ds, batch_size=..., num_workers=...)`` exactly as the README's training loop
  calls it: every other knob (workers kept across epochs, prefetch, decode threads) at its default.
- ``loader_refork``: the same with ``persistent_workers=False``: new DataLoader workers every epoch, to show what
  keeping them is worth.
- ``loader_random``: ``loader_readme`` with ``frame_order="random"``: frames leave the pool one by one
  at random instead of in GOP runs (independent neighbours, more decoding a sample)
- ``loader_segments``: ``loader_readme`` with ``frame_order="segments"``: one GOP run per pooled
  episode at a time, the fastest order, whose batches hold runs of neighbouring frames
- ``loader_unmixed``: ``loader_readme`` with ``mix_workers=False``: every batch from one worker's pool, as
  ``DataLoader(dataset, batch_size=...)`` batches (the README's call mixes every worker's share into each batch)
- ``largest`` / ``largest_loader``: ``compiled`` / ``loader`` over the largest member of a mixture alone
  (``compiled`` given as ``a,b,...``), the yardstick of a mixture's throughput (reader/mixture/_dataset.py).
- ``reference``: roboreel's map-style reader over the *source* (random sampler, batched ``__getitems__``,
  decoder reuse): the honest fast baseline for reading LeRobot v3 as it is published.
- ``lerobot``: LeRobot's own ``LeRobotDataset`` over the source (``return_uint8`` as the run asks), when
  ``lerobot`` is importable, or in LeRobot's own venv through ``external.py``.

Every dataset is wrapped so each sample carries its production time inside the worker (``LATENCY_KEY``): time
spent producing it, excluding time a worker sits blocked on a full prefetch queue.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch.utils.data import Dataset, IterableDataset

from roboreel.bench.config import RunConfig

Reader = Literal["compiled", "loader", "loader_cl", "loader_inproc", "loader_readme", "loader_refork",
                 "loader_random", "loader_segments", "loader_unmixed", "largest", "largest_loader", "reference",
                 "lerobot"]
Mode = Literal["single", "sarm"]
READERS: tuple[str, ...] = ("compiled", "loader", "loader_cl", "loader_inproc", "loader_readme", "loader_refork",
                            "loader_random", "loader_segments", "loader_unmixed", "largest", "largest_loader",
                            "reference", "lerobot")
SOURCE_READERS = ("reference", "lerobot")  # read the LeRobot source, not the compiled dataset
# roboreel.loader called as the README does (runner.py); loader_random / loader_segments at those frame orders,
# loader_unmixed with mix_workers=False
README_READERS = ("loader_readme", "loader_refork", "loader_random", "loader_segments", "loader_unmixed")
MODES: tuple[str, ...] = ("single", "sarm")
LATENCY_KEY = "__bench_latency_s"


def delta_timestamps(mode: str) -> dict[str, list[float]] | None:
    """The benchmark protocol: ``single`` = one frame per camera; ``sarm`` = 8 action steps 1 s apart."""
    if mode == "single":
        return None
    if mode == "sarm":
        return {"action": [float(k) for k in range(8)]}
    raise ValueError(f"mode must be one of {MODES}, got {mode!r}")


class TimedIterable(IterableDataset):
    """Adds the time spent inside ``next()`` of the wrapped iterable to every sample."""

    def __init__(self, inner: IterableDataset) -> None:
        self.inner = inner

    def __iter__(self) -> Iterator[dict[str, Any]]:
        it = iter(self.inner)
        while True:
            t = time.perf_counter()
            try:
                sample = next(it)
            except StopIteration:
                return
            sample[LATENCY_KEY] = time.perf_counter() - t
            yield sample


class TimedMap(Dataset):
    """Adds each sample's share of ``__getitems__`` (or ``__getitem__``) time to it."""

    def __init__(self, inner: Dataset) -> None:
        self.inner = inner

    def __len__(self) -> int:
        return len(self.inner)  # type: ignore[arg-type]

    def __getitem__(self, idx: int) -> dict[str, Any]:
        return self.__getitems__([idx])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        t = time.perf_counter()
        if hasattr(self.inner, "__getitems__"):
            samples = self.inner.__getitems__(list(indices))
        else:
            samples = [self.inner[i] for i in indices]
        share = (time.perf_counter() - t) / max(1, len(samples))
        for s in samples:
            s[LATENCY_KEY] = share
        return samples


@dataclass
class Built:
    """A dataset ready for a DataLoader, and how to read its counters afterwards."""

    dataset: Dataset | IterableDataset
    map_style: bool
    stats: Any = None  # callable -> dict, or None
    camera_keys: tuple[str, ...] = ()
    compiled: Any = None  # the bare CompiledDataset (for roboreel.loader), compiled readers only
    staged: bool = False  # read through roboreel.loader (decode in the main process)

    @property
    def cameras(self) -> int:
        return len(self.camera_keys)


def lerobot_available() -> tuple[bool, str]:
    try:
        import lerobot  # noqa: F401
    except Exception as e:  # any import failure means "not usable here"
        return False, f"lerobot is not importable ({type(e).__name__}: {e})"
    return True, ""


def mixture_members(compiled: str) -> list[str]:
    """The members of a mixture spelled ``a,b,...`` (one path: itself)."""
    return [p for p in compiled.split(",") if p]


def largest_member(compiled: str) -> str:
    """The member of ``a,b,...`` with the most frames (its manifest's index)."""
    from roboreel.formats.manifest import load_manifest

    members = mixture_members(compiled)
    return max(members, key=lambda p: int(load_manifest(p).index.shard_frames().sum()))


def build(reader: str, mode: str, *, compiled: str, source: str, cfg: RunConfig, seed: int,
          storage_options: dict | None = None) -> Built:
    """Construct one reader's dataset for ``mode``, as ``cfg`` asks (``return_uint8``: camera frames as uint8, for
    every reader; ``resize``: the source readers resize frames with torchvision's ``Resize(antialias=True)``;
    ``episode_pool_size`` and ``decode_device``: the compiled readers'). ``compiled`` may be a mixture ``a,b,...``
    (read with ``cfg.weights``, and the canonical keys of ``cfg.remap_file`` / ``cfg.pad`` when its members differ:
    docs/mixtures.md) for the compiled readers. ``seed``: the run's (its config's seed plus its round)."""
    decode_device, return_uint8, weights = cfg.decode_device, cfg.return_uint8, cfg.weights
    resize = tuple(cfg.resize) if cfg.resize else None
    dts = delta_timestamps(mode)
    transform = None
    if resize is not None and reader in ("reference", "lerobot"):
        from torchvision.transforms import v2  # LeRobot's venv has it (roboreel's does not need it)

        transform = v2.Resize(list(resize), antialias=True)
    if reader.startswith("largest"):
        compiled, reader, weights = largest_member(compiled), reader.replace("largest", "compiled"), None
        reader = "loader" if reader == "compiled_loader" else reader
    members = mixture_members(compiled)
    if len(members) > 1 and reader in ("reference", "lerobot"):
        raise ValueError(f"reader {reader!r} reads one source dataset, not the mixture {compiled!r}: compare the "
                         "mixture with its largest member (--readers compiled,largest or loader,largest_loader)")
    if reader in ("compiled", "loader", "loader_cl", "loader_inproc", *README_READERS):
        from roboreel.reader import CompiledDataset
        from roboreel.reader.options import DecodeOptions, StreamOptions

        order = {"loader_random": "random", "loader_segments": "segments"}.get(reader, "shuffled")
        kwargs: dict[str, Any] = {"delta_timestamps": dts, "seed": seed,
                                  "decode": DecodeOptions(device=decode_device), "frame_order": order,
                                  "stream": StreamOptions(storage_options=storage_options), "return_uint8": return_uint8}
        if cfg.episode_pool_size:
            kwargs["episode_pool_size"] = cfg.episode_pool_size
        if len(members) > 1 or weights is not None:
            kwargs["weights"] = None if weights is None else list(weights)
        if len(members) > 1 and cfg.remap_file:
            from roboreel.integrations.lerobot.options import read_mixture_file

            kwargs.update(read_mixture_file(cfg.remap_file))
        if len(members) > 1 and cfg.pad:
            kwargs["pad"] = cfg.pad
        ds = CompiledDataset(members if len(members) > 1 else compiled, **kwargs)
        return Built(TimedIterable(ds), map_style=False, stats=ds.stats, camera_keys=tuple(ds.camera_keys), compiled=ds,
                     staged=reader != "compiled" or decode_device != "cpu")
    if reader == "reference":
        from roboreel.bench.reference import ReferenceDataset

        ds = ReferenceDataset(source, delta_timestamps=dts, storage_options=storage_options, return_uint8=return_uint8,
                              image_transforms=transform)
        return Built(TimedMap(ds), map_style=True, stats=getattr(ds, "stats", None),
                     camera_keys=tuple(ds.camera_keys))
    if reader == "lerobot":
        ok, why = lerobot_available()
        if not ok:
            raise RuntimeError(why)
        from lerobot.datasets.lerobot_dataset import LeRobotDataset  # type: ignore[import-not-found]

        ds = LeRobotDataset(repo_id="local/bench", root=source, delta_timestamps=dts, return_uint8=return_uint8,
                            image_transforms=transform)
        return Built(TimedMap(ds), map_style=True, camera_keys=tuple(getattr(ds.meta, "video_keys", []) or []))
    raise ValueError(f"reader must be one of {READERS}, got {reader!r}")


def to_device(batch: dict[str, Any], device: torch.device) -> int:
    """The dummy consumer: move every tensor to ``device``; returns the batch size."""
    n = 0
    for k, v in batch.items():
        if isinstance(v, torch.Tensor):
            batch[k] = v.to(device, non_blocking=True)
            n = max(n, int(v.shape[0]) if v.dim() else 1)
    return n
