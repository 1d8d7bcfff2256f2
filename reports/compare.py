"""`python -m reports.compare <baseline> <candidate>`: AL per drafter, D and domain, candidate
minus baseline, with a paired bootstrap CI over prompts.

Both sides must hold runs over the same prompts (and sampling and seed); the target may differ,
which is the point (a fine-tuned target against the one the drafter was trained for). Each
resample draws prompts (conversations) with replacement and takes the same draws on both sides,
so prompt-to-prompt variation cancels out of the difference. A difference is significant when
its 95% CI excludes zero; over fewer than two prompts it has no CI and is never significant.
Writes compare.csv, compare.md and compare.html (the differences as a forest plot, significant
ones highlighted) into the candidate dir.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from reports.charts import forest_chart
from reports.page import Section, render_page
from reports.runs import CONSISTENT_KEYS, Run, check_consistent, find_runs
from reports.table import cell, markdown_table, text_table
from speclens.errors import ArgumentParser, SpeclensError, guarded
from speclens.metrics import BOOTSTRAP_SAMPLES, MIN_REQUESTS_FOR_CI, per_request, resample_indices
from speclens.records import read_parquet
from speclens.run_files import REQUESTS_FILE, STEPS_FILE
from speclens.segments import SEGMENTS

COMPARE_COLUMNS = [
    "drafter",
    "d",
    "domain",
    "n_requests",
    "baseline_al",
    "candidate_al",
    "al_diff",
    "diff_ci95_lo",
    "diff_ci95_hi",
    "significant",
    "segment",
]
# The target may differ between the two sides; nothing else that shapes acceptance may.
PAIRED_KEYS = tuple(k for k in CONSISTENT_KEYS if k != "fingerprints.target") + ("config.chat_template_kwargs",)


def _per_request(steps: pd.DataFrame, request_ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Accepted tokens and drafted steps per request, in `request_ids` order (0 where none)."""
    totals = per_request(steps).reindex(request_ids, fill_value=0)
    return totals["accepted"].to_numpy(dtype=float), totals["drafts"].to_numpy(dtype=float)


def paired_al_difference(
    baseline_steps: pd.DataFrame,
    candidate_steps: pd.DataFrame,
    request_ids: list[str],
    seed: int = 0,
    samples: int = BOOTSTRAP_SAMPLES,
) -> dict:
    """Pooled AL on each side over `request_ids`, their difference and its paired 95% CI (none
    over fewer than MIN_REQUESTS_FOR_CI prompts, and then never significant)."""
    acc_b, n_b = _per_request(baseline_steps, request_ids)
    acc_c, n_c = _per_request(candidate_steps, request_ids)
    if not n_b.sum() or not n_c.sum():
        al_b = al_c = diff = lo = hi = None
    else:
        al_b, al_c = float(1 + acc_b.sum() / n_b.sum()), float(1 + acc_c.sum() / n_c.sum())
        diff, lo, hi = al_c - al_b, None, None
        if len(request_ids) >= MIN_REQUESTS_FOR_CI:
            idx = resample_indices(seed, samples, len(request_ids))
            with np.errstate(invalid="ignore", divide="ignore"):
                diffs = (1 + acc_c[idx].sum(1) / n_c[idx].sum(1)) - (1 + acc_b[idx].sum(1) / n_b[idx].sum(1))
            lo, hi = (float(v) for v in np.nanpercentile(diffs, [2.5, 97.5]))
    return {
        "baseline_al": al_b,
        "candidate_al": al_c,
        "al_diff": diff,
        "diff_ci95_lo": lo,
        "diff_ci95_hi": hi,
        "significant": lo is not None and (lo > 0 or hi < 0),
    }


def _speculative_runs(root: Path) -> dict[tuple[str, int], Run]:
    runs: dict[tuple[str, int], Run] = {}
    for run in find_runs(root):
        if run.summary.d is None:
            continue
        key = (run.summary.mechanism, run.summary.d)
        if key in runs:
            raise SpeclensError(f"{root} holds drafter={key[0]} d={key[1]} twice ({runs[key].path} and {run.path}).")
        runs[key] = run
    if not runs:
        raise SpeclensError(f"{root}: no finished speculative runs (summary.json) in it.")
    return runs


def _check_same_prompts(base: Run, cand: Run, base_requests: pd.DataFrame, cand_requests: pd.DataFrame) -> None:
    b_ids, c_ids = set(base_requests.request_id), set(cand_requests.request_id)
    if b_ids != c_ids:
        only_b, only_c = sorted(b_ids - c_ids), sorted(c_ids - b_ids)
        raise SpeclensError(
            f"{base.path} and {cand.path} ran different prompts: {len(only_b)} only in the baseline "
            f"(e.g. {', '.join(only_b[:3]) or '-'}), {len(only_c)} only in the candidate "
            f"(e.g. {', '.join(only_c[:3]) or '-'}). Compare runs over the same dataset and num_requests."
        )
    if base.get("fingerprints.dataset") != cand.get("fingerprints.dataset"):
        raise SpeclensError(
            f"{base.path} and {cand.path} have the same request ids but different prompt text (dataset "
            f"fingerprint {base.get('fingerprints.dataset')} vs {cand.get('fingerprints.dataset')})."
        )


