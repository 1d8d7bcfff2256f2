"""The embedded target's own drafters, trained on this machine: an EAGLE-3 head, a draft model and a parallel draft model.

`python -m evals.embedded_drafters [eagle3] [draft_model] [draft_model_parallel] [--budget full|reduced]`
(`make drafters`) builds what is missing and prints the folders. `drafter=eagle3`,
`drafter=draft_model` and `drafter=draft_model drafter.parallel_drafting=true` (a draft
model trained for parallel drafting, PARD's scheme) without `drafter.model` build
theirs on first use when the target is the embedded default. The builds themselves:
evals/embedded/drafter_builds.py.
"""

from __future__ import annotations

import argparse
import sys

from evals.embedded.drafter_builds import BUDGETS, EMBEDDED_DRAFTERS, build_all
from speclens.errors import guarded


@guarded
def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.embedded_drafters", description=__doc__.splitlines()[0])
    parser.add_argument(
        "mechanisms", nargs="*", metavar="mechanism", help=f"any of {', '.join(EMBEDDED_DRAFTERS)} (default: all)"
    )
    parser.add_argument("--budget", choices=list(BUDGETS), default="full")
    args = parser.parse_args(argv)
    for folder in build_all(args.mechanisms, args.budget):
        print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
