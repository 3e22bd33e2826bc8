"""Part lerobot: LeRobot's own ``LeRobotDataset`` (0.6.1) on the AV1 source of the 480x640 dataset, read the way
lerobot-train reads it (``DataLoader``, batch 32, shuffle, persistent workers, pin_memory and camera tensors
moved to the GPU when there is one), at several ``num_workers``; the best is the baseline. Imports no roboreel:
it may run in another interpreter (run.py ``--lerobot-python``)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the prepared source is local; there is no network there

from common import SOURCE, cores, cuda_usable, part_args, results  # noqa: E402
from loaderrun import measure  # noqa: E402
from pyavshim import install as install_pyav_shim  # noqa: E402

BATCH = 32


def main() -> None:
    a = part_args(__doc__)
    shim = False
    try:
        shim = install_pyav_shim()  # LeRobot 0.6.1 beside PyAV 18 (pyavshim.py)
        import lerobot
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
    except (ImportError, AttributeError) as e:
        why = f"LeRobot is not importable here ({type(e).__name__}: {e})"
        results.merge(a.results, {}, reasons={"lerobot.samples_per_s": why, "lerobot.num_workers": why})
        return
    import torch

    ok, _ = cuda_usable()
    gpu = ok and not a.cpu_only
    n = cores()
    # num_workers=0 last: LeRobot caches video decoders in a module-level cache (video_utils._default_decoder_cache)
    # and workers forked after the main process decoded inherit them and fail ("Could not push packet to decoder")
    sweep = ([w for w in (4, 8, 12, 16) if w <= n] or [n]) if gpu else [2, 0]
    ds = LeRobotDataset("local/gpu_check", root=a.data / SOURCE)
    cams = list(ds.meta.camera_keys)
    info = {"lerobot": getattr(lerobot, "__version__", None), "video_backend": getattr(ds, "video_backend", None),
            "frames": ds.num_frames, "episodes": ds.num_episodes, "cameras": cams, "batch_size": BATCH,
            "dtype": "float32 (LeRobotDataset's frames)", "pyav_option_shim": shim, "sweep": []}
    results.merge(a.results, {"lerobot.info": info})
    best = None
    for w in sweep:
        dl = torch.utils.data.DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=w, pin_memory=gpu,
                                         persistent_workers=w > 0, prefetch_factor=2 if w else None, drop_last=True)

        def to_gpu(batch: dict) -> int:
            if gpu:
                for k in cams:
                    batch[k] = batch[k].to("cuda", non_blocking=True)
            return int(batch["index"].shape[0])

        r = measure(dl, seconds=a.seconds, cuda=gpu, count=to_gpu)
        r["num_workers"] = w
        info["sweep"].append(r)
        if best is None or r["samples_per_s"] > best["samples_per_s"]:
            best = r
        results.merge(a.results, {"lerobot.info": info, "lerobot.samples_per_s": best["samples_per_s"],
                                  "lerobot.num_workers": best["num_workers"],
                                  "lerobot.cpu_ms_per_sample": best["cpu_ms_per_sample"]})
        del dl


if __name__ == "__main__":
    main()
