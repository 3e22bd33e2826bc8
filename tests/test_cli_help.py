"""Every verb's command line holds up for a new user: each option of each verb (and each ``roboreel bench`` mode)
has help text that ends with its default, each verb has a description, and the names are the API's (renamed
spellings are accepted, the old ones refused)."""

from __future__ import annotations

import argparse
import dataclasses
import re

import pytest

from roboreel.cli import build_parser
from roboreel.cli._help import HelpFormatter, says_default
from roboreel.cli.lerobot_train import roboreel_flags


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def _commands() -> dict[str, argparse.ArgumentParser]:
    """``{"synth": parser, ..., "bench read": parser, ...}``: every verb and every verb's subcommand."""
    found: dict[str, argparse.ArgumentParser] = {}

    def walk(prefix: str, parser: argparse.ArgumentParser) -> None:
        sub = _subparsers(parser)
        for name, child in (sub.choices.items() if sub else ()):
            found[f"{prefix}{name}"] = child
            walk(f"{prefix}{name} ", child)

    walk("", PARSER)
    return found


PARSER = build_parser()  # argparse keeps no state between parses: one parser serves every test
COMMANDS = _commands()


def test_the_walk_finds_every_verb_and_bench_mode():
    assert {"synth", "compile", "validate", "inspect", "doctor", "demo", "lerobot-train", "bench"} <= set(COMMANDS)
    assert {n for n in COMMANDS if n.startswith("bench ")} == {
        f"bench {m}" for m in ("read", "compile", "resize", "images", "soak", "scale")}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_option_has_help_that_shows_its_default(name):
    parser = COMMANDS[name]
    assert parser.description, f"roboreel {name} has no description"
    if name == "lerobot-train":  # its arguments are lerobot-train's; roboreel's own are checked below
        return
    assert parser.formatter_class is HelpFormatter, name
    formatter = parser._get_formatter()
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
            continue
        label = "/".join(action.option_strings) or action.dest
        assert action.help and action.help is not argparse.SUPPRESS, f"roboreel {name} {label}: no help text"
        shown = formatter._get_help_string(action)
        assert says_default(action) or "(default: " in shown, f"roboreel {name} {label}: default not shown"
    parser.format_help()  # every %(default)s and %% in the help texts renders


def test_lerobot_train_lists_every_roboreel_flag_with_help_and_default():
    from roboreel.cli.lerobot_train import FLAG_NAMES
    from roboreel.integrations.lerobot.options import LoaderOptions

    flags = roboreel_flags()
    assert [f.split("=")[0] for f, _ in flags] == [f"--roboreel.{FLAG_NAMES.get(f.name, f.name)}"
                                                   for f in dataclasses.fields(LoaderOptions)]
    assert flags[0][0] == "--roboreel.loader=stage|dataloader"
    for flag, text in flags:
        assert text and "default" in text, flag


RENAMED = [  # (argv with the new spelling, dest, value), per verb
    (["bench", "read", "c", "--episode-pool-size", "4"], "episode_pool_size", 4),
    (["bench", "read", "c", "--return-uint8"], "return_uint8", True),
    (["bench", "read", "c", "--prefetch-factor", "3"], "prefetch_factor", 3),
    (["bench", "read", "c", "--prefetch-batches", "5"], "prefetch_batches", 5),
    (["bench", "read", "c", "--warmup-batches", "1"], "warmup_batches", 1),
    (["bench", "read", "c", "--no-persistent-workers"], "persistent_workers", False),
    (["bench", "read", "c"], "persistent_workers", True),
    (["bench", "compile", "--workers", "1", "--unit", "file"], "unit", "file"),
    (["bench", "compile", "--psnr-stride", "0"], "psnr_stride", 0),
    (["bench", "resize", "s", "--size", "96x128"], "size", (96, 128)),
    (["bench", "images", "s", "--return-uint8"], "return_uint8", True),
    (["bench", "soak", "c", "--epochs", "7", "--warmup-epochs", "2"], "epochs", 7),
    (["bench", "soak", "c", "--idle-decoders-mb", "0"], "idle_decoders_mb", 0.0),
    (["bench", "scale", "--sizes", "10,20"], "sizes", "10,20"),
    (["synth", "o", "--gop", "4"], "gop", 4),
    (["synth", "o", "--codec", "hevc"], "codec", "hevc"),
    (["synth", "o", "--video-files-size-in-mb", "0.5"], "video_files_size_in_mb", 0.5),
    (["synth", "o", "--data-files-size-in-mb", "0.5"], "data_files_size_in_mb", 0.5),
    (["doctor", "--decode-device", "cuda:1"], "decode_device", "cuda:1"),
]


