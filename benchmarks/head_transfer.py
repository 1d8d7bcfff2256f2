"""How far the embedded EAGLE-3 head's agreement with the target carries from its training
prompts to the prompts speclens evaluates on.

Measured in one run, on the same head: its greedy agreement with the target (as vLLM's
verification counts it: draft tokens 1..k all equal to the target's argmax) on the held-out
answers to its own training prompts, and on the target's greedy answers to `dataset=sample`'s
prompts (MT-Bench first turns and HumanEval, 128 tokens, as `evals.run` generates them), per
domain; the ratio of the two; and the share of answer tokens the head's draft vocabulary holds
(it can propose no other). 1 + the sum of the agreements is the AL a chain of that many drafts
would reach if every position were alike.

    python benchmarks/head_transfer.py [HEAD_DIR]   # default: the built full-budget head
"""

from __future__ import annotations

import pathlib
import sys

MAX_TOKENS = 128  # evals.run's default sampling.max_tokens


def main(argv: list[str]) -> None:
    from drafters.training.corpus import TrainingPrompt
    from drafters.training.eagle3_head import head_agreement
    from drafters.training.selfdistill import generate_answers
    from evals.datasets.humaneval import problems
    from evals.datasets.mt_bench import questions
    from evals.embedded_drafters import BUDGETS, ensure_drafter, training_samples
    from evals.embedded_target import ensure_smollm2

    target = ensure_smollm2()
    head = pathlib.Path(argv[0]) if argv else ensure_drafter("eagle3")
    _, heldout = training_samples(target, BUDGETS["full"])
    evaluated = [TrainingPrompt(p.domain, p.turns[0]) for p in questions() + problems()]
    answers = generate_answers(target, evaluated, MAX_TOKENS)
    sets = {"held-out (training prompts)": heldout, "sample (all)": answers}
    for domain in sorted({s.domain for s in answers}):
        sets[f"  {domain}"] = [s for s in answers if s.domain == domain]
    agreement = head_agreement(target, head, sets)

    from safetensors import safe_open

    with safe_open(str(head / "model.safetensors"), "pt") as weights:
        in_vocab = weights.get_tensor("t2d").bool()
    print(f"head: {head}")
    width = max(len(name) for name in sets)
    positions = len(next(iter(agreement.values())))
    print(f"{'answers':<{width}}  {'positions':>9}  " + "  ".join(f"agree@{k + 1}" for k in range(positions))
          + "  AL if alike  in vocab")
    for name, values in agreement.items():
        count = sum(len(s.answer_ids) for s in sets[name])
        print(f"{name:<{width}}  {count:>9}  " + "  ".join(f"{v:>7.3f}" for v in values)
              + f"  {1 + sum(values):>11.2f}"
              + f"  {sum(bool(in_vocab[t]) for s in sets[name] for t in s.answer_ids) / count:>8.3f}")
    base, moved = agreement["held-out (training prompts)"], agreement["sample (all)"]
    print("sample / held-out agreement: " + ", ".join(
        f"position {k + 1} {m / b:.2f}" for k, (b, m) in enumerate(zip(base, moved)) if b > 0))


if __name__ == "__main__":  # vLLM's engine process re-imports this module
    main(sys.argv[1:])
