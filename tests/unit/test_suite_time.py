"""`make test`'s closing line: wall time from make's start and the three slowest tests."""

from __future__ import annotations

import json

from tests.suite_time import closing_line


def test_the_closing_line_gives_the_wall_time_and_the_three_slowest_tests(tmp_path):
    times = tmp_path / "times.json"
    rows = [("a.py::slow", 301.4), ("b.py::slower", 90.0), ("c.py::mid", 12.6), ("d.py::fast", 0.1)]
    times.write_text(json.dumps([{"test": t, "seconds": s} for t, s in rows]))
    line = closing_line(1000.0, times, now=1000.0 + 21 * 60 + 7)
    assert line == (
        "make test: 21 min 7 s wall, set-up included; critical path: not recorded; "
        "slowest: a.py::slow 301 s, b.py::slower 90 s, c.py::mid 13 s"
    )


def test_the_critical_path_is_the_worker_whose_chain_of_tests_ran_longest(tmp_path):
    """gw1 holds the slowest test but gw0 the longest chain (300 + 250 + 40 s against 301 + 12 s):
    gw0 sets the wall time two workers cannot go below."""
    times = tmp_path / "times.json"
    rows = [("a::x", 301.0, "gw1"), ("b::y", 300.0, "gw0"), ("c::z", 250.0, "gw0"), ("d::w", 40.0, "gw0")]
    rows += [("e::v", 12.0, "gw1")]
    times.write_text(json.dumps([{"test": t, "seconds": s, "worker": w} for t, s, w in rows]))
    line = closing_line(0.0, times, now=700.0)
    assert line == (
        "make test: 11 min 40 s wall, set-up included; critical path: gw0 9 min 50 s in 3 tests "
        "(longest: b::y 300 s, c::z 250 s), beside gw1 5 min 13 s; slowest: a::x 301 s, b::y 300 s, c::z 250 s"
    )


def test_without_a_times_file_the_line_still_gives_the_wall_time(tmp_path):
    line = closing_line(0.0, tmp_path / "missing.json", now=59.6)
    assert line == "make test: 1 min 0 s wall, set-up included; critical path: not recorded; slowest: none recorded"


def test_the_times_file_gathers_every_session_that_writes_it(tmp_path):
    """`make test` runs two pytest sessions into one times file: the second adds to the first."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    times = tmp_path / "times.json"
    first, second = (
        f"tests/unit/test_metrics.py::{name}"
        for name in ("test_al_pools_steps_over_requests", "test_per_position_and_conditional")
    )
    for test in (first, second):
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--times-file={times}", test],
            cwd=root,
            check=True,
            capture_output=True,
        )
    recorded = json.loads(times.read_text())
    assert sorted(row["test"] for row in recorded) == sorted([first, second])
    assert {row["worker"] for row in recorded} == {"main"}  # no xdist: one chain
    assert [row["seconds"] for row in recorded] == sorted((row["seconds"] for row in recorded), reverse=True)
