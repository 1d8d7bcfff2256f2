"""How far the embedded EAGLE-3 head's agreement with the target carries from its training
prompts to the prompts speclens evaluates on.

Measured in one run, on the same head: its greedy agreement with the target (as vLLM's
verification counts it: draft tokens 1..k all equal to the target's argmax) on the held-out
answers to its own training prompts, and on the target's greedy answers to `dataset=sample`'s
prompts (MT-Bench first turns and HumanEval, 128 tokens, as `evals.run` generates them), per
domain; the ratio of the two; and the share of answer tokens the head's draft vocabulary holds
(it can propose no other). 1 + the sum of the agreements is the AL a chain of that many drafts
would reach if every position were alike.

    python benchmarks/head_transfer.py [HEAD_DIR] [--prompts N] [--max-tokens M]
        # default: the built full-budget head, every sample prompt, 128 tokens

A HEAD_DIR that speclens built with one of its budgets is compared with that build's held-out
answers; any other head only on the sample prompts.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

MAX_TOKENS = 128  # evals.run's default sampling.max_tokens
HELDOUT = "held-out (training prompts)"


def main(argv: list[str]) -> None:
    from safetensors import safe_open

    from drafters.training.corpus import TrainingPrompt
    from drafters.training.eagle3_head import head_agreement
    from drafters.training.selfdistill import generate_answers
    from evals.datasets.humaneval import problems
    from evals.datasets.mt_bench import questions
    from evals.embedded.drafter_builds import BUDGETS, ensure_drafter, training_samples
    from evals.embedded.target import ensure_smollm2
    from speclens.file_formats.drafter_build import DRAFTER_FACTS_FILE

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("head", type=pathlib.Path, nargs="?", help="a head dir (default: the built full-budget head)")
    parser.add_argument("--prompts", type=int, default=None, help="the first N sample prompts (default: all)")
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    args = parser.parse_args(argv)
    target = ensure_smollm2()
    head = args.head or ensure_drafter("eagle3")
    facts = head / DRAFTER_FACTS_FILE
    budget = json.loads(facts.read_text(encoding="utf-8")).get("budget") if facts.is_file() else None
    sets = {}
    if budget in BUDGETS:
        sets[HELDOUT] = training_samples(target, BUDGETS[budget])[1]
    # The first turns, as a training prompt is one turn.
    evaluated = [TrainingPrompt(p.domain, p.turns[0]) for p in questions() + problems()][: args.prompts]
    answers = generate_answers(target, evaluated, args.max_tokens)
    sets["sample (all)"] = answers
    for domain in sorted({s.domain for s in answers}):
        sets[f"  {domain}"] = [s for s in answers if s.domain == domain]
    agreement = head_agreement(target, head, sets)

    with safe_open(str(head / "model.safetensors"), "pt") as weights:
        in_vocab = weights.get_tensor("t2d").bool()
    print(f"head: {head}")
    width = max(len(name) for name in sets)
    positions = len(next(iter(agreement.values())))
    print(
        f"{'answers':<{width}}  {'positions':>9}  "
        + "  ".join(f"agree@{k + 1}" for k in range(positions))
        + "  AL if alike  in vocab"
    )
    for name, values in agreement.items():
        count = sum(len(s.answer_ids) for s in sets[name])
        print(
            f"{name:<{width}}  {count:>9}  "
            + "  ".join(f"{v:>7.3f}" for v in values)
            + f"  {1 + sum(values):>11.2f}"
            + f"  {sum(bool(in_vocab[t]) for s in sets[name] for t in s.answer_ids) / count:>8.3f}"
        )
    if HELDOUT in agreement:
        base, moved = agreement[HELDOUT], agreement["sample (all)"]
        print(
            "sample / held-out agreement: "
            + ", ".join(f"position {k + 1} {m / b:.2f}" for k, (b, m) in enumerate(zip(base, moved)) if b > 0)
        )


if __name__ == "__main__":  # vLLM's engine process re-imports this module
    main(sys.argv[1:])
