"""`speclens <command> [args]`: the front door to every speclens command. Each is also
`python -m <module>` with the same arguments."""

from __future__ import annotations

import importlib
import sys

# command -> (module whose main(argv) runs it, what it does)
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("evals.run", "measure AL (and, with baseline=true, speedups) for one drafter and D; -m sweeps"),
    "replay": ("evals.replay", "the AL-vs-D curve for D = 1..d_max from one generation"),
    "nightly": ("evals.nightly", "re-measure a suite after a target fine-tune; exit 1 on a regression"),
    "bisect": ("evals.bisect", "over an ordered list of target checkpoints: where a drafter's AL fell"),
    "load": ("evals.load", "a request-rate ladder through a server: where speculation stops paying under load"),
    "selfcheck": ("evals.selfcheck", "trust check of an engine build (draft == target gives AL = 1 + D)"),
    "guidelines": ("evals.guidelines", "draft-length guidelines from the target's (and draft's) config"),
    "whatif": ("evals.whatif", "speedup predicted on a named GPU from measured (or given) acceptance"),
    "drafters": ("evals.drafters", "the mechanisms' comparison table and the drafters built for the embedded target"),
    "prepare": ("evals.embedded_target", "prepare the embedded default target (SmolLM2-135M) and print its folder"),
    "build-drafters": (
        "evals.embedded_drafters",
        "train the embedded target's EAGLE-3 head and draft model (one time)",
    ),
    "quantize": ("evals.quantize", "a W8A8 copy of a checkpoint (target, draft model or EAGLE-3 head) to measure"),
    "report": ("reports.build", "report.html and report.md for a run or sweep dir"),
    "curves": ("reports.curves", "AL-vs-D curves of a sweep dir"),
    "rank": ("reports.rank", "rank (mechanism, D) by speedup over plain decoding"),
    "compare": ("reports.compare", "AL differences between two run or sweep dirs, paired bootstrap CI"),
    "explain": (
        "reports.explain",
        "why two runs' ALs differ (or a run's and a peer tool's): settings, prompts, outputs, parts",
    ),
}


def usage() -> str:
    width = max(len(c) for c in COMMANDS)
    lines = ["usage: speclens <command> [args]   (speclens <command> --help for a command's own help)", "", "commands:"]
    lines += [f"  {name.ljust(width)}  {what}  (python -m {module})" for name, (module, what) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"speclens: error: unknown command {command!r}; choose one of {', '.join(COMMANDS)}.", file=sys.stderr)
        return 2
    # Only the chosen command's module is imported: `speclens drafters` never loads Hydra apps or vllm.
    return importlib.import_module(COMMANDS[command][0]).main(rest)


if __name__ == "__main__":
    sys.exit(main())
