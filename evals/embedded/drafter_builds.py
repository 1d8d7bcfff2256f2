"""The embedded target's own drafters, trained on this machine: an EAGLE-3 head, a draft model and a parallel draft model.

`python -m evals.embedded_drafters [eagle3] [draft_model] [draft_model_parallel] [--budget full|reduced]`
(`make drafters`) builds what is missing and prints the folders. `drafter=eagle3`,
`drafter=draft_model` and `drafter=draft_model drafter.parallel_drafting=true` (a draft
model trained for parallel drafting, PARD's scheme) without `drafter.model` build
theirs on first use when the target is the embedded default.

All three learn from the same data: the target's own greedy answers to speclens's
training prompts (drafters/training/corpus.py), generated once with vLLM and
cached, less every answer that recites an evaluation set speclens ships or reads
(drafters/training/contamination.py; the build record counts them per set).
Each folder holds `speclens_drafter.json` (speclens/file_formats/drafter_build.py); one of another
build version is rebuilt. From an empty cache a build gives the same bytes on
every machine with the same CPU (speclens/machine.py), whatever cores it is given:
the answers are decoded in float32 on one thread (drafters/training/selfdistill.py),
and training is seeded, on a fixed thread count, for a fixed number of steps, in
bf16 autocast where the CPU has native bf16 and in float32 elsewhere.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from importlib import metadata

from drafters.training.optimise import PROBE_STEPS
from evals.embedded.target import SMOLLM2_DIRNAME, ensure_smollm2
from runners.parent_watch import run_in_group
from speclens.assets import building, cache_dir, locked
from speclens.console import console, quiet
from speclens.errors import AssetError, ConfigError
from speclens.file_formats.drafter_build import (
    DRAFTER_FACTS_FILE,
    DRAFTER_FACTS_VERSION,
    built_version,
    is_current_build,
    read_drafter_facts,
)
from speclens.files import write_json_atomic, write_text_atomic
from speclens.machine import cpu_label

__all__ = [
    "BUDGETS",
    "BUILD_OVERRIDES",
    "EMBEDDED_DRAFTERS",
    "Budget",
    "drafter_dir",
    "embedded_build",
    "ensure_drafter",
    "is_built",
    "training_probe",
    "training_samples",
]

# Spec-Bench's rows where this workplace keeps them (not redistributed with speclens).
SHARED_SPEC_BENCH = pathlib.Path(__file__).resolve().parents[3] / "shared" / "data" / "spec_bench" / "question.jsonl"

# build -> folder suffix (no "eagle" in the draft model's path: vLLM would take it for a head).
EMBEDDED_DRAFTERS = {"eagle3": "eagle3", "draft_model": "draft", "draft_model_parallel": "draft-pard"}
# build -> the evals.run overrides that draft with it.
BUILD_OVERRIDES = {
    "eagle3": ("drafter=eagle3",),
    "draft_model": ("drafter=draft_model",),
    "draft_model_parallel": ("drafter=draft_model", "drafter.parallel_drafting=true"),
}


@dataclass(frozen=True)
class Budget:
    name: str
    prompts: int  # training prompts; the held-out ones come on top
    heldout: int
    max_tokens: int  # longest answer
    head_steps: int
    draft_steps: int
    # Seconds each part took on the reference machine (2 cores), for the estimate shown up front.
    answer_tokens_per_s: float = 650.0  # vLLM's engine start included
    head_step_s: float = 0.7  # mean of the first-position steps (0.4 s) and the 3-position ones (1.25 s)
    head_fixed_s: float = 150.0  # the target's hidden states, loading, held-out check, saving
    draft_step_s: float = 0.45
    draft_fixed_s: float = 20.0


BUDGETS = {
    "full": Budget("full", prompts=720, heldout=48, max_tokens=160, head_steps=700, draft_steps=400),
    # For tests: the same builder, a minute or two. 70 draft-model steps: measured AL 1.14 on the
    # embedded-drafters test's set (150 steps: 1.19, 90: 1.17, 60: 1.12, untrained: 1.00; it asks
    # for +0.05). The head keeps 40 (AL 1.18; 30 steps: 1.08).
    "reduced": Budget("reduced", prompts=48, heldout=8, max_tokens=96, head_steps=40, draft_steps=70),
    # For synthetic acceptance (acceptance.synthetic), which times a drafter's shape, not its
    # training: no answers, no steps, built in seconds.
    "untrained": Budget(
        "untrained", prompts=0, heldout=0, max_tokens=0, head_steps=0, draft_steps=0, head_fixed_s=10, draft_fixed_s=10
    ),
}


def _log(msg: str) -> None:
    print(f"speclens: {msg}", file=console(), flush=True)


def drafter_dir(mechanism: str, budget: str = "full") -> pathlib.Path:
    """Where the built drafter lives (may not exist yet)."""
    name = f"{SMOLLM2_DIRNAME}-{EMBEDDED_DRAFTERS[mechanism]}" + ("" if budget == "full" else f"-{budget}")
    return cache_dir() / "models" / name


def embedded_build(drafter: str, parallel: bool) -> str | None:
    """The embedded build that `drafter=<drafter>` (drafting in parallel or not) runs with, if any."""
    name = f"{drafter}_parallel" if parallel else drafter
    return name if name in EMBEDDED_DRAFTERS else None


def _check_mechanism(mechanism: str) -> None:
    if mechanism not in EMBEDDED_DRAFTERS:
        raise ConfigError(
            f"speclens builds drafters {', '.join(EMBEDDED_DRAFTERS)} for the embedded target, "
            f"not {mechanism!r}; give drafter.model=<checkpoint> for other mechanisms."
        )


def estimate_s(mechanism: str, budget: Budget, answers_cached: bool) -> float:
    scale = 2 / max(1, min(os.cpu_count() or 2, 16))
    answers = (
        0.0 if answers_cached else (budget.prompts + budget.heldout) * budget.max_tokens / budget.answer_tokens_per_s
    )
    if mechanism == "eagle3":
        training = budget.head_steps * budget.head_step_s + budget.head_fixed_s
    else:  # the parallel draft model's steps cost about the serial one's (its masks add a few tokens)
        training = budget.draft_steps * budget.draft_step_s + budget.draft_fixed_s
    return (answers + training) * scale


def ensure_drafter(mechanism: str, budget: str = "full") -> pathlib.Path:
    """The built drafter's folder, building it first (in a child process, which keeps vLLM and the
    training threads out of the caller) when it is missing or was built by another builder version."""
    _check_mechanism(mechanism)
    dest = drafter_dir(mechanism, budget)
    if is_built(mechanism, BUDGETS[budget]):
        return dest
    version = built_version(dest)
    if version is not None and version != DRAFTER_FACTS_VERSION:
        _log(
            f"{dest} was built by builder version {version}, this speclens builds version {DRAFTER_FACTS_VERSION}: "
            "building it again"
        )
    elif version is not None:
        _log(f"{dest} was built with other training settings than budget {budget}'s: building it again")
    command = [sys.executable, "-m", "evals.embedded_drafters", mechanism, "--budget", budget]
    # in a process group of its own: an interrupt ends the build with its self-distillation child
    # and that child's vLLM engine, not only the build's own process
    returncode = run_in_group(command, stdout=subprocess.DEVNULL)
    if returncode != 0 or not is_built(mechanism, BUDGETS[budget]):
        raise AssetError(
            f"building the embedded {mechanism} drafter failed (exit {returncode}; its output is "
            f"above); retry with `{' '.join(command[1:])}`, or give drafter.model=<checkpoint>."
        )
    return dest


# The answers' own version: a new build version that does not change them reuses the cached ones.
# 3: decoded in float32 on one thread (2: bf16 in vLLM's engine process, which parted at near-ties).
ANSWERS_VERSION = 3


def _answers_file(budget: Budget) -> pathlib.Path:
    name = f"{SMOLLM2_DIRNAME}-{budget.name}-answers-v{ANSWERS_VERSION}.jsonl"
    return cache_dir() / "drafter-data" / name


def _prompts(budget: Budget):
    """The training prompts, then the held-out ones."""
    from drafters.training.corpus import training_prompts

    return training_prompts(budget.prompts + budget.heldout, seed=0)


def _answers(target: pathlib.Path, budget: Budget):
    """The target's greedy answers to the training and held-out prompts, generated once and cached."""
    from drafters.training.selfdistill import Sample, generate_answers_apart

    path = _answers_file(budget)
    with locked(f"drafter-data-{budget.name}"):
        if not path.is_file():
            prompts = _prompts(budget)
            _log(f"generating the target's answers to {len(prompts)} training prompts (vLLM)")
            samples = generate_answers_apart(target, prompts, budget.max_tokens)
            path.parent.mkdir(parents=True, exist_ok=True)
            write_text_atomic(
                path,
                "".join(
                    json.dumps({"domain": s.domain, "prompt_ids": s.prompt_ids, "answer_ids": s.answer_ids}) + "\n"
                    for s in samples
                ),
            )
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return [Sample(r["domain"], tuple(r["prompt_ids"]), tuple(r["answer_ids"])) for r in rows]


