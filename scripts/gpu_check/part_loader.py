"""Part loader: ``roboreel.loader`` end to end on the 480x640 dataset, uint8 frames, batch 32: decoding on NVDEC
(``DecodeOptions(device="cuda")``) and decoding on the CPU with the batches landing on the GPU
(``roboreel.loader(..., device="cuda")``), samples/s and CPU ms per sample (loaderrun.py). With ``--cpu-only``
only the CPU decode runs, its batches staying on the CPU.

``main`` holds 8 episodes, LeRobotDataset's data too; with 8 workers each holds one, so a batch is one clip and
the decode threads can work on few clips at once (``decode_parallelism``). Where ``many`` (40 short ALOHA
episodes) was prepared, both decodes run on it too, with 2 workers (``loader.many``)."""

from __future__ import annotations

from common import REAL, cores, cuda_usable, part_args, results
from loaderrun import measure

BATCH = 32
MANY_WORKERS = 2


def workers() -> int:
    return max(1, min(8, cores() // 2))


def run(path: str, *, decode: str, land: str | None, seconds: float, num_workers: int | None = None) -> dict:
    import roboreel
    from roboreel import CompiledDataset, DecodeOptions

    ds = CompiledDataset(path, seed=1, return_uint8=True, decode=DecodeOptions(device=decode))
    kw = {"device": land} if land else {}
    num_workers = workers() if num_workers is None else num_workers
    dl = roboreel.loader(ds, batch_size=BATCH, num_workers=num_workers, persistent_workers=True,
                         pin_memory=land is not None, **kw)
    try:
        out = measure(dl, seconds=seconds, cuda=decode != "cpu" or land is not None, set_epoch=dl.set_epoch)
        out.update(batch_size=BATCH, num_workers=num_workers, decode_threads=dl.decode_threads, decode=decode,
                   batches_on=land or decode)
        if decode != "cpu":
            import torch

            out["gpu_max_allocated_mb"] = round(torch.cuda.max_memory_allocated() / 2**20)
        return out
    finally:
        dl.close()


def main() -> None:
    a = part_args(__doc__)
    ok, why = cuda_usable()
    gpu = ok and not a.cpu_only
    path = str(a.data / REAL)
    cpu = run(path, decode="cpu", land="cuda" if gpu else None, seconds=a.seconds)
    results.merge(a.results, {"loader.cpu": cpu, "loader.cpu_samples_per_s": cpu["samples_per_s"],
                              "loader.cpu_cpu_ms_per_sample": cpu["cpu_ms_per_sample"]})
    if not gpu:
        why = f"needs NVDEC: {'--cpu-only run' if a.cpu_only else why}"
        results.merge(a.results, {}, reasons={"loader.nvdec_samples_per_s": why,
                                              "loader.nvdec_cpu_ms_per_sample": why})
        return
    nv = run(path, decode="cuda", land=None, seconds=a.seconds)
    values = {"loader.nvdec": nv, "loader.nvdec_samples_per_s": nv["samples_per_s"],
              "loader.nvdec_cpu_ms_per_sample": nv["cpu_ms_per_sample"]}
    results.merge(a.results, values)
    if (a.data / "many" / "roboreel.json").exists():  # enough episodes for every decode thread (part_scaling.py)
        many = str(a.data / "many")
        results.merge(a.results, {"loader.many": {
            "num_workers": MANY_WORKERS,
            "nvdec": run(many, decode="cuda", land=None, seconds=a.seconds, num_workers=MANY_WORKERS),
            "cpu": run(many, decode="cpu", land="cuda", seconds=a.seconds, num_workers=MANY_WORKERS)}})


if __name__ == "__main__":
    main()
