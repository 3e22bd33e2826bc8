"""The bad-input catalogue: every kind of damage is built here on a copy of a real synthetic dataset
(AV1 mp4s, parquet, tar shards), then compile, validate and the readers must each name the bad file and episode,
exit with the documented code, and leave nothing in OUT that a later step would trust.

docs/reliability.md lists the same catalogue with what the user sees for each kind.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.settings import FAST

from roboreel.bench.reference import ReferenceDataset
from roboreel.cli import main
from roboreel.compile import compile_dataset
from roboreel.formats.errors import RoboreelError, SourceError
from roboreel.formats.lerobot_v3 import LeRobotSource
from roboreel.formats.manifest import load_manifest
from roboreel.formats.shard import rows_digest
from roboreel.reader import CompiledDataset, StreamOptions
from roboreel.synth import read
from roboreel.validate import validate

from . import damage as D
from .trees import assert_same_tree, temp_files

TEST = FAST
CLI_COMPILE = ["--workers", "1", "--no-progress", "--preset", "ultrafast", "--episodes-per-shard", "2"]



@dataclass(frozen=True)
class SourceCase:
    """One kind of bad source and what each tool must do with it."""

    damage: Callable[[Path], D.Fault]
    compile: str | None  # regex the compile error must match; None: a legal layout compile must accept
    codes: frozenset[str]  # every error/fatal code validate reports, exactly
    exit: int = 1  # validate's exit code
    warns: frozenset[str] = frozenset()  # warning codes validate must report (a legal layout's advice)
    deep: bool = False  # validate needs --deep (decode every frame) to see it
    reference: bool = True  # True: ReferenceDataset raises naming file and episode; False: it reads correctly
    xfail: dict[str, str] = field(default_factory=dict)  # tool -> why it is known to fail


SOURCE_CASES = {
    "truncated-mp4": SourceCase(D.truncated_mp4, r"cannot open video", frozenset({"video-unreadable"})),
    # the decoder either rejects the damaged packets or drops their frames, depending on its threading
    "garbage-mid-mp4": SourceCase(D.garbage_mid_mp4, r"cannot decode video|video skips frames",
                                  frozenset({"video-unreadable"}), deep=True),
    "video-shorter-than-span": SourceCase(D.video_shorter_than_span, r"shorter than its span",
                                          frozenset({"video-too-short"})),
    "video-fps-mismatch": SourceCase(D.video_fps_mismatch,
                                     r"video skips frames|episode frame \d+ is at .* ms from its timestamp",
                                     frozenset({"video-fps-mismatch"})),
    "info-fps-mismatch": SourceCase(D.info_fps_mismatch, r"holds 42\.00 frames at 40 fps, length is 21",
                                    frozenset({"video-span-mismatch", "video-fps-mismatch", "video-too-short",
                                               "timestamp-mismatch"})),
    "missing-video": SourceCase(D.missing_video, r"missing", frozenset({"video-missing"})),
    "missing-data-parquet": SourceCase(D.missing_data_parquet, r"missing file", frozenset({"data-file-missing"}),
                                       ),
    "parquet-missing-column": SourceCase(D.parquet_missing_column, r"lacks columns \['action'\]",
                                         frozenset({"data-columns-missing"})),
    "meta-range-gap": SourceCase(D.meta_range_gap, r"dataset_from_index=64 but episode 2 ends at 59",
                                 frozenset({"episode-index-mismatch"})),
    "meta-range-shifted": SourceCase(D.meta_range_shifted, r"rows are not frames 5\.\.25 in order",
                                     frozenset({"episode-index-mismatch"})),
    "timestamp-off": SourceCase(D.timestamp_off, r"frame_index 5 has timestamp 0\.251000s, not frame_index / fps",
                                frozenset({"timestamp-mismatch"})),
    "episode-split-rowgroups": SourceCase(D.episode_split_rowgroups, None, frozenset(), exit=0,
                                          warns=frozenset({"episode-split-rowgroups"}), reference=False),
    "several-episodes-per-rowgroup": SourceCase(D.several_episodes_per_rowgroup, None, frozenset(), exit=0,
                                                warns=frozenset({"rowgroup-multi-episode"}), reference=False),
    "unsupported-codebase-version": SourceCase(D.unsupported_version, r"codebase_version 'v2\.1'.*convert_dataset_v21_to_v30",
                                               frozenset({"version-unsupported"}), exit=2),
    "info-not-json": SourceCase(D.info_not_json, r"not valid JSON", frozenset({"info-unreadable"}), exit=2),
}


def _params(tool: str, cases: dict | None = None) -> list:
    cases = SOURCE_CASES if cases is None else cases
    return [pytest.param(name, id=name, marks=[pytest.mark.xfail(strict=True, reason=c.xfail[tool])]
                         if tool in c.xfail else []) for name, c in cases.items()]


def names_fault(text: str, fault: D.Fault) -> bool:
    """``text`` names one of the fault's files and, when it has episodes, one of them as "episode N"."""
    if not any(f in text for f in fault.files):
        return False
    return not fault.episodes or re.search(rf"episode ({'|'.join(map(str, fault.episodes))})\b", text) is not None


