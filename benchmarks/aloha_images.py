"""ALOHA footage as a dataset LeRobot 0.6.1 writes itself with ``use_videos=False``: the image-feature benchmark data
(docs/format.md, "Image features").

The first ``--episodes x --length`` frames of a rendered camera (``benchmarks/render_aloha.py``: MuJoCo insertion
scene, 480x640) become one ``dtype: "image"`` feature, written by LeRobot's own image writer (PNG,
``compress_level=1``) and embedded in the data parquet, with 14-D state and action. Run it in the LeRobot venv:

    .venv-lerobot/bin/python benchmarks/aloha_images.py \\
        data/aloha/videos/observation.images.top/chunk-000/file-000.mp4 data/aloha-img
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import av
import numpy as np
from lerobot.datasets.lerobot_dataset import LeRobotDataset

KEY = "observation.images.top"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mp4", help="a rendered camera's video file")
    p.add_argument("out", type=Path)
    p.add_argument("--episodes", type=int, default=4)
    p.add_argument("--length", type=int, default=100)
    p.add_argument("--fps", type=int, default=50)
    args = p.parse_args()
    need = args.episodes * args.length
    frames = []
    with av.open(args.mp4) as f:
        for frame in f.decode(video=0):
            frames.append(frame.to_ndarray(format="rgb24"))
            if len(frames) == need:
                break
    if len(frames) < need:
        raise SystemExit(f"{args.mp4} has {len(frames)} frames, {need} needed")
    shutil.rmtree(args.out, ignore_errors=True)
    h, w = frames[0].shape[:2]
    features = {KEY: {"dtype": "image", "shape": (h, w, 3), "names": ["height", "width", "channels"]},
                "observation.state": {"dtype": "float32", "shape": (14,), "names": None},
                "action": {"dtype": "float32", "shape": (14,), "names": None}}
    ds = LeRobotDataset.create("local/aloha-images", fps=args.fps, root=args.out, features=features,
                               use_videos=False, image_writer_threads=2)
    rng = np.random.default_rng(0)
    for e in range(args.episodes):
        for k in range(args.length):
            ds.add_frame({KEY: frames[e * args.length + k], "observation.state": rng.random(14, dtype=np.float32),
                          "action": rng.random(14, dtype=np.float32), "task": "insert the peg"})
        ds.save_episode()
    ds.finalize()
    print(f"wrote {args.out}: {args.episodes} episodes x {args.length} frames of {h}x{w} images")


if __name__ == "__main__":
    main()
