"""Text and markdown tables: the terminal result table of one run, and the helpers every
report's tables use."""

from __future__ import annotations

import math
from typing import Any, Sequence

import pandas as pd

from speclens.figures.costs import GAP_TOLERANCE, StepTiming
from speclens.figures.summary import LosslessCheck, OperatingPoint, RunSummary, SyntheticAcceptance
from speclens.provenance import FAKE, MEASURED
from speclens.text import markdown_safe, terminal_safe


def cell(value: Any, digits: int = 2, signed: bool = False) -> str:
    """A table cell: `-` for a missing value (None, NaN, NA), floats to `digits` places."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"
    return str(value)


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]], left_columns: int = 1) -> str:
    """A fixed-width table: the first `left_columns` columns left-aligned, the rest right-aligned,
    a rule under the header."""
    header = [terminal_safe(c) for c in header]
    rows = [[terminal_safe(c) for c in r] for r in rows]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            str(c).ljust(w) if i < left_columns else str(c).rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
        )

    return "\n".join([line(header), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-style markdown table, every cell shown as its text (speclens.text.markdown_safe)."""
    lines = ["| " + " | ".join(markdown_safe(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(markdown_safe(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _ci(ci: list[float] | None) -> str:
    return "-" if ci is None else f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def result_table(summary: RunSummary) -> str:
    header = ("domain", "requests", "steps", "AL", "AL 95% CI", "tokens/step")
    rows = [
        (domain, str(g.n_requests), str(g.n_steps), cell(g.al), _ci(g.al_ci95), cell(g.tokens_per_step))
        for domain, g in summary.groups().items()
    ]
    d = summary.d
    title = f"speclens: drafter={summary.drafter}" + (f" d={d}" if d else "") + f" on {summary.dataset}"
    if summary.schedule:
        title += f", draft-length schedule {summary.schedule}"
    window = summary.context_window
    if window is not None and (window.extended or summary.by_length):
        title += f", {window.label()}"
    if summary.numerics is not None and summary.numerics.kv_cache_dtype:
        title += f", KV cache {summary.numerics.kv_cache_dtype}"
    synthetic = summary.synthetic_acceptance
    if synthetic is not None:
        title += ", SYNTHETIC acceptance"
    if summary.runner == FAKE:
        title += ", FAKE engine (runner=fake): scripted figures, not a model's"
    out = [title, text_table(header, rows)]
    if synthetic is not None:
        out.append(synthetic_line(synthetic))
    spread = summary.groups()["all"].al_per_request if "all" in summary.groups() else None
    if spread:
        out.append(
            f"AL per request: p10 {spread['p10']:.2f}, median {spread['p50']:.2f}, p90 {spread['p90']:.2f} "
            f"(min {spread['min']:.2f}, max {spread['max']:.2f}, std {spread['std']:.2f})"
        )
    if summary.by_segment:
        out.append(segment_table(summary))
    if summary.by_length:
        out.append(length_table(summary))
    if summary.by_turn:
        turns = sorted(summary.by_turn.items(), key=lambda kv: int(kv[0]))
        out.append(
            text_table(
                ("agent turn", "requests", "steps", "AL", "AL 95% CI"),
                [(t, str(g.n_requests), str(g.n_steps), cell(g.al), _ci(g.al_ci95)) for t, g in turns],
            )
        )
    timing = summary.timing
    runner = summary.numerics.model_runner if summary.numerics else None
    source = summary.provenance.source if summary.provenance is not None else MEASURED
    out.append(
        f"generate {timing.generate_s:.1f}s, {timing.output_tokens_per_s:.1f} output tokens/s"
        + (f", {source} speedup x{summary.speedup:.2f} over plain decoding" if summary.speedup else "")
        + (f" (vLLM model runner {runner.upper()})" if runner else "")
    )
    points = summary.operating_points
    if len(points) > 1 or any(p.t_verif for p in points):
        out += [operating_point_line(p, source) for p in points]
    loss = summary.lossless
    if loss and loss.checked:
        out.append(
            f"lossless: {loss.n_identical}/{loss.n_compared} outputs identical to plain decoding"
            + ("" if loss.identical else lossless_verdict(loss))
        )
    numerics = numerics_line(summary)
    if numerics:
        out.append(numerics)
    out += [f"{d.severity} [{d.code}]: {d.message}" for d in summary.diagnostics or []]
    return "\n".join(out)


def length_table(summary: RunSummary) -> str:
    """AL and tokens per step per length bucket, with their CIs and the throughput each length's
    own steps measured; lengths past the target's own window are marked as measured under its
    extension."""
    window = summary.context_window
    native = window.native if window is not None and window.extended else None
    single = summary.operating_points[0].by_length if len(summary.operating_points) == 1 else None
    header = ("length", "requests", "steps", "AL", "AL 95% CI", "tokens/step", "tokens/step 95% CI", "output tok/s")
    rows = []
    for label, g in (summary.by_length or {}).items():
        past = native is not None and g.input_tokens is not None and g.input_tokens > native
        point = (single or {}).get(label)
        rows.append(
            (
                label + (" *" if past else ""),
                str(g.n_requests),
                str(g.n_steps),
                cell(g.al),
                _ci(g.al_ci95),
                cell(g.tokens_per_step),
                _ci(g.tokens_per_step_ci95),
                cell(point.output_tokens_per_s, 1) if point is not None else "-",
            )
        )
    lines = [text_table(header, rows)]
    if any(r[0].endswith(" *") for r in rows):
        lines.append(f"* past the target's own window ({native} tokens): measured with {window.extension}")
    return "\n".join(lines)


def segment_table(summary: RunSummary) -> str:
    """AL per segment (thinking, answer) of every group, with its share of the output tokens, and
    how the outputs were split."""
    header = ("domain", "segment", "tokens", "share", "steps", "AL", "AL 95% CI", "tokens/step")
    rows = [
        (
            domain,
            segment,
            str(f.output_tokens),
            cell(f.share_of_output_tokens),
            str(f.n_steps),
            cell(f.al),
            _ci(f.al_ci95),
            cell(f.tokens_per_step),
        )
        for domain, group in summary.groups().items()
        for segment, f in (group.by_segment or {}).items()
    ]
    lines = [text_table(header, rows, left_columns=2)]
    split = summary.reasoning
    if split is not None:
        lines.append(
            f"thinking ends by {split.boundary}: closed in {split.n_closed} of {split.n_outputs} outputs"
            + (f", {split.n_unclosed} think to their end (all thinking)" if split.n_unclosed else "")
            + (f", {split.n_without_thinking} without thinking" if split.n_without_thinking else "")
        )
    return "\n".join(lines)


def numerics_line(summary: RunSummary) -> str | None:
    """Where the run's greedy outputs are not a fixed function of its config (speclens/figures/summary.py
    Numerics), by how much that can move its figures and what makes them exact."""
    numerics = summary.numerics
    if numerics is None or numerics.reproducible or summary.runner == FAKE:  # a script has no rounding
        return None
    if numerics.gpu:
        # on a GPU kernels and batch shapes move bf16 outputs; vLLM's batch-invariant kernels fix them
        where = f" on {numerics.gpu.get('count', 1)}x {numerics.gpu.get('name')}"
        moved_by, remedy = "batch shape or kernel", "engine.batch_invariant=true"
    else:
        where = f" on {numerics.threads} thread(s)" if numerics.threads else ""
        where += f" of {numerics.cpu}" if numerics.cpu else ""
        moved_by, remedy = "thread count or batch shape", "engine.dtype=float32"
    line = (
        f"numerics: {numerics.dtype}{where}: greedy outputs can part at near-ties with another {moved_by}, "
        f"so AL may differ by a few percent on another machine, server or run; {remedy} makes it reproducible"
    )
    fingerprints, d = summary.fingerprints, summary.d
    self_draft = fingerprints.draft is not None and fingerprints.draft == fingerprints.target
    if self_draft and d and summary.al is not None and summary.al < 1 + d:
        line += (
            f"; the draft is the target itself, so its AL {summary.al:.3f} below 1 + D = {1 + d} is such "
            "near-ties between the draft and verify passes"
        )
    return line


def synthetic_line(synthetic: SyntheticAcceptance) -> str:
    """What a synthetic run's AL is: set by the user, not measured, and what was not checked."""
    rates = ", ".join(f"{r:g}" for r in synthetic.rates)
    source = "" if synthetic.source == "given" else f" from {synthetic.source}"
    return (
        f"synthetic acceptance: drafts accepted at the marginal rates [{rates}]{source} (expected AL "
        f"{synthetic.expected_al:.2f}); AL is set, not measured: the timings are the drafter's at that "
        f"acceptance; lossless check {synthetic.lossless_check}"
    )


def lossless_verdict(loss: LosslessCheck) -> str:
    """What the mismatches are: near-ties (rounding in the engine's dtype) and divergences."""
    parts = []
    if loss.n_near_ties:
        parts.append(
            f"{loss.n_near_ties} numerical near-tie(s): plain decoding's top two tokens were within "
            f"{loss.near_tie_bound:g} (log-prob) where the outputs part, under {loss.dtype} rounding; "
            + ("engine.dtype=float32 makes them rare" if loss.dtype != "float32" else "rounding alone")
        )
    if loss.n_divergences:
        parts.append(
            f"{loss.n_divergences} DIVERGENCE(S) that rounding cannot explain <-- the engine or drafter is not lossless"
        )
    where = ", ".join(
        f"{m.request_id}#{m.turn} at token {m.first_divergence}"
        + (f" (margin {m.top2_margin:.3g})" if m.top2_margin is not None else "")
        for m in loss.mismatches[:3]
    )
    return "; " + "; ".join(parts) + f" (e.g. {where}; summary.json lossless.mismatches)"


def median_ms(timing: StepTiming | None) -> float | None:
    return None if timing is None else timing.median_ms


def operating_point_line(point: OperatingPoint, source: str = MEASURED) -> str:
    """One batch size's throughput, speedups and step costs (medians, ms); `source`: what the run's
    figures are (a fake run's speedup is the script's, never said to be measured)."""
    speedups = ""
    if point.speedup is not None:
        speedups += f", speedup x{point.speedup:.2f} {source}"
    if point.speedup_range is not None:
        lo, hi = point.speedup_range
        speedups += f" [{lo:.2f}, {hi:.2f}] over {len(point.speedup_repeats or [])} repeats"
    if point.latency_speedup is not None:
        speedups += f" (TPOT x{point.latency_speedup:.2f})"
    if point.predicted_speedup is not None:
        lo, hi = point.predicted_speedup_range
        speedups += f", x{point.predicted_speedup:.2f} predicted [{lo:.2f}, {hi:.2f}]"
    if point.gap_above_tolerance:
        speedups += f" (gap {point.speedup_gap:+.0%}: above {GAP_TOLERANCE:.0%})"
    account = point.speedup_account
    if account is not None:
        speedups += (
            "; measured = "
            + " x ".join(f"{name.split('_')[0]} {v:.3f}" for name, v in account.factors.items())
            + " (speedup_account)"
        )
    latency = point.latency
    p50 = lambda p: cell(p.p50 if p else None, 1)  # noqa: E731
    waits = (
        ""
        if latency is None
        else (
            f"; latency p50: TTFT {p50(latency.ttft_ms)} ms, TPOT {p50(latency.tpot_ms)} ms, e2e {p50(latency.e2e_ms)} ms"
        )
    )
    return (
        f"B={point.held}"
        + (f" in flight (batch_sizes asked {point.batch_size})" if point.held != point.batch_size else "")
        + f": {point.output_tokens_per_s:.1f} output tokens/s{speedups}; "
        f"T_verif(B) {cell(median_ms(point.t_verif), 1)} ms, T_step {cell(median_ms(point.t_step), 1)} ms, "
        f"T_verif(B(1+D)) {cell(median_ms(point.t_verif_spec), 1)} ms, T_draft {cell(point.t_draft_ms, 1)} ms"
        + (f", K=0 tax {point.k0_tax:+.1%}" if point.k0_tax is not None else "")
        + waits
    )
