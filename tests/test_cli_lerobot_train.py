"""``roboreel lerobot-train``'s command line: every argument after the verb reaches lerobot-train untouched, and
without LeRobot the command says how to get it and fails. (Training itself: tests/integration/.)"""

from __future__ import annotations

import subprocess
import sys

import pytest

from roboreel.cli import _split_passthrough
from roboreel.integrations.lerobot import lerobot_available


def test_arguments_after_the_verb_are_passed_on_untouched():
    args = ["--policy.type=act", "-h", "--help", "-v", "--version", "compile"]
    assert _split_passthrough(["lerobot-train", *args]) == (["lerobot-train"], args)
    assert _split_passthrough(["-v", "lerobot-train", *args]) == (["-v", "lerobot-train"], args)
    assert _split_passthrough(["compile", "a", "lerobot-train"]) == (["compile", "a", "lerobot-train"], None)


@pytest.mark.skipif(lerobot_available()[0], reason="LeRobot is installed here")
def test_without_lerobot_it_says_how_to_get_it():
    proc = subprocess.run([sys.executable, "-m", "roboreel.cli", "lerobot-train", "--policy.type=act", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "pip install 'roboreel[lerobot]'" in proc.stderr and proc.stdout == ""
