"""``roboreel lerobot-train ARGS`` with a recorder, for the integration tests: every batch LeRobot's training loop
takes is appended to ``$ROBOREEL_PROBE_DIR/rank<R>.jsonl`` (its sample indices, keys, shapes, dtypes, a digest of
every value, the type of the loader it came from), and ``rank<R>.started`` marks that the process came up.
Nothing is replaced: the recorder wraps the ``cycle`` the training script iterates its loader with, and passes
every batch on untouched (digested before LeRobot's loop turns uint8 frames into float)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import lerobot.scripts.lerobot_train as script

from roboreel.integrations.lerobot import main

OUT = Path(os.environ["ROBOREEL_PROBE_DIR"])
RANK = int(os.environ.get("RANK", "0"))


def digest(value) -> str:
    """sha256 of a tensor's bytes (with its dtype and shape), or of anything else's JSON."""
    if hasattr(value, "shape"):
        data = value.detach().cpu().contiguous().numpy().tobytes() + f"{value.dtype}{list(value.shape)}".encode()
    else:
        data = json.dumps(value, default=str).encode()
    return hashlib.sha256(data).hexdigest()


def recording(cycle):
    def wrapped(loader):
        with open(OUT / f"rank{RANK}.jsonl", "a") as f:
            for batch in cycle(loader):
                f.write(json.dumps({"index": batch["index"].tolist(), "loader": type(loader).__name__,
                                    **({"dataset_index": batch["dataset_index"].tolist()}
                                       if "dataset_index" in batch else {}),
                                    "spec": {k: [list(v.shape), str(v.dtype)] for k, v in batch.items()
                                             if hasattr(v, "shape")},
                                    "digest": {k: digest(v) for k, v in batch.items()}}) + "\n")
                f.flush()
                yield batch

    return wrapped


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"rank{RANK}.started").write_text(str(os.getpid()))
    script.cycle = recording(script.cycle)
    sys.exit(main(sys.argv[1:]))
