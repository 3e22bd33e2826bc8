"""``roboreel synth OUT``: write a synthetic LeRobot v3.0 dataset (see roboreel.synth)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("synth", help="write a synthetic LeRobot v3.0 dataset with self-identifying frames")
    p.add_argument("out", help="output directory")
    p.add_argument("--episodes", type=int, default=6)
    p.add_argument("--min-length", type=int, default=20)
    p.add_argument("--max-length", type=int, default=40)
    p.add_argument("--fps", type=int, default=20)
    p.add_argument("--cameras", type=int, default=2, help="number of cameras")
    p.add_argument("--height", type=int, default=64)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--tasks", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--codec", default="libsvtav1", choices=["libsvtav1", "libx265", "libx264"])
    p.add_argument("--crf", type=int, default=30)
    p.add_argument("--g", type=int, default=2, help="keyframe interval (LeRobot default 2)")
    p.add_argument("--video-file-mb", type=float, default=0.02, help="roll video files over past this estimated size")
    p.add_argument("--data-file-mb", type=float, default=0.01, help="roll data files over past this size")
    p.add_argument("--chunks-size", type=int, default=1000, help="files per chunk directory")
    p.add_argument("--row-groups", choices=["episode", "file"], default="episode")
    p.add_argument("--images", action="store_true",
                   help="cameras as image features, PNGs in the data parquet (LeRobot's use_videos=False)")
    p.add_argument("--language", action="store_true",
                   help="add a string feature and LeRobot's language_persistent / language_events columns")
    p.add_argument("--overwrite", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from roboreel.synth import SynthConfig, camera_names, synthesize

    cfg = SynthConfig(
        episodes=args.episodes, min_length=args.min_length, max_length=args.max_length, fps=args.fps,
        cameras=camera_names(args.cameras), height=args.height, width=args.width, tasks=args.tasks, seed=args.seed,
        codec=args.codec, crf=args.crf, g=args.g, video_files_size_in_mb=args.video_file_mb,
        data_files_size_in_mb=args.data_file_mb, chunks_size=args.chunks_size, row_groups=args.row_groups,
        use_videos=not args.images, language=args.language,
    )
    s = synthesize(args.out, cfg, overwrite=args.overwrite, progress=True)
    where = (", ".join(f"{k}: {n} mp4" for k, n in s.video_files.items()) if s.video_files
             else "images in the data parquet")
    print(f"wrote {s.root}: {s.episodes} episodes, {s.frames} frames, {len(cfg.cameras)} cameras ({where}), "
          f"{s.data_files} data files")
    return 0