def finding_names_fault(f, fault: D.Fault) -> bool:
    """A validate finding names one of the fault's files (or a directory holding it) and one of its episodes."""
    if f.file is None or not any(f.file == x or x.startswith(f.file + "/") for x in fault.files):
        return False
    return not fault.episodes or f.episode in fault.episodes or bool(set(f.episodes or ()) & set(fault.episodes))


def error_codes(report) -> set[str]:
    return {f.code for f in report.findings if f.severity in ("error", "fatal")}


# -- sources ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", _params("compile", {n: c for n, c in SOURCE_CASES.items() if c.compile}))
def test_compile_names_file_and_episode_and_leaves_nothing(name, small_source, copy_of, tmp_path, capsys):
    case = SOURCE_CASES[name]
    root = copy_of(small_source, "src")
    fault = case.damage(root)
    out = tmp_path / "out"
    with pytest.raises(SourceError) as err:
        compile_dataset(str(root), str(out), settings=TEST)
    message = str(err.value)
    assert re.search(case.compile, message), message
    assert names_fault(message, fault), (message, fault)
    if fault.episodes:
        assert err.value.episode in fault.episodes and err.value.file in fault.files
    assert not out.exists()  # a failed first compile removes OUT: nothing half-written to trust later
    capsys.readouterr()
    assert main(["compile", str(root), str(out), *CLI_COMPILE]) == 2
    stderr = capsys.readouterr().err.strip().splitlines()
    assert len(stderr) == 1 and stderr[0].startswith("roboreel compile: error: ") and names_fault(stderr[0], fault)
    assert not out.exists()


@pytest.mark.parametrize("name", [n for n, c in SOURCE_CASES.items() if c.compile is None])
def test_legal_layouts_compile_to_the_same_output(name, small_source, small_compiled, copy_of, tmp_path):
    """Row-group layouts other than one per episode are legal LeRobot v3: compile rewrites them, and the output
    is byte-identical to compiling the original (only the source path recorded in two files differs)."""
    root = copy_of(small_source, "src")
    SOURCE_CASES[name].damage(root)
    out = tmp_path / "out"
    assert compile_dataset(str(root), str(out), settings=TEST).finalized
    assert_same_tree(out, small_compiled, ignore_source=True)
    src = LeRobotSource(str(root))
    m = load_manifest(str(out))
    assert [e.rows_sha256 for e in m.episodes] == [rows_digest(src.episode_rows(e)) for e in src.episodes]
    assert validate(str(out)).exit_code == 0


@pytest.mark.parametrize("name", _params("validate"))
def test_validate_reports_file_and_episode(name, small_source, copy_of, capsys):
    case = SOURCE_CASES[name]
    root = copy_of(small_source, "src")
    fault = case.damage(root)
    report = validate(str(root), deep=case.deep)
    assert (report.exit_code, error_codes(report)) == (case.exit, set(case.codes)), report.to_text()
    for code in case.codes | case.warns:
        found = [f for f in report.findings if f.code == code]
        assert any(finding_names_fault(f, fault) for f in found), (code, found, fault)
    args = ["validate", str(root), "--json", *(["--deep"] if case.deep else [])]
    capsys.readouterr()
    assert main(args) == case.exit
    if case.deep:  # the default (demux only) pass reads every packet but decodes none
        assert validate(str(root)).exit_code == 0


@pytest.mark.parametrize("name", _params("reference"))
def test_reference_reader_names_file_and_episode(name, small_source, copy_of):
    case = SOURCE_CASES[name]
    root = copy_of(small_source, "src")
    fault = case.damage(root)

    def read_affected() -> int:
        ds = ReferenceDataset(str(root))
        n = 0
        for ep in ds.episodes:
            if ep.index in fault.episodes or not fault.episodes:
                for i in range(ep.from_index, ep.to_index):
                    sample = ds[ds.position(i)]
                    code = read(sample["observation.images.top"])
                    assert (code.index, code.episode) == (i, ep.index)  # never a wrong frame
                    n += 1
        return n

    if not case.reference:
        assert read_affected() > 0
        return
    with pytest.raises(RoboreelError) as err:
        read_affected()
    assert names_fault(str(err.value), fault), (str(err.value), fault)


