"""`python -m reports.curves <sweep dir>`: AL-vs-D curves per domain and drafter.

Writes curves.parquet and curves.csv (drafter, d, domain, al, al_ci95_lo, al_ci95_hi,
tokens_per_step, source = measured|replayed|estimated|fake, temperature, segment, chat_template_kwargs,
setting (the engine settings changed from their defaults: `kv_cache_dtype=fp8`, `verify.method=block`),
proposer = v1|v2 for n-gram (the model runner whose proposer drafted), empty for the others; domain
`all` is the pooled figure, segment `all` the whole output) and curve_<domain>.png (one
line per drafter, CI band, measured points marked). Runs at several sampling temperatures, or with
several chat_template_kwargs (thinking on, off), or several engine settings (an FP8 KV cache beside
the default), are one more axis: their lines are labelled by it,
and curve_temperature_<domain>.png draws AL against temperature per drafter and D. Runs with a
reasoning boundary add rows per segment (thinking, answer) and curve_segments_<domain>.png.

Runs whose prompts state their lengths (summary.json's `by_length`: dataset=long_context,
SPEED-Bench's throughput splits) add each length's own curve, domain `all@<length>` (e.g.
`all@32k`, beside the prompt sets' `<tier>@<length>` domains), so lengths are never pooled into one
point; `input_tokens` holds the length of every row of one length (those rows and `<tier>@<length>`
domains; empty otherwise), and `context_extension` names the extension a row was measured under
where its length is past the target's own window, followed by those lengths where only some of
its prompts are ("yarn x4 from 8192 at 32k" on `all`); empty otherwise. curve_lengths.png draws AL
against D per drafter and length.

`draft_share`: the share of target passes that verified a draft (speclens/figures/metrics.py draft_share),
so tokens_per_step = 1 + draft_share·(al − 1) less the tokens cut at the turns' ends; for n-gram
each proposer's own (V1 drafts where it finds a match, V2 on every decode step). Empty for segment
rows and where passes were not counted. `runner`, `engine`, `dtype` and `model_runner`: the engine
that computed the point (speclens/provenance.py; `unknown` where the record does not say); runs that
differ in them are lines of their own, their setting naming it. Each row is a CurveRow
(speclens/file_formats/curves_file.py), checked when a replay's curves.parquet is read back.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Collection

import pandas as pd

from drafters import REGISTRY
from reports import png_plots
from reports.plotly_charts import extension_over
from reports.runs import (
    CONSISTENT_ACROSS_TEMPERATURES,
    Replay,
    RunView,
    check_consistent,
    check_one_each,
    find_replays,
    find_runs,
    measured_runs,
    shown_identity,
)
from speclens.errors import ArgumentParser, SpeclensError, guarded
from speclens.figures.metrics import GroupFigures, SegmentFigures
from speclens.figures.summary import WHOLE_RUN_GROUP, RunSummary
from speclens.file_formats.curves_file import CURVE_COLUMNS, CURVES_CSV, read_curves_file, write_curves_files
from speclens.files import output_path

# One point of one curve.
CURVE_KEY = ["drafter", "d", "domain", "segment", "temperature", "chat_template_kwargs", "setting", "proposer"]
WHOLE_OUTPUT = "all"
# A length's own group: every prompt of that length, whatever its domain (`all@32k`).
LENGTH_GROUP_PREFIX = f"{WHOLE_RUN_GROUP}@"
# Where several sources give the same (drafter, d, domain), the first of these wins.
# (A fake run's own point wins over a replay as a measured one does: both are the run's, and the
# fake one is labelled so.)
SOURCE_ORDER = {"measured": 0, "fake": 0, "replayed": 1, "estimated": 2}


def curve_row(
    drafter: str,
    d: int,
    domain: str,
    figures: GroupFigures | SegmentFigures,
    source: str,
    temperature: float = 0.0,
    segment: str = WHOLE_OUTPUT,
    template: str = "",
    proposer: str = "",
    input_tokens: int | None = None,
    extension: str = "",
    setting: str = "",
) -> dict:
    """One curve point from a group's (or a segment's) figures."""
    lo, hi = figures.al_ci95 or [None, None]
    return {
        "drafter": drafter,
        "d": d,
        "domain": domain,
        "al": figures.al,
        "al_ci95_lo": lo,
        "al_ci95_hi": hi,
        "tokens_per_step": figures.tokens_per_step,
        "source": source,
        "temperature": temperature,
        "segment": segment,
        "chat_template_kwargs": template,
        "setting": setting,
        "proposer": proposer,
        "input_tokens": input_tokens,
        "context_extension": extension,
        "draft_share": getattr(figures, "draft_share", None),
    }


def _proposers(drafter: str) -> tuple[str, ...]:
    found = REGISTRY.get(drafter)
    return found.replay_proposers if found is not None else ("",)


def measured_proposer(summary: RunSummary) -> str:
    """The proposer a measured run's curve point belongs to: its model runner's, for a drafter whose
    proposals differ between runners (n-gram), else "" (also where the runner cannot be seen: a
    server, the fake engine). In-process runs from before the runner was recorded ran on V1 (the
    CPU build: no Triton, which Model Runner V2 needs)."""
    if len(_proposers(summary.drafter)) < 2:
        return ""
    recorded = summary.numerics.model_runner if summary.numerics else None
    return recorded or ("v1" if summary.runner == "vllm" else "")


def length_group(label: str) -> str:
    """The group of every prompt of one length: `all@32k`."""
    return LENGTH_GROUP_PREFIX + label


def is_length_group(domain: str) -> bool:
    return domain.startswith(LENGTH_GROUP_PREFIX)


def length_of(domain: str, by_length: dict[str, GroupFigures]) -> int | None:
    """The input length every prompt of `domain` has: a length group's, or a `<tier>@<length>`
    domain's where `<length>` is one of the run's own length buckets; else None."""
    label = domain.rpartition("@")[2] if "@" in domain else None
    figures = by_length.get(label) if label is not None else None
    return figures.input_tokens if figures is not None else None


def group_lengths(domain: str, by_length: dict[str, GroupFigures]) -> list[int]:
    """The input lengths of a group's prompts: every length for `all`, the one length of a length
    group or a `<tier>@<length>` domain; [] where they are not known."""
    if domain == WHOLE_RUN_GROUP:
        return [g.input_tokens for g in by_length.values() if g.input_tokens is not None]
    tokens = length_of(domain, by_length)
    return [] if tokens is None else [tokens]


def measured_groups(summary: RunSummary) -> dict[str, GroupFigures]:
    """`all`, every domain, and each length's own group where the prompts state their lengths."""
    lengths = {length_group(label): g for label, g in (summary.by_length or {}).items()}
    return summary.groups() | lengths