def _check_same_setting(base: Run, cand: Run) -> None:
    """The same drafter settings and batch sizes on both sides (the target may differ)."""
    for what, key in (("drafter settings", "config.drafter"), ("batch sizes", "config.batch_sizes")):
        if base.get(key) != cand.get(key):
            raise SpeclensError(
                f"{base.path} and {cand.path} were measured with different {what} ({key}: {base.get(key)} vs "
                f"{cand.get(key)}); compare runs of the same setting."
            )


def compare(baseline_dir: Path, candidate_dir: Path, seed: int = 0) -> tuple[pd.DataFrame, list[str]]:
    """The comparison table and notes on runs found on one side only."""
    if baseline_dir.resolve() == candidate_dir.resolve():
        raise SpeclensError(f"{baseline_dir} is given as both baseline and candidate; compare two different dirs.")
    base_runs, cand_runs = _speculative_runs(baseline_dir), _speculative_runs(candidate_dir)
    check_consistent(list(base_runs.values()) + list(cand_runs.values()), PAIRED_KEYS)
    rows = []
    for key in sorted(base_runs.keys() & cand_runs.keys()):
        base, cand = base_runs[key], cand_runs[key]
        _check_same_setting(base, cand)
        b_req, c_req = read_parquet(base.path / REQUESTS_FILE), read_parquet(cand.path / REQUESTS_FILE)
        _check_same_prompts(base, cand, b_req, c_req)
        b_steps, c_steps = read_parquet(base.path / STEPS_FILE), read_parquet(cand.path / STEPS_FILE)
        domains = b_req.groupby("domain")["request_id"].unique()
        groups = [("all", sorted(set(b_req.request_id)))] + [(dom, sorted(ids)) for dom, ids in domains.items()]
        # With a reasoning boundary on both sides, each segment is compared too (its steps on each side).
        segments = ["all"] + (list(SEGMENTS) if "segment" in b_steps.columns and "segment" in c_steps.columns else [])
        for domain, ids in groups:
            b_part = b_steps[b_steps.domain == domain] if domain != "all" else b_steps
            c_part = c_steps[c_steps.domain == domain] if domain != "all" else c_steps
            for segment in segments:
                b_seg = b_part if segment == "all" else b_part[b_part.segment == segment]
                c_seg = c_part if segment == "all" else c_part[c_part.segment == segment]
                figures = paired_al_difference(b_seg, c_seg, ids, seed)
                rows.append(
                    {"drafter": key[0], "d": key[1], "domain": domain, "n_requests": len(ids), "segment": segment}
                    | figures
                )
    notes = [f"only in the baseline: drafter={k[0]} d={k[1]}" for k in sorted(base_runs.keys() - cand_runs.keys())]
    notes += [f"only in the candidate: drafter={k[0]} d={k[1]}" for k in sorted(cand_runs.keys() - base_runs.keys())]
    if not rows:
        raise SpeclensError(f"no (drafter, d) was measured on both sides; {'; '.join(notes)}.")
    return pd.DataFrame(rows, columns=COMPARE_COLUMNS), notes


def display_rows(table: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    header = ["drafter", "D", "domain", "prompts", "baseline AL", "candidate AL", "difference", "95% CI", "significant"]
    segmented = (table.segment != "all").any()
    if segmented:
        header.insert(3, "segment")
    rows = []
    for r in table.itertuples():
        ci = "-" if pd.isna(r.diff_ci95_lo) else f"[{r.diff_ci95_lo:+.3f}, {r.diff_ci95_hi:+.3f}]"
        rows.append(
            [
                r.drafter,
                str(r.d),
                r.domain,
                *([r.segment] if segmented else []),
                str(r.n_requests),
                cell(r.baseline_al, 3),
                cell(r.candidate_al, 3),
                cell(r.al_diff, 3, signed=True),
                ci,
                "yes" if r.significant else "no",
            ]
        )
    return header, rows


def terminal_table(table: pd.DataFrame) -> str:
    header, rows = display_rows(table)
    return text_table(header, rows, left_columns=3)


def write_comparison(baseline_dir: Path, candidate_dir: Path) -> tuple[pd.DataFrame, list[str]]:
    table, notes = compare(baseline_dir, candidate_dir)
    table.to_csv(candidate_dir / "compare.csv", index=False)
    header, rows = display_rows(table)
    md = [
        f"# AL: {candidate_dir} against {baseline_dir}",
        "",
        "Difference = candidate − baseline; 95% CI from a paired bootstrap over prompts.",
        "",
        markdown_table(header, rows),
        "",
    ] + [f"- {n}" for n in notes]
    (candidate_dir / "compare.md").write_text("\n".join(md) + "\n")
    section = Section(
        "AL differences",
        text=[
            "Difference = candidate − baseline; 95% CI from a paired bootstrap over prompts; significant when "
            "the CI excludes zero.",
            *notes,
        ],
        charts=[forest_chart(table)],
        tables=[(header, rows)],
    )
    page = render_page("speclens comparison", f"{candidate_dir} against {baseline_dir}", [section])
    (candidate_dir / "compare.html").write_text(page, encoding="utf-8")
    return table, notes


@guarded
def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="python -m reports.compare", description=__doc__.splitlines()[0])
    parser.add_argument("baseline", type=Path, help="run or sweep dir measured first")
    parser.add_argument("candidate", type=Path, help="run or sweep dir to compare with it (outputs go here)")
    args = parser.parse_args(argv)
    table, notes = write_comparison(args.baseline, args.candidate)
    print(terminal_table(table))
    for note in notes:
        print(note)
    print(f"comparison: {args.candidate / 'compare.csv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
