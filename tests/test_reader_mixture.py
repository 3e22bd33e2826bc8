"""``CompiledDataset([a, b], weights=...)`` on real AV1-sourced compiled datasets: every sample equals the reference
reader's on its member's source (pixel codes, exact values), weights and repeats as planned, DataLoader workers
and ranks with equal steps, exact resume, roboreel.loader, and the merged meta (features, stats, tasks)."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch
from support.datasets import assert_same_sample, codes, compiled_pair
from support.resume import check_resume

import roboreel
from roboreel.bench.reference import ReferenceDataset
from roboreel.formats.merge import MixtureMismatch
from roboreel.reader import CompiledDataset
from roboreel.reader.mixture import MixtureDataset
from roboreel.synth import generate

pytestmark = pytest.mark.filterwarnings("ignore:.set_vital. is deprecated", "ignore:This DataLoader will create")
CAMERAS = ["observation.images.top", "observation.images.wrist"]
WINDOWS = {"action": [-0.1, 0.0, 0.2], "observation.images.top": [-0.05, 0.0]}
B = {"episodes": 3, "seed": 23, "tasks": 2, "min_length": 14, "max_length": 20}  # small: it repeats


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(A, B) as (source, compiled): B's task strings in another order, so its task_index is remapped."""
    a = compiled_pair(tmp_path_factory, episodes_per_shard=2)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(generate, "_TASKS", tuple(reversed(generate._TASKS)))
        b = compiled_pair(tmp_path_factory, episodes_per_shard=1, **B)
    return a, b


def _mix(pair, **kw):
    (_, a), (_, b) = pair
    return CompiledDataset([str(a), str(b)], delta_timestamps=WINDOWS, episode_pool_size=3, seed=7, **kw)


def _check_against_reference(pair, samples, ds):
    """Each sample equals its member's reference sample, with the merged task_index and its dataset_index."""
    refs = [ReferenceDataset(str(src), delta_timestamps=WINDOWS) for src, _ in pair]
    names = ds.meta.task_names
    for s in samples:
        k = int(s["dataset_index"])
        assert s["dataset_index"].dtype == torch.int64 and s["dataset_index"].ndim == 0
        want = refs[k].__getitems__([refs[k].position(int(s["index"]))])[0]
        assert names[int(s["task_index"])] == s["task"] == want["task"]
        assert isinstance(s["task_index"], torch.Tensor) and s["task_index"].dtype == torch.int64  # as LeRobot's
        assert s["task_index"].ndim == 0
        got = {key: v for key, v in s.items() if key not in ("dataset_index", "task_index")}
        assert_same_sample(got, {key: v for key, v in want.items() if key != "task_index"}, CAMERAS)
        assert codes(s["observation.images.wrist"])[0][:2] == (int(s["index"]), int(s["episode_index"]))


