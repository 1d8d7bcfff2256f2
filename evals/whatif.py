"""`python -m evals.whatif [RUN_DIR | SWEEP_DIR | speculation_profile.json] gpu=<name> [key=value …]`
(also `speclens whatif`): speedup predicted on a GPU from acceptance measured anywhere.

Acceptance: a run or sweep dir (its speculation_profile.json; `domain=` picks a domain, default
all), or `drafter=<name>` with `al=<AL> d=<D>` or `acceptance=[c1,c2,…]` (conditional per position), and
optionally `draft_share=` (the share of target passes that verify a draft, default 1) and
`model_runner=v1|v2` (what a step without a draft costs: a plain step, or a full verify on V2).
Architecture: `target.model=<folder or hub id>` (default: the run's target), `drafter.model=…`
(default: the run's draft; EAGLE heads without one are taken as one target-shaped layer),
`arch.<config field>=<value>` applied to the target's config before anything is derived.
Hardware: `gpu=<name>` (`--list-gpus`) or `gpu=custom gpu.bf16_tflops=… gpu.hbm_tb_s=… gpu.memory_gb=…
[gpu.fp8_tflops=… gpu.nvlink_gb_s=…]`, `tp=N`, `weights=bf16|fp8`, `expert_weights=bf16|fp8|nvfp4|mxfp4`
(a MoE target's experts; default: the checkpoint's quantization_config, else weights=), `eff.<field>=…`
(speclens/gpu_model/step_cost.py).
Engine: `engine=vllm|sglang|trtllm` (default vllm): its overlap scheduling under each drafter and
its in-graph drafting (speclens/gpu_model/engines.py), printed with every prediction.
`slo.tokens_per_s_per_user=N` answers in one line what to serve, and up to which B, for N tokens/s
per user. Operating points: `batch_sizes=[…]` (default 1 … 256), `context_len=` one or a list (default 4096),
`d=` one or a list (default every D with acceptance). A run or sweep measured at several prompt
lengths (long context) gives acceptance per length: each point takes the AL measured at the length
nearest its context_len (of two equally near, the shorter), named in the point as `al_measured_at`;
context_len defaults to the measured lengths, and whatif.json's `by_length` states guidelines 2 and
3 at each measured length with the share of the step attention takes there and the best D per B
(all predicted). `calibrate=<run or sweep dir measured with
baseline=true>` fits the model to that machine's step costs and predicts for it (gpu=measured),
printing each point's error, fitted and held out. Writes whatif.json to `out=` (default: the run
or sweep dir, else outputs/whatif/<date>/<time>/) and prints the best (drafter, D) per B.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from drafters import REGISTRY
from reports.profile import PROFILE_FILE, dynamo_flags, read_profiles
from reports.runs import find_runs
from reports.table import text_table
from reports.whatif_page import write_page
from speclens import checkpoints
from speclens.acceptance import al_at, check_rates, marginal_from_conditional
from speclens.errors import ConfigError, CorruptRecord, guarded
from speclens.files import output_dir, output_path, write_json_atomic
from speclens.gpu_model import calibrate
from speclens.gpu_model.calibrate import Measured
from speclens.gpu_model.draft_cost import MECHANISMS, drafter_shape, needs_draft_config
from speclens.gpu_model.engines import DEFAULT_ENGINE, engine_named
from speclens.gpu_model.gpu_guidelines import at_length
from speclens.gpu_model.gpus import GPUS, gpu_named
from speclens.gpu_model.measured_ops import AiconfiguratorOps
from speclens.gpu_model.model_error import HELD_OUT
from speclens.gpu_model.model_shape import ModelShape, shape_of
from speclens.gpu_model.step_cost import Efficiency, Hardware, check_tp, expert_format, measurable
from speclens.gpu_model.whatif import (
    DEFAULT_BATCH_SIZES,
    Drafting,
    best,
    best_label,
    check_fits,
    mean_context,
    predict,
    schedule,
    serve_at_slo,
    undrafted_step,
)
from speclens.metrics import conditional_acceptance, length_label
from speclens.model_facts import ModelFacts, text_config
from speclens.options import nearest, number, parse_value, strict_json_loads
from speclens.records import read_parquet
from speclens.run_files import REQUESTS_FILE, read_stamp
from speclens.summary import read_summary

WHATIF_FILE = "whatif.json"
DEFAULT_CONTEXT_LEN = 4096
KEYS = ("gpu", "tp", "weights", "batch_sizes", "context_len", "d", "al", "acceptance", "drafter", "domain", "out")
KEYS += ("target.model", "drafter.model", "calibrate", "slo.tokens_per_s_per_user", "cost_model", "engine")
KEYS += ("expert_weights", "draft_share", "model_runner")
TEXT_KEYS = ("target.model", "drafter.model", "out", "gpu", "calibrate", "cost_model", "engine", "expert_weights")
TEXT_KEYS += ("model_runner", "drafter", "domain", "weights")
MODEL_RUNNERS = ("v1", "v2")


def parse(argv: list[str]) -> tuple[Path | None, dict[str, Any], dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The source path, the options, and the arch.*, gpu.* and eff.* overrides."""
    source, options, arch, gpu, eff = None, {}, {}, {}, {}
    for arg in argv:
        if "=" not in arg:
            if source is not None:
                raise ConfigError(f"{arg}: give one run dir, sweep dir or {PROFILE_FILE}, then key=value settings.")
            source = Path(arg).expanduser()
            continue
        key, text = arg.split("=", 1)
        for prefix, into in (("arch.", arch), ("gpu.", gpu), ("eff.", eff)):  # slo.… is one key
            if key.startswith(prefix) and key not in KEYS:
                into[key.removeprefix(prefix)] = parse_value(text, key)
                break
        else:
            if key not in KEYS:
                raise ConfigError(f"{key}= is not a whatif setting; see `python -m evals.whatif --help`.")
            options[key] = text if key in TEXT_KEYS else parse_value(text, key)
    return source, options, arch, gpu, eff


