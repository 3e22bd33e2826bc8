"""``roboreel synth OUT``: write a synthetic LeRobot v3.0 dataset (see roboreel.synth)."""

from __future__ import annotations

import argparse

DESCRIPTION = """Write a synthetic LeRobot v3.0 dataset laid out and encoded as LeRobot's own writer does (AV1
yuv420p, gop 2, crf 30, several episodes per video and data file). Every frame carries a pixel code naming its
episode, frame and camera, and every row its own values, so a reader's output can be checked exactly."""


def register(sub: argparse._SubParsersAction) -> None:
    from roboreel.synth.config import ENCODERS, SynthConfig

    d = SynthConfig()
    codec = {enc: name for name, enc in ENCODERS.items()}[d.codec]
    p = sub.add_parser("synth", help="write a synthetic LeRobot v3.0 dataset with self-identifying frames",
                       description=DESCRIPTION)
    p.add_argument("out", metavar="OUT", help="output directory")
    p.add_argument("--episodes", type=int, default=d.episodes, metavar="N", help="episodes")
    p.add_argument("--min-length", type=int, default=d.min_length, metavar="N",
                   help="shortest episode (frames); lengths are drawn from [min, max] by --seed")
    p.add_argument("--max-length", type=int, default=d.max_length, metavar="N", help="longest episode (frames)")
    p.add_argument("--fps", type=int, default=d.fps, metavar="N", help="frames per second")
    p.add_argument("--cameras", type=int, default=len(d.cameras), metavar="N",
                   help="cameras (observation.images.top, .wrist, .side, then .cam3, ...)")
    p.add_argument("--height", type=int, default=d.height, metavar="N", help="frame height")
    p.add_argument("--width", type=int, default=d.width, metavar="N", help="frame width")
    p.add_argument("--tasks", type=int, default=d.tasks, metavar="N", help="distinct task strings")
    p.add_argument("--seed", type=int, default=d.seed, metavar="N", help="seed of the lengths, tasks and values")
    p.add_argument("--codec", default=codec, choices=list(ENCODERS),
                   help="video codec (encoders: " + ", ".join(f"{c} {e}" for c, e in ENCODERS.items()) + ")")
    p.add_argument("--crf", type=int, default=d.crf, metavar="N", help="the encoder's CRF")
    p.add_argument("--gop", type=int, default=d.g, metavar="N", help="keyframe interval in frames (LeRobot's g)")
    p.add_argument("--video-files-size-in-mb", type=float, default=d.video_files_size_in_mb, metavar="MB",
                   help="start a new video file past this estimated size (LeRobot's video_files_size_in_mb)")
    p.add_argument("--data-files-size-in-mb", type=float, default=d.data_files_size_in_mb, metavar="MB",
                   help="start a new data file past this size (LeRobot's data_files_size_in_mb)")
    p.add_argument("--chunks-size", type=int, default=d.chunks_size, metavar="N", help="files per chunk directory")
    p.add_argument("--row-groups", choices=["episode", "file"], default=d.row_groups,
                   help="parquet row groups: one per episode (LeRobot's writer today) or one per file (older "
                        "writers)")
    p.add_argument("--images", action="store_true",
                   help="cameras as image features, PNGs in the data parquet (LeRobot's use_videos=False)")
    p.add_argument("--language", action="store_true",
                   help="add a string feature and LeRobot's language_persistent / language_events columns")
    p.add_argument("--overwrite", action="store_true", help="replace an existing dataset in OUT")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from roboreel.synth import ENCODERS, SynthConfig, camera_names, synthesize

    cfg = SynthConfig(
        episodes=args.episodes, min_length=args.min_length, max_length=args.max_length, fps=args.fps,
        cameras=camera_names(args.cameras), height=args.height, width=args.width, tasks=args.tasks, seed=args.seed,
        codec=ENCODERS[args.codec], crf=args.crf, g=args.gop, video_files_size_in_mb=args.video_files_size_in_mb,
        data_files_size_in_mb=args.data_files_size_in_mb, chunks_size=args.chunks_size, row_groups=args.row_groups,
        use_videos=not args.images, language=args.language,
    )
    s = synthesize(args.out, cfg, overwrite=args.overwrite, progress=True)
    where = (", ".join(f"{k}: {n} mp4" for k, n in s.video_files.items()) if s.video_files
             else "images in the data parquet")
    print(f"wrote {s.root}: {s.episodes} episodes, {s.frames} frames, {len(cfg.cameras)} cameras ({where}), "
          f"{s.data_files} data files")
    return 0
