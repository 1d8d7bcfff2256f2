"""`python -m evals.whatif [RUN_DIR | SWEEP_DIR | speculation_profile.json] gpu=<name> [key=value …]`
(also `speclens whatif`): speedup predicted on a GPU from acceptance measured anywhere.

Acceptance: a run or sweep dir (its speculation_profile.json; `domain=` picks a domain, default
all), or `drafter=<name>` with `al=<AL> d=<D>` or `acceptance=[c1,c2,…]` (conditional per position), and
optionally `draft_share=` (the share of target passes that verify a draft, default 1; a lookup
drafter given without it gets a note: it drafts only where it finds a match) and
`model_runner=v1|v2` (what a step without a draft costs: a plain step, or a full verify on V2).
A drafter's profile is chosen by its whole identity (provenance: source, runner, dtype, model
runner, settings): where a folder holds several (a sweep over settings, fake and real runs), the
one measured under the defaults is taken where exactly one is, and the others named in a note;
otherwise whatif refuses, listing how they differ, and `setting=<label>` picks one (`setting=`
or `setting=defaults`: the defaults; a label the refusal names, e.g. `verify.method=block`,
`engine.dtype=float32`). A serial drafter's AL at a D below its profile's is derived from its
rates and marked `derived`; a profile measured at its own D only (`measured_per_k`: parallel
drafting, Model-Optimizer's accept_length_model measured_per_k) gives AL at that D only. D is at most
128 (vLLM's limit on num_speculative_tokens). Every point says what it is (`source`: predicted;
`al_source`: measured, derived, fake, synthetic or given), whatif.json's `provenance` what its
acceptance and step costs are, and the terminal and whatif.html mark every AL not measured.
Architecture: `target.model=<folder or hub id>` (default: the run's target), `drafter.model=…`
(default: the run's draft; EAGLE heads without one are taken as one target-shaped layer),
`arch.<config field>=<value>` applied to the target's config before anything is derived.
Hardware: `gpu=<name>` (`--list-gpus`) or `gpu=custom gpu.bf16_tflops=… gpu.hbm_tb_s=… gpu.memory_gb=…
[gpu.fp8_tflops=… gpu.nvlink_gb_s=…]`, `tp=N`, `weights=bf16|fp8`, `expert_weights=bf16|fp8|nvfp4|mxfp4`
(a MoE target's experts; default: the checkpoint's quantization_config, else weights=), `eff.<field>=…`
(speclens/gpu_model/step_cost.py).
Engine: `engine=vllm|sglang|trtllm` (default vllm): its overlap scheduling under each drafter and
its in-graph drafting (speclens/gpu_model/serving_engines.py), printed with every prediction.
`slo.tokens_per_s_per_user=N` answers in one line what to serve, and up to which B, for N tokens/s
per user. Operating points: `batch_sizes=[…]` (default 1 … 256), `context_len=` one or a list (default 4096),
`d=` one or a list (default every D with acceptance). A run or sweep measured at several prompt
lengths (long context) gives acceptance per length: each point takes the AL measured at the length
nearest its context_len (of two equally near, the shorter), named in the point as `al_measured_at`;
context_len defaults to the measured lengths, and whatif.json's `by_length` states guidelines 2 and
3 at each measured length with the share of the step attention takes there and the best D per B
(all predicted). `calibrate=<run or sweep dir measured with
baseline=true>` fits the model to that machine's step costs and predicts for it (gpu=measured),
printing each point's error, fitted and held out; beside them it fits the K=0 tax (what an
undrafted step costs beyond a plain one, from the idle pass's T_idle; none before summary.json
version 12, and said) and T_draft (a model drafter's per-pass overhead, a lookup's cost per
request; a kind no run measured keeps the GPU constant, and said), each with its held-out error. Writes whatif.json to `out=` (default: the run
or sweep dir, else outputs/whatif/<date>/<time>/) and prints the best (drafter, D) per B.
Every predicted speedup carries `speedup_interval`, the 80% range derived on published GPU speedups
held out by source, with the share of them it held when built without their source
(speclens/gpu_model/model_error.py); where the path was never scored (calibrate=, an engine= term
that moves the drafter's steps, cost_model=aiconfigurator, eff.*) it is widened and marked *.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from evals.whatif_calibration import (
    beside_warnings,
    calibration_points,
    calibration_steps,
    calibration_what,
    fit_beside,
    fitted_beside_line,
)
from evals.whatif_inputs import AcceptanceInput, DrafterInput, Share, draft_lengths, ints, resolve_inputs
from evals.whatif_ladder import STAGE_REQUESTS, predicted_ladder
from reports.load_ladder import predicted_ladder_lines
from reports.table import text_table
from reports.whatif_page import write_page
from reports.whatif_text import slo_line, whatif_lines
from speclens import provenance as prov
from speclens.arrivals import PROCESSES
from speclens.errors import ConfigError, guarded
from speclens.figures.metrics import conditional_acceptance, length_label
from speclens.file_formats.profile_file import (
    PROFILE_FILE,
    dynamo_cut_note,
    dynamo_flags,
)
from speclens.file_formats.records import read_parquet
from speclens.file_formats.run_files import REQUESTS_FILE, read_stamp
from speclens.file_formats.summary_file import read_summary
from speclens.file_formats.whatif_file import WHATIF_FILE, write_whatif_file
from speclens.files import output_dir, output_path
from speclens.gpu_model import calibrate
from speclens.gpu_model.calibrate import StepCostPoint
from speclens.gpu_model.draft_cost import drafter_shape
from speclens.gpu_model.gpu_guidelines import at_length
from speclens.gpu_model.gpus import GPUS, gpu_named
from speclens.gpu_model.measured_ops import AiconfiguratorOps
from speclens.gpu_model.model_error import (
    HELD_OUT,
    TOKENS_PER_S_DERIVED_ON,
    interval_for,
    tokens_per_s_interval,
)
from speclens.gpu_model.model_shape import ModelShape, shape_of
from speclens.gpu_model.serving_engines import DEFAULT_ENGINE, engine_named
from speclens.gpu_model.step_cost import Efficiency, Hardware, check_tp, expert_format, measurable
from speclens.gpu_model.whatif import (
    DEFAULT_BATCH_SIZES,
    Drafting,
    best,
    check_fits,
    mean_context,
    predict,
    schedule,
    serve_at_slo,
)
from speclens.load_config import MAX_STAGE_REQUESTS, check_rates
from speclens.options import nearest, number, parse_value

DEFAULT_CONTEXT_LEN = 4096
KEYS = ("gpu", "tp", "weights", "batch_sizes", "context_len", "d", "al", "acceptance", "drafter", "domain", "out")
KEYS += ("target.model", "drafter.model", "calibrate", "slo.tokens_per_s_per_user", "cost_model", "engine")
KEYS += ("expert_weights", "draft_share", "model_runner", "setting")
KEYS += ("request_rates", "input_tokens", "output_tokens", "arrivals", "stage.requests")
TEXT_KEYS = ("target.model", "drafter.model", "out", "gpu", "calibrate", "cost_model", "engine", "expert_weights")
TEXT_KEYS += ("model_runner", "drafter", "domain", "weights", "setting", "arrivals")
# A predicted ladder's requests where request_rates= is given without them.
DEFAULT_INPUT_TOKENS, DEFAULT_OUTPUT_TOKENS = 1024, 256


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


def run_point(run_dir: Path, batch_size: int, *settings: str) -> dict[str, Any]:
    """whatif's point for one operating point of a run: the run's target and drafter, its AL, D and
    that B's draft share and context (mean prompt plus half the output, as calibration takes it),
    on the machine `settings` name (`gpu=…` or `calibrate=…`), at the requests that operating point
    held in flight (OperatingPoint.held). What a measured speed is set beside."""
    (point,) = run_result(run_dir, batch_size, *settings)["points"]
    return point


def run_result(run_dir: Path, batch_size: int, *settings: str) -> dict[str, Any]:
    """The whole whatif result whose one point run_point gives (its `calibration` record with it)."""
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
        f"batch_sizes=[{op.held}]",  # the requests it held in flight: what its speed is of
        f"context_len={mean_context(mine.prompt_tokens, mine.output_tokens)}",
        *settings,
    ]
    draft = (stamp.get("config", {}).get("drafter") or {}).get("model")
    if draft:
        argv.append(f"drafter.model={draft}")
    result, _ = build(argv)
    return result


COST_MODELS = ("roofline", "aiconfigurator")


def cost_label(hw: Hardware, calibrated: bool, target: ModelShape) -> str:
    if calibrated:
        return "roofline, calibrated"
    if hw.ops is None:
        return "roofline"
    if not measurable(target):
        return f"roofline ({hw.ops.label} hold no MoE or MLA GEMMs: the target's stay on the roofline)"
    return f"{hw.ops.label}: the target's GEMMs and all-reduces; attention and drafting: roofline"


@dataclass
class Calibration:
    """calibrate=<runs>: the measured T_verif points, what they are, and the steps the K=0 tax and
    T_draft are fitted on (evals/whatif_calibration.py)."""

    source: Path
    points: list[StepCostPoint]
    what: dict[str, Any]
    steps: Any


@dataclass
class Machine:
    """The hardware predicted on, and, where calibrate= fitted it, the fit and its record's parts."""

    hw: Hardware
    fitted: calibrate.Fit | None = None
    errors: list = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    beside: dict[str, Any] = field(default_factory=dict)


