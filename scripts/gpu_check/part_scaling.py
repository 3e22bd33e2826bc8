"""Part scaling: the CPU-decode ``roboreel.loader`` (480x640, uint8, batch 32, batches kept on the CPU so only
decode scales) with 1, 2, 4, 8, 16 decode threads and 2 DataLoader workers (they only ship clip bytes), and where
it stops scaling: per setting the training process's CPU use (cores busy), its CPU by thread, the GIL's load
measured by a probe thread (common.GilProbe: the share of moments a thread that wants the GIL finds it held,
and the wait), and the clips the decode threads could work on at once (``decode_parallelism``: a clip's frames
decode in order on one thread). Decode threads limited by the GIL show held_share near 1 while cores stay idle;
limited by the cores, the process uses them all with the GIL mostly free; limited by the data, clips_in_flight
stays under the threads.

The data is ``many`` (40 short ALOHA episodes) when prepared: with ``main``'s 8 episodes split over the workers,
a batch holds a few clips and no thread count gets past them (the first H200 run: 2.7x at most)."""

from __future__ import annotations

import time

from common import REAL, GilProbe, cores, part_args, results
from loaderrun import measure

BATCH = 32
WORKERS = 2


def main() -> None:
    a = part_args(__doc__)
    import roboreel
    from roboreel import CompiledDataset

    n = cores()
    name = "many" if (a.data / "many" / "roboreel.json").exists() else REAL
    settings = [t for t in (1, 2, 4, 8, 16) if t <= n or t == 1] if not a.cpu_only else [1, 2]
    with GilProbe() as idle:  # the probe's reading with nothing else running: its floor on this machine
        time.sleep(min(1.0, a.seconds))
    held_us = max(GilProbe.HELD_US, 2e3 * idle.summary()["p99_wait_ms"])  # a busy machine delays the probe too
    results.merge(a.results, {"scaling_info": {"cores": n, "batch_size": BATCH, "workers": WORKERS, "data": name,
                                               "batches_on": "cpu", "gil_probe_idle": idle.summary(),
                                               "method": __doc__}})
    def one(data: str, threads: int, workers: int, inflight: int | None = None) -> dict:
        ds = CompiledDataset(str(a.data / data), seed=1, return_uint8=True)
        dl = roboreel.loader(ds, batch_size=BATCH, num_workers=workers, decode_threads=threads,
                             inflight_batches=inflight, persistent_workers=True)
        try:
            r = measure(dl, seconds=a.seconds, set_epoch=dl.set_epoch, gil=held_us)
        finally:
            dl.close()
        return {"decode_threads": threads, "num_workers": workers, "inflight_batches": r["inflight_batches"],
                "data": data, "decode_parallelism": r["decode_parallelism"], "samples_per_s": r["samples_per_s"],
                "cpu_ms_per_sample": r["cpu_ms_per_sample"], "main_process_cores_used": r["main_process_cores_used"],
                "tree_cores_used": r["tree_cores_used"], "gil": r.get("gil"),
                "threads_cpu_ms_per_sample": r["threads_cpu_ms_per_sample"],
                "decode_threads_cpu_ms_per_sample": r.get("decode_threads_cpu_ms_per_sample")}

    for t in settings:
        results.append(a.results, "scaling", one(name, t, WORKERS))
    if name != REAL and not a.cpu_only:  # the sweep runs the default batches in flight (threads // 2, 2 to 8);
        # against 2 (the default before the first H200 run), on this data and on 8 episodes over 8 workers
        t = settings[-1]
        results.append(a.results, "scaling_inflight", one(name, t, WORKERS, 2))
        for inflight in (2, None):
            results.append(a.results, "scaling_inflight", one(REAL, t, 8, inflight))


if __name__ == "__main__":
    main()
