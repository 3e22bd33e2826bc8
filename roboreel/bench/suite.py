"""A whole benchmark: prepare data, measure the decode ceiling, alternate readers per mode, write reports."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import statistics
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from roboreel.bench.ceiling import CEILING_SECONDS, CeilingMeter, compiled_clips
from roboreel.bench.config import RunConfig
from roboreel.bench.external import run_external
from roboreel.bench.readers import SOURCE_READERS, lerobot_available, mixture_members
from roboreel.bench.report import chart, markdown_table, summarize, write_runs
from roboreel.bench.runner import run_one
from roboreel.bench.transport import transport_bound
from roboreel.formats.manifest import load_manifest

DRIFT_NOTE = 0.1  # a run across which the ceiling moved this much is flagged in the log

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DataSpec:
    """The benchmark dataset (the standard protocol: 3 cameras, 20 fps, 224x224, >= 40 episodes)."""

    episodes: int = 40
    cameras: int = 3
    height: int = 224
    width: int = 224
    fps: int = 20
    min_length: int = 150
    max_length: int = 250
    episodes_per_shard: int = 4


def prepare(root: Path, spec: DataSpec, *, workers: int = 2, progress: bool = True) -> tuple[Path, Path]:
    """Synthesise (LeRobot defaults: AV1 g=2 crf=30) and compile (roboreel defaults) unless already there."""
    from roboreel.compile import CompileSettings, compile_dataset
    from roboreel.synth import SynthConfig, camera_names, synthesize

    src, out = root / "source", root / "compiled"
    if not (src / "meta" / "info.json").exists():
        cfg = SynthConfig(episodes=spec.episodes, cameras=camera_names(spec.cameras), height=spec.height,
                          width=spec.width, fps=spec.fps, min_length=spec.min_length, max_length=spec.max_length,
                          video_files_size_in_mb=100.0, data_files_size_in_mb=100.0)
        synthesize(src, cfg, overwrite=True, progress=progress)
    if not (out / "roboreel.json").exists():
        # 4 episodes per shard: 10 shards for the default 40 episodes, so 1 or 2 workers read whole shards
        settings = CompileSettings(episodes_per_shard=spec.episodes_per_shard)
        compile_dataset(str(src), str(out), settings=settings, workers=workers, progress=progress)
    return src, out


@contextlib.contextmanager
def served(compiled: str, source: str, latency_ms: float) -> Iterator[tuple[str, str]]:
    """Serve both datasets over HTTP on 127.0.0.1 with a fixed latency per request (an object store stand-in)."""
    from roboreel.bench.httpserver import Faults, FaultyServer

    faults = Faults(latency_s=latency_ms / 1000.0)
    with FaultyServer(compiled, faults=faults, lifetime_s=3600) as a, FaultyServer(source, faults=faults,
                                                                                  lifetime_s=3600) as b:
        yield a.url, b.url


def data_label(compiled: str, cfg: RunConfig) -> str:
    """What a chart measured, for its title: resolution, cameras, episodes/frames, dtype, batch, workers, window
    (a mixture ``a,b,...``: its members' together, with their count)."""
    ms = [load_manifest(p) for p in mixture_members(compiled)]
    m = ms[0]
    res = "/".join(sorted({f"{c.height}x{c.width}" for x in ms for c in x.cameras})) or "no cameras"
    cams = len(m.cameras)
    episodes, frames = sum(x.num_episodes for x in ms), sum(x.total_frames for x in ms)
    mix = f"mixture of {len(ms)}, " if len(ms) > 1 else ""
    workers = f"{cfg.num_workers} worker{'s' if cfg.num_workers != 1 else ''}" + ("" if cfg.num_workers == 0 else
                                               " (persistent)" if cfg.persistent_workers else " (new each epoch)")
    window = "steady window over epochs" if cfg.span_epochs else "steady window in one epoch"
    return (f"{mix}{res}, {cams} camera{'s' if cams != 1 else ''}, {episodes} episodes / {frames:,} frames, "
            f"{'uint8' if cfg.return_uint8 else 'float32'}, batch {cfg.batch_size}, {workers}, {window}")


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _gpu_note(res: dict[str, Any]) -> str:
    if res.get("gpu_max_allocated_mb") is None:
        return ""
    return (f", GPU max allocated {res['gpu_max_allocated_mb']:.0f} MB / reserved {res['gpu_max_reserved_mb']:.0f} MB"
            f", {res.get('fallback_clips') or 0} CPU-fallback clips")


def set_ceiling(res: dict[str, Any], before: float | None, after: float | None) -> None:
    """Set a run's ceiling to the mean of the measurements just before and just after it, its share of that,
    and how far the host drifted across it (``ceiling_drift``: after / before - 1)."""
    known = [c for c in (before, after) if c]
    fps = sum(known) / len(known) if known else None
    cams = res.get("cameras")
    sps = fps / cams if fps and cams else None
    res.update(ceiling_frames_per_s=fps, ceiling_before_frames_per_s=before, ceiling_after_frames_per_s=after,
               ceiling_drift=after / before - 1 if before and after else None,
               ceiling_samples_per_s=sps, ceiling_fraction=res["samples_per_s"] / sps if sps else None)


@dataclass(frozen=True)
class SuiteOptions:
    """How a suite runs, beside what each run reads (``RunConfig``): the readers it alternates (A B A B ...), the
    sample shapes (``modes``), the rounds, where it reads from and the ceiling it sets each run against.

    ``remote_latency_ms``: also read both datasets over HTTP with this latency per request (None: local only).
    ``s3``: also read the compiled dataset from a loopback S3 server (s3server.py; the source readers stay local).
    ``ceiling``: measure the decode ceiling and the transport bound. ``ceiling_seconds``: least length of each
    ceiling measurement (``ceiling.CEILING_SECONDS``). ``lerobot_python``: an interpreter with LeRobot installed
    (its own venv); the ``lerobot`` reader runs there (external.py) instead of in this process. ``isolate``: every
    run in a fresh Python process of its own (external.py), so peak RSS and CPU time are that reader's alone, not
    what earlier runs left in the heap."""

    readers: tuple[str, ...]
    modes: tuple[str, ...] = ("single", "sarm")
    repeats: int = 3
    remote_latency_ms: float | None = None
    s3: bool = False
    ceiling: bool = True
    ceiling_seconds: float | None = None
    lerobot_python: str | None = None
    isolate: bool = True


def run_suite(*, compiled: str, source: str, cfg: RunConfig, suite: SuiteOptions, out: Path,
              echo: Any = print) -> dict[str, Any]:
    """Alternate ``suite``'s readers for each mode, locally and where ``suite`` asks; write every report under
    ``out`` and return the summary. ``compiled`` may be a mixture ``a,b,...``."""
    suite = replace(suite, readers=tuple(_available_readers(suite.readers, suite.lerobot_python, echo)))
    plan = _Plan(suite=suite, cfg=cfg, echo=echo)
    first = compiled.split(",")[0]  # a mixture (a,b,...): the ceiling and shapes of its first member
    ceilings = _Ceilings(clips=compiled_clips(first) if suite.ceiling else [], echo=echo,
                         seconds=CEILING_SECONDS if suite.ceiling_seconds is None else suite.ceiling_seconds)
    transport = _transport_bound(first, cfg, echo) if suite.ceiling else None
    stack = contextlib.ExitStack()
    if ceilings.clips:
        ceilings.meter = stack.enter_context(CeilingMeter(ceilings.clips))
    places = _open_places(stack, compiled, source, remote_latency_ms=suite.remote_latency_ms, s3=suite.s3)
    with stack:
        runs = [res for place in places for res in _run_place(plan, place, ceilings)]
    return _write_reports(out, runs, plan, compiled=compiled, ceilings=ceilings, transport=transport)


@dataclass(frozen=True)
class _Plan:
    """What every round of a suite runs, and how: its options (the readers left to run), each run's config and
    what the log is printed with."""

    suite: SuiteOptions
    cfg: RunConfig
    echo: Any  # print, or what the caller prints with


@dataclass(frozen=True)
class _Place:
    """Where a round reads from: its label in the reports and the two datasets' addresses there."""

    where: str
    compiled: str
    source: str


@dataclass
class _Ceilings:
    """The decode ceiling over a suite: the decode processes kept open for every measurement (``meter``, None
    without a ceiling) and every local measurement, in order: before each run and after a round's last."""

    clips: list[Any]
    seconds: float  # least length of one measurement
    echo: Any
    meter: CeilingMeter | None = None
    measured: list[float] = field(default_factory=list)

    def measure(self, where: str, mode: str, r: int) -> float | None:
        """The ceiling now: measured locally (one pass of >= ``seconds``), so that each run is set against the
        passes just before and just after it and a host whose speed drifts moves the ceiling with the reader
        instead of skewing its share; remote runs use the median of the local ones so far."""
        if self.meter is None:
            return None
        if where == "local":
            self.measured.append(self.meter.measure(min_seconds=self.seconds))
            self.echo(f"decode ceiling ({mode} #{r}): {self.measured[-1]:,.0f} frames/s (sequential decode of "
                      f"{len(self.clips)} compiled clips, one process per core)")
            return self.measured[-1]
        return self.median()

    def median(self) -> float | None:
        return statistics.median(self.measured) if self.measured else None


def _available_readers(readers: Sequence[str], lerobot_python: str | None, echo: Any) -> list[str]:
    """``readers`` less ``lerobot`` when LeRobot is neither importable here nor given an interpreter of its own
    (said, not raised: the other readers still compare)."""
    readers = list(readers)
    if "lerobot" in readers and lerobot_python is None:
        ok, why = lerobot_available()
        if not ok:
            echo(f"skipping reader 'lerobot': {why} (--lerobot-python runs it in LeRobot's own venv)")
            readers.remove("lerobot")
    return readers


def _transport_bound(first: str, cfg: RunConfig, echo: Any) -> float:
    """What a DataLoader alone moves for samples of ``first``'s shapes (no decode): the charts' other ceiling."""
    shapes = [(3, c.height, c.width) for c in load_manifest(first).cameras]
    transport = transport_bound(shapes, return_uint8=cfg.return_uint8, batch_size=cfg.batch_size,
                                num_workers=cfg.num_workers, prefetch_factor=cfg.prefetch_factor)
    echo(f"transport bound: {transport:,.0f} samples/s (a DataLoader moving {'uint8' if cfg.return_uint8 else 'float32'}"
         f" samples of these shapes with no decode, batch {cfg.batch_size}, {cfg.num_workers} workers)")
    return transport


def _open_places(stack: contextlib.ExitStack, compiled: str, source: str, *, remote_latency_ms: float | None,
                 s3: bool) -> list[_Place]:
    """Local first, then the servers asked for, opened on ``stack`` (closed with it after the last round)."""
    places = [_Place("local", compiled, source)]
    if remote_latency_ms is not None:
        rc, rs = stack.enter_context(served(compiled, source, remote_latency_ms))
        places.append(_Place(f"http+{remote_latency_ms:g}ms", rc, rs))
    if s3:
        from roboreel.bench.s3server import served_s3

        places.append(_Place("s3", stack.enter_context(served_s3({"compiled": compiled}))["compiled"], source))
    return places


def _run_place(plan: _Plan, place: _Place, ceilings: _Ceilings) -> Iterator[dict[str, Any]]:
    """Every mode's rounds at ``place``: each round runs the readers in turn (A B A B ... across rounds), each run
    set against the ceiling measured just before and just after it (a run's after: the next one's before)."""
    for mode in plan.suite.modes:
        for r in range(plan.suite.repeats):
            before = ceilings.measure(place.where, mode, r)
            for reader in plan.suite.readers:
                if place.where == "s3" and reader in SOURCE_READERS:
                    continue  # the bucket holds the compiled dataset; the source is read locally
                res = _run_reader(plan, place, reader, mode, r)
                after = ceilings.measure(place.where, mode, r)
                set_ceiling(res, before, after)
                before = after
                plan.echo(_run_line(res, place.where, mode, reader, r))
                yield res


def _run_reader(plan: _Plan, place: _Place, reader: str, mode: str, r: int) -> dict[str, Any]:
    """One run, in LeRobot's interpreter, a fresh process of its own (``isolate``) or this one (over HTTP: the
    server is this process's own)."""
    cfg = plan.cfg
    if place.where.startswith("http") and reader != "compiled":
        # per-frame range requests at tens of ms each: a short window measures it fine
        cfg = replace(cfg, batches=max(2, cfg.batches // 8), seconds=None)
    if reader == "lerobot" and plan.suite.lerobot_python is not None:
        return run_external(plan.suite.lerobot_python, reader, mode, compiled=place.compiled, source=place.source,
                            cfg=cfg, where=place.where, repeat=r)
    if plan.suite.isolate and place.where in ("local", "s3"):
        return run_external(sys.executable, reader, mode, compiled=place.compiled, source=place.source, cfg=cfg,
                            where=place.where, repeat=r)
    return run_one(reader, mode, compiled=place.compiled, source=place.source, cfg=cfg, where=place.where, repeat=r)


def _run_line(res: dict[str, Any], where: str, mode: str, reader: str, r: int) -> str:
    """A run's line in the log: throughput, its share of the ceiling (and the ceiling's drift across it when
    large), order, memory, CPU and GPU figures."""
    frac = f", {res['ceiling_fraction']:.0%} of ceiling" if res["ceiling_fraction"] else ""
    if res["ceiling_drift"] is not None and abs(res["ceiling_drift"]) >= DRIFT_NOTE:
        frac += f" (the ceiling moved {res['ceiling_drift']:+.0%} across this run)"
    return (f"  {where:>12} {mode:>6} {reader:>9} #{r}: {res['samples_per_s']:8.1f} samples/s"
            f"{frac}, first batch {res['first_batch_s']:.2f}s, "
            f"{res['distinct_episodes_per_batch']:.1f} episodes and "
            f"{res['near_duplicate_pairs_per_batch']:.1f} near-duplicate pairs a batch, "
            f"peak RSS {res['peak_rss_mb']:.0f} MB, CPU {_ms(res.get('cpu_ms_per_sample'))} ms/sample"
            f"{_gpu_note(res)}")


def _write_reports(out: Path, runs: list[dict[str, Any]], plan: _Plan, *, compiled: str, ceilings: _Ceilings,
                   transport: float | None) -> dict[str, Any]:
    """runs.json/.csv, the chart, summary.json and summary.md under ``out``; the table echoed; the summary back."""
    ceiling_fps = ceilings.median()
    rows = summarize(runs)
    table = markdown_table(rows)
    write_runs(out, runs)
    ceiling_sps = ceiling_fps / runs[0]["cameras"] if ceiling_fps and runs and runs[0]["cameras"] else None
    label = data_label(compiled, plan.cfg) if compiled else None
    png = chart(rows, out / "chart.png", ceiling_samples_per_s=ceiling_sps, transport_samples_per_s=transport,
                title=label)
    summary = {
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                    "python": platform.python_version()},
        "config": asdict(plan.cfg), "data": label, "repeats": plan.suite.repeats, "ceiling_frames_per_s": ceiling_fps,
        "ceiling_frames_per_s_measured": ceilings.measured,
        "ceiling_samples_per_s": ceiling_sps, "transport_samples_per_s": transport, "summary": rows,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    note = f"\n\nData: {label}" if label else ""
    (out / "summary.md").write_text(table + note + "\n")
    plan.echo("\n" + table + note)
    plan.echo(f"\nwrote {out}/runs.json, runs.csv, summary.json, summary.md" + (f", {png.name}" if png else ""))
    return summary
