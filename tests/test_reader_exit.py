"""A training script that stops reading mid-epoch and ends: the process exits 0, with nothing on stderr.

Breaking out of the loop and letting the script end is how a run with a step budget finishes. The reader's
background threads (shard prefetch, the loader's decode stage) are still working then; left to the interpreter's
finalization they used to abort the process (``terminate called without an active exception``, exit 134) in most
runs, after the work was done: a job scheduler records such a run as failed.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import sys
import torch
import roboreel
from roboreel.reader import CompiledDataset

path, how = sys.argv[1], sys.argv[2]
ds = CompiledDataset(path, return_uint8=True)
if how == "dataset":
    batches = iter(ds)
elif how == "dataloader":
    batches = iter(torch.utils.data.DataLoader(ds, batch_size=2, num_workers=0))
else:
    batches = iter(roboreel.loader(ds, batch_size=2, num_workers=int(how[-1])))
for _ in range(3):
    next(batches)
print("stopped mid-epoch", flush=True)
"""

RUNS = 2  # the abort came in 3 of 4 runs, not all: two clean exits in a row each way, eight in all


@pytest.mark.parametrize("how", ["loader0", "loader2", "dataset", "dataloader"])
def test_stopping_mid_epoch_then_exiting_is_a_clean_exit(small_compiled, how) -> None:
    for _ in range(RUNS):
        done = subprocess.run([sys.executable, "-c", SCRIPT, str(small_compiled), how], capture_output=True,
                              text=True, timeout=300)
        assert (done.returncode, done.stdout, done.stderr) == (0, "stopped mid-epoch\n", ""), how
