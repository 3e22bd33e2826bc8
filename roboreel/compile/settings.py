"""Compile settings: every knob that shapes the compiled bytes, checked once, recorded in the manifest.

Defaults come from measurements (docs/format.md, "Encoding"): x265 CRF 24 keeps >= 35 dB mean PSNR against the
source AV1 decode on textured 224x224 footage (CRF 28 gave ~34 dB there; each CRF step is ~0.5 dB), keyframes
every 10 frames with no B-frames bound a random access to at most 9 extra decoded frames, and ``veryfast`` is
within 0.1 dB of ``medium`` at this size while encoding faster. HEVC's in-loop filters (deblocking, SAO) are off
by default: on 480x640 ALOHA footage they cost ~20% of the CPU decode of every frame, every epoch, for ~0.6 dB
of PSNR (47.3 -> 46.6 dB mean at CRF 24), and CPU decode is what bounds a training loader (docs/format.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal

X265_PRESETS = (
    "ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow", "placebo",
)
# x265's rc-lookahead of each preset (x265 docs, "Preset Options"); x265_params caps it at the GOP.
X265_LOOKAHEAD = {"ultrafast": 5, "superfast": 10, "veryfast": 15, "faster": 15, "fast": 15, "medium": 20,
                  "slow": 25, "slower": 40, "veryslow": 40, "placebo": 60}
CODECS = ("hevc",)
IMAGE_MODES = ("clips", "keep")


MIN_WIDTH, MIN_HEIGHT = 32, 16


def x265_size_params(*, height: int, width: int) -> list[str]:
    """CTU size (and lookahead) for a frame size, chosen so x265 4.2 stays deterministic and does not crash.

    Measured on x265 4.2 (PyAV 18 wheels), repeated in fresh processes: a picture only one CTU wide (e.g. 64x64
    with the presets' 64 px CTU) encodes differently from run to run (a read of uninitialised memory), and the
    lookahead corrupts the heap on some narrow frames (width 48). Picking the largest CTU with at least two CTU
    columns, and no lookahead below 64 px, gave identical bytes on every size tried from 32x16 to 640x480.
    """
    if width < MIN_WIDTH or height < MIN_HEIGHT:
        raise ValueError(
            f"frames of {width}x{height} are too small for a reliable x265 encode (at least "
            f"{MIN_WIDTH}x{MIN_HEIGHT}); pass resize=(height, width) / --resize HxW"
        )
    ctu = next((c for c in (64, 32, 16) if width >= 2 * c and height >= c), 16)
    return [f"ctu={ctu}", *(["rc-lookahead=0"] if min(height, width) < 64 else [])]


@dataclass(frozen=True)
class CompileSettings:
    """How to compile. Every field is recorded in ``roboreel.json`` (``settings``) and in the compile record, so a
    resume or a ``--part`` job refuses to mix bytes made with different settings."""

    codec: Literal["hevc"] = "hevc"
    crf: int = 24
    preset: str = "veryfast"
    gop: int = 10  # keyframe interval in frames; closed GOPs, so any frame decodes from <= gop - 1 predecessors
    bframes: int = 0  # B-frames make random access decode frames out of order and add latency: off by default
    reencode: bool = False  # force re-encoding of HEVC/H.264 sources that could be stream-copied
    resize: tuple[int, int] | None = None  # (height, width) of every camera, even numbers (yuv420p)
    # (camera, height, width) per camera, over ``resize``; sorted by camera (compile/video/_resize.py)
    resize_cameras: tuple[tuple[str, int, int], ...] = ()
    fps: int | None = None  # output frame rate; must divide the source's (compile/source/_resample.py keeps every k-th frame)
    shard_size_mb: float = 128.0  # target shard size; a shard holds whole episodes, so sizes vary around it
    episodes_per_shard: int | None = None  # when set, overrides size-based planning
    psnr_frames: int = 4  # frames per re-encoded clip compared with the source decode for the PSNR report
    loop_filters: bool = False  # x265 deblocking + SAO: a little more PSNR for more CPU decode every epoch
    # A source span is stream-copied only when no keyframe interval in it is longer than this (frames): a long
    # GOP makes every random access decode up to that many frames (measured: a 240-frame GOP H.264 read
    # 1.8-2x slower than re-encoded, docs/format.md). LeRobot writes g=2; phones and recorders write 30-250.
    remux_max_gop: int = 32
    # Fidelity floor of re-encoded RGB (dB, every frame in RGB against the source decode): below it the clip is
    # re-encoded at a lower CRF (down to ``crf - 12`` in steps of 4), then x265 lossless (video/_transcode.py).
    min_psnr: float = 40.0
    # Image features (``dtype: "image"``, images in the data parquet): "clips" re-encodes RGB ones as HEVC clips
    # held to ``min_psnr`` on every frame in RGB (compile/video/_imageclips.py), faster to read than the images;
    # "keep" carries the source's encoded images as they are (exact, LeRobot's own decode). Measured:
    # docs/benchmarks.md; docs/format.md, "Image features".
    images: Literal["clips", "keep"] = "clips"

    def __post_init__(self) -> None:
        if self.codec not in CODECS:
            raise ValueError(f"codec must be one of {CODECS}, got {self.codec!r}")
        if not isinstance(self.crf, int) or not 0 <= self.crf <= 51:
            raise ValueError(f"crf must be an integer in [0, 51], got {self.crf!r}")
        if self.preset not in X265_PRESETS:
            raise ValueError(f"preset must be one of {X265_PRESETS}, got {self.preset!r}")
        if not isinstance(self.gop, int) or self.gop < 1:
            raise ValueError(f"gop must be a positive integer, got {self.gop!r}")
        if not isinstance(self.bframes, int) or not 0 <= self.bframes <= 16:
            raise ValueError(f"bframes must be an integer in [0, 16], got {self.bframes!r}")
        if self.resize is not None:
            size = tuple(self.resize)
            if len(size) != 2 or any(not isinstance(v, int) or v <= 0 or v % 2 for v in size):
                raise ValueError(f"resize must be (height, width), positive even integers, got {self.resize!r}")
            object.__setattr__(self, "resize", size)
        cams = []
        for item in (self.resize_cameras.items() if isinstance(self.resize_cameras, dict) else self.resize_cameras):
            key, *hw = item if len(item) == 3 else (item[0], *item[1])
            if not isinstance(key, str) or not key or len(hw) != 2 or any(
                    not isinstance(v, int) or v <= 0 or v % 2 for v in hw):
                raise ValueError(f"resize_cameras entries must be (camera, height, width) with positive even sizes, "
                                 f"got {item!r}")
            cams.append((key, int(hw[0]), int(hw[1])))
        if len({c[0] for c in cams}) != len(cams):
            raise ValueError(f"resize_cameras names a camera twice: {sorted(c[0] for c in cams)}")
        object.__setattr__(self, "resize_cameras", tuple(sorted(cams)))
        if self.fps is not None and (not isinstance(self.fps, int) or isinstance(self.fps, bool) or self.fps <= 0):
            raise ValueError(f"fps must be None or a positive integer, got {self.fps!r}")
        if not self.shard_size_mb > 0:
            raise ValueError(f"shard_size_mb must be > 0, got {self.shard_size_mb!r}")
        if self.episodes_per_shard is not None and (
            not isinstance(self.episodes_per_shard, int) or self.episodes_per_shard < 1
        ):
            raise ValueError(f"episodes_per_shard must be None or a positive integer, got {self.episodes_per_shard!r}")
        if not isinstance(self.loop_filters, bool):
            raise ValueError(f"loop_filters must be True or False, got {self.loop_filters!r}")
        if not isinstance(self.remux_max_gop, int) or self.remux_max_gop < 1:
            raise ValueError(f"remux_max_gop must be a positive integer, got {self.remux_max_gop!r}")
        if not isinstance(self.min_psnr, int | float) or not 0 <= self.min_psnr < float("inf"):  # NaN fails too
            raise ValueError(f"min_psnr must be a finite non-negative number (dB), got {self.min_psnr!r}")
        if self.images not in IMAGE_MODES:
            raise ValueError(f"images must be one of {IMAGE_MODES}, got {self.images!r}")
        if not isinstance(self.psnr_frames, int) or self.psnr_frames < 0:
            raise ValueError(f"psnr_frames must be a non-negative integer, got {self.psnr_frames!r}")

    def camera_size(self, camera: str, source_hw: tuple[int, int]) -> tuple[int, int]:
        """The (height, width) ``camera`` is written at: its own ``resize_cameras`` entry, else ``resize``, else
        the source's."""
        own = next(((h, w) for key, h, w in self.resize_cameras if key == camera), None)
        return own or self.resize or tuple(source_hw)

    def resizes(self, camera: str) -> bool:
        """Whether ``camera`` is asked for a size (then its frames are always re-encoded, never stream-copied)."""
        return self.resize is not None or any(key == camera for key, _, _ in self.resize_cameras)

    @property
    def transforms(self) -> bool:
        """Whether the output differs from the source in more than encoding (size or frame rate): then stats are
        recomputed for what is written (compile/tables/_stats.py)."""
        return self.resize is not None or bool(self.resize_cameras) or self.fps is not None

    def x265_params(self, *, height: int | None = None, width: int | None = None) -> str:
        """The x265 parameter string for frames of ``height`` x ``width`` (see ``x265_size_params``; without a
        size, the size-dependent CTU/lookahead parameters are left out).

        ``rc-lookahead`` at most the GOP (no B-frames): with fixed closed GOPs and no scenecut, frames past the
        next keyframe cannot change how a frame is coded, so the bytes are those of the preset's own lookahead
        (tested: tests/test_compile_lookahead.py), but x265 emits each packet ``lookahead - gop`` frames sooner:
        13 frames after its input instead of 18 at veryfast (15) with gop 10, which is how far the fidelity floor's
        check runs ahead of x265 before a failed GOP is re-encoded (video/_segments.py).

        ``pools=none`` (single-threaded x265) makes output byte-identical on any machine: x265's bytes depend on
        its thread-pool size (measured: pools=1, 2 and 8 give three different streams), so parallelism comes
        from worker processes instead.
        """
        size = x265_size_params(height=height, width=width) if height and width else []
        return ":".join(
            [
                f"keyint={self.gop}",
                f"min-keyint={self.gop}",
                "scenecut=0",
                "open-gop=0",
                f"bframes={self.bframes}",
                "pools=none",
                "frame-threads=1",
                *size,
                *([] if self.bframes or any(p.startswith("rc-lookahead=") for p in size) else
                  [f"rc-lookahead={min(self.gop, X265_LOOKAHEAD[self.preset])}"]),
                *([] if self.loop_filters else ["no-deblock=1", "no-sao=1"]),
                "log-level=error",
            ]
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["resize"] = list(self.resize) if self.resize is not None else None
        d["resize_cameras"] = {key: [h, w] for key, h, w in self.resize_cameras}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CompileSettings:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown compile settings {unknown}; known: {sorted(known)}")
        kw = dict(d)
        kw.setdefault("loop_filters", True)  # written before the setting existed, when x265's filters were on
        kw.setdefault("min_psnr", 0.0)  # written before the floor existed: nothing was enforced
        kw.setdefault("remux_max_gop", 1 << 30)  # ... and before the GOP policy: any closed span was copied
        kw.setdefault("images", "keep")  # ... and before image features could become clips
        if kw.get("resize") is not None:
            kw["resize"] = tuple(kw["resize"])
        kw["resize_cameras"] = tuple((key, *hw) for key, hw in (kw.get("resize_cameras") or {}).items())
        return cls(**kw)

    def replace(self, **changes: Any) -> CompileSettings:
        return replace(self, **changes)
