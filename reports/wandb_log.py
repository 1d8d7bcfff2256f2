"""`logger=wandb`: every run, and every sweep's AL-vs-D curves and ranking, logged to Weights & Biases.

Runs are grouped by sweep (the sweep dir's name, or logger.group) and tagged with drafter, D,
domain set and target fingerprint, so a dashboard can filter and compare. WANDB_MODE=offline
writes under the run dir's wandb/ folder with no network (`wandb sync` uploads it later).
Configs are logged with secret-looking values redacted (speclens/redact.py).
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd

from reports.table import median_ms
from speclens.figures.summary import RunSummary
from speclens.redact import redact

# wandb refuses tags longer than 64 characters.
MAX_TAG = 64


def run_tags(summary: RunSummary, stamp: dict[str, Any] | None = None) -> list[str]:
    target = summary.fingerprints.target or "unknown"
    found = summary.provenance_of(stamp or {})
    tags = [
        # what its figures are: a dashboard filters fake and synthetic runs out by it
        f"source={found.source}",
        f"drafter={summary.drafter}",
        f"d={summary.d}",
        f"domains={'+'.join(sorted(summary.by_domain))}",
        f"target={target.split(':')[-1][:16]}",
    ]
    return [t[:MAX_TAG] for t in tags]


def summary_figures(summary: RunSummary) -> dict[str, Any]:
    """The flat headline figures a dashboard's run table shows."""
    lo, hi = summary.al_ci95 or (None, None)
    flat: dict[str, Any] = {
        "al": summary.al,
        "al_ci95_lo": lo,
        "al_ci95_hi": hi,
        "al_request_weighted": summary.al_request_weighted,
        "tokens_per_step": summary.tokens_per_step,
        "n_requests": summary.n_requests,
        "n_steps": summary.n_steps,
        "speedup": summary.speedup,
        "lossless_identical": summary.lossless.identical if summary.lossless else None,
        "output_tokens_per_s": summary.timing.output_tokens_per_s,
        "al_emitted": summary.al_emitted,
        "diagnostics": ",".join(d.code for d in summary.diagnostics or []),
    }
    for key, value in (summary.al_per_request or {}).items():
        flat[f"al_per_request/{key}"] = value
    peers = summary.peer_figures
    if peers is not None and peers.specdec_bench is not None:
        flat["peer/specdec_bench/Average_AL"] = peers.specdec_bench.Average_AL
    if peers is not None and peers.aiperf is not None:
        flat["peer/aiperf/spec_decode_acceptance_length"] = peers.aiperf.spec_decode_acceptance_length
    for domain, figures in summary.by_domain.items():
        flat[f"al/{domain}"] = figures.al
        flat[f"tokens_per_step/{domain}"] = figures.tokens_per_step
        for segment, f in (figures.by_segment or {}).items():
            flat[f"al/{domain}/{segment}"] = f.al
    for segment, f in (summary.by_segment or {}).items():
        flat[f"al/{segment}"] = f.al
        flat[f"tokens_per_step/{segment}"] = f.tokens_per_step
        flat[f"share_of_output_tokens/{segment}"] = f.share_of_output_tokens
    for k, rate in enumerate(summary.per_position_acceptance or [], start=1):
        flat[f"acceptance/pos{k}"] = rate
    for point in summary.operating_points:
        b = point.batch_size
        flat[f"speedup/B{b}"] = point.speedup
        flat[f"predicted_speedup/B{b}"] = point.predicted_speedup
        flat[f"t_verif_ms/B{b}"] = median_ms(point.t_verif)
        flat[f"t_draft_ms/B{b}"] = point.t_draft_ms
    return flat


def _tables(summary: RunSummary) -> dict[str, pd.DataFrame]:
    domains = [
        {
            "domain": dom,
            "al": f.al,
            "al_ci95_lo": (f.al_ci95 or [None, None])[0],
            "al_ci95_hi": (f.al_ci95 or [None, None])[1],
            "tokens_per_step": f.tokens_per_step,
            "n_requests": f.n_requests,
        }
        for dom, f in summary.by_domain.items()
    ]
    per_pos = summary.per_position_acceptance or []
    conditional = summary.conditional_acceptance or [None] * len(per_pos)
    histogram = summary.acceptance_histogram or []
    points = [
        {
            "batch_size": p.batch_size,
            "al": p.al,
            "tokens_per_step": p.tokens_per_step,
            "output_tokens_per_s": p.output_tokens_per_s,
            "speedup": p.speedup,
            "predicted_speedup": p.predicted_speedup,
            "t_verif_ms": median_ms(p.t_verif),
            "t_verif_spec_ms": median_ms(p.t_verif_spec),
            "t_draft_ms": p.t_draft_ms,
        }
        for p in summary.operating_points
    ]
    bins = [{"from": b.from_, "to": b.to, "n_steps": b.n_steps, "al": b.al} for b in summary.al_by_position]
    output_bins = [
        {"from": b.from_, "to": b.to, "n_steps": b.n_steps, "al": b.al} for b in summary.al_by_output_position or []
    ]
    return {
        "per_domain": pd.DataFrame(domains),
        "per_position_acceptance": pd.DataFrame(
            {"position": range(1, len(per_pos) + 1), "acceptance": per_pos, "conditional": conditional}
        ),
        "acceptance_histogram": pd.DataFrame({"accepted": range(len(histogram)), "steps": histogram}),
        "al_by_position": pd.DataFrame(bins, columns=["from", "to", "n_steps", "al"]),
        "al_by_output_position": pd.DataFrame(output_bins, columns=["from", "to", "n_steps", "al"]),
        "operating_points": pd.DataFrame(points),
    }