def measured_rows(run: RunView) -> list[dict]:
    s = run.summary
    proposer = measured_proposer(s)
    found = run.provenance
    engine = {k: v for k, v in found.columns().items() if k != "setting"}
    rows = []
    for domain, g in measured_groups(s).items():
        lengths = s.by_length or {}
        extension = extension_over(s.context_window, group_lengths(domain, lengths)) or ""
        point = dict(input_tokens=length_of(domain, lengths), extension=extension, setting=run.setting)
        source = found.source
        rows.append(
            curve_row(s.drafter, s.d, domain, g, source, run.temperature, WHOLE_OUTPUT, run.template, proposer, **point)
            | engine
        )
        rows += [
            curve_row(s.drafter, s.d, domain, f, source, run.temperature, segment, run.template, proposer, **point)
            | engine
            for segment, f in (g.by_segment or {}).items()
        ]
    return rows


def curve_point(run: RunView) -> tuple[str, int, float, str, str]:
    """The (drafter, D, temperature, chat_template_kwargs, setting) a run is drawn at."""
    return run.summary.drafter, run.summary.d, run.temperature, run.template, run.setting


def collect(root: Path, exclude: Collection[Path] = ()) -> pd.DataFrame:
    """Curve rows from every finished run (and replayed curve) under `root`, but for `exclude`.
    Two runs at one curve point are refused, as reports.rank refuses two at one ranking entry."""
    # A run of a draft-length schedule has no one D: it is ranked, not drawn on an AL-vs-D curve.
    # A run at synthetic acceptance has no acceptance of its own to draw.
    runs = [r for r in measured_runs(find_runs(root, exclude)) if r.summary.d is not None and not r.summary.schedule]
    replays = find_replays(root, exclude)
    # one setting label over both: what the runs and the replays differ in, each names
    both = shown_identity([*runs, *replays])
    runs, replays = both[: len(runs)], both[len(runs) :]
    if not runs and not replays:
        raise SpeclensError(f"{root}: no finished speculative runs (summary.json) or replayed curves in it.")
    check_consistent(runs + replays, CONSISTENT_ACROSS_TEMPERATURES)
    check_one_each(
        runs,
        lambda run: [curve_point(run)],
        lambda key: f"drafter={key[0]} d={key[1]} (temperature {key[2]:g}{''.join(', ' + k for k in key[3:] if k)})",
        "draw each setting from its own dir.",
    )
    frames = [pd.DataFrame([row for run in runs for row in measured_rows(run)], columns=CURVE_COLUMNS)]
    # the mode is in a replay's stamp (replays written before curves carried a temperature or a
    # segment: their rows are of the whole output)
    frames += [_replay_rows(r) for r in replays]
    curves = pd.concat([f for f in frames if not f.empty], ignore_index=True)
    curves = curves.assign(_rank=curves["source"].map(SOURCE_ORDER)).sort_values(
        ["drafter", "domain", "segment", "temperature", "chat_template_kwargs", "setting", "d", "_rank"]
    )
    curves = curves.drop_duplicates(CURVE_KEY).drop(columns="_rank")
    curves["context_extension"] = curves["context_extension"].fillna("")
    # a figure that could not be measured (a drafter that never drafted has no AL) is NaN, not None
    figures = {c: "float64" for c in ("al", "al_ci95_lo", "al_ci95_hi", "tokens_per_step")}
    return curves.astype({"d": "int64", "input_tokens": "Int64", **figures}).reset_index(drop=True)


