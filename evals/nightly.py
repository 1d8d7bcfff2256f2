"""`python -m evals.nightly target.model=<new checkpoint> baseline=<dir> [history=<path>] [key=value ...]`:
re-measure the suite after a target fine-tune and fail on an acceptance regression.

Runs every job of the suite (conf/experiment/nightly.yaml, or suite=<path>) into the night's
dir (out=<dir>, default outputs/nightly/<night>, night=<label> defaulting to today's UTC date),
compares each (drafter, D, domain) with the baseline dir (reports.compare: paired bootstrap over
prompts), appends the night to the history store (parquet, one row per drafter, D, domain and
night; default <baseline's parent>/history.parquet) and redraws its trend plot beside it.
Where the prompts state their input lengths, each length is its own group (a `<tier>@<length>`
domain, or `all@<length>` for a length spread over several domains: reports.compare), never
averaged with another length; a group past the target's own window names the context extension
it was measured under (`context_extension`).

Exit status: 1 when any (drafter, domain) AL fell by more than `threshold` (AL units; the
suite's value unless threshold=<x> is given) with its CI below zero, each named; 0 otherwise.
Like is compared with like: a night whose figures would differ from the baseline's in what they are
(source, runner, engine, engine.dtype, engine.model_runner: a fake night, another dtype) is refused
before it runs, unless intended=<field>[,<field>] names each difference as meant; a verdict line
names every difference between the pair it compares.
Without `baseline` the night's results are a new baseline and it exits 0. The history is
written once, at the end, atomically: a night that dies leaves it as it was, and running the
same night again skips the jobs that finished (their run dirs hold summary.json).
After the history is written: drift.json beside it (the change points in each drafter, D and
domain's AL over the nights, each with what changed with it: reports/drift.py) and, with a
baseline, diagnosis.json in the night's dir (per drafter: its AL change beside the n-gram or
suffix control's, and what to retrain: reports/diagnosis.py).
reference=<yaml> gate=<fraction>: also exit 1 where a (drafter, D, domain)'s AL is below that
fraction of its reference (model -> thinking mode -> drafter -> domain -> K -> AL;
thinking_mode=default|thinking|non_thinking picks the mode); write_reference=<yaml> writes the
night's ALs in that form (speclens/file_formats/reference_file.py).
Any other key=value is an `evals.run` key applied to every job (target.model, dataset.num_requests, ...).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from evals.pipeline.compose import compose_config, to_run_config
from evals.pipeline.plan import RunPlan, make_plan, planned_identity
from evals.pipeline.run_job import TqdmProgress, run
from reports import png_plots
from reports.compare import lengths_named, own_length_groups, terminal_table, write_comparison
from reports.curves import group_lengths, length_group
from reports.diagnosis import write_diagnosis
from reports.drift import change_line, write_drift
from reports.page import Section, render_page
from reports.plotly_charts import extension_over, trend_chart
from reports.runs import RunView, find_runs, measured_runs
from runners.registry import runner_of
from speclens.errors import ConfigError, guarded
from speclens.figures.drift import DEFAULT_LEVEL
from speclens.figures.metrics import GroupFigures, length_label
from speclens.figures.summary import RunSummary
from speclens.file_formats.drift_file import DRIFT_FILE
from speclens.file_formats.reference_file import THINKING_MODES, References, read_references, write_references
from speclens.files import check_folder, exclusive, write_atomic
from speclens.options import number, parse_value, split_own_keys
from speclens.provenance import FIELD_NAMES, Provenance, differences

NIGHTLY_KEYS = (
    "baseline",
    "history",
    "threshold",
    "suite",
    "night",
    "out",
    "intended",
    "reference",
    "gate",
    "write_reference",
    "thinking_mode",
)
# What a night may differ from its baseline in only where intended= names it: a fake night is no
# measurement of the target, and a dtype, runner or engine change moves AL by itself.
GUARDED_FIELDS = ("source", "runner", "engine", "dtype", "model_runner")
TREND_FILE = "trend.png"
TREND_PAGE = "trend.html"  # the same, interactive
DEFAULT_SUITE = Path(__file__).resolve().parent.parent / "conf" / "experiment" / "nightly.yaml"
HISTORY_COLUMNS = [
    "night",
    "night_dir",
    "job",
    "target",
    "target_fingerprint",
    "drafter",
    "d",
    "domain",
    "n_requests",
    "al",
    "baseline_dir",
    "baseline_al",
    "al_diff",
    "diff_ci95_lo",
    "diff_ci95_hi",
    "significant",
    "regressed",
    "context_extension",
    "setting",
    # what the night's figures are (speclens/provenance.py; absent from histories before issue 66)
    "source",
    "runner",
    "engine",
    "dtype",
    "model_runner",
    # the engine's own version (a change point at a vLLM upgrade names it; absent before issue 68)
    "engine_version",
]


@dataclass
class Suite:
    jobs: dict[str, list[str]]
    common: list[str] = field(default_factory=list)
    threshold: float = 0.1

    @classmethod
    def load(cls, path: Path) -> "Suite":
        if not path.is_file():
            raise ConfigError(f"suite={path}: no such file.")
        layout = (
            "needs `jobs` (a mapping of job name to a list of evals.run overrides) and may hold `common` "
            "(a list of overrides) and `threshold` (a number)"
        )
        try:
            raw = OmegaConf.to_container(OmegaConf.load(path))
        except Exception as exc:  # noqa: BLE001 - YAML's and OmegaConf's errors alike: not a suite file
            raise ConfigError(
                f"suite={path}: not readable YAML ({str(exc).splitlines()[0]}); a suite {layout}."
            ) from None
        if not isinstance(raw, dict):
            raise ConfigError(f"suite={path}: a suite {layout}.")
        unknown = sorted(set(raw) - {"jobs", "common", "threshold"})
        jobs, common, threshold = raw.get("jobs"), raw.get("common") or [], raw.get("threshold", 0.1)
        well_formed = (
            not unknown
            and isinstance(jobs, dict)
            and jobs
            and isinstance(common, list)
            and all(isinstance(v, list) for v in jobs.values())
            and isinstance(threshold, (int, float))
        )
        if not well_formed:
            raise ConfigError(
                f"suite={path}: a suite {layout}" + (f"; unknown keys: {', '.join(unknown)}" if unknown else "") + "."
            )
        for name in jobs:  # each job's run dir is <night dir>/<job name>
            check_label(str(name), f"suite={path}: job")
        return cls({str(k): [str(o) for o in v] for k, v in jobs.items()}, [str(o) for o in common], float(threshold))


@dataclass
class NightlyArgs:
    run_overrides: list[str]
    baseline: Path | None
    history: Path
    threshold: float
    suite: Suite
    night: str
    out: Path
    # The identity fields (as FIELD_NAMES names them) the night is meant to differ in from its baseline.
    intended: tuple[str, ...] = ()
    # reference= read, gate= the fraction of its AL below which a (drafter, D, domain) fails
    references: References | None = None
    gate: float | None = None
    write_reference: Path | None = None
    thinking_mode: str = "default"


def parse_intended(value: str) -> tuple[str, ...]:
    """intended=engine.dtype,runner: the identity fields a night may differ in from its baseline."""
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    known = {FIELD_NAMES[f]: f for f in GUARDED_FIELDS}
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise ConfigError(
            f"intended={value}: name the fields the night is meant to differ in from its baseline, among "
            f"{', '.join(known)} (comma-separated)."
        )
    return tuple(known[n] for n in names)


def parse_args(argv: list[str]) -> NightlyArgs:
    own, overrides = split_own_keys(argv, NIGHTLY_KEYS)
    suite = Suite.load(Path(own.get("suite", DEFAULT_SUITE)))
    night = check_label(
        own.get("night") or datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "night",
        "; out=<dir> puts the night anywhere else",
    )
    out = Path(own.get("out") or Path("outputs") / "nightly" / night)
    check_folder(out, "out" if own.get("out") else "night")
    baseline = Path(own["baseline"]) if own.get("baseline") else None
    if baseline is not None and not baseline.is_dir():
        raise ConfigError(
            f"baseline={baseline}: no such folder (give an earlier night's dir, or no baseline "
            "to make this night the baseline)."
        )
    if baseline is not None and baseline.resolve() == out.resolve():
        raise ConfigError(f"baseline={baseline} is this night's own dir; give out=<another dir> or an earlier night.")
    history = Path(own["history"]) if own.get("history") else (baseline or out).resolve().parent / "history.parquet"
    check_history(history)
    try:
        threshold = float(own["threshold"]) if "threshold" in own else suite.threshold
    except ValueError:
        raise ConfigError(f"threshold={own['threshold']}: must be a number (AL units).") from None
    if threshold < 0:
        raise ConfigError(f"threshold={threshold}: must be >= 0.")
    intended = parse_intended(own["intended"]) if "intended" in own else ()
    mode = own.get("thinking_mode", "default")
    if mode not in THINKING_MODES:
        raise ConfigError(f"thinking_mode={mode}: one of {', '.join(THINKING_MODES)}.")
    references = read_references(Path(own["reference"])) if own.get("reference") else None
    gate = None
    if "gate" in own:
        gate = number(parse_value(own["gate"], "gate"), "gate", above=0, at_most=1)
        if references is None:
            raise ConfigError(
                f"gate={own['gate']}: needs reference=<file> (model -> thinking mode -> drafter -> domain -> K -> AL)."
            )
    written = Path(own["write_reference"]) if own.get("write_reference") else None
    if written is not None:
        check_folder(written.parent, "write_reference", str(written))
    return NightlyArgs(
        overrides, baseline, history, threshold, suite, night, out, intended, references, gate, written, mode
    )


def reference_key(target: str) -> list[str]:
    """The names a reference file may know a target by: as the run names it, then its folder's name."""
    return list(dict.fromkeys([target, Path(target).name]))