def ints(value: Any, key: str) -> list[int]:
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values):
        raise ConfigError(f"{key}={json.dumps(value)}: one whole number or a list of them (>= 1).")
    return sorted(set(values))


def _stamps(source: Path) -> list[tuple[str | None, dict[str, Any]]]:
    """Each run's drafter (its summary's; None where it has none) and stamp under `source`."""
    files = [source / "stamp.json"] if (source / "stamp.json").is_file() else sorted(source.rglob("stamp.json"))
    found = []
    for file in files:
        found.append((_summary_drafter(file.parent), read_stamp(file.parent)))
    return found


def _summary_drafter(run_dir: Path) -> str | None:
    """The drafter a run's summary.json names (None where it has no summary), read for that field
    alone: a summary that is not JSON, or names no drafter by a string, is a CorruptRecord."""
    path = run_dir / "summary.json"
    if not path.is_file():
        return None
    try:
        data = strict_json_loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise CorruptRecord(f"{path} is unreadable ({exc})") from None
    drafter = data.get("drafter") if isinstance(data, dict) else None
    if not isinstance(drafter, str):
        raise CorruptRecord(f"{path} names no drafter (its field drafter is {drafter!r})")
    return drafter


def _read_config(ref: str, key: str) -> dict[str, Any]:
    return checkpoints.read_config(checkpoints.resolve(ref, key, config_only=True), key)


@dataclass(frozen=True)
class Share:
    """A drafter's share of target passes that verify a draft (speclens/gpu_model/whatif.py): `value` measured (its
    profile's) or given (draft_share=), None where its profile predates the share (taken as 1, and
    said); per length bucket where measured per length; the model runner that measured it."""

    value: float | None = 1.0
    model_runner: str | None = None
    by_length: dict[int, float] | None = None

    @property
    def undrafted(self) -> str:
        return undrafted_step(self.model_runner)


def measured_acceptance(source: Path, domain: str) -> dict[str, dict[str, Any]]:
    """Per drafter, the profile of its longest measured D."""
    folder = source.parent if source.name == PROFILE_FILE else source
    if not (folder / PROFILE_FILE).is_file():
        raise ConfigError(f"{source}: holds no {PROFILE_FILE} (a run or sweep dir speclens wrote, with a drafter).")
    chosen: dict[str, dict[str, Any]] = {}
    for p in read_profiles(folder):
        if p["domain"] != domain or p.get("segment", "all") != "all" or "input_tokens" in p:
            continue
        if p["drafter"] not in chosen or p["d"] > chosen[p["drafter"]]["d"]:
            chosen[p["drafter"]] = p
    if not chosen:
        domains = sorted({p["domain"] for p in read_profiles(folder)})
        raise ConfigError(f"{source}: no acceptance profile for domain={domain}; it has {', '.join(domains)}.")
    return chosen


# Per drafter, per length bucket's input tokens: the profile measured there.
LengthAcceptance = dict[str, dict[int, dict[str, Any]]]


def measured_length_acceptance(source: Path, domain: str) -> LengthAcceptance:
    """Per drafter and length bucket, the profile of its longest D measured at that length, from
    the length profiles of all prompts (reports/profile.py); {} where the source has none, or a
    domain other than all is asked for (a long-context domain is one length already)."""
    folder = source.parent if source.name == PROFILE_FILE else source
    if domain != "all" or not (folder / PROFILE_FILE).is_file():
        return {}
    chosen: dict[tuple[str, int], dict[str, Any]] = {}
    for p in read_profiles(folder):
        if "input_tokens" not in p or p.get("segment", "all") != "all":
            continue
        key = (p["drafter"], int(p["input_tokens"]))
        if key not in chosen or p["d"] > chosen[key]["d"]:
            chosen[key] = p
    out: LengthAcceptance = {}
    for (drafter, tokens), p in sorted(chosen.items()):
        out.setdefault(drafter, {})[tokens] = p
    return out