def evaluation_sets() -> dict[str, list[str]]:
    """Every evaluation text speclens ships or reads, by set: MT-Bench's and HumanEval's prompts,
    the long-context sets' sources (standard-library code and docstrings), and Spec-Bench's rows
    where a copy is found (SPECLENS_SPEC_BENCH, else the workplace's shared data beside the checkout)."""
    from evals.datasets.humaneval import problems
    from evals.datasets.long_context import source_texts
    from evals.datasets.mt_bench import questions

    sets = {
        "mt_bench": [t for p in questions() for t in p.turns],
        "humaneval": [t for p in problems() for t in p.turns],
        "long_context": source_texts(),
    }
    spec_bench = _spec_bench_file()
    if spec_bench is not None:
        rows = [json.loads(line) for line in spec_bench.read_text(encoding="utf-8").splitlines() if line.strip()]
        sets["spec_bench"] = [t for r in rows for t in r.get("turns", [])]
    return sets


def _spec_bench_file() -> pathlib.Path | None:
    chosen = os.environ.get("SPECLENS_SPEC_BENCH")
    path = pathlib.Path(chosen) if chosen else SHARED_SPEC_BENCH
    return path if path.is_file() else None


@dataclass(frozen=True)
class TrainingSet:
    """The answers a build learns from (training, held-out) and the recitations left out of both."""

    train: list
    heldout: list
    dropped: dict[str, int]
    evaluation_texts: dict[str, int]