def below_reference(args: NightlyArgs, rows: pd.DataFrame) -> list[str]:
    """gate=: each (drafter, D, domain) whose AL is below gate x its reference, one line each."""
    if args.references is None or args.gate is None:
        return []
    lines = []
    for r in rows.itertuples():
        reference = next(
            (
                args.references[key]
                for model in reference_key(str(r.target))
                if (key := (model, args.thinking_mode, r.drafter, r.domain, int(r.d))) in args.references
            ),
            None,
        )
        if reference is not None and r.al < args.gate * reference:
            lines.append(
                f"speclens nightly: BELOW REFERENCE drafter={r.drafter} d={r.d} domain={r.domain}: AL {r.al:.3f} < "
                f"{args.gate:g} x reference {reference:.3f} ({args.thinking_mode})"
            )
    return lines


def reference_entries(args: NightlyArgs, rows: pd.DataFrame) -> References:
    """write_reference=: the night's AL per (drafter, D, domain), keyed by its target's folder name."""
    return {
        (Path(str(r.target)).name, args.thinking_mode, r.drafter, r.domain, int(r.d)): float(r.al)
        for r in rows.itertuples()
        if pd.notna(r.al)
    }


def check_label(label: str, key: str, hint: str = "") -> str:
    """A label that names one folder (a night in outputs/nightly/, a job in the night's dir): no
    path (`../x`, `/tmp/x`) that leads out of it."""
    if not label or label in (".", "..") or "/" in label or "\\" in label:
        raise ConfigError(
            f"{key}={label!r}: must name a single folder (e.g. 2026-05-01 or rerun-1: no / or \\, not . or ..){hint}."
        )
    return label


