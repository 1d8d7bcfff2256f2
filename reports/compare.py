"""`python -m reports.compare <baseline> <candidate>`: AL per drafter, D and domain, candidate
minus baseline, with a paired bootstrap CI over prompts.

Both sides must hold runs over the same prompts (and sampling and seed); the target may differ,
which is the point (a fine-tuned target against the one the drafter was trained for). Each
resample draws prompts (conversations) with replacement and takes the same draws on both sides,
so prompt-to-prompt variation cancels out of the difference. A difference is significant when
its 95% CI excludes zero; over fewer than two prompts it has no CI and is never significant.
Writes compare.csv, compare.md and compare.html (the differences as a forest plot, significant
ones highlighted) into the candidate dir.

Where the prompts state their input lengths (dataset=long_context, SPEED-Bench's throughput
splits), every length is compared on its own: the prompt sets' `<tier>@<length>` domains carry it,
and a length spread over several domains gets its own row, domain `all@<length>` (the lengths are
the prompts', so one side's records give them where the other's predate lengths; a note says so).
A row of one length past the target's own window names the context extension it was measured
under (`context_extension`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from reports.curves import length_group
from reports.page import Section, render_page
from reports.plotly_charts import extension_over, forest_chart
from reports.runs import CONSISTENT_KEYS, RunView, check_consistent, find_runs, shown_identity
from reports.table import cell, markdown_table, text_table
from speclens.errors import ArgumentParser, SpeclensError, guarded
from speclens.figures.metrics import BOOTSTRAP_SAMPLES, MIN_REQUESTS_FOR_CI, length_label, per_request, resample_indices
from speclens.figures.summary import WHOLE_RUN_GROUP, RunSummary
from speclens.file_formats.records import read_parquet
from speclens.file_formats.run_files import REQUESTS_FILE, STEPS_FILE
from speclens.provenance import IDENTITY_FIELDS, differences, field_label
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
    "input_tokens",
    "context_extension",
    # Everything the candidate's run and the baseline's differ in, each side's value (pair_labels):
    # the settings changed from their defaults, and the runner, dtype or model runner where they differ.
    "setting",
    "baseline_setting",
    # The two runs paired (their dirs).
    "baseline_run",
    "candidate_run",
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


def _named(key: tuple[str, int, str]) -> str:
    return f"drafter={key[0]} d={key[1]}" + (f" ({key[2]})" if key[2] else "")


def _speculative_runs(root: Path) -> list[RunView]:
    runs = []
    for run in find_runs(root):
        if run.summary.d is None:
            continue
        if run.summary.synthetic_acceptance is not None:
            raise SpeclensError(
                f"{run.path}: its acceptance is synthetic (acceptance.synthetic, set, not measured); compare measured runs."
            )
        runs.append(run)
    if not runs:
        raise SpeclensError(f"{root}: no finished speculative runs (summary.json) in it.")
    return runs


def keyed(root: Path, runs: list[RunView]) -> dict[tuple[str, int, str], RunView]:
    """Each run by (drafter, D, setting), its setting naming what the runs of both sides differ in."""
    found: dict[tuple[str, int, str], RunView] = {}
    for run in runs:
        key = (run.summary.mechanism, run.summary.d, run.setting)
        if key in found:
            raise SpeclensError(f"{root} holds {_named(key)} twice ({found[key].path} and {run.path}).")
        found[key] = run
    return found


def pair_labels(base: RunView, cand: RunView) -> tuple[str, str]:
    """Each side's label of everything the pair differs in: the identity fields where they differ
    (speclens/provenance.py: source, runner, engine.dtype, engine.model_runner) and each side's setting."""
    mine, theirs = base.provenance, cand.provenance
    differ = [name for name in IDENTITY_FIELDS if name != "setting" and getattr(mine, name) != getattr(theirs, name)]

    def label(run: RunView) -> str:
        found = run.provenance
        parts = [field_label(found, name) for name in differ]
        return ", ".join(parts + ([run.axis_setting] if run.axis_setting else []))

    return label(base), label(cand)


def _check_same_prompts(base: RunView, cand: RunView, base_requests: pd.DataFrame, cand_requests: pd.DataFrame) -> None:
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