# -- compiled -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CompiledCase:
    """One kind of damaged compiled dataset and what each tool must do with it."""

    damage: Callable[[Path], D.Fault]
    codes: frozenset[str]  # every error/fatal code validate reports, exactly
    reader: str  # regex the reader's error must match
    exit: int = 1
    repaired: bool = True  # rerunning compile into the damaged OUT restores the exact output
    xfail: dict[str, str] = field(default_factory=dict)


COMPILED_CASES = {
    "truncated-tar-shard": CompiledCase(D.truncated_shard,
                                        frozenset({"shard-size-mismatch", "shard-truncated", "record-missing"}),
                                        r"stream ended at byte \d+, before byte \d+"),
    "missing-shard": CompiledCase(D.missing_shard, frozenset({"shard-missing"}), r"No such file"),
    "tar-member-missing": CompiledCase(D.tar_member_missing, frozenset({"shard-size-mismatch", "member-missing"}),
                                       r"shard ended without episodes \[1\]"),
    "manifest-checksum-mismatch": CompiledCase(D.shard_bytes_flipped,
                                               frozenset({"member-checksum-mismatch", "shard-checksum-mismatch"}),
                                               r"fails its sha256 check"),
    "manifest-newer-version": CompiledCase(D.manifest_newer_version, frozenset({"manifest-version"}),
                                           r"format_version 3 is not supported.*upgrade roboreel", exit=2),
    "manifest-not-json": CompiledCase(D.manifest_not_json, frozenset({"manifest-unreadable"}),
                                      r"manifest is not valid JSON", exit=2),
}


@pytest.mark.parametrize("name", _params("validate", COMPILED_CASES))
def test_validate_reports_damaged_compiled(name, small_compiled, copy_of, capsys):
    case = COMPILED_CASES[name]
    root = copy_of(small_compiled, "out")
    fault = case.damage(root)
    report = validate(str(root))
    assert (report.exit_code, error_codes(report)) == (case.exit, set(case.codes)), report.to_text()
    for code in case.codes:
        found = [f for f in report.findings if f.code == code]
        # shard-level findings (size, sha256, truncation) name the shard; record-level ones also the episode
        assert any(finding_names_fault(f, D.Fault(fault.files, ())) for f in found), (code, found)
    if fault.episodes:
        assert any(finding_names_fault(f, fault) for f in report.findings), report.to_text()
    capsys.readouterr()
    assert main(["validate", str(root), "--json"]) == case.exit


@pytest.mark.parametrize("name", _params("reader", COMPILED_CASES))
def test_reader_fails_loudly_never_short(name, small_compiled, copy_of):
    """The reader raises naming the shard (and episode) and never yields a sample of a damaged episode: an
    epoch either completes in full or ends in an error, never silently short."""
    case = COMPILED_CASES[name]
    root = copy_of(small_compiled, "out")
    fault = case.damage(root)
    seen: list[int] = []
    with pytest.raises(RoboreelError) as err:
        ds = CompiledDataset(str(root), shuffle=False, stream=StreamOptions(backoff_s=0.001, retries=2))
        for sample in ds:
            seen.append(int(sample["episode_index"]))
    message = str(err.value)
    assert re.search(case.reader, message), message
    assert names_fault(message, fault), (message, fault)
    assert not set(seen) & set(fault.episodes)


@pytest.mark.parametrize("name", _params("compile", COMPILED_CASES))
def test_rerun_compile_restores_damaged_out(name, small_source, small_compiled, copy_of):
    """Rerunning compile into a damaged OUT rebuilds what is missing, short or corrupted in place (resume trusts
    a shard only when its sidecar's sizes and sha256 match its files)."""
    case = COMPILED_CASES[name]
    root = copy_of(small_compiled, "out")
    fault = case.damage(root)
    compile_dataset(str(small_source), str(root), settings=TEST)
    if not case.repaired:
        assert validate(str(root)).exit_code == 1
        (root / fault.file).unlink()  # the remedy docs/reliability.md gives: delete what validate named, rerun
        compile_dataset(str(small_source), str(root), settings=TEST)
    assert_same_tree(root, small_compiled)
    assert temp_files(root) == []
