"""What is odd about a run, said with the numbers it is drawn from (`summary.json` → `diagnostics`).

Each diagnostic has a `code`, a `severity` (`warning`: the figure likely measures something else
than the user meant; `info`: it holds, read it knowing this), a one-line `message` and the
`evidence` behind it. Thresholds and why: docs/definitions.md#diagnostics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pandas as pd

from speclens.figures.metrics import TURN_KEY, GroupFigures, accepted_cut
from speclens.schema import record

# First-position acceptance below which a mechanism is most often set up wrong, per family: a head
# or MTP layer trained for the target accepts its first draft token well over half the time
# (EAGLE-3 papers and vLLM's own examples: 0.6-0.8); a standalone draft model of the same family
# 0.4-0.7. A figure below these says "check the set-up" before it says "weak drafter".
LOW_FIRST_POSITION = {
    "eagle": 0.3,
    "eagle3": 0.3,
    "mtp": 0.3,
    "dflash": 0.3,
    "dspark": 0.3,
    "medusa": 0.2,
    "draft_model": 0.2,
}
LOW_FIRST_POSITION_CHECKS = (
    "the head or draft built for another target (or another revision of it)",
    "its vocabulary map (d2t/t2d) or aux hidden-state layers not the target's",
    "a tokenizer or chat template that differs from the one the drafter saw in training",
)
# Model drafters whose drafts are sampled where verification samples (drafter.sample_method).
SAMPLED_DRAFTERS = ("draft_model", "eagle", "eagle3", "mtp", "dflash", "dspark", "medusa")
# A request loops where this share of its output's n-grams repeat an earlier one.
LOOP_NGRAM = 8
LOOP_SHARE = 0.5
# n-gram and suffix: a warning where most decode steps proposed nothing.
SPARSE_SHARE = 0.5
LOOKUP_DRAFTERS = ("ngram", "suffix")
# A measured speedup this far above tokens per step is impossible, not a near miss (the speculative
# step costs at least a plain step: T_verif(B(1+D)) >= T_verif(B)).
NOISE_MARGIN = 1.05
# Truncation worth saying: this share of requests stopped by max_tokens.
TRUNCATED_SHARE = 0.2


@record
class Diagnostic:
    code: str
    severity: str
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunFacts:
    """What the diagnostics read of a run: its records and settings."""

    drafter: str
    d: int | None
    temperature: float
    sample_method: str | None
    max_tokens: int
    chat_template: str | None
    per_position_acceptance: list[float] | None
    steps: pd.DataFrame
    requests: pd.DataFrame
    # Each request turn's output token ids, keyed as the records are (request_id, turn).
    outputs: dict[tuple[str, int], Sequence[int]] = field(default_factory=dict)
    # The draft's build record where speclens built it (speclens/file_formats/drafter_build.py): its budget.
    draft_budget: str | None = None
    # Server mode: each request turn's prompt tokens by speclens's rendering and by the server's
    # usage, where the server counted them.
    prompt_counts: dict[tuple[str, int], tuple[int, int]] = field(default_factory=dict)
    # Where the prompts state their lengths: each length bucket's figures (summary.json's by_length),
    # and the target's own window with the context extension the run was measured under, if any.
    by_length: dict[str, GroupFigures] | None = None
    native_window: int | None = None
    context_extension: str | None = None
    # Per batch size: the measured speedup, tokens per target step and T_draft in ms (None where not measured).
    # Per operating point: (B, speedup, tokens per step, T_draft ms, K=0 tax, its range or None).
    timings: list[tuple[int, float | None, float | None, float | None, float | None, list[float] | None]] = field(
        default_factory=list
    )


def diagnose(run: RunFacts) -> list[Diagnostic]:
    if not run.d:
        return []
    found = [
        low_first_position(run),
        sample_mismatch(run),
        repetition(run),
        truncated(run),
        untemplated(run),
        sparse_drafting(run),
        prompt_drift(run),
        long_context_decay(run),
        timing_noise(run),
    ]
    return [d for d in found if d is not None]


def low_first_position(run: RunFacts) -> Diagnostic | None:
    floor = LOW_FIRST_POSITION.get(run.drafter)
    if floor is None or not run.per_position_acceptance or run.temperature > 0:
        return None
    first = run.per_position_acceptance[0]
    if first >= floor:
        return None
    evidence = {"first_position_acceptance": first, "threshold": floor}
    if run.draft_budget not in (None, "full"):
        # speclens's own small build: low by its training budget, not by a set-up fault
        return Diagnostic(
            "low_first_position",
            "info",
            f"the first draft position is accepted {first:.0%} of the time (a drafter set up right reaches "
            f">= {floor:.0%}); this draft is speclens's `{run.draft_budget}` build, trained for minutes",
            evidence | {"draft_budget": run.draft_budget},
        )
    return Diagnostic(
        "low_first_position",
        "warning",
        f"the first draft position is accepted {first:.0%} of the time, far below what drafter={run.drafter} "
        f"reaches when set up right (>= {floor:.0%}); most often: " + "; ".join(LOW_FIRST_POSITION_CHECKS),
        evidence,
    )


def sample_mismatch(run: RunFacts) -> Diagnostic | None:
    if run.temperature <= 0 or run.drafter not in SAMPLED_DRAFTERS or run.sample_method not in (None, "greedy"):
        return None
    return Diagnostic(
        "sample_mismatch",
        "warning",
        f"sampling.temperature={run.temperature:g} verifies by sampling, but the drafter drafts greedily "
        "(drafter.sample_method=greedy): its proposals are rejected far more often than a sampling drafter's; "
        "set drafter.sample_method=probabilistic to measure what a matched set-up accepts",
        {"temperature": run.temperature, "sample_method": run.sample_method or "greedy"},
    )


def loops(tokens: Sequence[int], n: int = LOOP_NGRAM) -> bool:
    """Whether most of an output's n-grams repeat one seen earlier in it."""
    if len(tokens) < 2 * n:
        return False
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    seen: set[tuple[int, ...]] = set()
    repeats = 0
    for gram in grams:
        repeats += gram in seen
        seen.add(gram)
    return repeats / len(grams) >= LOOP_SHARE


