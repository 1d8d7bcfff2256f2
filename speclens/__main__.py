"""`python -m speclens <command> ...`: the front door under the package's own name, the same as the
`speclens` command. The foundation imports nothing of the project, so this hands the process over
to `python -m evals.cli` (os.execv: the same process, its arguments, signals and exit status)."""

import os
import sys

if __name__ == "__main__":
    os.execv(sys.executable, [sys.executable, "-m", "evals.cli", *sys.argv[1:]])