def test_concatenation_reads_every_frame_of_every_dataset_once(pair):
    ds = _mix(pair)
    assert isinstance(ds, MixtureDataset) and isinstance(ds, torch.utils.data.IterableDataset)
    sizes = [CompiledDataset(str(c)).num_frames for _, c in pair]
    assert ds.member_samples() == sizes and len(ds) == sum(sizes) == ds.num_frames
    orders = []
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        samples = list(ds)
        keys = [(int(s["dataset_index"]), int(s["index"])) for s in samples]
        assert sorted(keys) == sorted([(0, i) for i in range(sizes[0])] + [(1, i) for i in range(sizes[1])])
        first = [k for k, _ in keys[:len(keys) // 2]]
        assert 0 < sum(first) < len(first)  # shuffled together, not member after member
        _check_against_reference(pair, samples, ds)
        orders.append(keys)
    assert orders[0] != orders[1]
    assert list(samples[0])[-1] == "dataset_index"
    with pytest.raises(TypeError, match="a mixture has no map-style access"):
        ds[0]


def test_weights_repeat_a_small_dataset_in_fresh_orders(pair):
    ds = _mix(pair, weights=[0.4, 0.6], samples_per_epoch=300)
    n_b = CompiledDataset(str(pair[1][1])).num_frames
    samples = list(ds)
    assert len(samples) == len(ds) == 300
    per = collections.Counter(int(s["dataset_index"]) for s in samples)
    assert per == {0: 120, 1: 180}
    b = collections.Counter(int(s["index"]) for s in samples if int(s["dataset_index"]) == 1)
    assert set(b) == set(range(n_b)) and set(b.values()) <= {180 // n_b, 180 // n_b + 1}
    _check_against_reference(pair, samples[:120], ds)
    again = _mix(pair, weights=[0.4, 0.6], samples_per_epoch=300)
    assert [int(s["index"]) for s in list(again)] == [int(s["index"]) for s in samples]  # deterministic


def test_dataloader_workers_and_ranks_take_equal_steps(pair):
    """Two ranks x two workers, batches of 4: equal batches per rank, ``len(DataLoader)`` exact, and together
    the planned draws of every member."""
    batches, per = [], collections.Counter()
    for rank in range(2):
        ds = _mix(pair, weights=[0.5, 0.5], samples_per_epoch=203, rank=rank, world_size=2, batch_size=4)
        dl = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2)
        got = list(dl)
        assert len(got) == len(dl)
        batches.append(len(got))
        per.update(int(i) for b in got for i in b["dataset_index"])
        assert sum(len(b["index"]) for b in got) == len(ds) == 101
    assert batches[0] == batches[1]
    assert sum(per.values()) == 202 and abs(per[0] - per[1]) <= 3


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_after_any_batch_equals_the_uninterrupted_run(pair, num_workers):
    def make():
        ds = _mix(pair, weights=[0.3, 0.7], samples_per_epoch=150)
        ds.set_epoch(1)
        return ds

    full = check_resume(make, [1, 6, 11], batch_size=7, num_workers=num_workers)
    assert len(full) == 22
    check_resume(make, [3], batch_size=6, num_workers=0, in_process=True)


def test_state_of_another_mixture_is_refused(pair):
    ds = _mix(pair, weights=[0.3, 0.7])
    state = ds.state_dict()
    other = _mix(pair, weights=[0.5, 0.5])
    with pytest.raises(ValueError, match="weights"):
        other.load_state_dict(state)


def test_loader_batches_equal_the_dataloader(pair):
    want = list(torch.utils.data.DataLoader(_mix(pair, weights=[0.5, 0.5], samples_per_epoch=90), batch_size=8,
                                            num_workers=2))
    got = list(roboreel.loader(_mix(pair, weights=[0.5, 0.5], samples_per_epoch=90), mix_workers=False, batch_size=8, num_workers=2))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert list(g) == list(w)
        for k in w:
            assert torch.equal(g[k], w[k]) if isinstance(w[k], torch.Tensor) else g[k] == w[k], k


def test_merged_meta_features_stats_and_tasks(pair):
    ds = _mix(pair)
    meta = ds.meta
    a, b = (CompiledDataset(str(c)).meta for _, c in pair)
    assert list(meta.features) == list(a.features) and meta.fps == a.fps
    assert meta.total_frames == a.total_frames + b.total_frames
    # tasks: A's in order, then B's new ones; B's (reversed) strings map to A's indices
    assert meta.task_names[:a.total_tasks] == a.task_names
    assert set(b.task_names) <= set(meta.task_names)
    assert list(meta.tasks.index) == meta.task_names and meta.get_task_index(b.task_names[0]) is not None
    # stats: the exact statistics of every frame of both datasets (LeRobot's pooled mean and variance)
    samples = list(CompiledDataset([str(c) for _, c in pair], seed=1))
    state = np.stack([s["observation.state"].numpy() for s in samples]).astype(np.float64)
    st = meta.stats["observation.state"]
    assert np.allclose(st["mean"], state.mean(0)) and np.allclose(st["std"], state.std(0))
    assert np.array_equal(st["min"], state.min(0)) and np.array_equal(st["max"], state.max(0))
    assert int(st["count"][0]) == len(samples)


def test_per_dataset_episodes_and_bad_arguments(pair, tmp_path_factory):
    (_, a), (_, b) = pair
    ds = CompiledDataset([str(a), str(b)], episodes=[[0, 1], None], seed=2)
    got = collections.Counter((int(s["dataset_index"]), int(s["episode_index"])) for s in ds)
    assert {k for k in got if k[0] == 0} == {(0, 0), (0, 1)} and {e for d, e in got if d == 1} == {0, 1, 2}
    assert CompiledDataset([str(a), str(b)], episodes={1: [2]}).member_samples()[0] == CompiledDataset(str(a)).num_frames
    with pytest.raises(ValueError, match="one entry per dataset"):
        CompiledDataset([str(a), str(b)], episodes=[0, 1, 2])
    with pytest.raises(ValueError, match="pass a list of paths"):
        CompiledDataset(str(a), weights=[1.0])
    with pytest.raises(ValueError, match="3 values for 2 datasets"):
        CompiledDataset([str(a), str(b)], weights=[1, 1, 1])
    _, other = compiled_pair(tmp_path_factory, episodes_per_shard=2, episodes=2, height=72)
    with pytest.raises(MixtureMismatch, match="--resize") as e:
        CompiledDataset([str(a), str(other)])
    assert str(a) in str(e.value) and str(other) in str(e.value)


def test_remote_mixture_equals_the_local_one_through_faults(pair):
    """Both members over http:// (one server injecting 503s): the same batches as the local mixture."""
    from support.httpserver import Faults, FaultyServer
    from support.resume import assert_same_batches

    from roboreel.reader import StreamOptions

    (_, a), (_, b) = pair
    kw = {"weights": [0.5, 0.5], "samples_per_epoch": 80, "seed": 3, "episode_pool_size": 3,
          "stream": StreamOptions(backoff_s=0.01)}

    def read(paths):
        return list(torch.utils.data.DataLoader(CompiledDataset(paths, **kw), batch_size=8, num_workers=2))

    local = read([str(a), str(b)])
    faults = Faults(unavailable=0.3, seed=1, path_prefix="/shards/", max_faults=4)
    with FaultyServer(a) as sa, FaultyServer(b, faults=faults) as sb:
        remote = read([sa.url, sb.url])
        injected = sb.faults_injected()
    assert sum(injected.values()) > 0
    assert_same_batches(remote, local)