def check_cost_model(options: dict[str, Any]) -> str:
    cost_model = str(options.get("cost_model", "roofline"))
    if cost_model not in COST_MODELS:
        raise ConfigError(f"cost_model={cost_model}: choose one of {', '.join(COST_MODELS)}.")
    if cost_model == "aiconfigurator" and "calibrate" in options:
        raise ConfigError("cost_model=aiconfigurator predicts for a GPU of its tables; calibrate= fits this machine.")
    return cost_model


def read_calibration(options: dict[str, Any], source: Path | None) -> Calibration:
    """calibrate='s runs, checked against the keys it excludes; the target they measured becomes
    target.model where nothing else names one."""
    if options.get("gpu", "measured") != "measured":
        raise ConfigError(f"calibrate= predicts for the machine it measured: gpu=measured, not gpu={options['gpu']}.")
    if "engine" in options:
        raise ConfigError(
            f"calibrate= fits the engine that measured its runs, overheads included; engine={options['engine']} "
            "is for a GPU of the table."
        )
    if not str(options["calibrate"]).strip():  # (Path("") is the current folder: never meant)
        raise ConfigError("calibrate= is empty; give the run or sweep dir measured with baseline=true.")
    folder = Path(options["calibrate"]).expanduser()
    points, measured_target = calibration_points(folder)
    found = Calibration(folder, points, calibration_what(folder), calibration_steps(folder))
    if "target.model" not in options and source is None and measured_target is not None:
        options["target.model"] = measured_target
    return found


