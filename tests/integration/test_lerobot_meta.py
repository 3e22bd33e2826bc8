"""``CompiledDataset.meta`` is what LeRobot itself reads from the source: ``LeRobotDatasetMetadata`` field for
field, and ``make_policy`` / ``make_pre_post_processors`` (ACT and diffusion) build the same policy features,
delta timestamps and normalisation stats from it."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("lerobot.policies.factory", reason="needs the real LeRobot (.ci/ci_lerobot.sh VENV)")

from lerobot.datasets import LeRobotDatasetMetadata  # noqa: E402
from lerobot.datasets.factory import resolve_delta_timestamps  # noqa: E402
from lerobot.policies import make_policy, make_pre_post_processors  # noqa: E402
from lerobot.policies.act.configuration_act import ACTConfig  # noqa: E402
from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig  # noqa: E402
from lerobot_support import REPO_ID, lerobot_pair_fixture  # noqa: E402, F401

from roboreel.reader import CompiledDataset  # noqa: E402


def _assert_same_stats(got, want):
    assert list(got) == list(want)
    for key in want:
        assert list(got[key]) == list(want[key]), key
        for name, w in want[key].items():
            g = got[key][name]
            assert type(g) is type(w) and g.dtype == w.dtype and g.shape == w.shape, (key, name)
            assert np.array_equal(g, w), (key, name)


def test_meta_equals_lerobots_metadata_of_the_source(lerobot_pair):
    source, compiled = lerobot_pair
    want = LeRobotDatasetMetadata(REPO_ID, root=source)
    ds = CompiledDataset(str(compiled))
    got = ds.meta
    for attr in ("fps", "robot_type", "total_episodes", "total_frames", "total_tasks", "camera_keys", "video_keys",
                 "image_keys", "depth_keys", "has_language_columns", "names", "shapes"):
        assert getattr(got, attr) == getattr(want, attr), attr
    assert list(got.features) == list(want.features)
    for key, feature in want.features.items():
        mine = got.features[key]
        if key in want.video_keys:  # the clip's codec and encoder settings are the compiled ones
            mine, feature = {k: v for k, v in mine.items() if k != "info"}, {k: v for k, v in feature.items() if k != "info"}
        assert mine == feature, key
    # LeRobot's own reading of a camera's encoder keys (what its editing and recording tools rebuild an encoder
    # from, checked against PyAV's encoders) gives the x265 encode that made the compiled clips
    from lerobot.configs.video import encoder_config_from_video_info

    settings = ds.manifest.settings
    for key in want.video_keys:
        cfg = encoder_config_from_video_info(got.features[key]["info"])
        assert (cfg.vcodec, cfg.g, cfg.crf, cfg.preset, cfg.fast_decode) == (
            "hevc", settings["gop"], settings["crf"], settings["preset"], 0), key
        assert cfg.extra_options == {"x265-params": settings["x265_params"][key]}, key
    _assert_same_stats(got.stats, want.stats)
    import pandas as pd

    pd.testing.assert_frame_equal(got.tasks, want.tasks)
    for column in ("episode_index", "tasks", "length", "dataset_from_index", "dataset_to_index"):
        assert got.episodes[column] == list(want.episodes[column]), column
    assert got.episodes[2]["tasks"] == want.episodes[2]["tasks"]
    assert (ds.num_frames, ds.num_episodes) == (want.total_frames, want.total_episodes)


@pytest.mark.parametrize("make_cfg", [
    lambda: ACTConfig(device="cpu", pretrained_backbone_weights=None, dim_model=32, n_heads=2, dim_feedforward=64,
                      n_encoder_layers=1, n_decoder_layers=1, chunk_size=4, n_action_steps=4, latent_dim=8),
    lambda: DiffusionConfig(device="cpu", pretrained_backbone_weights=None, crop_shape=(40, 56), down_dims=(16, 32),
                            n_obs_steps=2, horizon=8, n_action_steps=4, diffusion_step_embed_dim=16,
                            spatial_softmax_num_keypoints=8),
], ids=["act", "diffusion"])
def test_policies_and_processors_built_from_meta_equal_lerobots(lerobot_pair, make_cfg):
    source, compiled = lerobot_pair
    want_meta = LeRobotDatasetMetadata(REPO_ID, root=source)
    meta = CompiledDataset(str(compiled)).meta
    cfg, want_cfg = make_cfg(), make_cfg()
    if cfg.type == "diffusion":
        pytest.importorskip("diffusers", reason="LeRobot's diffusion policy needs lerobot[diffusion]")
    policy, want_policy = make_policy(cfg, ds_meta=meta), make_policy(want_cfg, ds_meta=want_meta)
    assert cfg.input_features == want_cfg.input_features and cfg.output_features == want_cfg.output_features
    assert cfg.input_features and cfg.output_features
    assert resolve_delta_timestamps(cfg, meta) == resolve_delta_timestamps(want_cfg, want_meta)
    mine, theirs = policy.state_dict(), want_policy.state_dict()
    assert {k: v.shape for k, v in mine.items()} == {k: v.shape for k, v in theirs.items()}

    pre, post = make_pre_post_processors(cfg, dataset_stats=meta.stats)
    want_pre, want_post = make_pre_post_processors(want_cfg, dataset_stats=want_meta.stats)
    for got_pipe, want_pipe in ((pre, want_pre), (post, want_post)):
        assert [type(s).__name__ for s in got_pipe.steps] == [type(s).__name__ for s in want_pipe.steps]
        for g, w in zip(got_pipe.steps, want_pipe.steps, strict=True):
            if hasattr(w, "stats"):
                _assert_same_stats(g.stats, w.stats)
                gs, ws = g.state_dict(), w.state_dict()
                assert list(gs) == list(ws) and all(np.array_equal(gs[k].numpy(), ws[k].numpy()) for k in ws)


def test_mixture_stats_are_lerobots_aggregate_stats(lerobot_pair):
    """A mixture's meta.stats is LeRobot's own ``aggregate_stats`` of its members' stats (here: one dataset twice
    and with one member's counts, means and stds changed, so the pooled variance term is exercised)."""
    from lerobot.datasets.compute_stats import aggregate_stats

    from roboreel.formats.merge import aggregate_stats as ours

    _, compiled = lerobot_pair
    a = CompiledDataset(str(compiled)).meta.stats
    b = {k: {n: (v * 3 + 1 if n in ("mean", "count") else v * 2) for n, v in s.items()} for k, s in a.items()}
    want = aggregate_stats([a, b])
    got = ours(["a", "b"], [a, b], list(a))
    assert sorted(got) == sorted(want)
    for key in want:
        assert sorted(got[key]) == sorted(want[key]), key
        for name in want[key]:
            assert np.allclose(got[key][name], want[key][name], rtol=1e-12, atol=0), (key, name)
    mixed = CompiledDataset([str(compiled), str(compiled)]).meta
    assert mixed.stats["action"]["count"][0] == 2 * a["action"]["count"][0]
