"""``roboreel lerobot-train``'s command line: every argument after the verb reaches lerobot-train untouched except
roboreel's own ``--roboreel.*`` options, which are taken out first (and refused by name when wrong), and without
LeRobot the command says how to get it and fails, while ``--help`` lists roboreel's own flags and how to install
LeRobot. (Training itself: tests/integration/.)"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from roboreel.cli import _split_passthrough
from roboreel.cli.lerobot_train import FLAG_NAMES
from roboreel.integrations.lerobot import lerobot_available
from roboreel.integrations.lerobot.options import LoaderOptions


def test_arguments_after_the_verb_are_passed_on_untouched():
    args = ["--policy.type=act", "-h", "--help", "-v", "--version", "compile"]
    assert _split_passthrough(["lerobot-train", *args]) == (["lerobot-train"], args)
    assert _split_passthrough(["-v", "lerobot-train", *args]) == (["-v", "lerobot-train"], args)
    assert _split_passthrough(["compile", "a", "lerobot-train"]) == (["compile", "a", "lerobot-train"], None)


@pytest.mark.skipif(lerobot_available()[0], reason="LeRobot is installed here")
def test_without_lerobot_it_says_how_to_get_it():
    proc = subprocess.run([sys.executable, "-m", "roboreel.cli", "lerobot-train", "--policy.type=act"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "pip install 'roboreel[lerobot]'" in proc.stderr and proc.stdout == ""


@pytest.mark.skipif(lerobot_available()[0], reason="LeRobot is installed here")
def test_help_without_lerobot_lists_roboreels_flags_and_how_to_install():
    proc = subprocess.run([sys.executable, "-m", "roboreel.cli", "lerobot-train", "--policy.type=act", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for field in dataclasses.fields(LoaderOptions):  # every flag LoaderOptions defines, with its help
        assert f"--roboreel.{FLAG_NAMES.get(field.name, field.name)}=" in proc.stdout
    assert "--roboreel.loader=stage|dataloader\n      stage (roboreel.loader: decode threads" in proc.stdout
    assert "LeRobot is not installed here" in proc.stdout
    assert "pip install 'roboreel[lerobot]'" in proc.stdout and "docs/lerobot.md" in proc.stdout


def test_roboreel_options_are_taken_out_before_lerobot_parses_the_rest():
    rest = ["--policy.type=act", "--batch_size=8", "--dataset.root=/x"]
    assert LoaderOptions.from_argv(rest) == (LoaderOptions(loader="stage", decode_threads=None), rest)
    argv = [rest[0], "--roboreel.loader=dataloader", rest[1], "--roboreel.decode_threads", "3", rest[2]]
    assert LoaderOptions.from_argv(argv) == (LoaderOptions(loader="dataloader", decode_threads=3), rest)
    assert LoaderOptions.from_argv(["--roboreel.mix_workers=true", *rest]) == (LoaderOptions(mix_workers=True), rest)


@pytest.mark.parametrize(("argv", "message"), [
    (["--roboreel.loader=fast"], "--roboreel.loader='fast': expected one of ['stage', 'dataloader']"),
    (["--roboreel.decode_threads=0"], "--roboreel.decode_threads must be an integer >= 1, got 0"),
    (["--roboreel.decode_threads=many"], "--roboreel.decode_threads must be an integer >= 1, got 'many'"),
    (["--roboreel.workers=2"], "unknown option --roboreel.workers"),
    (["--roboreel.loader"], "--roboreel.loader needs a value"),
    (["--roboreel.mix_workers=yes"], "--roboreel.mix_workers must be true or false, got 'yes'"),
])
def test_wrong_roboreel_options_are_refused_by_name(argv, message):
    with pytest.raises(ValueError) as e:
        LoaderOptions.from_argv(argv)
    assert message in str(e.value)


def test_a_wrong_loader_fails_before_lerobot_starts():
    proc = subprocess.run([sys.executable, "-m", "roboreel.cli", "lerobot-train", "--roboreel.loader=fast",
                           "--policy.type=act"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "roboreel lerobot-train: error: --roboreel.loader='fast': expected one of" in proc.stderr


def test_mixture_weights_are_parsed_and_checked():
    rest = ["--dataset.root=/a,/b", "--policy.type=act"]
    got = LoaderOptions.from_argv([rest[0], "--roboreel.weights=0.7,0.3", rest[1]])
    assert got == (LoaderOptions(weights=(0.7, 0.3)), rest)
    assert LoaderOptions.from_argv(["--roboreel.weights", "[1,2]"])[0].weights == (1.0, 2.0)
    with pytest.raises(ValueError, match="--roboreel.weights must be numbers separated by commas"):
        LoaderOptions.from_argv(["--roboreel.weights=0.7;0.3"])