def _init(logger: Any, out_dir: Path, **kwargs: Any):
    """A wandb run that records what speclens logs and nothing of the process: no command line
    (it may hold credentials given as overrides), no environment metadata, no code or git state."""
    # wandb is loaded only with logger=wandb.
    import wandb

    settings = wandb.Settings(
        console="off", silent=True, x_disable_meta=True, save_code=False, disable_git=True, program="speclens"
    )
    argv = sys.argv
    sys.argv = [argv[0]]  # wandb reads the command line from sys.argv when the run starts
    try:
        return wandb.init(
            project=logger.project,
            entity=logger.entity,
            dir=str(out_dir),
            reinit="finish_previous",
            settings=settings,
            **kwargs,
        )
    finally:
        sys.argv = argv


def log_run(out_dir: Path, summary: RunSummary, stamp: dict[str, Any], logger: Any, group: str | None) -> None:
    # wandb is loaded only with logger=wandb.
    import wandb

    config = redact(
        {
            "drafter": summary.drafter,
            "d": summary.d,
            "dataset": summary.dataset,
            "runner": summary.runner,
            "provenance": summary.provenance_of(stamp).to_dict(),
            "config": stamp.get("config"),
            "fingerprints": asdict(summary.fingerprints),
            "versions": summary.versions,
            "git_sha": summary.git_sha,
            "speculative_config": stamp.get("speculative_config"),
        }
    )
    name = summary.drafter + (f"-d{summary.d}" if summary.d is not None else "")
    run = _init(
        logger,
        out_dir,
        group=group or logger.group,
        job_type="run",
        name=name,
        tags=run_tags(summary, stamp) + list(logger.tags),
        config=config,
    )
    try:
        run.summary.update(summary_figures(summary) | {"source": summary.provenance_of(stamp).source})
        tables = {key: wandb.Table(dataframe=frame) for key, frame in _tables(summary).items() if not frame.empty}
        plots = {}
        if "per_position_acceptance" in tables:
            plots["plot/per_position_acceptance"] = wandb.plot.bar(
                tables["per_position_acceptance"], "position", "acceptance", title="Per-position acceptance"
            )
        if "acceptance_histogram" in tables:
            plots["plot/acceptance_histogram"] = wandb.plot.bar(
                tables["acceptance_histogram"], "accepted", "steps", title="Acceptance histogram"
            )
        if "al_by_position" in tables:
            plots["plot/al_by_position"] = wandb.plot.line(
                tables["al_by_position"], "from", "al", title="AL by context position"
            )
        if "al_by_output_position" in tables:
            plots["plot/al_by_output_position"] = wandb.plot.line(
                tables["al_by_output_position"], "from", "al", title="AL by output position"
            )
        run.log({f"table/{k}": t for k, t in tables.items()} | plots)
    finally:
        run.finish()


# What makes one line of an AL-vs-D plot: points of one drafter in one mode and identity.
LINE_KEY = ["drafter", "proposer", "temperature", "chat_template_kwargs", "setting"]