def fitted_machine(target: ModelShape, found: Calibration, options: dict[str, Any]) -> Machine:
    """The machine calibrate= measured, in place of a GPU of the table: the three constants, then
    the K=0 tax and T_draft beside them."""
    weights = str(options.get("weights", "bf16"))
    fitted = calibrate.fit(target, found.points, weights)
    errors = calibrate.errors(target, found.points, weights, everything=fitted)
    warnings = calibrate.implausible(fitted, [h for _, _, h in errors])
    fitted, beside = fit_beside(fitted, target, found.steps, weights)
    warnings += beside_warnings(beside)
    hw = fitted.hardware(weights, ints(options.get("tp", 1), "tp")[0], options.get("expert_weights"))
    return Machine(hw, fitted, errors, warnings, beside)


def calibration_record(machine: Machine, options: dict[str, Any], what: dict[str, Any] | None) -> dict[str, Any] | None:
    """whatif.json's `calibration`: the fit, each point's error fitted and held out, and what was
    fitted beside (None without calibrate=)."""
    if machine.fitted is None:
        return None
    return {
        "source": str(options["calibrate"]),
        "fit": asdict(machine.fitted),
        "points": [
            {**asdict(p), "error": round(in_fit, 4), "held_out_error": None if math.isnan(h) else round(h, 4)}
            for p, in_fit, h in machine.errors
        ],
        "held_out_bound": calibrate.HELD_OUT_BOUND,
        # fitted beside the three: the K=0 tax and T_draft, each point's error fitted and held out
        **machine.beside,
        "fitted_beside": fitted_beside_line(machine.beside),
        "warnings": machine.warnings,
        "provenance": what,
    }


