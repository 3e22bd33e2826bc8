"""What one benchmark run is asked to do: the knobs every reader of a comparison shares (``RunConfig``).

A module of its own because both the readers (``readers.build``) and the run (``runner.run_one``) read it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RunConfig:
    """Knobs of one run (shared by every reader in a comparison)."""

    batch_size: int = 32
    num_workers: int = 2
    prefetch_factor: int = 2  # DataLoader's: batches each worker has ready ahead
    prefetch_batches: int = 2  # roboreel.loader's: decoded batches kept ready ahead of the loop
    persistent_workers: bool = True  # as lerobot-train (its default): workers live across epochs
    episode_pool_size: int | None = None  # CompiledDataset's (None: its default)
    decode_device: str = "cpu"
    device_loader: bool = False  # read the compiled reader through roboreel.loader even on the CPU
    return_uint8: bool = False  # camera frames as uint8 (normalise on the GPU): the transport costs 4x less
    warmup_batches: int = 3
    warmup_epochs: int = 0  # whole epochs read (untimed) before the measured one: the steady state (see run_one)
    batches: int = 40
    seconds: float | None = None  # stop the steady window after this long instead of after ``batches``
    seed: int = 0
    decode_threads: int | None = None  # the loader reader's decode threads (None: the available cores)
    # (height, width): the source readers (reference, lerobot) resize camera frames with torchvision's
    # Resize(antialias=True) as an image transform, what users do today instead of compiling at that size
    resize: tuple[int, int] | None = None
    span_epochs: bool = True  # the steady window runs on into the next epochs (set_epoch each) until it is full
    weights: tuple[float, ...] | None = None  # a mixture's (compiled = "a,b,..."); None: every frame once
    remap_file: str | None = None  # a mixture's canonical keys (JSON/YAML, as roboreel inspect --remap reads it)
    pad: str | None = None  # a mixture's 1-D feature padding ("max")