def measured_share(chosen: dict[str, Any], by_length: dict[int, dict[str, Any]]) -> Share:
    """The share of drafting steps a drafter's profiles measured (overall and per length)."""
    shares = {tokens: p["draft_share"] for tokens, p in by_length.items() if p.get("draft_share") is not None}
    return Share(chosen.get("draft_share"), chosen.get("model_runner"), shares or None)


def given_share(options: dict[str, Any]) -> Share:
    """draft_share= beside drafter= and al= / acceptance= (default 1: every step drafts), and the
    model runner that measured it (model_runner=v1|v2: what a step without a draft costs)."""
    value = options.get("draft_share", 1.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ConfigError(
            f"draft_share={json.dumps(value)}: the share of target passes that verify a draft, a number in (0, 1] "
            "(a run's summary.json draft_share)."
        )
    runner = options.get("model_runner")
    if runner is not None and runner not in MODEL_RUNNERS:
        raise ConfigError(
            f"model_runner={runner}: one of {', '.join(MODEL_RUNNERS)} (the run's numerics.model_runner)."
        )
    return Share(float(value), runner)


def given_acceptance(options: dict[str, Any]) -> dict[str, list[float] | float]:
    drafter = options.get("drafter")
    if drafter is None:
        raise ConfigError("give drafter=<name> with al= or acceptance= (or a run dir measured with one).")
    if "al" in options and "acceptance" in options:
        raise ConfigError("give al= (with one d=) or acceptance=[…], not both.")
    if "acceptance" in options:
        return {drafter: marginal_from_conditional(check_rates(options["acceptance"], "acceptance"))}
    ds = ints(options.get("d"), "d") if "d" in options else []
    al = options["al"]
    if len(ds) != 1 or not isinstance(al, (int, float)) or isinstance(al, bool) or not 1 <= al <= 1 + ds[0]:
        raise ConfigError(f"al={al} needs one d= and 1 <= al <= 1 + d.")
    return {drafter: float(al)}


def resolve_inputs(source: Path | None, options: dict[str, Any], arch: dict[str, Any]):
    """The target's config (arch.* applied), and per drafter its acceptance, its acceptance per
    length bucket where measured, and its draft config."""
    stamps = _stamps(source) if source is not None and source.is_dir() else []
    by_length: dict[str, dict[int, list[float]]] = {}
    if "al" in options or "acceptance" in options:
        acceptance = given_acceptance(options)
        shares = {drafter: given_share(options) for drafter in acceptance}
    elif source is not None:
        for key in ("draft_share", "model_runner"):
            if key in options:
                raise ConfigError(
                    f"{key}= goes with drafter= and al= or acceptance=; a run's profile measured its own."
                )
        chosen = measured_acceptance(source, options.get("domain", "all"))
        length_profiles = measured_length_acceptance(source, options.get("domain", "all"))
        acceptance = {drafter: p["marginal"] for drafter, p in chosen.items()}
        by_length = {
            drafter: {tokens: p["marginal"] for tokens, p in found.items()}
            for drafter, found in length_profiles.items()
        }
        shares = {drafter: measured_share(p, length_profiles.get(drafter, {})) for drafter, p in chosen.items()}
    else:
        raise ConfigError(
            "no acceptance: give a run or sweep dir, or drafter=<name> with al=<AL> d=<D> or acceptance=[…]."
        )
    for drafter in acceptance:
        if drafter not in MECHANISMS:
            raise ConfigError(f"drafter={drafter}: no draft-cost model for it; choose one of {', '.join(MECHANISMS)}.")
    if "target.model" in options:
        target_ref = str(options["target.model"])
    elif stamps and stamps[0][1].get("target_dir"):
        target_ref = str(stamps[0][1]["target_dir"])
    else:
        raise ConfigError("give target.model=<folder or hub id> (a folder holding its config.json is enough).")
    target_config = _read_config(target_ref, "target.model")
    text = text_config(target_config)
    for field, value in arch.items():
        if field not in text and field not in checkpoints.COUNT_FIELDS:
            known = sorted(set(text) | set(checkpoints.COUNT_FIELDS))
            raise ConfigError(f"arch.{field}: the target's config has no such field{nearest(field, known)}.")
        text[field] = value
    checkpoints.check_config(target_config, "the target's config with the arch. overrides")
    draft_configs: dict[str, dict[str, Any] | None] = {}
    for drafter in acceptance:
        ref = options.get("drafter.model") if len(acceptance) == 1 else None
        for name, stamp in stamps:
            if ref is None and name == drafter:
                ref = (stamp.get("config", {}).get("drafter") or {}).get("model")
        if ref is None and needs_draft_config(drafter):
            raise ConfigError(f"drafter={drafter}: give drafter.model=<folder or hub id> for its config.json.")
        draft_configs[drafter] = _read_config(ref, "drafter.model") if ref else None
        longest = max(ints(options["d"], "d")) if "d" in options else len(np.atleast_1d(acceptance[drafter]))
        check_pair(drafter, longest, target_ref, target_config, ref, draft_configs[drafter])
    return target_config, acceptance, by_length, shares, draft_configs


def check_pair(
    drafter: str, d: int, target_ref: str, target_config: dict, draft_ref: str | None, draft_config: dict | None
) -> None:
    """What evals.run refuses about this target and drafter at this D from their configs (the
    vocabulary, a head built for another target, MTP layers, the checkpoint's kind: drafters'
    check_pair), refused here too. An EAGLE head given no config.json is estimated, so not checked."""
    cls = REGISTRY[drafter]
    if cls.needs_checkpoint and draft_config is None:
        return
    target = ModelFacts.from_config(target_ref, target_config)
    draft = None if draft_config is None else ModelFacts.from_config(str(draft_ref), draft_config)
    cls(drafter, cls.config_class()).check_pair(d, target, draft)


def _hardware(options: dict[str, Any], gpu_fields: dict[str, Any], eff_fields: dict[str, Any]) -> Hardware:
    if "gpu" not in options:
        raise ConfigError(f"give gpu=<name> (one of {', '.join(GPUS)}) or gpu=custom with its figures.")
    known = [f.name for f in fields(Efficiency)]
    unknown = sorted(set(eff_fields) - set(known))
    if unknown:
        raise ConfigError(
            f"eff.{unknown[0]} is not an efficiency{nearest(unknown[0], known)} (any of {', '.join(known)})."
        )
    eff_fields = {k: number(v, f"eff.{k}", at_least=0) for k, v in eff_fields.items()}
    return Hardware(
        gpu_named(options["gpu"], gpu_fields),
        tp=ints(options.get("tp", 1), "tp")[0],
        weights=str(options.get("weights", "bf16")),
        eff=Efficiency(**eff_fields),
        expert_weights=options.get("expert_weights"),
        engine=engine_named(str(options.get("engine", DEFAULT_ENGINE))),
    )


def hardware_from(settings: dict[str, str]) -> Hardware:
    """The hardware of `gpu=… tp=… weights=… gpu.<field>=… eff.<field>=…` settings (key -> text)."""
    options = {k: (v if k == "gpu" else parse_value(v, k)) for k, v in settings.items() if "." not in k}
    gpu_fields = {k.removeprefix("gpu."): parse_value(v, k) for k, v in settings.items() if k.startswith("gpu.")}
    eff_fields = {k.removeprefix("eff."): parse_value(v, k) for k, v in settings.items() if k.startswith("eff.")}
    return _hardware(options, gpu_fields, eff_fields)


def calibration_points(folder: Path) -> tuple[list[Measured], str | None]:
    """The measured T_verif of every run under `folder` measured with baseline=true: plain steps
    at each B (D = 0) and the zero-cost verify pass's at B·(1+D); context: each B's requests' mean
    prompt plus half their output. Points measured by several runs are averaged. With the
    runs' target folder (None where the stamp names none)."""
    runs = [r for r in find_runs(folder) if any(op.t_verif for op in r.summary.operating_points)]
    if not runs:
        raise ConfigError(f"calibrate={folder}: no run there was measured with baseline=true (no step costs).")
    found: dict[tuple[int, int, int], list[float]] = {}
    for run in runs:
        requests = read_parquet(run.path / REQUESTS_FILE)
        for op in run.summary.operating_points:
            mine = requests[requests.batch_size == op.batch_size]
            context = mean_context(mine.prompt_tokens, mine.output_tokens)
            if op.t_verif is not None:
                found.setdefault((op.batch_size, 0, context), []).append(op.t_verif.median_ms)
            if op.t_verif_spec is not None and run.summary.d:
                found.setdefault((op.batch_size, run.summary.d, context), []).append(op.t_verif_spec.median_ms)
    points = [Measured(b, d, c, sum(ts) / len(ts)) for (b, d, c), ts in sorted(found.items())]
    return points, runs[0].stamp.get("target_dir")


def run_point(run_dir: Path, batch_size: int, *settings: str) -> dict[str, Any]:
    """whatif's point for one operating point of a run: the run's target and drafter, its AL, D and
    that B's draft share and context (mean prompt plus half the output, as calibration takes it),
    on the machine `settings` name (`gpu=…` or `calibrate=…`). What a measured speed is set beside."""
    summary, stamp = read_summary(run_dir), read_stamp(run_dir)
    (op,) = [op for op in summary.operating_points if op.batch_size == batch_size]
    requests = read_parquet(run_dir / REQUESTS_FILE)
    mine = requests[requests.batch_size == batch_size]
    argv = [
        f"target.model={stamp['target_dir']}",
        f"drafter={summary.drafter}",
        f"al={summary.al}",
        f"d={summary.d}",
        *([f"draft_share={op.draft_share}"] if op.draft_share is not None else []),  # none recorded: every step
        *(
            [f"model_runner={summary.numerics.model_runner}"]
            if summary.numerics and summary.numerics.model_runner
            else []
        ),
        f"batch_sizes=[{batch_size}]",
        f"context_len={mean_context(mine.prompt_tokens, mine.output_tokens)}",
        *settings,
    ]
    draft = (stamp.get("config", {}).get("drafter") or {}).get("model")
    if draft:
        argv.append(f"drafter.model={draft}")
    result, _ = build(argv)
    (point,) = result["points"]
    return point


COST_MODELS = ("roofline", "aiconfigurator")


def cost_label(hw: Hardware, calibrated: bool, target: ModelShape) -> str:
    if calibrated:
        return "roofline, calibrated"
    if hw.ops is None:
        return "roofline"
    if not measurable(target):
        return f"roofline ({hw.ops.label} hold no MoE or MLA GEMMs: the target's stay on the roofline)"
    return f"{hw.ops.label}: the target's GEMMs and all-reduces; attention and drafting: roofline"


def build(argv: list[str]) -> tuple[dict[str, Any], Path | None]:
    source, options, arch, gpu_fields, eff_fields = parse(argv)
    cost_model = str(options.get("cost_model", "roofline"))
    if cost_model not in COST_MODELS:
        raise ConfigError(f"cost_model={cost_model}: choose one of {', '.join(COST_MODELS)}.")
    if cost_model == "aiconfigurator" and "calibrate" in options:
        raise ConfigError("cost_model=aiconfigurator predicts for a GPU of its tables; calibrate= fits this machine.")
    calibration = None
    if "calibrate" in options:
        if options.get("gpu", "measured") != "measured":
            raise ConfigError(
                f"calibrate= predicts for the machine it measured: gpu=measured, not gpu={options['gpu']}."
            )
        if "engine" in options:
            raise ConfigError(
                f"calibrate= fits the engine that measured its runs, overheads included; engine={options['engine']} "
                "is for a GPU of the table."
            )
        if not str(options["calibrate"]).strip():  # (Path("") is the current folder: never meant)
            raise ConfigError("calibrate= is empty; give the run or sweep dir measured with baseline=true.")
        calibration, measured_target = calibration_points(Path(options["calibrate"]).expanduser())
        if "target.model" not in options and source is None and measured_target is not None:
            options["target.model"] = measured_target
    else:
        hw = _hardware(options, gpu_fields, eff_fields)  # checked before any config is read
        if cost_model == "aiconfigurator":
            hw = replace(hw, ops=AiconfiguratorOps(str(options["gpu"]), str(options.get("engine", "vllm"))))
    target_config, acceptance, by_length, shares, draft_configs = resolve_inputs(source, options, arch)
    target = shape_of(target_config, "target.model")
    fitted, calibration_warnings = None, []
    if calibration is not None:  # the machine measured, in place of a GPU of the table
        weights = str(options.get("weights", "bf16"))
        fitted = calibrate.fit(target, calibration, weights)
        calibrated = calibrate.errors(target, calibration, weights, everything=fitted)
        calibration_warnings = calibrate.implausible(fitted, [h for _, _, h in calibrated])
        hw = fitted.hardware(weights, ints(options.get("tp", 1), "tp")[0], options.get("expert_weights"))
    check_tp(target, hw.tp)
    ds = ints(options["d"], "d") if "d" in options else None
    draftings = []
    for drafter, rates in acceptance.items():
        draft = drafter_shape(drafter, target, draft_configs[drafter])
        if draft is not None:
            check_tp(draft, hw.tp, "the draft")
        drafting = drafting_of(drafter, rates, by_length.get(drafter, {}), ds, draft)
        draftings.append(with_share(drafting, shares[drafter]))
    measured_lengths = sorted({length for d in draftings for length in d.al_by_length or {}})
    batch_sizes = ints(options.get("batch_sizes", DEFAULT_BATCH_SIZES), "batch_sizes")
    context_lens = ints(options.get("context_len", measured_lengths or DEFAULT_CONTEXT_LEN), "context_len")
    if 0 in batch_sizes or 0 in context_lens:
        raise ConfigError("batch_sizes and context_len are whole numbers >= 1.")
    points = predict(draftings, target, hw, batch_sizes, context_lens, ds)
    with_intervals(points)
    if not any(p["fits"] for p in points):
        least = min(points, key=lambda p: p["memory_gb"])
        check_fits(hw, least["memory_gb"], least["batch_size"], least["context_len"])
    result = {
        "gpu": gpu_record(hw),
        "tp": hw.tp,
        "weights": hw.weights,
        "expert_weights": expert_format(target, hw) if target.experts else None,
        "efficiency": asdict(hw.eff),
        "model": {
            "arch_overrides": arch,
            "layers": target.layers,
            "hidden_size": target.hidden,
            "g": target.g,
            "mla": target.mla,
            "active_params": target.active_params(),
            "total_params": target.total_params(),
        },
        "cost_model": cost_label(hw, fitted is not None, target),
        "engine": None if hw.engine is None else hw.engine.as_dict(),
        "speedup_interval": INTERVAL_SOURCE,
        "calibration": None
        if fitted is None
        else {
            "source": str(options["calibrate"]),
            "fit": asdict(fitted),
            "points": [
                {**asdict(p), "error": round(in_fit, 4), "held_out_error": None if math.isnan(h) else round(h, 4)}
                for p, in_fit, h in calibrated
            ],
            "held_out_bound": calibrate.HELD_OUT_BOUND,
            "warnings": calibration_warnings,
        },
        "draft_shares": {
            d.drafter: {
                "draft_share": shares[d.drafter].value,
                "model_runner": shares[d.drafter].model_runner,
                "undrafted_step": shares[d.drafter].undrafted,
                **(
                    {"by_length": {length_label(t): v for t, v in d.share_by_length.items()}}
                    if d.share_by_length
                    else {}
                ),
            }
            for d in draftings
        },
        "notes": [f"calibration: {w}" for w in calibration_warnings] + share_notes(draftings, shares),
        # the same acceptance as Dynamo's planner and mocker take it (reports/profile.py dynamo_flags)
        "dynamo_flags": {
            drafter: dynamo_flags(conditional_acceptance(rates), len(rates))
            for drafter, rates in acceptance.items()
            if isinstance(rates, list)
        },
        "points": points,
        "best": best(points),
        "schedules": {d.drafter: schedule(points, d.drafter, context_lens[0]) for d in draftings},
        "schedules_by_context_len": {
            str(c): {d.drafter: schedule(points, d.drafter, c) for d in draftings} for c in context_lens
        },
    }
    if measured_lengths:
        result["by_length"] = [
            length_section(length, draftings, target, hw, batch_sizes, ds) for length in measured_lengths
        ]
    if "slo.tokens_per_s_per_user" in options:
        wanted = options["slo.tokens_per_s_per_user"]
        if isinstance(wanted, bool) or not isinstance(wanted, (int, float)) or wanted <= 0:
            raise ConfigError(f"slo.tokens_per_s_per_user={wanted}: a number of tokens/s above 0.")
        chosen = serve_at_slo(points, hw.tp, context_lens[0], float(wanted))
        result["slo"] = {"tokens_per_s_per_user": wanted, "context_len": context_lens[0], "serve": chosen}
    if "out" in options:
        out = output_path(options["out"], "out")
    elif source is not None:
        out = source.parent if source.name == PROFILE_FILE else source
    else:
        out = Path("outputs/whatif") / datetime.now().strftime("%Y-%m-%d/%H-%M-%S")
    return result, out


def drafting_of(
    drafter: str, rates: list[float] | float, by_length: dict[int, list[float]], ds: list[int] | None, draft
) -> Drafting:
    """A drafter's AL by D (and per measured length where it has lengths) at the asked D (default:
    every D its acceptance covers, at every length)."""
    if isinstance(rates, float):  # al= at one d
        return Drafting(drafter, {ds[0]: rates}, draft)
    covered = min([len(rates), *(len(r) for r in by_length.values())])
    wanted = [d for d in (ds if ds is not None else range(1, covered + 1)) if d > 0]
    al_by_d = {d: al_at(rates, d) for d in wanted}
    if not by_length:
        return Drafting(drafter, al_by_d, draft)
    al_by_length = {tokens: {d: al_at(r, d) for d in wanted} for tokens, r in by_length.items()}
    labels = {tokens: length_label(tokens) for tokens in by_length}
    return Drafting(drafter, al_by_d, draft, al_by_length, labels)


INTERVAL_SOURCE = (
    f"each point's speedup_interval: where 8 of 10 published speedups fell when their source was left out of "
    f"the model's fit ({HELD_OUT.cases} cases, {HELD_OUT.sources} sources; held-out median |error| "
    f"{HELD_OUT.median_abs:.0%}, worst {HELD_OUT.worst_abs:.0%}; speclens/gpu_model/model_error.py)"
)


def with_intervals(points: list[dict[str, Any]]) -> None:
    """Each point's speedup_interval from the model's held-out error (speclens/gpu_model/model_error.py),
    its top held at the point's tokens per step, which no speedup exceeds (a verify costs at least a
    plain step on any real engine, whatever the model's error)."""
    for p in points:
        low, high = HELD_OUT.interval(p["speedup"])
        p["speedup_interval"] = [round(min(low, p["tokens_per_step"]), 4), round(min(high, p["tokens_per_step"]), 4)]


def interval_label(interval: list[float] | None) -> str:
    return "-" if not interval else f"[{interval[0]:.2f}, {interval[1]:.2f}]"


def with_share(drafting: Drafting, share: Share) -> Drafting:
    """The drafting with its share of drafting steps (1 where its profile did not record one)."""
    return replace(
        drafting,
        draft_share=1.0 if share.value is None else share.value,
        share_by_length=share.by_length,
        undrafted=share.undrafted,
    )


def gpu_record(hw: Hardware) -> dict[str, Any]:
    """The GPU as whatif.json holds it: a calibrated machine's memory is not known (every point is
    taken to fit), so it is null, not Infinity, which is not JSON."""
    record = asdict(hw.gpu)
    if not math.isfinite(record["memory_gb"]):
        record["memory_gb"] = None
        record["memory_gb_unknown"] = "a calibrated machine: its memory is not modelled, every point is taken to fit"
    return record


def share_notes(draftings: list[Drafting], shares: dict[str, Share]) -> list[str]:
    """What the predictions assume of each drafter's drafting steps, where a reader needs telling."""
    out = []
    for drafting in draftings:
        share = shares[drafting.drafter]
        if share.value is None:
            out.append(
                f"{drafting.drafter}: its profile does not record the share of passes that draft (written "
                "before speclens did): every step is taken as drafting, so its speedups are upper bounds"
            )
        elif share.value < 1:
            runner = f" on Model Runner {share.model_runner.upper()}" if share.model_runner else ""
            cost = "a full verify" if share.undrafted == "verify" else "a plain step"
            out.append(
                f"{drafting.drafter}: drafts on {share.value:.0%} of target passes{runner}; tokens per step = "
                f"1 + {share.value:.2f}·(AL − 1), and a step without a draft costs {cost}"
            )
    return out


PREDICTED = "predicted by the step-cost model from the acceptance measured at this length"


def length_section(
    length: int, draftings: list[Drafting], target: ModelShape, hw: Hardware, batch_sizes: list[int], ds
) -> dict[str, Any]:
    """At one measured length: the AL measured there, guidelines 2 and 3 with the share of the step
    attention takes, and the best (drafter, D) per B, all but the AL predicted."""
    guidelines = at_length(target, hw, length, batch_sizes)
    points = predict(draftings, target, hw, batch_sizes, [length], ds)
    with_intervals(points)
    return {
        "length": length_label(length),
        "context_len": length,
        "source": PREDICTED,
        "al_measured": {
            d.drafter: {str(k): al for k, al in sorted(d.al_by_length[length].items())}
            for d in draftings
            if d.al_by_length and length in d.al_by_length
        },
        "g": guidelines.g,
        "guideline_2_d": guidelines.starting_d,
        "guideline_3_ds": guidelines.tile_aligned,
        "by_batch_size": [asdict(b) for b in guidelines.by_batch],
        "best": best(points),
    }


def length_lines(result: dict[str, Any]) -> list[str]:
    """Per measured length: guidelines 2 and 3, the attention share and the best D, one block each."""
    out = []
    for section in result.get("by_length") or []:
        al = "; ".join(
            f"{drafter} " + ", ".join(f"D={d}: {v:.2f}" for d, v in by_d.items())
            for drafter, by_d in section["al_measured"].items()
        )
        g2 = section["guideline_2_d"]
        out.append(
            f"at {section['length']} ({section['context_len']} tokens; AL measured there: {al}): guideline 2 "
            + (f"D={g2}" if g2 is not None else "does not apply")
            + f" (G={section['g']}), guideline 3 D in {section['guideline_3_ds'][:4]}; predicted:"
        )
        best_at = {b["batch_size"]: b for b in section["best"]}
        for b in section["by_batch_size"]:
            knees = ", ".join(map(str, b["knees"][:4])) or "none up to D=64"
            chosen = best_at.get(b["batch_size"])
            what = best_label(chosen)
            at_g2 = "" if g2 is None else f", {b['attention_share_at_starting_d']:.0%} at D={g2}"
            out.append(
                f"  B={b['batch_size']}: attention {b['attention_share_plain']:.0%} of T_verif(B){at_g2}; "
                f"T_verif steps up after D = {knees}; best {what}"
            )
    return out


def table(result: dict[str, Any]) -> str:
    """The best per (B, context length), predicted; where plain decoding wins, its own step. With
    acceptance per length, the length whose AL each row took."""
    by_length = any("al_measured_at" in p for p in result["points"])
    rows = []
    for b in result["best"]:
        here = [
            p for p in result["points"] if (p["batch_size"], p["context_len"]) == (b["batch_size"], b["context_len"])
        ]
        chosen = next((p for p in here if (p["drafter"], p["d"]) == (b["drafter"], b["d"])), None)
        t_plain = here[0]["t_plain_ms"]
        al, per_step, t_step, bound = (
            (1.0, 1.0, t_plain, "-")
            if chosen is None
            else (chosen["al"], chosen["tokens_per_step"], chosen["t_step_ms"], chosen["bound"])
        )
        what = "plain" if b["drafter"] == "none" else f"{b['drafter']} d={b['d']}"
        rows.append([str(b["batch_size"]), str(b["context_len"]), what, f"{al:.2f}", f"{per_step:.2f}"])
        interval = None if chosen is None else chosen["speedup_interval"]
        rows[-1] += [f"{t_plain:.2f}", f"{t_step:.2f}", f"{b['speedup']:.2f}", interval_label(interval), bound]
        if by_length:
            rows[-1].append("-" if chosen is None else chosen.get("al_measured_at", "-"))
    header = [
        "B",
        "context",
        "best",
        "AL",
        "tokens/step",
        "T_verif(B) ms",
        "T_step ms",
        "speedup",
        "80% range",
        "bound",
    ]
    return text_table(header + (["AL measured at"] if by_length else []), rows)


def slo_line(result: dict[str, Any]) -> str | None:
    """The one-line answer to slo.tokens_per_s_per_user= (None where it was not asked)."""
    slo = result.get("slo")
    if slo is None:
        return None
    wanted, context, serve = slo["tokens_per_s_per_user"], slo["context_len"], slo["serve"]
    if serve is None:
        return f"no setting gives {wanted:g} tokens/s per user at context {context} on {result['gpu']['name']}"
    what = "plain decoding" if serve["mechanism"] == "plain" else f"{serve['mechanism']} d={serve['d']}"
    return (
        f"serve {what} up to B={serve['batch_size']}: {serve['output_tokens_per_s']:,.0f} tokens/s per GPU, "
        f"{serve['tokens_per_s_per_request']:.0f} tokens/s per user (>= {wanted:g}) at context {context}"
    )


@guarded
def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__)
        return 0
    if "--list-gpus" in argv:
        header = ["gpu", "bf16 TFLOPS", "fp8 TFLOPS", "HBM TB/s", "memory GB", "NVLink GB/s"]
        rows = [
            [g.name, f"{g.bf16_tflops:g}", f"{g.fp8_tflops:g}" if g.fp8_tflops else "-", f"{g.hbm_tb_s:g}"]
            + [f"{g.memory_gb:g}", f"{g.nvlink_gb_s:g}" if g.nvlink_gb_s else "- (PCIe)"]
            for g in GPUS.values()
        ]
        print(text_table(header, rows))
        return 0
    result, out = build(argv)
    output_dir(output_path(out, "out"), "out")
    write_json_atomic(result, out / WHATIF_FILE)
    gpu = result["gpu"]["name"]
    experts = f", experts {result['expert_weights']}" if result["expert_weights"] else ""
    engine = "the engine calibrated" if result["engine"] is None else result["engine"]["label"]
    print(
        f"speclens whatif: {gpu}, tp={result['tp']}, weights={result['weights']}{experts}; engine: {engine}; "
        f"cost model: {result['cost_model']}"
    )
    if result["model"]["arch_overrides"]:
        print("arch overrides: " + ", ".join(f"{k}={v}" for k, v in result["model"]["arch_overrides"].items()))
    if result["calibration"] is not None:
        fitted = result["calibration"]["fit"]
        print(
            f"calibrated on {result['calibration']['source']}: {fitted['hbm_tb_s'] * 1e3:.1f} GB/s, "
            f"{fitted['tflops']:.3f} TFLOPS, {fitted['overhead_ms']:.2f} ms a pass, attention "
            + ("in 128-row tiles" if fitted["tile_rows"] else "on the real query rows")
        )
        for p in result["calibration"]["points"]:
            held = "-" if p["held_out_error"] is None else f"{p['held_out_error']:+.1%}"
            print(
                f"  B={p['batch_size']} D={p['d']} context {p['context']}: measured {p['t_ms']:.2f} ms, "
                f"fit {p['error']:+.1%}, held out {held}"
            )
    print(table(result))
    print(f"predicted; {result['speedup_interval']}")
    for line in result["notes"]:
        print(line)
    for drafter, flags in result["dynamo_flags"].items():
        print(f"{drafter} for Dynamo's planner and mocker: {flags}")
    for line in length_lines(result):
        print(line)
    left_out = sum(not p["fits"] for p in result["points"])
    if left_out:
        print(f"{left_out} points left out: weights and KV cache above 90% of the GPU's memory")
    line = slo_line(result)
    if line:
        print(line)
    page = write_page(result, out, line)
    print(f"written: {out / WHATIF_FILE}, {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