def check_history(history: Path) -> None:
    """history= (and trend.png beside it), before the suite runs rather than after it: an existing
    store must be readable, and a new one creatable."""
    check_folder(history.parent, "history", str(history))
    for path in (history, history.with_name(TREND_FILE)):
        if path.is_dir():
            raise ConfigError(f"history={history}: {path} is a folder; give history=<a file path>.")
        if path.exists() and not os.access(path, os.R_OK | os.W_OK):
            raise ConfigError(
                f"history={history}: {path} is not readable and writable by this user; give history=<another path>."
            )
    if history.exists():
        _read_history(history)


def check_baseline(baseline: Path, plans: list[RunPlan], intended: tuple[str, ...] = ()) -> None:
    """The baseline holds finished runs over the prompts, sampling and seed this night uses, measured
    as this night is (source, runner, engine, dtype, model runner) but where `intended` says
    otherwise: checked before the suite runs, not after hours of measuring."""
    runs = [r for r in measured_runs(find_runs(baseline)) if r.summary.d is not None]
    if not runs:
        raise ConfigError(
            f"baseline={baseline} holds no finished speculative runs (summary.json); give an "
            "earlier night's dir, or no baseline to make this night the baseline."
        )
    for plan in plans:
        check_like_with_like(baseline, runs, plan, intended)
        cfg = plan.config
        mine = {
            "fingerprints.dataset": plan.fingerprints["dataset"],
            "config.sampling.temperature": cfg.sampling.temperature,
            "config.sampling.top_p": cfg.sampling.top_p,
            "config.sampling.max_tokens": cfg.sampling.max_tokens,
            "config.seed": cfg.seed,
        }
        for key, value in mine.items():
            theirs = {r.get(key) for r in runs}
            if value not in theirs:
                what = (
                    other_prompts(runs, plan)
                    if key == "fingerprints.dataset"
                    else f"{key} in {sorted(map(str, theirs))}"
                )
                raise ConfigError(
                    f"baseline={baseline} was measured with {what}; this night's {key} is {value}. "
                    "Compare nights over the same prompts, sampling and seed."
                )


