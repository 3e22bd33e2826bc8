"""Episodes kept across epochs (reader/plan/_episode_cache.py): a small dataset is read once per process, and its
later epochs, taken from memory, equal epochs read from the shards bit for bit: the DataLoader and
``roboreel.loader``, 0 and 2 workers, windows, a mixture whose cameras are renamed and whose short member repeats.
"""

from __future__ import annotations

import pickle

import pytest
from support.datasets import compiled_pair
from support.resume import assert_same_batches
from torch.utils.data import DataLoader

import roboreel
from roboreel.reader import CompiledDataset
from roboreel.reader.options import StreamOptions
from roboreel.reader.plan._episode_cache import AUTO_KEEP_BYTES, EpisodeCache, auto_budget

pytestmark = pytest.mark.filterwarnings("ignore:.set_vital. is deprecated", "ignore:This DataLoader will create")
WINDOWS = {"action": [-0.1, 0.0, 0.2], "observation.images.top": [-0.1, -0.05, 0.0],
           "observation.images.wrist": [0.0, 0.05]}
OFF = StreamOptions(keep_episodes_mb=0)
EPOCHS = (0, 1, 2)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """SMALL (64x64, 8 episodes of 12-30 frames, 2 cameras), 2 episodes per shard."""
    return compiled_pair(tmp_path_factory, episodes_per_shard=2)[1]


def _epochs(ds, *, num_workers: int, loader: bool, batch_size: int = 5) -> list[dict]:
    """Every batch of EPOCHS, ``set_epoch`` before each, workers kept across them."""
    if loader:
        it = roboreel.loader(ds, batch_size=batch_size, num_workers=num_workers)
    else:
        it = DataLoader(ds, batch_size=batch_size, num_workers=num_workers, persistent_workers=num_workers > 0)
    out = []
    for e in EPOCHS:
        ds.set_epoch(e)
        out += list(it)
    if loader:
        it.close()
    return out


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("loader", [False, True], ids=["dataloader", "loader"])
def test_kept_episodes_give_the_same_epochs_and_are_not_read_again(compiled, num_workers, loader):
    kw = dict(seed=3, return_uint8=True, delta_timestamps=WINDOWS, episode_pool_size=3)
    kept, plain = CompiledDataset(str(compiled), **kw), CompiledDataset(str(compiled), stream=OFF, **kw)
    assert kept.episode_cache.budget > 0 and plain.episode_cache.budget == 0
    got = _epochs(kept, num_workers=num_workers, loader=loader)
    want = _epochs(plain, num_workers=num_workers, loader=loader)
    assert len(got) == len(want) > 0
    assert_same_batches(got, want)
    st, ref = kept.stats(), plain.stats()
    n = kept.num_episodes
    assert ref["episodes_kept"] == 0 and st["samples"] == ref["samples"] == len(EPOCHS) * kept.num_frames
    # what the plain run read, the kept one read or took from memory; an episode cut between two workers is
    # read (or kept) by both
    assert st["episodes_read"] + st["episodes_kept"] == ref["episodes_read"]
    if num_workers == 0:
        assert st["episodes_read"] == n and st["episodes_kept"] == (len(EPOCHS) - 1) * n
        assert len(kept.episode_cache) == n and 0 < kept.episode_cache.nbytes <= kept.episode_cache.budget
    else:  # each worker keeps what it read in its own process; the main process read nothing
        assert st["episodes_kept"] > 0 and len(kept.episode_cache) == 0


def test_a_budget_keeps_what_fits_first_and_reads_the_rest(compiled):
    whole = CompiledDataset(str(compiled), seed=3)
    list(whole)
    n, total = len(whole.episode_cache), whole.episode_cache.nbytes
    assert n == whole.num_episodes
    part = CompiledDataset(str(compiled), seed=3, stream=StreamOptions(keep_episodes_mb=total / 2 / 2**20))
    plain = CompiledDataset(str(compiled), seed=3, stream=OFF)
    for e in EPOCHS:
        part.set_epoch(e)
        plain.set_epoch(e)
        assert_same_batches(list(DataLoader(part, batch_size=4)), list(DataLoader(plain, batch_size=4)))
    cache = part.episode_cache
    assert 0 < len(cache) < n and cache.nbytes <= cache.budget
    st = part.stats()
    assert st["episodes_read"] > n and st["episodes_read"] + st["episodes_kept"] == len(EPOCHS) * n


def test_automatic_budget_and_options():
    assert auto_budget(AUTO_KEEP_BYTES) == 2 * AUTO_KEEP_BYTES and auto_budget(AUTO_KEEP_BYTES + 1) == 0
    cache = EpisodeCache(1234)
    copy = pickle.loads(pickle.dumps(cache))  # a spawned worker's copy: empty, same budget
    assert isinstance(copy, EpisodeCache) and copy.budget == 1234 and len(copy) == 0
    with pytest.raises(ValueError, match="keep_episodes_mb"):
        StreamOptions(keep_episodes_mb=-1)


def test_a_dataset_larger_than_the_automatic_bound_keeps_nothing(compiled, monkeypatch):
    import roboreel.reader.plan._episode_cache as ec

    monkeypatch.setattr(ec, "AUTO_KEEP_BYTES", 1024)  # the fixture's shards are larger than this
    from roboreel.reader import dataset as dataset_module

    monkeypatch.setattr(dataset_module, "auto_budget", ec.auto_budget)
    ds = CompiledDataset(str(compiled), seed=3)
    assert ds.episode_cache.budget == 0
    for e in EPOCHS[:2]:
        ds.set_epoch(e)
        list(ds)
    assert ds.stats()["episodes_kept"] == 0 and len(ds.episode_cache) == 0


@pytest.mark.parametrize("loader", [False, True], ids=["dataloader", "loader"])
def test_a_mixture_with_renamed_cameras_and_a_repeating_member(tmp_path_factory, loader):
    """A mixture renames a member's cameras (on copies of its clips) and reads its short member more than once an
    epoch (each pass its own clip stream): kept episodes give the same epochs as episodes read afresh, and stay as
    they were made."""
    front = "observation.images.front"
    a = compiled_pair(tmp_path_factory, episodes_per_shard=2)[1]
    b = compiled_pair(tmp_path_factory, episodes_per_shard=1, episodes=3, fps=10, cameras=(front,), state_dim=4,
                      action_dim=3, seed=5, min_length=10, max_length=16)[1]

    def make(**kw):
        return CompiledDataset([str(a), str(b)], remap=[None, {front: "observation.images.top"}], pad="max",
                               weights=[0.5, 0.5], samples_per_epoch=120, seed=5, episode_pool_size=3,
                               return_uint8=True, **kw)

    kept, plain = make(), make(stream=OFF)
    got = _epochs(kept, num_workers=0, loader=loader, batch_size=8)
    want = _epochs(plain, num_workers=0, loader=loader, batch_size=8)
    assert len(got) == len(want) == len(EPOCHS) * 15
    assert_same_batches(got, want)
    assert "observation.images.top" in got[0] and kept.stats()["episodes_kept"] > 0
    # the renamed clips were copies: the kept episodes' own clips still hold the member's camera names
    episodes = list(kept.members[1].episode_cache._episodes.values())
    assert episodes and all(c.camera == cam == front for ep in episodes for cam, c in ep.clips.items())