def repetition(run: RunFacts) -> Diagnostic | None:
    looping = {key for key, tokens in run.outputs.items() if loops(list(tokens))}
    if not looping or run.steps.empty:
        return None
    keys = list(zip(run.steps.request_id, run.steps.turn))
    in_loop = np.array([k in looping for k in keys])
    accepted = run.steps.num_accepted.to_numpy()
    rest = run.steps[~in_loop]
    without = 1.0 + float(rest.num_accepted.sum()) / len(rest) if len(rest) else None
    share_accepted = float(accepted[in_loop].sum()) / max(int(accepted.sum()), 1)
    share = len(looping) / max(len(run.outputs), 1)
    return Diagnostic(
        "repetition",
        "warning" if share_accepted >= 0.25 else "info",
        f"{len(looping)} of {len(run.outputs)} outputs loop (most of their {LOOP_NGRAM}-grams repeat earlier ones); "
        f"they hold {share_accepted:.0%} of the accepted tokens"
        + (f", and AL without them is {without:.3f}" if without is not None else "")
        + " (n-gram and suffix AL is often high because the target loops)",
        {
            "requests": len(looping),
            "share_of_requests": share,
            "share_of_accepted_tokens": share_accepted,
            "al_without": without,
            "looping": sorted(f"{r}#{t}" for r, t in looping),
        },
    )


def truncated(run: RunFacts) -> Diagnostic | None:
    requests = run.requests
    if requests.empty or "output_tokens" not in requests:
        return None
    stopped = requests[requests.output_tokens >= run.max_tokens]
    share = len(stopped) / len(requests)
    if share < TRUNCATED_SHARE:
        return None
    cut = None
    if not run.steps.empty and {"position", "batch_size"} <= set(run.steps.columns):
        # the accepted drafts their last steps verified past what the outputs kept (metrics.py, as AL counts them)
        turns = pd.MultiIndex.from_frame(stopped[TURN_KEY])
        cut = int(accepted_cut(run.steps, requests).reindex(turns).fillna(0).sum())
    return Diagnostic(
        "truncated",
        "info",
        f"{share:.0%} of the requests stopped at sampling.max_tokens={run.max_tokens}"
        + (
            f"; {cut} accepted {'tokens were' if cut > 1 else 'token was'} cut at their ends (AL counts them, as vLLM's counters do)"
            if cut
            else ""
        )
        + "; a larger max_tokens measures the rest of those answers",
        {"share_of_requests": share, "requests": len(stopped), "accepted_tokens_cut": cut},
    )


def untemplated(run: RunFacts) -> Diagnostic | None:
    if run.chat_template != "plain":
        return None
    return Diagnostic(
        "untemplated",
        "warning",
        "the chat prompts were sent as plain text (target.chat_template=plain): AL is measured on another input "
        "than a chat-served target sees",
        {"chat_template": "plain"},
    )


def sparse_drafting(run: RunFacts) -> Diagnostic | None:
    requests = run.requests
    if run.drafter not in LOOKUP_DRAFTERS or requests.empty or requests.target_steps.isna().any():
        return None
    decode_steps = int((requests.target_steps - 1).clip(lower=0).sum())
    drafted = int(requests.drafted_steps.sum())
    if not decode_steps:
        return None
    idle = 1 - drafted / decode_steps
    if idle < SPARSE_SHARE:
        return None
    return Diagnostic(
        "sparse_drafting",
        "warning",
        f"{idle:.0%} of the decode steps proposed nothing (drafter={run.drafter} found no match): its AL is over the "
        f"{drafted} steps that drafted, so read it with tokens per step, which counts every step",
        {"share_without_draft": idle, "decode_steps": decode_steps, "drafted_steps": drafted},
    )


