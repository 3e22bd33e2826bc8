"""The command line used wrongly: a file where a directory belongs, OUT holding SRC, settings out of range. Each is
one line naming the path, exit 2, no traceback, and nothing of the user's removed."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from roboreel.cli import main
from roboreel.compile import CompileSettings


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _one_line_error(capsys, verb: str) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith(f"roboreel {verb}: error: ")]
    assert len(lines) == 1, err
    return lines[0]


def test_compile_of_a_file_given_as_src(tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("not a dataset\n")
    assert main(["compile", str(f), str(tmp_path / "out"), "--no-progress"]) == 2
    assert "has no meta/info.json" in _one_line_error(capsys, "compile")
    assert not (tmp_path / "out").exists()


def test_compile_into_a_path_under_a_file(small_source, tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("keep\n")
    assert main(["compile", str(small_source), str(f / "out"), "--no-progress"]) == 2
    assert str(f / "out") in _one_line_error(capsys, "compile")
    assert f.read_text() == "keep\n"


def test_finalize_of_a_file(tmp_path, capsys):
    f = tmp_path / "notes.txt"
    f.write_text("keep\n")
    assert main(["compile", "--finalize", str(f)]) == 2
    assert str(f) in _one_line_error(capsys, "compile")
    assert f.read_text() == "keep\n"


def test_overwrite_never_removes_a_source_inside_out(small_source, small_compiled, tmp_path, capsys):
    """OUT holds a compile (so --overwrite may replace it) and, inside it, the source: refused before anything is
    removed. It used to delete OUT with the source in it, then fail on the missing source files."""
    out = tmp_path / "out"
    shutil.copytree(small_compiled, out)
    shutil.copytree(small_source, out / "src")
    before = _tree(out)
    for src, dest in [(out / "src", out), (out / "src", out / "src")]:
        assert main(["compile", str(src), str(dest), "--overwrite", "--no-progress"]) == 2
        assert "is SRC or a directory holding it" in _one_line_error(capsys, "compile")
        assert _tree(out) == before


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_min_psnr_must_be_finite(small_source, tmp_path, capsys, value):
    """Refused up front; NaN and infinity used to pass the check and stop the compile mid-way."""
    with pytest.raises(ValueError, match="min_psnr"):
        CompileSettings(min_psnr=float(value))
    assert main(["compile", str(small_source), str(tmp_path / "out"), "--min-psnr", value, "--no-progress"]) == 2
    assert "min_psnr must be a finite" in _one_line_error(capsys, "compile")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("verb", [["inspect"], ["bench", "read", "--no-ceiling"]])
@pytest.mark.parametrize(("value", "says"), [("1,x", "'x' in '1,x' is not a number"),
                                             ("1,-2", "'-2' in '1,-2': weights are finite and >= 0"),
                                             ("nan,1", "'nan' in 'nan,1': weights are finite")])
def test_bad_mixture_weights_name_the_flag(small_compiled, capsys, verb, value, says):
    """Refused by the parser, naming --weights; they were a bare "could not convert string to float"."""
    mixture = f"{small_compiled},{small_compiled}"
    with pytest.raises(SystemExit) as e:
        main([*verb, mixture, "--weights", value])
    assert e.value.code == 2
    line = _one_line_error(capsys, " ".join(v for v in verb if not v.startswith("--")))
    assert f"argument --weights: {says}" in line


def test_inspect_of_one_path_with_a_trailing_comma(small_compiled, capsys):
    assert main(["inspect", str(small_compiled), "--json"]) == 0
    one = capsys.readouterr().out
    assert main(["inspect", f"{small_compiled},", "--json"]) == 0
    assert capsys.readouterr().out == one


def test_compile_of_a_compiled_output_says_so(small_compiled, tmp_path, capsys):
    """A compiled output's meta/ reads as LeRobot v3, but its frames are in shards: before, compile failed on the
    first missing mp4 ("missing file videos/..."), which reads like a broken source."""
    before = _tree(small_compiled)
    assert main(["compile", str(small_compiled), str(tmp_path / "out"), "--no-progress"]) == 2
    assert "is a roboreel compiled output, not a LeRobot v3 source: it is compiled already" in \
        _one_line_error(capsys, "compile")
    assert not (tmp_path / "out").exists() and _tree(small_compiled) == before


@pytest.mark.parametrize("killed", ["before-finalize", "during-finalize"])
def test_inspect_and_doctor_of_an_unfinished_compile_say_so(small_compiled, tmp_path, capsys, killed):
    """As validate does (manifest-missing), not "not a dataset", nor a LeRobot source whose videos are missing."""
    out = tmp_path / "out"
    shutil.copytree(small_compiled, out)
    (out / "roboreel.json").unlink()  # finalize writes meta/, then the manifest
    if killed == "before-finalize":
        shutil.rmtree(out / "meta")
    assert main(["inspect", str(out)]) == 2
    assert "compile has not finished" in _one_line_error(capsys, "inspect")
    assert main(["doctor", str(out)]) == 2  # doctor says it in its verdict
    captured = capsys.readouterr()
    assert "VERDICT: cannot read" in captured.out and "compile has not finished" in captured.out
    assert "Traceback" not in captured.err


def test_ctrl_c_while_the_verbs_load_is_one_line(monkeypatch, capsys):
    """Ctrl-C in the first second (the verbs' modules loading) printed a KeyboardInterrupt traceback."""
    import roboreel.cli as cli

    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["validate", "."]) == 130
    assert capsys.readouterr().err == "interrupted\n"