def draftings_of(
    inputs: dict[str, DrafterInput], target: ModelShape, draft_configs: dict[str, Any], tp: int, ds: list[int] | None
) -> list[Drafting]:
    draftings = []
    for drafter, found in inputs.items():
        draft = drafter_shape(drafter, target, draft_configs[drafter])
        if draft is not None:
            check_tp(draft, tp, "the draft")
        drafting = drafting_of(drafter, found.acceptance, found.by_length, ds, draft)
        draftings.append(with_share(drafting, found.share))
    return draftings


def share_record(draftings: list[Drafting], inputs: dict[str, DrafterInput]) -> dict[str, Any]:
    """whatif.json's `draft_shares`: each drafter's share of passes that draft, and what measured it."""
    return {
        d.drafter: {
            "draft_share": inputs[d.drafter].share.value,
            "model_runner": inputs[d.drafter].share.model_runner,
            "undrafted_step": inputs[d.drafter].share.undrafted,
            **({"by_length": {length_label(t): v for t, v in d.share_by_length.items()}} if d.share_by_length else {}),
        }
        for d in draftings
    }


def dynamo_records(inputs: dict[str, DrafterInput]) -> dict[str, Any]:
    """The same acceptance as Dynamo's planner and mocker take it (speclens/file_formats/profile_file.py
    dynamo_flags), and what those flags leave out (AIC's five slots hold five positions)."""
    flags = {
        drafter: dynamo_flags(conditional_acceptance(found.acceptance.marginal), len(found.acceptance.marginal))
        for drafter, found in inputs.items()
        if found.acceptance.marginal is not None
    }
    notes = {
        drafter: note
        for drafter, found in inputs.items()
        if found.acceptance.marginal is not None and (note := dynamo_cut_note(found.acceptance.marginal)) is not None
    }
    return {"dynamo_flags": flags, "dynamo_flags_notes": notes}


def slo_answer(wanted: Any, points: list[dict[str, Any]], tp: int, context: int) -> dict[str, Any]:
    """whatif.json's `slo`: the most throughput that keeps every user above the rate, predicted,
    with the range published absolute figures put on its rates."""
    if isinstance(wanted, bool) or not isinstance(wanted, (int, float)) or wanted <= 0:
        raise ConfigError(f"slo.tokens_per_s_per_user={wanted}: a number of tokens/s above 0.")
    chosen = serve_at_slo(points, tp, context, float(wanted))
    if chosen is not None:
        chosen = chosen | {
            "source": prov.PREDICTED,
            "output_tokens_per_s_interval": tokens_per_s_interval(chosen["output_tokens_per_s"]),
            "tokens_per_s_per_request_interval": tokens_per_s_interval(chosen["tokens_per_s_per_request"]),
            "interval_derived_on": TOKENS_PER_S_DERIVED_ON,
        }
    return {"tokens_per_s_per_user": wanted, "context_len": context, "serve": chosen}


def output_folder(options: dict[str, Any], source: Path | None) -> Path:
    if "out" in options:
        return output_path(options["out"], "out")
    if source is not None:
        return source.parent if source.name == PROFILE_FILE else source
    return Path("outputs/whatif") / datetime.now().strftime("%Y-%m-%d/%H-%M-%S")


