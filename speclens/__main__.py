"""`python -m speclens <command> ...`: the front door (evals/cli.py) under the package's own name,
the same as the `speclens` command. It sits in the entry points' layer (tests/layers.py
ENTRY_ALIASES), not in the foundation it shares a folder with."""

import sys

from evals.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
