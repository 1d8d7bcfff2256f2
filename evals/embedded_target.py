"""`python -m evals.embedded_target`: prepare the embedded default target, SmolLM2-135M-Instruct
(evals/embedded/target.py), and print its folder."""

from __future__ import annotations

import sys

from evals.embedded.target import ensure_smollm2
from speclens.errors import ArgumentParser, guarded


@guarded
def main(argv: list[str]) -> int:
    """`python -m evals.embedded_target`: prepare the embedded target and print its folder."""
    ArgumentParser(prog="python -m evals.embedded_target", description=main.__doc__).parse_args(argv)
    print(ensure_smollm2())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
