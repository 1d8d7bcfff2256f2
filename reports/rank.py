"""`python -m reports.rank <runs or sweep dirs> [--out DIR]`: (mechanism, D) ranked per domain
and operating point by speedup over plain decoding (guideline 5; computed in reports/speedup_ranking.py),
with the guidelines set against the measured best D.

Writes ranking.csv, ranking.md, serve.json (what to deploy: reports/serve.py) and pareto.png into
--out (default: the first dir given), and prints the ranking's tables. Runs with length buckets
(long context) are also ranked per length and batch size: ranking_by_length.csv, a section of
ranking.md, serve.json's `by_length`, and the (B, context) -> D table in the
speculation_profile.json written beside them (reports/profile.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

from reports.ranking_tables import length_terminal_table, terminal_table, write_rankings
from speclens.errors import ArgumentParser, guarded
from speclens.files import output_path


@guarded
def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="python -m reports.rank", description=__doc__.splitlines()[0])
    parser.add_argument("dirs", type=Path, nargs="+", help="run dirs or sweep dirs")
    parser.add_argument("--out", default=None, help="where to write (default: the first dir)")
    args = parser.parse_args(argv)
    if args.out is not None:
        args.out = output_path(args.out, "--out")
    ranking, lengths, notes = write_rankings(args.dirs, args.out)
    print(terminal_table(ranking))
    if not lengths.empty:
        print(length_terminal_table(lengths))
    print("\n".join(notes))
    print(f"ranking: {(args.out or args.dirs[0]) / 'ranking.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