@pytest.mark.parametrize(("argv", "dest", "value"), RENAMED)
def test_renamed_options_are_accepted(argv, dest, value):
    assert getattr(PARSER.parse_args(argv), dest) == value


REMOVED = [
    ["bench", "c", "--source", "s"],  # no mode: bench needs one
    ["bench", "read", "c", "--pool-size", "4"],
    ["bench", "read", "c", "--uint8"],
    ["bench", "read", "c", "--prefetch", "2"],
    ["bench", "read", "c", "--warmup", "1"],
    ["bench", "read", "c", "--soak", "10"],
    ["bench", "read", "c", "--scale"],
    ["bench", "read", "c", "--compile"],
    ["bench", "read", "c", "--no-dataloading"],
    ["bench", "compile", "--compile-workers", "1"],
    ["bench", "compile", "--compile-unit", "file"],
    ["bench", "resize", "s", "--resize-bench", "96x128"],
    ["bench", "resize", "s"],  # --size is required
    ["bench", "images", "s", "--images-bench"],
    ["bench", "soak", "c", "--soak-warmup", "2"],
    ["bench", "scale", "--scale-sizes", "10"],
    ["synth", "o", "--g", "4"],
    ["synth", "o", "--codec", "libx265"],
    ["synth", "o", "--video-file-mb", "0.5"],
    ["synth", "o", "--data-file-mb", "0.5"],
    ["doctor", "--device", "cpu"],
    ["bench", "read", "c", "--decode-device", "gpu"],  # not a device: refused as doctor refuses it
]


@pytest.mark.parametrize("argv", REMOVED, ids=" ".join)
def test_old_spellings_are_refused(argv, capsys):
    with pytest.raises(SystemExit) as e:
        PARSER.parse_args(argv)
    assert e.value.code == 2


def test_scale_defaults_are_the_benchmarks_own():
    from roboreel.bench.scale import ScaleConfig
    from roboreel.cli.bench import scale

    d = ScaleConfig()
    assert (d.sizes, d.batch_size, d.num_workers) == (scale.SIZES, scale.BATCH_SIZE, scale.NUM_WORKERS)


def test_bench_options_build_the_run_config_by_api_name():
    from roboreel.bench.config import RunConfig
    from roboreel.cli.bench.options import run_config

    args = PARSER.parse_args(["bench", "read", "c", "--episode-pool-size", "4", "--return-uint8",
                                      "--prefetch-factor", "3", "--prefetch-batches", "5", "--warmup-batches", "1",
                                      "--no-persistent-workers", "--decode-threads", "2"])
    assert run_config(args) == RunConfig(episode_pool_size=4, return_uint8=True, prefetch_factor=3,
                                         prefetch_batches=5, warmup_batches=1, persistent_workers=False,
                                         decode_threads=2)


# -- every help text names only what exists --------------------------------------------------------------------


def _texts(parser: argparse.ArgumentParser) -> str:
    """A parser's own words, unwrapped: description, epilog, every option's help and every subcommand's summary."""
    parts = [parser.description or "", parser.epilog or ""]
    for action in parser._actions:
        if action.help and action.help is not argparse.SUPPRESS:
            parts.append(action.help)
        if isinstance(action, argparse._SubParsersAction):
            parts += [c.help or "" for c in action._choices_actions]
    return "\n".join(parts)


def _all_texts() -> dict[str, str]:
    """``{command: its help's words}`` for ``roboreel`` itself and every verb and subcommand."""
    from roboreel.cli.lerobot_train import help_text

    texts = {"": _texts(PARSER)} | {name: _texts(p) for name, p in COMMANDS.items()}
    texts["lerobot-train"] += "\n" + help_text(None)
    return texts


TEXTS = _all_texts()


def _definitions(text: str) -> list[tuple[str, str]]:
    """``[(name, meaning), ...]`` of a help text ``what, of: name = meaning; name = meaning; ...``."""
    listing = text.partition(": ")[2]
    return [(name, meaning) for name, _, meaning in (e.partition(" = ") for e in listing.split("; "))]


def _option(command: str, flag: str) -> argparse.Action:
    """The option ``flag`` of ``roboreel COMMAND``; its help shows its default (a list's words may not say it)."""
    action = next(a for a in COMMANDS[command]._actions if flag in a.option_strings)
    assert "(default: " in COMMANDS[command]._get_formatter()._get_help_string(action), (command, flag)
    return action