def _check_same_setting(base: RunView, cand: RunView) -> None:
    """The same drafter settings and batch sizes on both sides. The target may differ, and so may
    the draft checkpoint (a retrained or quantized draft: compare() names it) and the settings of
    speclens/provenance.py SETTING_KEYS (drafter.sample_method, drafter.parallel_drafting)."""

    def kept(run: RunView, key: str) -> Any:
        value = run.get(key)
        free = ("sample_method", "parallel_drafting", "model")
        return {k: v for k, v in value.items() if k not in free} if isinstance(value, dict) else value

    for what, key in (("drafter settings", "config.drafter"), ("batch sizes", "config.batch_sizes")):
        if kept(base, key) != kept(cand, key):
            raise SpeclensError(
                f"{base.path} and {cand.path} were measured with different {what} ({key}: {base.get(key)} vs "
                f"{cand.get(key)}); compare runs of the same setting."
            )


def own_length_groups(summary: RunSummary) -> list[str]:
    """The length labels that need a row of their own: each length whose prompts are neither the
    whole run's (one length) nor one `<tier>@<length>` domain's (that row already is the length's)."""
    own = []
    for label, g in (summary.by_length or {}).items():
        whole = g.n_requests == summary.n_requests
        one_domain = any(
            domain.endswith(f"@{label}") and figures.n_requests == g.n_requests
            for domain, figures in summary.by_domain.items()
        )
        if not whole and not one_domain:
            own.append(label)
    return own


def _lengths(requests: pd.DataFrame) -> pd.Series:
    """Each prompt's input length (request_id -> tokens); empty where the records carry none."""
    if "input_tokens" not in requests.columns:
        return pd.Series(dtype="int64")
    known = requests.dropna(subset=["input_tokens"])
    return known.groupby("request_id")["input_tokens"].first().astype("int64")


def prompt_lengths(
    base: RunView, cand: RunView, base_requests: pd.DataFrame, cand_requests: pd.DataFrame
) -> tuple[pd.Series, RunView | None, str | None]:
    """The prompts' input lengths, the run whose records gave them (None: neither side's records
    carry lengths) and a note where only one side's do (records from before lengths were kept)."""
    b, c = _lengths(base_requests), _lengths(cand_requests)
    if b.empty and c.empty:
        return b, None, None
    if b.empty or c.empty:
        (given, by), (other, without) = ((c, cand), ("baseline", base)) if b.empty else ((b, base), ("candidate", cand))
        note = (
            f"input lengths from {by.path}'s records: the {other}'s ({without.path}) carry none (measured before "
            "speclens kept them); the prompts are the same, so each length is compared on both sides"
        )
        return given, by, note
    both = b.index.intersection(c.index)
    if not b[both].equals(c[both]):
        differs = next(r for r in both if b[r] != c[r])
        raise SpeclensError(
            f"{base.path} and {cand.path} give prompt {differs} different input lengths ({b[differs]} vs {c[differs]}); "
            "compare runs over the same prompts."
        )
    return c, cand, None


def comparison_groups(
    requests: pd.DataFrame, lengths: pd.Series, lengths_of: RunView | None
) -> list[tuple[str, list[str]]]:
    """(group, its request ids): `all`, every domain, and each length that needs its own row."""
    domains = requests.groupby("domain")["request_id"].unique()
    groups = [(WHOLE_RUN_GROUP, sorted(set(requests.request_id)))]
    groups += [(domain, sorted(ids)) for domain, ids in domains.items()]
    if lengths_of is not None:
        labels = lengths.map(length_label)
        for label in own_length_groups(lengths_of.summary):
            groups.append((length_group(label), sorted(labels.index[labels == label])))
    return groups


def group_extension(base: RunView, cand: RunView, lengths: list[int]) -> str:
    """The context extension a group of prompts of these lengths was measured under on each side
    (reports/plotly_charts.py extension_over): one name where both agree, both sides' where they differ,
    "" where none is past its target's window."""
    on_base = extension_over(base.summary.context_window, lengths)
    on_cand = extension_over(cand.summary.context_window, lengths)
    if on_base == on_cand:
        return on_base or ""
    return f"baseline {on_base or 'native window'}, candidate {on_cand or 'native window'}"


def run_lengths(runs: dict[tuple[str, int], RunView]) -> dict[str, int]:
    """The input lengths the runs' prompts state, label -> tokens."""
    return {label: g.input_tokens for run in runs.values() for label, g in (run.summary.by_length or {}).items()}


