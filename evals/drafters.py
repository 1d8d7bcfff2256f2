"""`python -m evals.drafters [--format md|csv]`: the mechanisms' comparison table, from the drafters' code."""

from __future__ import annotations

import argparse
import csv
import sys

from core.errors import guarded
from drafters.facts_table import HEADER, comparison_rows
from reports.table import markdown_table


@guarded
def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.drafters", description=__doc__)
    parser.add_argument("--format", choices=["md", "csv"], default="md")
    args = parser.parse_args(argv)
    if args.format == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(HEADER)
        writer.writerows(comparison_rows())
    else:
        print(markdown_table(HEADER, comparison_rows()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