def test_bench_read_lists_exactly_the_readers_that_exist():
    from roboreel.bench.readers import READERS

    action = _option("bench read", "--readers")
    listed = [name for name, _ in _definitions(action.help)]
    assert listed == list(READERS), f"bench read --readers help lists {listed}, the registry has {list(READERS)}"
    assert set(action.default.split(",")) <= set(READERS), action.default


def test_bench_read_modes_are_the_codes_modes_with_their_windows():
    from roboreel.bench.readers import MODES, delta_timestamps

    action = _option("bench read", "--modes")
    defined = dict(_definitions(action.help))
    assert list(defined) == list(MODES), f"bench read --modes help lists {list(defined)}, the code has {MODES}"
    assert set(action.default.split(",")) <= set(MODES), action.default
    for mode, meaning in defined.items():  # what each mode reads: its windows' keys and lengths, or none
        windows = delta_timestamps(mode) or {}
        assert ("window" in meaning) == bool(windows), (mode, meaning)
        for key, offsets in windows.items():
            assert key in meaning and str(len(offsets)) in meaning, (mode, meaning, key, len(offsets))
    words = re.findall(r"\b(\w+) = ", TEXTS["bench read"])  # the modes and readers are defined only there
    assert sorted(words) == sorted([*MODES, *(n for n, _ in _definitions(_option("bench read", "--readers").help))])


def _known_names() -> set[str]:
    """Every name a help text may use: the API's keywords, option fields and methods, the benchmarks' readers and
    modes, the CLI's own options, and the names of the other tools a help text attributes to them."""
    import inspect

    import torch.utils.data

    from roboreel import CompiledDataset, DecodeOptions, StreamOptions
    from roboreel.bench.readers import MODES, READERS
    from roboreel.compile import CompileSettings
    from roboreel.integrations.lerobot.options import LoaderOptions
    from roboreel.reader.loader import DeviceLoader, loader
    from roboreel.reader.mixture import CanonicalOptions, MixtureDataset, build_mixture
    from roboreel.reader.mixture._normalize import NORM_MODES
    from roboreel.synth import SynthConfig
    from roboreel.synth.tables import LANGUAGE_FEATURES

    names = {*READERS, *MODES, *NORM_MODES, *LANGUAGE_FEATURES}
    for fn in (CompiledDataset.__init__, build_mixture, DeviceLoader.__init__, loader, torch.utils.data.DataLoader):
        names |= set(inspect.signature(fn).parameters)
    for cls in (DecodeOptions, StreamOptions, LoaderOptions, CanonicalOptions, SynthConfig, CompileSettings):
        names |= {f.name for f in dataclasses.fields(cls)}
    for cls in (CompiledDataset, MixtureDataset, DeviceLoader):
        names |= {n for n in dir(cls) if not n.startswith("_")}
    # Other tools' names, as the help texts attribute them: LeRobot's writer and torchvision's Resize.
    return names | {"use_videos", "antialias"}


KNOWN = _known_names()


@pytest.mark.parametrize("name", sorted(TEXTS), ids=lambda n: n or "roboreel")
def test_help_names_only_keywords_and_fields_that_exist(name):
    from roboreel import DecodeOptions, StreamOptions

    text = TEXTS[name]
    fields = {c.__name__: {f.name for f in dataclasses.fields(c)} for c in (DecodeOptions, StreamOptions)}
    for cls, field in re.findall(r"\b(DecodeOptions|StreamOptions)(?:\.|\()(\w+)", text):
        assert field in fields[cls], f"roboreel {name} --help: {cls} has no field {field!r}"
    snake = set(re.findall(r"(?<![\w./-])([A-Za-z]\w*_\w*)", text))  # snake_case names (keywords, keys, fields)
    keywords = set(re.findall(r"(?<![\w.-])([a-z_]\w*)=", text))  # name=value
    unknown = sorted((snake | keywords) - KNOWN)
    assert not unknown, f"roboreel {name} --help names {unknown}: no such keyword, field or name in the code"


def test_help_names_only_options_that_exist():
    from roboreel.integrations.lerobot.options import LoaderOptions

    flags = {s for p in [PARSER, *COMMANDS.values()] for a in p._actions for s in a.option_strings}
    for name, text in TEXTS.items():
        for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)(?![\w.-])", text):
            assert flag in flags, f"roboreel {name} --help names {flag}: no command has it"
        for option in re.findall(r"--roboreel\.(\w+)", text):
            if option == "NAME":
                continue
            try:
                LoaderOptions.from_argv([f"--roboreel.{option}=1"])
            except ValueError as e:
                assert not str(e).startswith("unknown option"), f"roboreel {name} --help: {e}"