def lengths_named(lengths: dict[str, int]) -> str:
    """Length labels for a message, shortest first: "300, 1k, 32k", or "none"."""
    if not lengths:
        return "none (its prompts state no input lengths)"
    return ", ".join(sorted(lengths, key=lambda label: lengths[label] or 0))


def _check_same_lengths(baseline_dir: Path, base_runs: dict, candidate_dir: Path, cand_runs: dict) -> None:
    """Runs over prompts of other input lengths are refused naming the lengths of each side; the
    same prompts with lengths on one side only (records from before lengths were kept) are compared."""
    base_lengths, cand_lengths = run_lengths(base_runs), run_lengths(cand_runs)
    same_prompts = {r.get("fingerprints.dataset") for r in base_runs.values()} == {
        r.get("fingerprints.dataset") for r in cand_runs.values()
    }
    if base_lengths.keys() == cand_lengths.keys() or same_prompts:
        return
    raise SpeclensError(
        f"{baseline_dir} was measured at input lengths {lengths_named(base_lengths)} and {candidate_dir} at "
        f"{lengths_named(cand_lengths)}: each length is compared with itself only; measure both over the same "
        "prompts and lengths (dataset=, dataset.input_tokens=)."
    )


def compare_pair(key: tuple[str, int, str], base: RunView, cand: RunView, seed: int) -> tuple[list[dict], str | None]:
    """One (drafter, D)'s rows: every group, and each segment where both sides split thinking from
    the answer; and the note on where the input lengths came from, if any."""
    _check_same_setting(base, cand)
    b_req, c_req = read_parquet(base.path / REQUESTS_FILE), read_parquet(cand.path / REQUESTS_FILE)
    _check_same_prompts(base, cand, b_req, c_req)
    lengths, lengths_of, note = prompt_lengths(base, cand, b_req, c_req)
    b_steps, c_steps = read_parquet(base.path / STEPS_FILE), read_parquet(cand.path / STEPS_FILE)
    labels = pair_labels(base, cand)
    # With a reasoning boundary on both sides, each segment is compared too (its steps on each side).
    segments = ["all"] + (list(SEGMENTS) if "segment" in b_steps.columns and "segment" in c_steps.columns else [])
    rows = []
    for domain, ids in comparison_groups(b_req, lengths, lengths_of):
        b_part = b_steps if domain == WHOLE_RUN_GROUP else b_steps[b_steps.request_id.isin(ids)]
        c_part = c_steps if domain == WHOLE_RUN_GROUP else c_steps[c_steps.request_id.isin(ids)]
        known = lengths.reindex(ids)
        tokens = int(known.iloc[0]) if known.notna().all() and known.nunique() == 1 else None
        group_lengths = [int(t) for t in known.dropna().unique()]
        where = {"input_tokens": tokens, "context_extension": group_extension(base, cand, group_lengths)}
        for segment in segments:
            b_seg = b_part if segment == "all" else b_part[b_part.segment == segment]
            c_seg = c_part if segment == "all" else c_part[c_part.segment == segment]
            figures = paired_al_difference(b_seg, c_seg, ids, seed)
            group = {"drafter": key[0], "d": key[1], "domain": domain, "n_requests": len(ids), "segment": segment}
            runs = {"baseline_run": str(base.path), "candidate_run": str(cand.path)}
            rows.append(group | figures | where | dict(zip(("baseline_setting", "setting"), labels)) | runs)
    return rows, note


RunKey = tuple[str, int, str]


def paired_runs(
    base_runs: dict[RunKey, RunView], cand_runs: dict[RunKey, RunView]
) -> tuple[list[tuple[RunKey, RunView, RunView]], list[RunKey], list[RunKey]]:
    """(key, baseline run, candidate run) per pair, and the keys left on each side. Runs pair by
    (drafter, D, engine setting); a (drafter, D) left with one run on each side pairs across its
    settings (an FP8 KV cache dir against a default one: the comparison is of the setting)."""
    pairs = [(k, base_runs[k], cand_runs[k]) for k in sorted(base_runs.keys() & cand_runs.keys())]
    left_base = sorted(base_runs.keys() - cand_runs.keys())
    left_cand = sorted(cand_runs.keys() - base_runs.keys())
    for b in list(left_base):
        mine = [c for c in left_cand if c[:2] == b[:2]]
        if len(mine) == 1 and sum(k[:2] == b[:2] for k in left_base) == 1:
            (c,) = mine
            pairs.append((c, base_runs[b], cand_runs[c]))
            left_base.remove(b)
            left_cand.remove(c)
    return sorted(pairs, key=lambda p: p[0]), left_base, left_cand