def _replay_rows(replay: Replay) -> pd.DataFrame:
    frame = read_curves_file(replay.path)
    if "segment" not in frame.columns:
        frame["segment"] = WHOLE_OUTPUT
    if "proposer" not in frame.columns:  # replayed before both n-gram proposers were: V1's function
        frame["proposer"] = ["v1" if len(_proposers(d)) > 1 else "" for d in frame.drafter]
    if "input_tokens" not in frame.columns:  # replayed before curves carried lengths
        frame["input_tokens"], frame["context_extension"] = None, ""
    if "draft_share" not in frame.columns:  # replayed before curves carried the share of drafting passes
        frame["draft_share"] = None
    # a point's source is its kind (replayed, estimated); the engine columns say whose outputs
    identity = {k: v for k, v in replay.provenance.columns().items() if k not in ("setting", "source")}
    frame = frame.assign(
        temperature=replay.temperature, chat_template_kwargs=replay.template, setting=replay.setting, **identity
    )
    return frame[CURVE_COLUMNS]


# Longest domain kept whole in a file name (curve_<domain>.png, report_al_vs_d_<domain>.png).
MAX_NAME_CHARS = 64


def safe_name(domain: str) -> str:
    """A file-name part for `domain`, one per domain: the domain itself where it is short and
    plain; else its plain characters, cut short, and a hash of the whole (so `a/b` and `a_b`,
    or two long names alike at the start, never share a file)."""
    plain = "".join(c if c.isascii() and (c.isalnum() or c in "-_.@+") else "_" for c in domain)
    if plain == domain and 0 < len(domain) <= MAX_NAME_CHARS and not domain.startswith("."):
        return domain
    return f"{plain[: MAX_NAME_CHARS - 13]}-{hashlib.sha256(domain.encode()).hexdigest()[:12]}"


def write_curves(root: Path, out_dir: Path | None = None, exclude: Collection[Path] = ()) -> pd.DataFrame:
    curves = collect(root, exclude)
    out_dir = out_dir or root
    out_dir.mkdir(parents=True, exist_ok=True)
    write_curves_files(curves, out_dir)
    whole = curves[curves.segment == WHOLE_OUTPUT]
    lengths = whole[whole.domain.map(is_length_group)]
    if not lengths.empty:
        (out_dir / "curve_lengths.png").write_bytes(png_plots.al_vs_d_by_length(lengths))
    for domain in sorted(d for d in curves.domain.unique() if not is_length_group(d)):
        (out_dir / f"curve_{safe_name(domain)}.png").write_bytes(png_plots.al_vs_d(whole, domain))
        if curves.temperature.nunique() > 1:
            (out_dir / f"curve_temperature_{safe_name(domain)}.png").write_bytes(
                png_plots.al_vs_temperature(whole, domain)
            )
        segments = curves[(curves.domain == domain) & (curves.segment != WHOLE_OUTPUT)]
        if not segments.empty:
            (out_dir / f"curve_segments_{safe_name(domain)}.png").write_bytes(
                png_plots.al_vs_d_by_segment(segments, domain)
            )
    return curves


@guarded
def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="python -m reports.curves", description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--out", default=None, help="where to write (default: the sweep dir)")
    args = parser.parse_args(argv)
    if args.out is not None:
        args.out = output_path(args.out, "--out")
    curves = write_curves(args.sweep_dir, args.out)
    print(curves.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    print(f"curves: {(args.out or args.sweep_dir) / CURVES_CSV}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
