"""Every run under a folder that was split by a text delimiter: each step's segment as speclens
recorded it against the independent derivation (tests/fixtures/segments.py), and each segment's AL.

    PYTHONPATH=. python benchmarks/segment_agreement.py <sweep or run dir>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from speclens.file_formats.records import read_parquet
from speclens.file_formats.summary_file import read_summary
from tests.fixtures.segments import derived_segments


def main(root: Path) -> None:
    from transformers import AutoTokenizer

    for summary_file in sorted(root.rglob("summary.json")):
        run_dir = summary_file.parent
        stamp = json.loads((run_dir / "stamp.json").read_text())
        end = (stamp["config"].get("reasoning") or {}).get("end")
        if not end or (stamp["config"]["reasoning"].get("start")):
            continue
        summary = read_summary(run_dir)
        segments, _ = derived_segments(run_dir, AutoTokenizer.from_pretrained(stamp["target_dir"]), end)
        recorded = list(read_parquet(run_dir / "steps.parquet").segment)
        agree = sum(a == b for a, b in zip(segments, recorded))
        figures = summary.by_segment
        thinking, answer = figures["thinking"], figures["answer"]
        share = "-" if thinking.share_of_output_tokens is None else f"{thinking.share_of_output_tokens:.0%}"
        print(
            f"{summary.label:<16} steps {len(recorded):5d}, segment agrees on {agree}/{len(recorded)}; AL all "
            f"{_al(summary.al)}, thinking {_al(thinking.al)} ({share} of tokens), answer {_al(answer.al)}"
        )


def _al(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    main(Path(sys.argv[1]))