def curve_lines(curves: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """One domain's curve rows as lines, each keyed by its drafter and by every part of its mode
    (proposer, temperature, chat template, setting) the lines differ in: two dtypes, or an FP8
    cache beside the defaults, are two lines, never one."""
    varying = [k for k in LINE_KEY[1:] if curves[k].nunique(dropna=False) > 1]
    lines = []
    for values, rows in curves.groupby(["drafter", *varying], sort=True, dropna=False):
        values = values if isinstance(values, tuple) else (values,)
        parts = [f"{k}={v:g}" if k == "temperature" else str(v) for k, v in zip(varying, values[1:]) if v != ""]
        lines.append((values[0] + (f" ({', '.join(parts)})" if parts else ""), rows.sort_values("d")))
    return lines


def log_sweep(sweep_dir: Path, curves: pd.DataFrame, ranking: pd.DataFrame | None, logger: Any, group: str) -> None:
    """AL-vs-D tables and line plots per domain, and the ranking, as one run of the sweep's group."""
    # wandb is loaded only with logger=wandb.
    import wandb

    run = _init(
        logger,
        sweep_dir,
        group=group,
        job_type="sweep",
        name=f"sweep {group}",
        tags=[f"sweep={group}"[:MAX_TAG]] + list(logger.tags),
    )
    try:
        # nullable integer columns (curves' input_tokens) as floats: wandb's JSON takes no pd.NA
        nullable = {c: "float64" for c in curves.columns if isinstance(curves[c].dtype, pd.Int64Dtype)}
        logged: dict[str, Any] = {"table/al_vs_d": wandb.Table(dataframe=curves.astype(nullable))}
        for domain, g in curves[curves.segment == "all"].groupby("domain", sort=True):
            series = curve_lines(g)
            logged[f"plot/al_vs_d/{domain}"] = wandb.plot.line_series(
                xs=[s.d.tolist() for _, s in series],
                ys=[s.al.tolist() for _, s in series],
                keys=[key for key, _ in series],
                title=f"AL vs D: {domain}",
                xname="D",
            )
        if ranking is not None:
            logged["table/ranking"] = wandb.Table(dataframe=ranking.astype({"rank": "float64", "d": "float64"}))
        run.log(logged)
        # a point's key names what it is where it is not measured, and its setting: no two collide
        run.summary.update(
            {
                f"al/{r.drafter}/d{r.d}"
                + (f"/{r.setting}" if r.setting else "")
                + ("" if r.source == "measured" else f"/{r.source}"): r.al
                for r in curves[(curves.domain == "all") & (curves.segment == "all")].itertuples()
            }
        )
    finally:
        run.finish()


def log_ladder(out_dir: Path, load: Any, policy: Any, logger: Any) -> None:
    """A load ladder as one run (job_type `load`): every stage as a table row, tokens/s and TPOT
    against the rate per arm as line plots, the crossovers and the load policy in its summary."""
    # wandb is loaded only with logger=wandb.
    import wandb

    source = load.stages[0].provenance.source if load.stages else "unknown"
    drafters = sorted({s.drafter for s in load.stages if s.arm != "plain"})
    run = _init(
        logger,
        out_dir,
        group=logger.group,
        job_type="load",
        name="load-" + ("-".join(drafters) or "plain"),
        tags=[f"source={source}", *(f"drafter={d}" for d in drafters), "load_ladder", *logger.tags][:64],
        config=redact({"provenance": load.stages[0].provenance.to_dict() if load.stages else None}),
    )
    try:
        stages = pd.DataFrame(
            [
                {
                    "arm": s.arm,
                    "drafter": s.drafter,
                    "d": s.d,
                    "request_rate": s.request_rate,
                    "repeat": s.repeat,
                    "achieved_rate": s.achieved_rate,
                    "output_tokens_per_s": s.output_tokens_per_s,
                    "tpot_ms_p50": None if s.tpot_ms is None else s.tpot_ms.p50,
                    "ttft_ms_p50": s.ttft_ms.p50,
                    "mean_in_flight": s.mean_in_flight,
                    "al": s.al,
                    "saturated": s.saturated,
                    "source": s.provenance.source,
                }
                for s in load.stages
            ]
        )
        figures: dict[str, Any] = {"source": source}
        for row in load.crossover:
            key = f"{row.drafter}_d{row.d}/{row.domain}"
            figures[f"crossover/throughput_rate/{key}"] = row.throughput_rate
            figures[f"crossover/tpot_rate/{key}"] = row.tpot_rate
            figures[f"crossover/reached/{key}"] = row.reached
        if policy is not None:
            figures["load_policy/speculate_below_rate"] = policy.speculate_below_rate
            figures["load_policy/d"] = policy.d
            figures["load_policy/switch_at_in_flight"] = policy.switch_at_in_flight
        run.summary.update(figures)
        arms = stages.assign(arm_name=stages["drafter"] + " d=" + stages["d"].astype(str) + " " + stages["arm"])
        lines = arms.groupby(["arm_name", "request_rate"], as_index=False)[
            ["output_tokens_per_s", "tpot_ms_p50"]
        ].mean()
        keys = sorted(lines["arm_name"].unique())
        plots = {
            f"plot/{figure}": wandb.plot.line_series(
                xs=[lines[lines.arm_name == k].request_rate.tolist() for k in keys],
                ys=[lines[lines.arm_name == k][figure].tolist() for k in keys],
                keys=keys,
                title=f"{figure} against the offered rate",
                xname="request_rate",
            )
            for figure in ("output_tokens_per_s", "tpot_ms_p50")
        }
        run.log({"table/stages": wandb.Table(dataframe=stages)} | plots)
    finally:
        run.finish()
