"""`python -m evals.drafters [--format md|csv]`: the mechanisms' comparison table, from the drafters' code."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import sys

from drafters import REGISTRY
from drafters.base import MechanismFacts

FACT_FIELDS = [f.name for f in dataclasses.fields(MechanismFacts)]
HEADER = ["drafter", "checkpoint", "replay", *FACT_FIELDS]


def comparison_rows() -> list[list[str]]:
    return [
        [name, "yes" if cls.needs_checkpoint else "no", cls.replay, *(getattr(cls.facts, f) for f in FACT_FIELDS)]
        for name, cls in REGISTRY.items()
    ]


def main(argv: list[str]) -> int:
    from reports.table import markdown_table

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
