"""The reader's resume state: what ``CompiledDataset.state_dict`` saves and how a fresh dataset finds its place.

The stream is a pure function of (seed, epoch, rank, worker) and the index, so a state is a handful of scalars:
the epoch, and either the samples each worker's iterator yielded, or the batches a DataLoader delivered (the
per-worker positions follow from its round-robin order, resume.py). ``stream`` fingerprints what shapes the
order (seed, pool, split, the index's layout), so a state is never applied to another stream.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from roboreel.reader.plan._epoch import World
from roboreel.reader.plan._resume import loader_position

STATE_FORMAT = "roboreel.reader.state"
STATE_VERSION = 2  # 2: frame-quota split (_epoch.py); version-1 states split differently


def loader_state(base: dict[str, Any], *, epoch: int, world_size: int, batches: int | None,
                 loader: Any) -> dict[str, Any]:
    """The state of a DataLoader that delivered ``batches`` batches this epoch (any number of workers)."""
    if batches is None or loader is None:
        raise ValueError("pass both batches= (batches received this epoch) and loader= (the DataLoader)")
    bs = loader.batch_size
    return {**base, "epoch": epoch, "world_size": world_size, "batches": int(batches),
            "batch_size": 1 if bs is None else int(bs), "drop_last": bool(loader.drop_last),
            "num_workers": max(1, int(loader.num_workers))}


def checked_state(state: Mapping[str, Any], stream_id: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` as a dict, or ValueError when it is not a reader state or was saved for another stream."""
    if state.get("format") != STATE_FORMAT or state.get("version") != STATE_VERSION:
        raise ValueError(f"not a roboreel reader state (format={state.get('format')!r}, "
                         f"version={state.get('version')!r}); expected {STATE_FORMAT!r} v{STATE_VERSION}")
    differ = {k: (v, stream_id.get(k)) for k, v in state["stream"].items() if stream_id.get(k) != v}
    if differ:
        raise ValueError(f"the state was saved for a different stream; (saved, now): {differ}")
    return dict(state)


def resume_point(state: Mapping[str, Any] | None, world: World, epoch: int,
                 worker_samples: Callable[[int], list[int]]) -> tuple[int, int]:
    """(samples to skip, worker stream to serve) for ``world``'s worker in ``epoch``; ``worker_samples(k)``
    gives the samples each of k workers emits in that epoch."""
    if state is None or state["epoch"] != epoch:
        return 0, world.worker
    if state["world_size"] != world.world_size or state["num_workers"] != world.num_workers:
        raise ValueError(
            f"the state was saved with world_size={state['world_size']}, num_workers={state['num_workers']}; "
            f"this run has world_size={world.world_size}, num_workers={world.num_workers}: resume needs the same")
    if "batches" in state:
        pos = loader_position(state["batches"], worker_samples(world.num_workers), batch_size=state["batch_size"],
                              drop_last=state["drop_last"])
        stream = pos.stream_of(world.worker)
        return pos.consumed[stream], stream
    if state["rank"] != world.rank:
        raise ValueError(f"the state holds rank {state['rank']}'s position, this is rank {world.rank}; save "
                         "each rank's state, or use state_dict(batches=..., loader=...) which fits every rank")
    consumed = {int(k): int(v) for k, v in state["consumed"].items()}
    return consumed.get(world.worker, 0), world.worker
