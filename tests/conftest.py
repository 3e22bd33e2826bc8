"""Shared fixtures: small synthetic LeRobot v3 datasets (real AV1 mp4s) and their compiled forms.

Sizes are small (64x64, tens of frames) so the whole suite runs in minutes on 2 cores, yet they exercise what
matters: several cameras, episodes sharing mp4s, files rolling over (from_timestamp > 0) across chunks.

Selection: tests marked ``slow`` (long sweeps) and ``slurm`` (a real SLURM) are deselected unless a ``-m``
expression names them (``-m slow``, ``-m slurm``) or ``ROBOREEL_SLOW=1`` / ``ROBOREEL_SLURM=1`` is set; CI runs
both (.ci/run). Under CI (``CI`` set) a test file that skips as a whole (a module-level ``importorskip`` whose
module is missing, a ``pytestmark`` skipif that holds) fails the run: a suite that quietly stopped running is worse
than a red one.
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


_OPT_IN = {"slow": "ROBOREEL_SLOW", "slurm": "ROBOREEL_SLURM"}  # marker -> environment variable that selects it
_SKIPPED_FILES: list[tuple[str, str]] = []  # (file, reason): skipped while collected (importorskip)
_OUTCOMES: dict[str, list[tuple[str, object]]] = {}  # file -> (outcome, longrepr) of each test that ran


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("markexpr", ""):
        return  # an explicit -m decides
    off = {m for m, env in _OPT_IN.items() if os.environ.get(env) != "1"}
    keep, drop = [], []
    for item in items:
        (drop if any(item.get_closest_marker(m) for m in off) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped and report.nodeid.endswith(".py"):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        _SKIPPED_FILES.append((report.nodeid, reason))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Outcomes per file, to find a file whose every test skipped (a module-level ``skipif``)."""
    if report.when == "call" or report.outcome != "passed":
        _OUTCOMES.setdefault(report.nodeid.split("::")[0], []).append((report.outcome, report.longrepr))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput") or not os.environ.get("CI"):
        return  # (an xdist worker reports its tests to the controller, which decides)
    whole = list(_SKIPPED_FILES)
    for path, outcomes in _OUTCOMES.items():
        # tests/integration: its own runner checks what skipped (.ci/ci_lerobot.sh, .ci/junit_check.py)
        if not path.startswith("tests/integration/") and all(o == "skipped" for o, _ in outcomes):
            longrepr = outcomes[0][1]
            whole.append((path, longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)))
    for nodeid, reason in whole:
        print(f"\nCI: {nodeid} skipped as a whole: {reason}")
    if whole and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def small_source(tmp_path_factory) -> Path:
    """A read-only small source dataset. Copy it before breaking it.

    The same directory as ``support.datasets.source()`` without overrides: built once per test process."""
    from support.datasets import source

    return source(tmp_path_factory)


@pytest.fixture(scope="session")
def small_compiled(tmp_path_factory) -> Path:
    """small_source compiled with fast test settings (``FAST``: 2 episodes per shard;
    read-only). The same directory as ``support.datasets.compiled_pair(episodes_per_shard=2)``."""
    from support.datasets import compiled_pair

    return compiled_pair(tmp_path_factory, episodes_per_shard=2)[1]


@pytest.fixture()
def source_factory(tmp_path):
    """Build a fresh source dataset per test: ``source_factory(name, **SynthConfig overrides)``."""

    def make(name: str = "src", **overrides) -> Path:
        return make_source(tmp_path / name, **overrides)

    return make


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what collection left alive (torch, roboreel and every test module, imported; the collected items)
    into the garbage collector's permanent generation: it lives until the process ends, and the full collection
    after each test (below) then walks only what tests allocated, instead of a few hundred thousand objects of
    imported modules every time (~0.1 s per test on 2 cores). Forked DataLoader workers still freeze what they
    inherit themselves (roboreel/reader/decode/_forksafe.py): a cycle a test drops is never frozen here."""
    import gc

    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def _collect_garbage_in_the_parent():
    """Finalise each test's garbage here, where it is safe: a forked DataLoader worker that finalises an
    inherited PyAV/x265 encoder hangs forever (roboreel/reader/decode/_forksafe.py). First empty this process's idle
    decoders: a test reading a dataset for several epochs parks them (the automatic default, idle_policy.py), and
    the next test's decoder counts must not depend on what ran before."""
    yield
    import gc

    from roboreel.reader.decode._decoder_cache import process_cache

    process_cache(1).resize(0)
    gc.collect()