def training_set(target: pathlib.Path, budget: Budget) -> TrainingSet:
    """The build's training and held-out samples (the target's cached answers), less every answer
    that recites an evaluation set."""
    from transformers import AutoTokenizer

    from drafters.training.contamination import EvaluationIndex, drop_recitations

    samples = _answers(target, budget)
    tokenizer = AutoTokenizer.from_pretrained(str(target))
    index = EvaluationIndex(evaluation_sets())
    recitations = drop_recitations([tokenizer.decode(s.answer_ids) for s in samples], index)
    kept = set(recitations.kept)
    return TrainingSet(
        [s for i, s in enumerate(samples[: budget.prompts]) if i in kept],
        [s for i, s in enumerate(samples) if i >= budget.prompts and i in kept],
        recitations.dropped,
        index.sizes,
    )


def training_samples(target: pathlib.Path, budget: Budget):
    """The build's training samples and its held-out ones (training_set)."""
    chosen = training_set(target, budget)
    return chosen.train, chosen.heldout


class _Bar:
    """A tqdm bar over the training's work, shown from the first step on (its ETA is measured on the
    steps alone, not on the set-up before them), with the loss."""

    def __init__(self, total: int, what: str):
        self.total, self.what, self.bar = total, what, None

    def __call__(self, done: int, loss: float) -> None:
        from tqdm import tqdm

        if self.bar is None:
            self.bar = tqdm(total=self.total, desc=f"speclens: training {self.what}", file=console(), smoothing=0.05)
        self.bar.update(done - self.bar.n)
        if loss == loss:  # not NaN
            self.bar.set_postfix(loss=f"{loss:.3f}", refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _plan(mechanism: str, budget: Budget):
    """What the budget trains: the trainer's plan (recorded in the build facts as `training`)."""
    if mechanism == "eagle3":
        from drafters.training.eagle3_head import HeadPlan

        return HeadPlan(steps=budget.head_steps)
    if mechanism == "draft_model_parallel":
        from drafters.training.parallel_lm import ParallelDraftPlan

        return ParallelDraftPlan(steps=budget.draft_steps)
    from drafters.training.small_lm import DraftPlan

    return DraftPlan(steps=budget.draft_steps)


def is_built(mechanism: str, budget: Budget) -> bool:
    """Whether the drafter's folder holds this builder version's build of the budget's plan: a build
    left by a budget since changed (its steps, its settings) is built again, never read as this one."""
    dest = drafter_dir(mechanism, budget.name)
    if not is_current_build(dest):
        return False
    recorded = {k: v for k, v in read_drafter_facts(dest)["training"].items() if k != "final_loss"}
    return recorded == json.loads(json.dumps(asdict(_plan(mechanism, budget))))


def _train(
    mechanism: str,
    target: pathlib.Path,
    train,
    heldout,
    out: pathlib.Path | None,
    budget: Budget,
    stop_after: int | None = None,
) -> dict:
    """The budget's training of ``mechanism`` into ``out``; with ``stop_after``, only that many
    steps, nothing saved (what `training_probe` checks)."""
    plan = _plan(mechanism, budget)
    if mechanism == "eagle3":
        from drafters.training.eagle3_head import train_eagle3_head

        trainer, library = train_eagle3_head, "speculators"
        bar = _Bar(plan.work, "EAGLE-3 head")
    elif mechanism == "draft_model_parallel":
        from drafters.training.parallel_lm import train_parallel_draft_model

        trainer, library = train_parallel_draft_model, "transformers"
        bar = _Bar(plan.steps, "parallel draft model")
    else:
        from drafters.training.small_lm import train_draft_model

        trainer, library = train_draft_model, "transformers"
        bar = _Bar(plan.steps, "draft model")
    try:
        result = trainer(target, train, heldout, out, plan, bar, stop_after=stop_after)
    finally:
        bar.close()
    return {
        "library": f"{library} {metadata.version(library)}",
        "plan": asdict(plan),
        "final_loss": result.final_loss,
        "agreement": result.heldout_agreement,
        "probe": {"steps": PROBE_STEPS, "sha256": result.probe},
    }


def training_probe(mechanism: str, budget: Budget) -> dict:
    """The build's first PROBE_STEPS steps trained again from the cached answers: the weights'
    digest, which a build of the same inputs records as `training_probe` (the same bytes, checked
    in a few steps instead of a whole build)."""
    target = ensure_smollm2()
    return _train(mechanism, target, *training_samples(target, budget), None, budget, stop_after=PROBE_STEPS)["probe"]


def build(mechanism: str, budget: Budget) -> pathlib.Path:
    """Build one drafter in this process (holding its lock) and return its folder."""
    _check_mechanism(mechanism)
    dest = drafter_dir(mechanism, budget.name)
    with locked(f"drafter-{dest.name}"):
        if is_built(mechanism, budget):  # built by another process while we waited
            return dest
        started = time.monotonic()
        target = ensure_smollm2()
        if budget.name == "untrained":
            return _build_untrained(mechanism, target, dest, budget, started)
        minutes = estimate_s(mechanism, budget, _answers_file(budget).is_file()) / 60
        _log(
            f"building the {mechanism} drafter for {SMOLLM2_DIRNAME} (one time, budget {budget.name}: "
            f"about {minutes:.0f} min on this machine)"
        )
        # vLLM's, torch's and the libraries' own output goes to a log; progress stays on the terminal.
        log = cache_dir() / "drafter-data" / f"{dest.name}.build.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with quiet(log):
            chosen = training_set(target, budget)
        train, heldout = chosen.train, chosen.heldout
        answers_done = time.monotonic()
        with building(dest) as tmp:
            with quiet(log):
                trained = _train(mechanism, target, train, heldout, tmp, budget)
            from drafters.training.corpus import CORPUS
            from drafters.training.selfdistill import ANSWER_DTYPE, ANSWER_THREADS

            facts = {
                "version": DRAFTER_FACTS_VERSION,
                "mechanism": mechanism,
                "target": SMOLLM2_DIRNAME,
                "library": trained["library"],
                "budget": budget.name,
                "corpus": {
                    **CORPUS,
                    "training_prompts": len(train),
                    "heldout_prompts": len(heldout),
                    "answer_tokens": sum(len(s.answer_ids) for s in train),
                    "max_answer_tokens": budget.max_tokens,
                    "answers_decoded": {"dtype": ANSWER_DTYPE, "threads": ANSWER_THREADS, "cpu": cpu_label()},
                    "dropped_recitations": chosen.dropped,
                    "evaluation_texts": chosen.evaluation_texts,
                },
                "training": {**trained["plan"], "final_loss": round(trained["final_loss"], 4)},
                "training_probe": trained["probe"],
                "heldout_greedy_agreement": trained["agreement"],
                "build_seconds": {
                    "answers": round(answers_done - started, 1),
                    "training": round(time.monotonic() - answers_done, 1),
                    "total": round(time.monotonic() - started, 1),
                },
                "speclens": metadata.version("speclens"),
            }
            write_json_atomic(facts, tmp / DRAFTER_FACTS_FILE)
        _log(f"{mechanism} drafter ready at {dest} ({(time.monotonic() - started) / 60:.1f} min)")
    return dest


def _build_untrained(
    mechanism: str, target: pathlib.Path, dest: pathlib.Path, budget: Budget, started: float
) -> pathlib.Path:
    """The drafter's shape, untrained (the caller holds its lock)."""
    plan = _plan(mechanism, budget)
    log = cache_dir() / "drafter-data" / f"{dest.name}.build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with building(dest) as tmp:
        with quiet(log):
            if mechanism == "eagle3":
                from drafters.training.eagle3_head import untrained_eagle3_head

                untrained_eagle3_head(target, tmp, plan)
                library = "speculators"
            elif mechanism == "draft_model_parallel":
                from drafters.training.parallel_lm import untrained_parallel_draft_model

                untrained_parallel_draft_model(target, tmp, plan)
                library = "transformers"
            else:
                from drafters.training.small_lm import untrained_draft_model

                untrained_draft_model(target, tmp, plan)
                library = "transformers"
        facts = {
            "version": DRAFTER_FACTS_VERSION,
            "mechanism": mechanism,
            "target": SMOLLM2_DIRNAME,
            "library": f"{library} {metadata.version(library)}",
            "budget": budget.name,
            "training": {**asdict(plan), "final_loss": None},
            "build_seconds": {"total": round(time.monotonic() - started, 1)},
            "speclens": metadata.version("speclens"),
        }
        write_json_atomic(facts, tmp / DRAFTER_FACTS_FILE)
    _log(f"untrained {mechanism} drafter of the trained one's shape ready at {dest} (for synthetic acceptance)")
    return dest


def build_all(mechanisms: list[str], budget_name: str) -> list[pathlib.Path]:
    """Build each of `mechanisms` (all where none is named) that is missing at the budget, saying
    first how long the missing ones take on this machine; their folders."""
    for mechanism in mechanisms:
        _check_mechanism(mechanism)
    budget = BUDGETS[budget_name]
    missing = [m for m in mechanisms or list(EMBEDDED_DRAFTERS) if not is_built(m, budget)]
    if len(missing) > 1:
        cached = _answers_file(budget).is_file()
        total = sum(estimate_s(m, budget, answers_cached=cached or i > 0) for i, m in enumerate(missing)) / 60
        _log(f"building {', '.join(missing)} (budget {budget.name}): about {total:.0f} min in all on this machine")
    return [build(mechanism, budget) for mechanism in mechanisms or list(EMBEDDED_DRAFTERS)]
