"""`python -m evals.drafters [--format md|csv]`: the mechanisms' comparison table, from the drafters' code,
then (md) the drafters speclens built for the embedded target and how."""

from __future__ import annotations

import csv
import sys

from drafters.facts_table import HEADER, comparison_rows
from evals.embedded.drafter_builds import BUDGETS, EMBEDDED_DRAFTERS, drafter_dir, is_built
from reports.table import markdown_table
from speclens.errors import ArgumentParser, guarded
from speclens.file_formats.drafter_build import (
    DRAFTER_FACTS_FILE,
    describe_build,
    is_current_build,
    read_drafter_facts,
)


@guarded
def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="python -m evals.drafters", description=__doc__)
    parser.add_argument("--format", choices=["md", "csv"], default="md")
    args = parser.parse_args(argv)
    if args.format == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(HEADER)
        writer.writerows(comparison_rows())
    else:
        print(markdown_table(HEADER, comparison_rows()))
        print("\nBuilt for the embedded target (drafter.model left unset):")
        for mechanism in EMBEDDED_DRAFTERS:
            folder = drafter_dir(mechanism)
            if is_built(mechanism, BUDGETS["full"]):
                line = f"{folder}: {describe_build(read_drafter_facts(folder))}"
            elif is_current_build(folder):
                line = f"{folder} was built with other training settings; rebuilt on first use, or now with `make drafters`"
            elif (folder / DRAFTER_FACTS_FILE).is_file():
                line = f"{folder} was built by an older speclens; rebuilt on first use, or now with `make drafters`"
            else:
                line = "not built yet; built on first use, or now with `make drafters`"
            print(f"- {mechanism}: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