def check_like_with_like(baseline: Path, runs: list[RunView], plan: RunPlan, intended: tuple[str, ...]) -> None:
    """Refuse a night whose figures would differ from its baseline's in what they are (a fake night
    against a measured baseline, another dtype or runner), unless intended= names each difference."""
    own = planned_identity(plan.config, plan.runner, plan.synthetic, plan.target, plan.draft)
    same = [r for r in runs if (r.summary.drafter, r.summary.d) == (plan.drafter.name, plan.d)] or runs
    unintended = list(
        dict.fromkeys(
            line
            for run in same
            for line in differences(run.provenance, own, GUARDED_FIELDS)
            if not _unknown_either_side(line, run.provenance, own)
            and {v: k for k, v in FIELD_NAMES.items()}[line.split(":", 1)[0]] not in intended
        )
    )
    if unintended:
        names = list(dict.fromkeys(line.split(":", 1)[0] for line in unintended))
        raise ConfigError(
            f"baseline={baseline} was measured otherwise than this night's drafter={plan.drafter.name}"
            f"{f' d={plan.d}' if plan.d else ''} would be ({'; '.join(unintended)}; baseline vs night): a change "
            f"there moves AL by itself. Measure the night as the baseline was, or say the change is meant: "
            f"intended={','.join(names)}."
        )


def _unknown_either_side(line: str, a: Provenance, b: Provenance) -> bool:
    """A difference in a field one side does not know (the model runner before vLLM chose it)."""
    name = {v: k for k, v in FIELD_NAMES.items()}[line.split(":", 1)[0]]
    return (
        getattr(a, name) is None or getattr(b, name) is None or (name == "engine" and "server" in (a.runner, b.runner))
    )


def other_prompts(baseline_runs: list[RunView], plan: RunPlan) -> str:
    """What differs in a baseline measured over other prompts: their input lengths where those differ."""
    theirs = {label: g.input_tokens for run in baseline_runs for label, g in (run.summary.by_length or {}).items()}
    mine = {length_label(p.input_tokens): p.input_tokens for p in plan.prompts if p.input_tokens is not None}
    if theirs.keys() == mine.keys():
        return "other prompts"
    return (
        f"other prompts, at input lengths {lengths_named(theirs)} (this night's: {lengths_named(mine)}; each length "
        "is compared with itself only)"
    )


