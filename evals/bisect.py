"""`python -m evals.bisect checkpoints=[<ckpt>,...] drafter=<d> d=<D> [below=<AL>] [out=<dir>] [key=value ...]`:
where, over an ordered list of target checkpoints (fine-tune steps), a drafter's AL fell.

Measures the first and the last checkpoint, then halves the range between the last one that held
and the first one below the threshold: about log2(N) runs for N checkpoints, each kept as a run
dir under out= (default outputs/bisect), named by its place and folder; a run dir that already
holds summary.json is read, not measured again, so a bisect that dies resumes. The threshold is
below=<AL>, or the first checkpoint's AL less 0.1 (the nightly's default). bisect.json in out=
lists what was measured and the checkpoint found. It assumes AL falls once along the list (a
fine-tune drifting away from what the drafter learned); where the first checkpoint is already
below, or the last still holds, it says so. Any other key=value is an `evals.run` key.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from drafters import drafter_name
from evals.pipeline.compose import compose_config, to_run_config
from evals.pipeline.run_job import TqdmProgress, run
from runners.registry import runner_of
from speclens.errors import ConfigError, guarded
from speclens.file_formats.bisect_file import BISECT_FILE, BISECT_VERSION, BisectFile, BisectStep, write_bisect_file
from speclens.file_formats.summary_file import SUMMARY_FILE, read_summary
from speclens.files import check_folder
from speclens.options import number, parse_value, split_own_keys

BISECT_KEYS = ("checkpoints", "below", "out")
DEFAULT_DROP = 0.1  # AL units, as the nightly's default threshold


def parse_checkpoints(text: str) -> list[Path]:
    value = parse_value(text, "checkpoints")
    if isinstance(value, str):  # checkpoints=[a,b] without quotes is no JSON: its items, bare
        value = [v.strip() for v in value.strip().removeprefix("[").removesuffix("]").split(",") if v.strip()]
    if not isinstance(value, list) or len(value) < 2 or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(
            f"checkpoints={text}: give at least two checkpoint folders, in fine-tune order: checkpoints=[a,b,c]."
        )
    paths = [Path(v) for v in value]
    if len({p.resolve() for p in paths}) != len(paths):
        raise ConfigError(f"checkpoints={text}: each checkpoint once.")
    for path in paths:
        if not (path / "config.json").is_file():
            raise ConfigError(f"checkpoints: {path} is not a model (no config.json in it); give checkpoint folders.")
    return paths


def search(count: int, below: Callable[[int], bool]) -> int | None:
    """The first index whose `below` is true, where it turns true once along 0..count-1; None
    where the last is not below. Asks the ends first, then halves: ceil(log2(count)) + 1 calls at most."""
    if below(0):
        return 0
    if not below(count - 1):
        return None
    held, fell = 0, count - 1
    while fell - held > 1:
        middle = (held + fell) // 2
        held, fell = (held, middle) if below(middle) else (middle, fell)
    return fell


def main_(argv: list[str]) -> int:
    own, run_overrides = split_own_keys(argv, BISECT_KEYS)
    if "checkpoints" not in own:
        raise ConfigError("checkpoints=[<ckpt>,...]: give the target checkpoints to bisect, in fine-tune order.")
    checkpoints = parse_checkpoints(own["checkpoints"])
    threshold = number(parse_value(own["below"], "below"), "below", at_least=1) if "below" in own else None
    out = Path(own.get("out") or "outputs/bisect")
    check_folder(out, "out")
    configs = [compose_config([*run_overrides, "target=custom", f"target.model={c}"]) for c in checkpoints]
    typed = [to_run_config(cfg) for cfg in configs]
    drafter, d = drafter_name(typed[0].drafter), int(typed[0].d)
    if drafter == "none":
        raise ConfigError("evals.bisect: give drafter=<name> d=<D>: the drafter whose AL is bisected.")
    runner_of(typed[0]).prepare_process(typed[0])
    measured: dict[int, BisectStep] = {}

    def al_at(index: int) -> float:
        if index not in measured:
            run_dir = out / f"{index:02d}-{checkpoints[index].name}"
            if not (run_dir / SUMMARY_FILE).is_file():
                print(
                    f"speclens bisect: checkpoint {index + 1} of {len(checkpoints)}: {checkpoints[index]}", flush=True
                )
                run(configs[index], run_dir, progress=TqdmProgress)
            al = float(read_summary(run_dir).al)
            measured[index] = BisectStep(
                index=index, checkpoint=str(checkpoints[index]), al=al, below=False, run_dir=str(run_dir)
            )
        return measured[index].al

    limit = threshold if threshold is not None else al_at(0) - DEFAULT_DROP
    found = search(len(checkpoints), lambda i: al_at(i) < limit)
    steps = [
        BisectStep(index=s.index, checkpoint=s.checkpoint, al=s.al, below=s.al < limit, run_dir=s.run_dir)
        for s in sorted(measured.values(), key=lambda s: s.index)
    ]
    if found is None:
        verdict = f"the last checkpoint still holds: AL {steps[-1].al:.3f} >= {limit:.3f}"
    elif found == 0:
        verdict = f"the first checkpoint is already below: AL {steps[0].al:.3f} < {limit:.3f}"
    else:
        before = next(s for s in steps if s.index == found - 1)
        after = next(s for s in steps if s.index == found)
        verdict = (
            f"AL fell below {limit:.3f} at checkpoint {found + 1} of {len(checkpoints)}, {checkpoints[found]} "
            f"(AL {after.al:.3f}; {before.al:.3f} at {checkpoints[found - 1]})"
        )
    record = BisectFile(
        BISECT_VERSION,
        drafter,
        d,
        [str(c) for c in checkpoints],
        limit,
        steps,
        found,
        None if found is None else str(checkpoints[found]),
        verdict,
    )
    write_bisect_file(record, out)
    print(
        f"speclens bisect: {drafter} d={d}: {verdict}; {len(steps)} of {len(checkpoints)} checkpoints measured ({out / BISECT_FILE})"
    )
    return 0


@guarded
def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    return main_(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
