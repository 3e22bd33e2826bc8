"""Part scaling: the CPU-decode ``roboreel.loader`` (480x640, uint8, batch 32, batches kept on the CPU so only
decode scales) with 1, 2, 4, 8, 16 decode threads and ``max(1, threads // 2)`` DataLoader workers, and where
it stops scaling: per setting the training process's CPU use (cores busy), its CPU by thread, and the GIL's load
measured by a probe thread (common.GilProbe: the share of moments a thread that wants the GIL finds it held,
and the wait). Decode threads limited by the GIL show held_share near 1 while cores stay idle; limited by the
cores, the process uses them all with the GIL mostly free."""

from __future__ import annotations

import time

from common import REAL, GilProbe, cores, part_args, results
from loaderrun import measure

BATCH = 32


def main() -> None:
    a = part_args(__doc__)
    import roboreel
    from roboreel import CompiledDataset

    n = cores()
    settings = [t for t in (1, 2, 4, 8, 16) if t <= n or t == 1] if not a.cpu_only else [1, 2]
    with GilProbe() as idle:  # the probe's reading with nothing else running: its floor on this machine
        time.sleep(min(1.0, a.seconds))
    held_us = max(GilProbe.HELD_US, 2e3 * idle.summary()["p99_wait_ms"])  # a busy machine delays the probe too
    results.merge(a.results, {"scaling_info": {"cores": n, "batch_size": BATCH, "workers": "max(1, threads // 2)",
                                               "batches_on": "cpu", "gil_probe_idle": idle.summary(),
                                               "method": __doc__}})
    for t in settings:
        ds = CompiledDataset(str(a.data / REAL), seed=1, return_uint8=True)
        w = max(1, t // 2)
        dl = roboreel.loader(ds, batch_size=BATCH, num_workers=w, decode_threads=t, persistent_workers=True)
        try:
            r = measure(dl, seconds=a.seconds, set_epoch=dl.set_epoch, gil=held_us)
        finally:
            dl.close()
        entry = {"decode_threads": t, "num_workers": w, "samples_per_s": r["samples_per_s"],
                 "cpu_ms_per_sample": r["cpu_ms_per_sample"], "main_process_cores_used": r["main_process_cores_used"],
                 "tree_cores_used": r["tree_cores_used"], "gil": r.get("gil"),
                 "threads_cpu_ms_per_sample": r["threads_cpu_ms_per_sample"]}
        results.append(a.results, "scaling", entry)


if __name__ == "__main__":
    main()
