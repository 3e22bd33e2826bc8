"""What a compile run did: ``CompileReport`` (built from the part's sidecars), its one-paragraph summary and the
JSON object ``roboreel compile --json`` prints last."""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from roboreel.compile.out import shard_done

_NUMBER = re.compile(r"\b\d+\b")


def group_reasons(whys: list[str]) -> dict[str, int]:
    """Re-encode reasons -> clip counts, one line per kind of reason (the same words), numbers kept: a number that
    varies inside a kind is shown as its range, e.g. ``CRF 20-22 (not 24) to keep every checked frame >= 40 dB``.
    A clip's ``why`` may join several reasons with "; " (re-encoded for its codec, then at a lower CRF for the
    floor): each is counted on its own, so one reason is never listed twice under different companions."""
    kinds: dict[tuple[str, ...], list[list[int]]] = {}
    for part in (p.strip() for why in whys for p in why.split("; ")):
        if part:
            kinds.setdefault(tuple(_NUMBER.split(part)), []).append([int(x) for x in _NUMBER.findall(part)])
    out = {}
    for words, rows in kinds.items():
        text = words[0]
        for k, values in enumerate(zip(*rows, strict=True)):
            lo, hi = min(values), max(values)
            text += (str(lo) if lo == hi else f"{lo}-{hi}") + words[k + 1]
        out[text] = len(rows)
    return out