def compare(baseline_dir: Path, candidate_dir: Path, seed: int = 0) -> tuple[pd.DataFrame, list[str]]:
    """The comparison table and notes on runs found on one side only."""
    if baseline_dir.resolve() == candidate_dir.resolve():
        raise SpeclensError(f"{baseline_dir} is given as both baseline and candidate; compare two different dirs.")
    base_list, cand_list = _speculative_runs(baseline_dir), _speculative_runs(candidate_dir)
    both = shown_identity(base_list + cand_list)
    base_runs = keyed(baseline_dir, both[: len(base_list)])
    cand_runs = keyed(candidate_dir, both[len(base_list) :])
    _check_same_lengths(baseline_dir, base_runs, candidate_dir, cand_runs)
    check_consistent(list(base_runs.values()) + list(cand_runs.values()), PAIRED_KEYS)
    rows, length_notes = [], set()
    pairs, only_base, only_cand = paired_runs(base_runs, cand_runs)
    for key, base, cand in pairs:
        pair_rows, note = compare_pair(key, base, cand, seed)
        rows += pair_rows
        length_notes |= {note} if note else set()
        drafts = [run.get("config.drafter.model") for run in (base, cand)]
        if drafts[0] != drafts[1]:
            length_notes.add(f"{_named(key)}: another draft checkpoint, drafter.model {drafts[0]} → {drafts[1]}")
        beyond = differences(base.provenance.but(setting=""), cand.provenance.but(setting=""))
        if beyond:
            length_notes.add(
                f"{_named(key)}: the two runs differ in more than the setting ({'; '.join(beyond)}): "
                "the difference is theirs together, not one setting's"
            )
    length_notes |= set(unmeasured_notes(pairs))
    notes = [f"only in the baseline: {_named(k)}" for k in only_base]
    notes += [f"only in the candidate: {_named(k)}" for k in only_cand]
    if not rows:
        raise SpeclensError(f"no (drafter, d) was measured on both sides; {'; '.join(notes)}.")
    notes += sorted(length_notes)
    table = pd.DataFrame(rows, columns=COMPARE_COLUMNS).astype({"input_tokens": "Int64"})
    return table, notes


def unmeasured_notes(pairs: list[tuple[RunKey, RunView, RunView]]) -> list[str]:
    """What the compared figures are where they were not measured (speclens/provenance.py): one
    note for both sides where they agree, else one per side."""
    sides = [
        {run.provenance.label() for _, *both in pairs for run in [both[i]] if not run.provenance.measured}
        for i in (0, 1)
    ]
    if sides[0] == sides[1]:
        return [f"both sides' figures are {label}, not measured" for label in sorted(sides[0])]
    return [
        f"the {side}'s figures are {label}, not measured"
        for side, labels in zip(("baseline", "candidate"), sides)
        for label in sorted(labels)
    ]


def setting_shown(baseline: str, candidate: str) -> str:
    """One side's engine setting, or `baseline's → candidate's` where they differ."""
    if baseline == candidate:
        return candidate or "engine defaults"
    return f"{baseline or 'engine defaults'} → {candidate or 'engine defaults'}"


def display_rows(table: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    header = ["drafter", "D", "domain", "prompts", "baseline AL", "candidate AL", "difference", "95% CI", "significant"]
    segmented = (table.segment != "all").any()
    if segmented:
        header.insert(3, "segment")
    extended = (table.context_extension != "").any()
    if extended:
        header.append("context extension")
    with_settings = ((table.setting != "") | (table.baseline_setting != "")).any()
    if with_settings:
        header.insert(1, "setting")
    rows = []
    for r in table.itertuples():
        ci = "-" if pd.isna(r.diff_ci95_lo) else f"[{r.diff_ci95_lo:+.3f}, {r.diff_ci95_hi:+.3f}]"
        rows.append(
            [
                r.drafter,
                *([setting_shown(r.baseline_setting, r.setting)] if with_settings else []),
                str(r.d),
                r.domain,
                *([r.segment] if segmented else []),
                str(r.n_requests),
                cell(r.baseline_al, 3),
                cell(r.candidate_al, 3),
                cell(r.al_diff, 3, signed=True),
                ci,
                "yes" if r.significant else "no",
                *([r.context_extension or "-"] if extended else []),
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
