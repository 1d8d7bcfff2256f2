"""`python -m evals.bisect` (issue 68): the search finds the first checkpoint below the threshold in
about log2(N) measurements, the command keeps every measurement as a run dir and resumes, and a
bad checkpoint list is one line before anything runs."""

from __future__ import annotations

import math
import re

import pytest

from evals.bisect import main, search
from speclens.file_formats.bisect_file import read_bisect_file
from tests.unit.conftest import fake_overrides, write_checkpoint

ROWS = [{"question_id": "q1", "category": "coding", "turns": ["Write a sort."]}]
SCRIPT = {"q1#0": [3, 1, 3, 0]}


@pytest.mark.parametrize("count", [2, 3, 5, 8, 13, 32])
def test_the_search_finds_the_first_checkpoint_below_in_about_log2_n_asks(count):
    for first in range(count + 1):  # first == count: none falls
        asked: list[int] = []

        def below(i: int, first: int = first, asked: list[int] = asked) -> bool:
            asked.append(i)
            return i >= first

        assert search(count, below) == (None if first == count else first)
        assert len(asked) == len(set(asked)) <= 2 + math.ceil(math.log2(count - 1))


def checkpoints(tmp_path, n: int) -> list[str]:
    return [str(write_checkpoint(tmp_path / f"step{i}", hidden_size=16)) for i in range(n)]


def test_a_list_that_holds_measures_its_ends_keeps_them_and_resumes(tmp_path, capsys):
    steps = checkpoints(tmp_path, 5)
    argv = [*fake_overrides(tmp_path, ROWS, SCRIPT), "drafter=ngram", "d=3", f"checkpoints=[{','.join(steps)}]"]
    argv.append(f"out={tmp_path / 'bisect'}")
    assert main(argv) == 0
    found = read_bisect_file(tmp_path / "bisect")
    assert [s.index for s in found.measured] == [0, 4] and found.found_index is None
    assert found.measured[0].al == found.measured[1].al and found.threshold == pytest.approx(found.measured[0].al - 0.1)
    assert found.verdict.startswith("the last checkpoint still holds")
    assert all((tmp_path / "bisect" / f"{i:02d}-step{i}" / "summary.json").is_file() for i in (0, 4))
    capsys.readouterr()
    assert main(argv) == 0  # a second time: read from the run dirs, nothing measured again
    out = capsys.readouterr().out
    assert "checkpoint 1 of 5" not in out and "2 of 5 checkpoints measured" in out
    # a threshold above every AL: the first is already below, one measurement
    assert main([*argv[:-1], f"out={tmp_path / 'above'}", "below=9"]) == 0
    above = read_bisect_file(tmp_path / "above")
    assert (above.found_index, [s.index for s in above.measured]) == (0, [0])


@pytest.mark.parametrize(
    "value, said",
    [
        (None, r"checkpoints=\[<ckpt>,...\]: give the target checkpoints"),
        ("[{a}]", r"give at least two checkpoint folders"),
        ("[{a},{a}]", r"each checkpoint once"),
        ("[{a},{missing}]", r"\S+/missing is not a model \(no config.json in it\)"),
    ],
)
def test_a_bad_checkpoint_list_is_one_line_before_anything_runs(tmp_path, capsys, value, said):
    a = checkpoints(tmp_path, 1)[0]
    argv = [*fake_overrides(tmp_path, ROWS, SCRIPT), "drafter=ngram", f"out={tmp_path / 'b'}"]
    if value is not None:
        argv.append("checkpoints=" + value.format(a=a, missing=tmp_path / "missing"))
    assert main(argv) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("speclens: error: ") and re.search(said, line), line
    assert not (tmp_path / "b").exists()


def test_a_threshold_that_is_no_al_and_no_drafter_are_refused(tmp_path, capsys):
    steps = checkpoints(tmp_path, 2)
    base = [*fake_overrides(tmp_path, ROWS, SCRIPT), f"checkpoints=[{','.join(steps)}]", f"out={tmp_path / 'b'}"]
    assert main([*base, "drafter=ngram", "below=0.5"]) == 2
    assert "below=0.5: must be a finite number >= 1" in capsys.readouterr().err
    assert main([*base, "drafter=none"]) == 2
    assert "give drafter=<name> d=<D>" in capsys.readouterr().err
