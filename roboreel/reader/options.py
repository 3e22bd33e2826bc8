"""Option groups of ``CompiledDataset``: transport knobs (``StreamOptions``) and decode knobs (``DecodeOptions``).

Everyday arguments (delta_timestamps, episodes, shuffle, seed, batch_size, ...) stay flat keywords; the knobs
most users never touch are grouped here, as frozen dataclasses (as torchcodec and torchdata do), so they can be
built once, shared between datasets, and checked where they are made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from roboreel.formats.transient import Retry
from roboreel.reader.decode import DEFAULT_GPU_RUN_CACHE_BYTES, DecodeFallback

_FALLBACKS = ("error", "cpu")


def _int_at_least(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def _number_at_least(name: str, value: Any, low: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= low:
        raise ValueError(f"{name} must be a number >= {low}, got {value!r}")


@dataclass(frozen=True)
class StreamOptions:
    """How shard bytes travel from storage to the reader.

    Args:
        readahead: episode records fetched ahead of the pool by a background thread.
        retries: transient read faults retried per shard (a reopen at the exact next byte, docs/reliability.md).
        backoff_s: first retry delay; it doubles per consecutive failure.
        verify_checksums: check every member's sha256 against the index while streaming.
        storage_options: passed to fsspec (credentials, timeouts, headers).
        keep_episodes_mb: episodes (rows and compressed clips, no pixels) each process keeps across epochs, in
            MiB, so that later epochs take them from memory instead of reading their records again
            (reader/plan/_episode_cache.py). None (default): automatic, every episode when the selected shards
            together are at most 64 MiB, none otherwise: on a small dataset an epoch starts ~20 ms sooner
            (docs/benchmarks.md, "Small frames"). A number: that bound. 0 turns it off.
    """

    readahead: int = 2
    retries: int = 5
    backoff_s: float = 0.2
    verify_checksums: bool = True
    storage_options: Mapping[str, Any] | None = None
    keep_episodes_mb: float | None = None

    def __post_init__(self) -> None:
        _int_at_least("StreamOptions.readahead", self.readahead, 1)
        try:  # Retry checks its two numbers (formats/transient.py); its messages name them as this class's
            retry = Retry(self.retries, self.backoff_s)
        except ValueError as e:
            raise ValueError(f"StreamOptions.{e}") from e
        # not a field: equality, hash and repr are the fields' alone; pickling keeps it, ``replace`` makes it anew
        object.__setattr__(self, "_retry", retry)
        if not isinstance(self.verify_checksums, bool):
            raise ValueError(f"StreamOptions.verify_checksums must be a bool, got {self.verify_checksums!r}")
        if self.keep_episodes_mb is not None:
            _number_at_least("StreamOptions.keep_episodes_mb", self.keep_episodes_mb, 0)
        if self.storage_options is not None and not isinstance(self.storage_options, Mapping):
            raise ValueError(f"StreamOptions.storage_options must be a mapping or None, got "
                             f"{type(self.storage_options).__name__}")

    @property
    def retry(self) -> Retry:
        """``retries`` and ``backoff_s`` as the one ``Retry`` value every read under the reader spends."""
        return self._retry


@dataclass(frozen=True)
class DecodeOptions:
    """How compressed clips become frames.

    Args:
        device: the decode device, where frames decode: "cpu", or "cuda" / "cuda:N": decode on that GPU, reading
            the dataset through ``roboreel.loader(dataset, ...)`` (docs/gpu.md). Clips the GPU cannot decode fall
            back to the CPU. The dataset's ``decode_device`` is this resolved ("cuda" -> "cuda:0", or "cpu" by
            ``fallback``); where batches land is ``roboreel.loader``'s ``device=`` (default: the decode device).
        fallback: "error": "cuda" without a CUDA device raises RuntimeError("no CUDA device: ..."); "cpu": log one
            warning and decode on the CPU.
        batch: pending samples decoded together (one sorted call per clip among them).
        cache_mb: the run cache: decoded frames each consumer may hold ahead of their samples, in MiB: when a GOP
            run's first frame is asked, its next frames are decoded in the same call and wait for their samples
            (docs/reader.md, "Decode and memory"). None (default): automatic: in ``roboreel.loader``'s decode
            stage, room for one decode call of every run the order keeps open (2 x ``spread`` per worker) and
            at least 96 MiB; in a process that decodes its own samples (``DataLoader(CompiledDataset)``), 96 MiB.
            0 turns it off.
        gpu_cache_mb: the run cache of ``roboreel.loader``'s GPU decoders, in GPU memory. Larger: a batch asks ~2
            frames of each of its clips, a run not granted is decoded a batch's frames at a time, and an NVDEC call
            costs more than a CPU one (docs/gpu.md). ~21 clips of 480x640 in flight (40 short episodes, 2 workers,
            batch 32) held up to 281 MiB of runs; 96 MiB refused 67% of them.
        tolerance_s: max distance between a decoded frame's pts and the timestamp it must show.
        idle_decoders_mb: decoders of released clips each process keeps open (estimated MiB), taken back when the
            clip is pooled again in a later epoch instead of opening a new one: torch 2.13 leaks ~0.84 KB per
            decoder opened, a creep of ~6% per worker over 100 epochs on a small dataset (docs/reliability.md,
            "Memory over long training"). None (default): automatic, from a process's second iteration of the
            dataset on (a persistent DataLoader worker, or the main process) and only if every clip x lane of
            the dataset fits 256 MiB, or every episode fits one episode pool: ~+150-180 MB per such process, the
            price of a flat RSS (reader/decode/_idle_policy.py). A number: that bound, from the first iteration.
            0 turns it off.
    """

    device: str = "cpu"
    fallback: DecodeFallback = "error"
    batch: int = 8
    cache_mb: float | None = None
    gpu_cache_mb: float = DEFAULT_GPU_RUN_CACHE_BYTES / 2**20
    tolerance_s: float = 1e-4
    idle_decoders_mb: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.device, str):
            raise ValueError(f"DecodeOptions.device must be a string like 'cpu' or 'cuda:0', got {self.device!r}")
        if self.fallback not in _FALLBACKS:
            raise ValueError(f"DecodeOptions.fallback must be one of {_FALLBACKS}, got {self.fallback!r}")
        _int_at_least("DecodeOptions.batch", self.batch, 1)
        if self.cache_mb is not None:
            _number_at_least("DecodeOptions.cache_mb", self.cache_mb, 0)
        _number_at_least("DecodeOptions.gpu_cache_mb", self.gpu_cache_mb, 0)
        _number_at_least("DecodeOptions.tolerance_s", self.tolerance_s, 0)
        if self.idle_decoders_mb is not None:
            _number_at_least("DecodeOptions.idle_decoders_mb", self.idle_decoders_mb, 0)

    @property
    def run_cache_bytes(self) -> int | None:
        """``cache_mb`` in bytes: the run cache's bound for a consumer's CPU decoders (decode/_runs.py); None:
        automatic (``auto_run_cache_bytes`` in the decode stage, ``DEFAULT_RUN_CACHE_BYTES`` elsewhere)."""
        return None if self.cache_mb is None else int(self.cache_mb * 2**20)

    @property
    def gpu_run_cache_bytes(self) -> int:
        """``gpu_cache_mb`` in bytes: the run cache's bound for ``roboreel.loader``'s GPU decoders."""
        return int(self.gpu_cache_mb * 2**20)

    @property
    def idle_decoders_bytes(self) -> int | None:
        """``idle_decoders_mb`` in bytes; None: automatic (decode/_idle_policy.py)."""
        return None if self.idle_decoders_mb is None else int(self.idle_decoders_mb * 2**20)


_GROUPS = {"stream": StreamOptions, "decode": DecodeOptions}


def resolve_options(stream: StreamOptions | None, decode: DecodeOptions | None, *,
                    owner: str = "CompiledDataset") -> tuple[StreamOptions, DecodeOptions]:
    """The option groups a dataset runs with: the defaults where None, refused when of the wrong class (a
    ``StreamOptions`` passed as ``decode=`` would otherwise fail later, far from the call)."""
    for name, value in (("stream", stream), ("decode", decode)):
        if value is not None and not isinstance(value, _GROUPS[name]):
            raise TypeError(f"{owner}({name}=...) takes a roboreel.{_GROUPS[name].__name__}, got "
                            f"{type(value).__name__}")
    return stream or StreamOptions(), decode or DecodeOptions()