def prompt_drift(run: RunFacts) -> Diagnostic | None:
    drifted = {key: counts for key, counts in run.prompt_counts.items() if counts[0] != counts[1]}
    if not drifted:
        return None
    differences = [server - ours for ours, server in drifted.values()]
    examples = [
        {"request": f"{r}#{t}", "speclens": ours, "server": server}
        for (r, t), (ours, server) in sorted(drifted.items())[:5]
    ]
    return Diagnostic(
        "prompt_drift",
        "warning",
        f"the server counted other prompt lengths than speclens sent for {len(drifted)} of {len(run.prompt_counts)} "
        f"requests ({min(differences):+d} to {max(differences):+d} tokens): it renders or tokenizes the prompts "
        "itself (a chat endpoint, its own template, an added BOS), so AL is measured on other inputs than speclens's",
        {
            "requests": len(drifted),
            "share_of_requests": len(drifted) / len(run.prompt_counts),
            "mean_difference": sum(differences) / len(differences),
            "examples": examples,
        },
    )


def long_context_decay(run: RunFacts) -> Diagnostic | None:
    """AL that falls with the input length beyond its CI (vLLM #47602: MTP a net loss at long
    context): a longer length's 95% CI entirely below a shorter one's; the widest such drop is named."""
    lengths = sorted(
        ((label, g) for label, g in (run.by_length or {}).items() if g.al_ci95 and g.input_tokens is not None),
        key=lambda item: item[1].input_tokens,
    )
    falls = [
        (short, long)
        for i, short in enumerate(lengths)
        for long in lengths[i + 1 :]
        if long[1].al_ci95[1] < short[1].al_ci95[0]
    ]
    if not falls:
        return None
    (short_label, short), (long_label, long) = max(falls, key=lambda pair: pair[0][1].al - pair[1][1].al)
    extended = run.context_extension is not None and run.native_window is not None
    past = extended and long.input_tokens > run.native_window
    return Diagnostic(
        "long_context_decay",
        "warning",
        f"AL falls with context length: {long.al:.3f} {_ci(long.al_ci95)} at {long_label} input tokens against "
        f"{short.al:.3f} {_ci(short.al_ci95)} at {short_label} (95% CIs apart)"
        + (
            f"; {long_label} was measured past the target's own window ({run.native_window} tokens), with "
            f"{run.context_extension}"
            if past
            else ""
        )
        + "; speculation buys less at long context, and the run's pooled AL overstates what long prompts get: "
        "choose D per length (`python -m reports.rank <dir>` ranks each length)",
        {
            "shorter": short_label,
            "longer": long_label,
            "al_shorter": short.al,
            "al_shorter_ci95": short.al_ci95,
            "al_longer": long.al,
            "al_longer_ci95": long.al_ci95,
            "falls": [[s, lo] for (s, _), (lo, _) in falls],
            "al_by_length": {label: g.al for label, g in lengths},
        }
        | ({"context_extension": run.context_extension} if past else {}),
    )


def timing_noise(run: RunFacts) -> Diagnostic | None:
    """Timings that cannot be right: a speedup above the tokens each target step gives (drafting
    cannot make a step cheaper than plain decoding's), a negative drafting cost, or a K=0 tax below
    zero over its whole range (speculation switched on with nothing proposed is no cheaper than
    plain decoding). On a noisy machine the passes' wall times moved apart; the figures are noise,
    not a result."""
    found = []
    for batch_size, speedup, tokens_per_step, t_draft_ms, tax, tax_range in run.timings:
        if speedup is not None and tokens_per_step is not None and speedup > tokens_per_step * NOISE_MARGIN:
            found.append(f"B={batch_size}: speedup x{speedup:.2f} above its {tokens_per_step:.2f} tokens per step")
        if t_draft_ms is not None and t_draft_ms < 0:
            found.append(f"B={batch_size}: T_draft {t_draft_ms:.2f} ms, below zero")
        if tax is not None and (tax_range[1] if tax_range else tax) < 0:
            shown = f" [{tax_range[0]:+.0%}, {tax_range[1]:+.0%}]" if tax_range else ""
            found.append(f"B={batch_size}: K=0 tax {tax:+.0%}{shown}, below zero")
    if not found:
        return None
    return Diagnostic(
        "timing_noise",
        "warning",
        f"timings that cannot be right ({'; '.join(found)}): the speculative and plain passes' wall times "
        "moved apart on a busy machine, so these speedups and costs are noise; measure again on an idle "
        "machine, or with repeats= and baseline=true to see their spread",
        {"found": found},
    )


def _ci(ci: Sequence[float]) -> str:
    return f"[{ci[0]:.3f}, {ci[1]:.3f}]"