def build(argv: list[str]) -> tuple[dict[str, Any], Path | None]:
    """whatif.json's record and the folder it goes to: the options read and checked, the machine
    (a GPU of the table, or this one calibrated), every point predicted with its interval and
    sources, and the records a reader needs beside them."""
    source, options, arch, gpu_fields, eff_fields = parse(argv)
    cost_model = check_cost_model(options)
    ds = draft_lengths(options["d"]) if "d" in options else None
    found = read_calibration(options, source) if "calibrate" in options else None
    if found is None:
        hw = _hardware(options, gpu_fields, eff_fields)  # checked before any config is read
        if cost_model == "aiconfigurator":
            hw = replace(hw, ops=AiconfiguratorOps(str(options["gpu"]), str(options.get("engine", "vllm"))))
    target_config, inputs, draft_configs = resolve_inputs(source, options, arch)
    target = shape_of(target_config, "target.model")
    machine = Machine(hw) if found is None else fitted_machine(target, found, options)
    hw, calibrated_on = machine.hw, None if found is None else found.what
    check_tp(target, hw.tp)
    draftings = draftings_of(inputs, target, draft_configs, hw.tp, ds)
    measured_lengths = sorted({length for d in draftings for length in d.al_by_length or {}})
    batch_sizes = ints(options.get("batch_sizes", DEFAULT_BATCH_SIZES), "batch_sizes")
    context_lens = ints(options.get("context_len", measured_lengths or DEFAULT_CONTEXT_LEN), "context_len")
    if 0 in batch_sizes or 0 in context_lens:
        raise ConfigError("batch_sizes and context_len are whole numbers >= 1.")
    points = predict(draftings, target, hw, batch_sizes, context_lens, ds)
    with_intervals(points, hw)
    with_sources(points, draftings, inputs)
    if not any(p["fits"] for p in points):
        least = min(points, key=lambda p: p["memory_gb"])
        check_fits(hw, least["memory_gb"], least["batch_size"], least["context_len"])
    beside = None if machine.fitted is None else fitted_beside_line(machine.beside)
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
        "cost_model": cost_label(hw, machine.fitted is not None, target),
        "engine": None if hw.engine is None else hw.engine.as_dict(),
        "speedup_interval": interval_source(points),
        "calibration": calibration_record(machine, options, calibrated_on),
        "provenance": {
            "source": prov.PREDICTED,
            "acceptance": {drafter: found.what for drafter, found in inputs.items()},
            "step_costs": step_costs_what(hw, calibrated_on, beside),
        },
        "draft_shares": share_record(draftings, inputs),
        "notes": [f"calibration: {w}" for w in machine.warnings]
        + calibration_notes(calibrated_on)
        + [f"calibration: {n}" for n in machine.beside.get("notes", [])]
        + [note for found in inputs.values() for note in found.notes]
        + share_notes(draftings, {drafter: found.share for drafter, found in inputs.items()}, hw),
        **dynamo_records(inputs),
        "points": points,
        "best": with_best_sources(best(points), points),
        "schedules": {d.drafter: schedule(points, d.drafter, context_lens[0]) for d in draftings},
        "schedules_by_context_len": {
            str(c): {d.drafter: schedule(points, d.drafter, c) for d in draftings} for c in context_lens
        },
    }
    if measured_lengths:
        result["by_length"] = [
            length_section(length, draftings, inputs, target, hw, batch_sizes, ds) for length in measured_lengths
        ]
    if "slo.tokens_per_s_per_user" in options:
        result["slo"] = slo_answer(options["slo.tokens_per_s_per_user"], points, hw.tp, context_lens[0])
    if "request_rates" in options:
        result |= ladder_of(options, draftings, points, target, hw, ds)
    return result, output_folder(options, source)


def ladder_of(
    options: dict[str, Any],
    draftings: list[Drafting],
    points: list[dict[str, Any]],
    target: ModelShape,
    hw: Hardware,
    ds: list[int] | None,
) -> dict[str, Any]:
    """The predicted ladder: each drafter at each D given with d=, else at its best D at one request."""
    rates = check_rates(options["request_rates"])
    lengths = {}
    sizes = (("input_tokens", DEFAULT_INPUT_TOKENS), ("output_tokens", DEFAULT_OUTPUT_TOKENS))
    for key, default in (*sizes, ("stage.requests", STAGE_REQUESTS)):
        value = options.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{key}={value}: a whole number >= 1.")
        if key == "stage.requests" and value > MAX_STAGE_REQUESTS:
            raise ConfigError(f"stage.requests={value}: at most {MAX_STAGE_REQUESTS} requests a stage.")
        lengths[key] = value
    process = str(options.get("arrivals", "poisson"))
    if process not in PROCESSES:
        raise ConfigError(f"arrivals={process}: one of {', '.join(PROCESSES)}.")

    smallest = min(p["batch_size"] for p in points)

    def lengths_of(drafting: Drafting) -> list[int]:
        if ds is not None:
            return [d for d in ds if d in drafting.al_by_d]
        mine = [p for p in points if p["drafter"] == drafting.drafter and p["batch_size"] == smallest]
        return [max(mine, key=lambda p: p["speedup"])["d"]] if mine else []

    return predicted_ladder(
        draftings,
        lengths_of,
        target,
        hw,
        rates,
        lengths["input_tokens"],
        lengths["output_tokens"],
        process,
        lengths["stage.requests"],
    )


