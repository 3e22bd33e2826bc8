"""Shared fixtures: small synthetic LeRobot v3 datasets (real AV1 mp4s) and their compiled forms.

Sizes are small (64x64, tens of frames) so the whole suite runs in minutes on 2 cores, yet they exercise what
matters: several cameras, episodes sharing mp4s, files rolling over (from_timestamp > 0) across chunks.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from roboreel.synth import SynthConfig, synthesize

os.environ.setdefault("SVT_LOG", "1")

# Small but structurally complete: 8 episodes, 2 cameras, mp4s roll over (several per camera), chunk dirs roll.
SMALL = SynthConfig(
    episodes=8, min_length=12, max_length=30, fps=20, height=64, width=64, tasks=3,
    video_files_size_in_mb=0.005, data_files_size_in_mb=0.004, chunks_size=2,
)


def make_source(root: Path, **overrides) -> Path:
    """Synthesise a dataset at ``root`` with SMALL's settings, overridden by keyword."""
    cfg = SynthConfig(**{**SMALL.__dict__, **overrides})
    synthesize(root, cfg, overwrite=True)
    return root


@pytest.fixture(scope="session")
def small_source(tmp_path_factory) -> Path:
    """A read-only small source dataset. Copy it before breaking it."""
    return make_source(tmp_path_factory.mktemp("src") / "small")


@pytest.fixture(scope="session")
def small_compiled(tmp_path_factory, small_source) -> Path:
    """small_source compiled with fast test settings (read-only)."""
    from roboreel.compile import CompileSettings, compile_dataset

    out = tmp_path_factory.mktemp("compiled") / "small"
    compile_dataset(str(small_source), str(out), settings=CompileSettings.for_tests(), workers=1)
    return out


@pytest.fixture()
def source_factory(tmp_path):
    """Build a fresh source dataset per test: ``source_factory(name, **SynthConfig overrides)``."""

    def make(name: str = "src", **overrides) -> Path:
        return make_source(tmp_path / name, **overrides)

    return make


@pytest.fixture(autouse=True)
def _collect_garbage_in_the_parent():
    """Finalise each test's garbage here, where it is safe: a forked DataLoader worker that finalises an
    inherited PyAV/x265 encoder hangs forever (roboreel/reader/decode/forksafe.py). First empty this process's idle
    decoders: a test reading a dataset for several epochs parks them (the automatic default, idle_policy.py), and
    the next test's decoder counts must not depend on what ran before."""
    yield
    import gc

    from roboreel.reader.decode.decoder_cache import process_cache

    process_cache(1).resize(0)
    gc.collect()