@dataclass
class CompileReport:
    """What a compile run did. Counts cover this run's part (all shards without ``part``)."""

    out: str
    episodes: int
    frames: int
    shards: int  # shards in this part
    shards_total: int  # shards in the whole dataset
    shards_compiled: int  # compiled by this run
    shards_skipped: int  # already complete (resume, or kept byte for byte by an update)
    clips_encoded: int  # re-encoded clips of this part (not counting those reused from the previous compile)
    clips_remuxed: int  # stream-copied clips, the same way
    bytes: int  # shard bytes of this part
    psnr_mean: float | None  # dB over the sampled frames of re-encoded clips (None when none were re-encoded)
    psnr_min: float | None
    seconds: float
    frames_per_s: float  # episode frames compiled by this run per wall-clock second (each has `cameras` images)
    finalized: bool
    cameras: int = 0
    part: tuple[int, int] | None = None
    psnr_per_camera: dict[str, float] = field(default_factory=dict)
    input_bytes: int = 0  # the source bytes (video + rows) of this part's episodes
    clips_reused: int = 0  # clips an earlier, interrupted run had finished (not made again)
    reencode_reasons: dict[str, int] = field(default_factory=dict)  # why clips were re-encoded -> how many
    clips_lossless: int = 0  # clips proven identical to the source decode (stream copies, lossless depth)
    images_kept: dict[str, str] = field(default_factory=dict)  # image features --images clips left encoded: why
    frames_out: int | None = None  # frames written, when --fps kept fewer than ``frames`` (source frames)
    fps_out: int | None = None
    generation: int = 1  # OUT's compile generation: 1, then + 1 per update (compile/out/_update.py)
    episodes_reused: int = 0  # episodes of this part taken as compiled from OUT's previous generation
    episodes_compiled: int = 0  # episodes of this part whose clips this run made (encoded or stream-copied)
    clips_previous: int = 0  # clips copied from OUT's previous generation (no decode, no encode)
    clips_unsampled: int = 0  # lossy clips this run encoded with no frame sampled for PSNR (--psnr-frames 0)

    @property
    def size_ratio(self) -> float | None:
        """Output bytes / source bytes of this part's episodes."""
        return self.bytes / self.input_bytes if self.input_bytes else None

    def summary(self) -> str:
        psnr = (f"PSNR mean {self.psnr_mean:.2f} dB, min {self.psnr_min:.2f} dB" if self.psnr_mean is not None
                else "PSNR not sampled (--psnr-frames 0)" if self.clips_unsampled
                else f"PSNR n/a (no lossy clips; {self.clips_lossless} lossless)" if self.clips_lossless
                else "PSNR n/a (no re-encoded clips)")
        part = f" (part {self.part[0]}/{self.part[1]})" if self.part else ""
        ratio = self.size_ratio
        size = f"{self.bytes / 1e6:.1f} MB" + (f" ({ratio:.2f}x the source's {self.input_bytes / 1e6:.1f} MB)"
                                               if ratio is not None else "")
        update = (f"; update (generation {self.generation}): {self.episodes_reused} episodes reused, "
                  f"{self.episodes_compiled} compiled, {self.clips_previous} clips copied from the previous compile"
                  if self.generation > 1 else "")
        return (
            f"{self.out}{part}: {self.episodes} episodes, {self.frames} frames"
            + (f" ({self.frames_out} kept at {self.fps_out} fps)" if self.frames_out is not None else "")
            + f", {self.shards} shards "
            f"({self.shards_compiled} compiled, {self.shards_skipped} already done), {size}"
            + update
            + f"; clips: {self.clips_encoded} encoded, {self.clips_remuxed} stream-copied"
            + (f" ({self.clips_reused} kept from an interrupted run)" if self.clips_reused else "")
            + (f", {self.clips_lossless} lossless" if self.clips_lossless else "")
            + "".join(f"; {n} re-encoded: {why}"
                      for why, n in sorted(self.reencode_reasons.items(), key=lambda kv: -kv[1]) if why)
            + "".join(f"; image feature {k} kept as encoded images: {why}" for k, why in self.images_kept.items())
            + f"; {psnr}; "
            f"{self.seconds:.1f}s, {self.frames_per_s:.0f} frames/s x {self.cameras} cameras; "
            + ("manifest written" if self.finalized else "not finalized (other parts missing)")
        )

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` object: every count of the summary, by name."""
        d = asdict(self)
        d["part"] = list(self.part) if self.part else None
        d["frames_per_s"] = None if math.isinf(self.frames_per_s) else round(self.frames_per_s, 3)
        d["seconds"] = round(self.seconds, 3)
        d["size_ratio"] = self.size_ratio
        return {
            "out": self.out, "part": d["part"], "finalized": self.finalized, "generation": self.generation,
            "episodes": self.episodes, "episodes_compiled": self.episodes_compiled,
            "episodes_reused": self.episodes_reused, "frames": self.frames, "frames_out": self.frames_out,
            "fps_out": self.fps_out, "cameras": self.cameras,
            "shards": {"part": self.shards, "total": self.shards_total, "compiled": self.shards_compiled,
                       "already_done": self.shards_skipped},
            "clips": {"encoded": self.clips_encoded, "copied": self.clips_remuxed, "lossless": self.clips_lossless,
                      "from_interrupted_run": self.clips_reused, "from_previous_compile": self.clips_previous,
                      "reencode_reasons": dict(sorted(self.reencode_reasons.items()))},
            "images_kept": self.images_kept,
            "psnr": {"min": self.psnr_min, "mean": self.psnr_mean, "per_camera": self.psnr_per_camera},
            "bytes": {"in": self.input_bytes, "out": self.bytes, "ratio": d["size_ratio"]},
            "seconds": d["seconds"], "frames_per_s": d["frames_per_s"],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1) + "\n"


@dataclass(frozen=True)
class RunFacts:
    """What the run knows of itself that the sidecars do not say: its part, how many shards it packed and their
    episodes (``worked``) and frames, its wall-clock seconds, whether it finalized."""

    part: tuple[int, int] | None
    compiled: int
    worked: set[int]
    work_frames: int
    seconds: float
    finalized: bool


def make_report(out: str, plan: list[list[int]], mine: list[int], gen: int, lengths: dict[int, int],
                run: RunFacts) -> CompileReport:
    """The report of this part (shards ``mine`` of ``plan``) from its sidecars (of generation ``gen``)."""
    compiled, part, finalized, seconds, worked = run.compiled, run.part, run.finalized, run.seconds, run.worked
    work_frames = run.work_frames
    sides = [shard_done(out, i, gen) for i in mine]
    reused = {e for side in sides if side is not None for e in side.get("reused", [])}
    values: list[float] = []
    per_cam: dict[str, list[float]] = {}
    floor_min: list[float] = []  # each re-encoded clip's lowest PSNR over every frame checked (video/_transcode.py)
    encoded = remuxed = lossless = previous = unsampled = 0
    whys: list[str] = []
    for side in sides:
        if side is None:
            continue
        for clips in side["clips"].values():
            for cam, c in clips.items():
                lossless += bool(c.get("lossless"))
                previous += bool(c.get("reused"))
                if c["mode"] == "encode" and c.get("why") and not c.get("reused"):
                    whys.append(c["why"])
                if c["mode"] == "remux":
                    remuxed += not c.get("reused")
                    continue
                encoded += not c.get("reused")
                finite = [p for p in c["psnr"] if p is not None]
                unsampled += not c.get("reused") and not c.get("lossless") and not c["psnr"]
                values += finite
                if c.get("psnr_min") is not None:
                    floor_min.append(c["psnr_min"])
                per_cam.setdefault(cam, []).extend(finite)
    frames = sum(lengths[e] for i in mine for e in plan[i])
    return CompileReport(
        out=out, episodes=sum(len(plan[i]) for i in mine), frames=frames, shards=len(mine),
        shards_total=len(plan), shards_compiled=compiled, shards_skipped=len(mine) - compiled,
        clips_encoded=encoded, clips_remuxed=remuxed,
        bytes=sum(s["tar"]["size"] for s in sides if s is not None),
        psnr_mean=sum(values) / len(values) if values else None,
        psnr_min=min(values + floor_min) if values or floor_min else None,
        reencode_reasons=group_reasons(whys), clips_lossless=lossless, clips_unsampled=unsampled,
        seconds=seconds, frames_per_s=work_frames / seconds if seconds > 0 else math.inf,
        finalized=finalized, part=part,
        psnr_per_camera={cam: sum(v) / len(v) for cam, v in per_cam.items() if v},
        generation=gen, episodes_reused=len(reused), episodes_compiled=len(worked - reused), clips_previous=previous,
    )
