"""The demo's last step: stream a compiled dataset through a DataLoader and check it against the source."""

from __future__ import annotations


def read_some(compiled: str, source: str, *, batches: int = 8) -> None:
    import torch

    from roboreel import CompiledDataset
    from roboreel.bench.reference import ReferenceDataset
    from roboreel.formats.manifest import load_manifest
    from roboreel.synth import read as read_code

    fps = load_manifest(compiled).fps
    window = {"action": [k / fps for k in range(8)]}  # 8 steps, one frame apart
    ds = CompiledDataset(compiled, delta_timestamps=window, seed=0)
    ref = ReferenceDataset(source, delta_timestamps=window)
    same = 0
    loader = torch.utils.data.DataLoader(ds, batch_size=16, num_workers=2)
    checked = 0
    episodes_per_batch = []
    for b, batch in enumerate(loader):
        if b == 0:
            shapes = {k: tuple(v.shape) if hasattr(v, "shape") else f"list[{type(v[0]).__name__}]"
                      for k, v in batch.items()}
            print("   first batch:", ", ".join(f"{k} {s}" for k, s in shapes.items()))
        cams = [k for k in batch if k.startswith("observation.images.") and not k.endswith("_is_pad")]
        for i in range(len(batch["index"])):
            for cam in cams:
                code = read_code(batch[cam][i])
                assert code.index == int(batch["index"][i]), (code, int(batch["index"][i]))
                checked += 1
            if b == 0:  # the same sample from the source, LeRobot-style map access, must agree exactly
                want = ref[ref.position(int(batch["index"][i]))]
                for key in ("observation.state", "action", "action_is_pad", "timestamp", "task_index"):
                    assert torch.equal(batch[key][i], want[key]), key
                assert batch["task"][i] == want["task"]
                same += 1
        episodes_per_batch.append(len(set(batch["episode_index"].tolist())))
        if b + 1 == batches:
            break
    mean = sum(episodes_per_batch) / len(episodes_per_batch)
    print(f"   {checked} camera frames checked against their pixel codes: all are the frame asked for")
    print(f"   {same} samples equal the reference reader's over the source (tabular values, windows, _is_pad, task)")
    print(f"   distinct episodes per batch of 16: {mean:.1f} on average")