def drafting_of(
    drafter: str, acceptance: AcceptanceInput, by_length: dict[int, AcceptanceInput], ds: list[int] | None, draft
) -> Drafting:
    """A drafter's AL by D (and per measured length where it has lengths) at the asked D (default:
    every D its acceptance holds at every length, up to vLLM's limit)."""
    held = set(acceptance.al_by_d).intersection(*(set(found.al_by_d) for found in by_length.values()))
    wanted = ds if ds is not None else sorted(held)
    for d in wanted:
        if d not in held:
            raise ConfigError(missing_d(drafter, d, acceptance, by_length))
    al_by_d = {d: acceptance.al_by_d[d] for d in wanted}
    if not by_length:
        return Drafting(drafter, al_by_d, draft)
    al_by_length = {tokens: {d: found.al_by_d[d] for d in wanted} for tokens, found in by_length.items()}
    labels = {tokens: length_label(tokens) for tokens in by_length}
    return Drafting(drafter, al_by_d, draft, al_by_length, labels)


def missing_d(drafter: str, d: int, acceptance: AcceptanceInput, by_length: dict[int, AcceptanceInput]) -> str:
    """Why a D asked for has no AL: a parallel drafter's profile holds the D it measured only; a
    serial one's rates end before it."""
    short = next((found for found in (acceptance, *by_length.values()) if d not in found.al_by_d), acceptance)
    if short.measured_per_k:
        measured = ", ".join(map(str, sorted(short.al_by_d)))
        return (
            f"drafter={drafter} was measured at D={measured} only (measured_per_k: it drafts in parallel, so its AL at "
            f"another D is measured there, never derived); D={d} was not measured: give d={measured.split(', ')[-1]}."
        )
    return f"acceptance is known for {max(short.al_by_d)} positions; D={d} needs {d}."


def al_source(found: DrafterInput, drafting: Drafting, d: int, context: int) -> str:
    """What the AL of a point at (D, context) is: the source's own figure or derived."""
    length = drafting.measured_at(context)
    acceptance = found.acceptance if length is None else found.by_length[length]
    return acceptance.source_by_d[d]


def with_sources(points: list[dict[str, Any]], draftings: list[Drafting], inputs: dict[str, DrafterInput]) -> None:
    """Each point says what it is: its speedup predicted, its AL measured, derived, fake, given…"""
    by_drafter = {d.drafter: d for d in draftings}
    for p in points:
        p["source"] = prov.PREDICTED
        p["al_source"] = al_source(inputs[p["drafter"]], by_drafter[p["drafter"]], p["d"], p["context_len"])