def run_suite(args: NightlyArgs) -> None:
    """Every job into its own dir under the night's dir; finished jobs are skipped. Every job's
    config is composed and planned first, and the baseline checked against them, so a bad key or
    a baseline that cannot be compared stops the night before any engine starts."""

    jobs = {
        name: compose_config([*args.suite.common, *job, *args.run_overrides]) for name, job in args.suite.jobs.items()
    }
    typed = [to_run_config(cfg) for cfg in jobs.values()]
    runner_of(typed[0]).prepare_process(typed[0])
    if args.baseline is not None:
        check_baseline(args.baseline, [make_plan(cfg) for cfg in typed], args.intended)
    for name, cfg in jobs.items():
        print(f"speclens nightly: {name} ({' '.join(args.suite.jobs[name])})", flush=True)
        run(cfg, args.out / name, progress=TqdmProgress)


def night_rows(args: NightlyArgs, comparison: pd.DataFrame | None) -> pd.DataFrame:
    """The night's history rows: its own AL per (drafter, D, domain), and the comparison if any."""
    rows = []
    for measured in find_runs(args.out):
        s = measured.summary
        if s.d is None:
            continue
        lengths = s.by_length or {}
        for domain, group in night_groups(s).items():
            rows.append(
                {
                    "night": args.night,
                    "night_dir": str(args.out.resolve()),
                    "job": measured.path.name,
                    "target": s.target,
                    "target_fingerprint": s.fingerprints.target,
                    "drafter": s.drafter,
                    "d": s.d,
                    "domain": domain,
                    "n_requests": group.n_requests,
                    "al": group.al,
                    "context_extension": extension_over(s.context_window, group_lengths(domain, lengths)) or "",
                    "setting": measured.setting,
                    **{k: v for k, v in measured.provenance.columns().items() if k in GUARDED_FIELDS},
                    "engine_version": measured.provenance.engine_version or "",
                    "_path": str(measured.path),
                }
            )
    frame = pd.DataFrame(rows)
    if comparison is not None and not frame.empty:
        # the history's rows are of whole outputs; the comparison's segments are in compare.csv
        # each row beside its own run's comparison (its setting label there names what the pair differs in)
        own = ["candidate_al", "n_requests", "segment", "input_tokens", "context_extension", "baseline_setting"]
        own += ["setting", "baseline_run"]
        diff = comparison[comparison.segment == "all"].drop(columns=own)
        diff = diff.assign(job_path=diff.pop("candidate_run").map(lambda p: str(Path(p).resolve())))
        frame = frame.assign(job_path=[str(Path(p).resolve()) for p in frame.pop("_path")])
        frame = frame.merge(diff, on=["drafter", "d", "domain", "job_path"], how="left")
        frame["baseline_dir"] = str(args.baseline.resolve()) if args.baseline else None
        frame["regressed"] = regressed(frame, args.threshold)
    return frame.reindex(columns=HISTORY_COLUMNS)


def pair_differences(comparison: pd.DataFrame) -> dict[str, str]:
    """Per night job (its run dir's name), what its figures are beside its baseline's where they
    differ (the source, and each identity field intended= allowed), as its verdict line says it."""
    out: dict[str, str] = {}
    pairs = comparison[comparison.segment == "all"][["baseline_run", "candidate_run"]].drop_duplicates()
    for base_path, cand_path in pairs.itertuples(index=False):
        base, cand = (find_runs(Path(p))[0].provenance for p in (base_path, cand_path))
        lines = differences(base, cand)
        if lines or not cand.measured:
            what = f"; the night's figures are {cand.label()}" + (f", the baseline's {base.label()}" if lines else "")
            out[Path(cand_path).name] = what + (f" (baseline vs night: {'; '.join(lines)})" if lines else "")
    return out


def night_groups(summary: RunSummary) -> dict[str, GroupFigures]:
    """`all`, every domain, and each length spread over several domains (as reports.compare has them)."""
    lengths = summary.by_length or {}
    return summary.groups() | {length_group(label): lengths[label] for label in own_length_groups(summary)}


def regressed(table: pd.DataFrame, threshold: float) -> pd.Series:
    """AL fell by more than `threshold` and the paired CI lies below zero."""
    diff, hi = table["al_diff"].astype(float), table["diff_ci95_hi"].astype(float)
    return (diff < -threshold) & (hi < 0)