def with_best_sources(chosen: list[dict[str, Any]], points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The best per (B, context) with the AL and its source of the point each took (none for plain)."""
    at = {(p["batch_size"], p["context_len"], p["drafter"], p["d"]): p for p in points}
    out = []
    for b in chosen:
        point = at.get((b["batch_size"], b["context_len"], b["drafter"], b["d"]))
        out.append(b if point is None else b | {"al": point["al"], "al_source": point["al_source"]})
    return out


def step_costs_what(hw: Hardware, calibrated_on: dict[str, Any] | None, beside: str | None = None) -> str:
    """What the step costs the predictions rest on are (calibrated: with what was fitted beside
    the three constants, `beside`)."""
    if calibrated_on is None:
        return f"the step-cost model for {hw.gpu.name}"
    fake = " (runner=fake: a script's step times, not a machine's)" if calibrated_on["fake"] else ""
    fitted = "" if beside is None else f" ({beside})"
    return "fitted to the step costs of " + ", ".join(calibrated_on["runs"]) + fitted + fake


def calibration_notes(calibrated_on: dict[str, Any] | None) -> list[str]:
    if calibrated_on is None or not calibrated_on["fake"]:
        return []
    return [
        "calibration: fitted on runs of the scripted engine (runner=fake): their step times are a script's, so the "
        "machine predicted is no real one [fake]"
    ]


def interval_source(points: list[dict[str, Any]]) -> str:
    """What every point's speedup_interval is, and which points' path no published case scored."""
    unscored = sorted({p["speedup_interval_derived_on"] for p in points} - {HELD_OUT.derived_on})
    widened = "".join(f"; ranges marked *: {u.removeprefix(HELD_OUT.derived_on + '; ')}" for u in unscored)
    return f"each point's speedup_interval: the {HELD_OUT.describe()}{widened}"


def with_intervals(points: list[dict[str, Any]], hw: Hardware) -> None:
    """Each point's speedup_interval and the kind of case it was derived on
    (speclens/gpu_model/model_error.py interval_for: widened where the path was never scored), its
    top held at the point's tokens per step, which no speedup exceeds (a verify costs at least a
    plain step on any real engine, whatever the model's error)."""
    for p in points:
        p["speedup_interval"], p["speedup_interval_derived_on"] = interval_for(
            p["speedup"], p["tokens_per_step"], hw, p["drafter"]
        )


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


def share_notes(draftings: list[Drafting], shares: dict[str, Share], hw: Hardware | None = None) -> list[str]:
    """What the predictions assume of each drafter's drafting steps, where a reader needs telling
    (with `hw`, the K=0 tax a plain undrafted step pays where it is not 0: calibrate=)."""
    out = []
    taxed = hw is not None and (hw.eff.k0_tax_ms or hw.eff.k0_tax_us_per_request)
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
            if taxed and share.undrafted == "plain":
                cost += " plus the K=0 tax fitted (calibration)"
            out.append(
                f"{drafting.drafter}: drafts on {share.value:.0%} of target passes{runner}; tokens per step = "
                f"1 + {share.value:.2f}·(AL − 1), and a step without a draft costs {cost}"
            )
    return out


PREDICTED = "predicted by the step-cost model from the acceptance measured at this length"


def length_section(
    length: int,
    draftings: list[Drafting],
    inputs: dict[str, DrafterInput],
    target: ModelShape,
    hw: Hardware,
    batch_sizes: list[int],
    ds,
) -> dict[str, Any]:
    """At one measured length: the AL measured there (at the D measured only; what its source is
    where not measured) and the AL the points derive from its rates at a smaller D, guidelines 2 and
    3 with the share of the step attention takes, and the best (drafter, D) per B, all but the AL
    predicted."""
    guidelines = at_length(target, hw, length, batch_sizes)
    points = predict(draftings, target, hw, batch_sizes, [length], ds)
    with_intervals(points, hw)
    with_sources(points, draftings, inputs)
    here = {drafter: found.by_length[length] for drafter, found in inputs.items() if length in found.by_length}
    used = {d.drafter: d.al_by_length[length] for d in draftings if d.al_by_length and length in d.al_by_length}
    return {
        "length": length_label(length),
        "context_len": length,
        "source": PREDICTED,
        "al_measured": {drafter: {str(d): found.al_by_d[d] for d in found.own_ds} for drafter, found in here.items()},
        "al_measured_source": {drafter: found.source_by_d[found.own_ds[-1]] for drafter, found in here.items()},
        "al_derived": {
            drafter: {
                str(d): al for d, al in sorted(used[drafter].items()) if prov.is_derived(here[drafter].source_by_d[d])
            }
            for drafter in here
            if drafter in used
        },
        "g": guidelines.g,
        "guideline_2_d": guidelines.starting_d,
        "guideline_3_ds": guidelines.tile_aligned,
        "by_batch_size": [asdict(b) for b in guidelines.by_batch],
        "best": with_best_sources(best(points), points),
    }


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
    write_whatif_file(result, out)
    for line in whatif_lines(result):
        print(line)
    if "ladder" in result:
        for line in predicted_ladder_lines(result):
            print(line)
    page = write_page(result, out, slo_line(result))
    print(f"written: {out / WHATIF_FILE}, {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