def write_trend_page(history: pd.DataFrame, store: Path) -> None:
    """trend.html beside the history store: the nightly AL per (drafter, D), interactive."""
    section = Section(
        "Nightly AL",
        text=[
            f"{history.night.nunique()} night(s) in {store}; a regression (AL fell by more than the threshold "
            "with its CI below zero) is marked x."
        ],
        charts=[trend_chart(history)],
    )
    store.with_name(TREND_PAGE).write_text(render_page("speclens nightly", str(store), [section]), encoding="utf-8")


def append_history(history: Path, rows: pd.DataFrame) -> pd.DataFrame:
    """The store with these rows added, written atomically under a lock (nightlies may share it).
    A (night, target fingerprint, suite job) measured again replaces its earlier rows; two targets
    measured the same night both stay."""
    history.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(history.with_name(history.name + ".lock"), wait=True):
        old = _read_history(history)
        measured = set(zip(rows.night, rows.target_fingerprint, rows.job))
        kept = old[[key not in measured for key in zip(old.night, old.target_fingerprint, old.job)]]
        merged = pd.concat([f for f in (kept, rows) if not f.empty], ignore_index=True).reindex(columns=HISTORY_COLUMNS)
        write_atomic(history, lambda tmp: merged.to_parquet(tmp, index=False))
    return merged


def _read_history(history: Path) -> pd.DataFrame:
    if not history.is_file():
        return pd.DataFrame(columns=HISTORY_COLUMNS)
    try:
        return pd.read_parquet(history).reindex(columns=HISTORY_COLUMNS)
    except (OSError, ValueError) as exc:  # pyarrow's errors for a file that is not parquet
        raise ConfigError(
            f"history={history} is not a readable history file ({exc}); move it aside or give history=<another path>."
        ) from None


def nightly(args: NightlyArgs) -> int:
    run_suite(args)
    comparison = None
    if args.baseline is not None:
        comparison, notes = write_comparison(args.baseline, args.out)
        print(terminal_table(comparison))
        for note in notes:
            print(note)
    rows = night_rows(args, comparison)
    history = append_history(args.history, rows)
    args.history.with_name(TREND_FILE).write_bytes(png_plots.trend(history))
    write_trend_page(history, args.history)
    print(f"history: {args.history} ({history.night.nunique()} nights); trend: {args.history.with_name(TREND_FILE)}")
    if args.write_reference is not None:
        old = read_references(args.write_reference) if args.write_reference.is_file() else {}
        write_references(args.write_reference, old | reference_entries(args, rows))
        print(f"reference: {args.write_reference} holds this night's AL per drafter, D and domain")
    gated = below_reference(args, rows)
    for line in gated:
        print(line, file=sys.stderr)
    changes = write_drift(history, args.history)
    print(
        f"drift: {args.history.with_name(DRIFT_FILE)}: {len(changes)} change point(s) over the history "
        f"(false-alarm rate {DEFAULT_LEVEL:g} per drafter, D and domain)"
    )
    for change in changes:
        print(f"speclens nightly: CHANGE {change_line(change)}")
    if args.baseline is None:
        print(f"speclens nightly: no baseline given; this night is a new baseline: {args.out}")
        return 1 if gated else 0
    for diagnosis in write_diagnosis(rows, args.night, args.out, args.baseline):
        print(f"speclens nightly: DIAGNOSIS {diagnosis.sentence}")
    bad = rows[rows.regressed.eq(True)]
    across = pair_differences(comparison) if comparison is not None else {}
    for r in bad.itertuples():
        print(
            f"speclens nightly: REGRESSION drafter={r.drafter} d={r.d} domain={r.domain}: AL {r.baseline_al:.3f} -> "
            f"{r.al:.3f} ({r.al_diff:+.3f}, 95% CI [{r.diff_ci95_lo:+.3f}, {r.diff_ci95_hi:+.3f}], threshold "
            f"{args.threshold})"
            + (f"; measured past the target's own window, with {r.context_extension}" if r.context_extension else "")
            + across.get(r.job, ""),
            file=sys.stderr,
        )
    if bad.empty:
        print(f"speclens nightly: no AL drop beyond {args.threshold} against {args.baseline}")
    return 1 if len(bad) or gated else 0


@guarded
def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    return nightly(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
