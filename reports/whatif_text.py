"""whatif's terminal view: what `python -m evals.whatif` prints from the record it writes to
whatif.json (reports/whatif_page.py is the same record's HTML page) — the machine and cost model,
each drafter's acceptance and what it is, the calibration and its held-out errors, the best per
(B, context) with its 80 % range, the notes, Dynamo's flags, the per-length blocks and the answer
to slo.tokens_per_s_per_user=. Every figure here is predicted, and says so."""

from __future__ import annotations

from typing import Any

from reports.table import text_table
from reports.whatif_page import acceptance_lines
from speclens import provenance as prov
from speclens.gpu_model.model_error import HELD_OUT
from speclens.gpu_model.whatif import best_label
from speclens.provenance import mark


def whatif_lines(result: dict[str, Any]) -> list[str]:
    """Everything `python -m evals.whatif` prints about a prediction, in order."""
    gpu = result["gpu"]["name"]
    experts = f", experts {result['expert_weights']}" if result["expert_weights"] else ""
    engine = "the engine calibrated" if result["engine"] is None else result["engine"]["label"]
    out = [
        f"speclens whatif: {gpu}, tp={result['tp']}, weights={result['weights']}{experts}; engine: {engine}; "
        f"cost model: {result['cost_model']}",
        *acceptance_lines(result),
    ]
    if result["model"]["arch_overrides"]:
        out.append("arch overrides: " + ", ".join(f"{k}={v}" for k, v in result["model"]["arch_overrides"].items()))
    if result["calibration"] is not None:
        out += calibration_lines(result["calibration"])
    out += [table(result), f"predicted; {result['speedup_interval']}", *result["notes"]]
    for drafter, flags in result["dynamo_flags"].items():
        out.append(f"{drafter} for Dynamo's planner and mocker: {flags}")
        if drafter in result["dynamo_flags_notes"]:
            out.append(f"  {result['dynamo_flags_notes'][drafter]}")
    out += length_lines(result)
    left_out = sum(not p["fits"] for p in result["points"])
    if left_out:
        out.append(f"{left_out} points left out: weights and KV cache above 90% of the GPU's memory")
    slo = slo_line(result)
    return out + ([slo] if slo else [])


def calibration_lines(calibration: dict[str, Any]) -> list[str]:
    """The fit of `calibrate=`: its constants, each point's error fitted and held out, and what was
    fitted beside them."""
    fitted = calibration["fit"]
    fake = mark(prov.FAKE) if (calibration.get("provenance") or {}).get("fake") else ""
    out = [
        f"calibrated on {calibration['source']}{fake}: {fitted['hbm_tb_s'] * 1e3:.1f} GB/s, "
        f"{fitted['tflops']:.3f} TFLOPS, {fitted['overhead_ms']:.2f} ms a pass, attention "
        + ("in 128-row tiles" if fitted["tile_rows"] else "on the real query rows")
    ]
    for p in calibration["points"]:
        held = "-" if p["held_out_error"] is None else f"{p['held_out_error']:+.1%}"
        out.append(
            f"  B={p['batch_size']} D={p['d']} context {p['context']}: measured {p['t_ms']:.2f} ms, "
            f"fit {p['error']:+.1%}, held out {held}"
        )
    return out + beside_lines(calibration)


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
        al_mark = "" if chosen is None else mark(chosen.get("al_source", prov.MEASURED))
        what = "plain" if b["drafter"] == "none" else f"{b['drafter']} d={b['d']}"
        rows.append([str(b["batch_size"]), str(b["context_len"]), what, f"{al:.2f}{al_mark}", f"{per_step:.2f}"])
        interval = None if chosen is None else chosen["speedup_interval"]
        unscored = chosen is not None and chosen.get("speedup_interval_derived_on", "") != HELD_OUT.derived_on
        shown = interval_label(interval, unscored)
        rows[-1] += [f"{t_plain:.2f}", f"{t_step:.2f}", f"{b['speedup']:.2f}", shown, bound]
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


def length_lines(result: dict[str, Any]) -> list[str]:
    """Per measured length: guidelines 2 and 3, the attention share and the best D, one block each."""
    out = []
    for section in result.get("by_length") or []:
        al = "; ".join(measured_there(section, drafter) for drafter in section["al_measured"])
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


def measured_there(section: dict[str, Any], drafter: str) -> str:
    """`eagle3 D=3: 1.80 (D=1, 2 derived from its rates [derived])`: the AL a length's profile
    measured, marked where its source is not a measurement, and the D derived from it."""
    measured = section["al_measured"][drafter]
    source = section.get("al_measured_source", {}).get(drafter, prov.MEASURED)
    text = f"{drafter} " + ", ".join(f"D={d}: {v:.2f}" for d, v in measured.items()) + mark(source)
    derived = section.get("al_derived", {}).get(drafter)
    if derived:
        text += f" (D={', '.join(derived)} derived from its rates{mark(prov.derived_from(source))})"
    return text


def slo_line(result: dict[str, Any]) -> str | None:
    """The one-line answer to slo.tokens_per_s_per_user= (None where it was not asked)."""
    slo = result.get("slo")
    if slo is None:
        return None
    wanted, context, serve = slo["tokens_per_s_per_user"], slo["context_len"], slo["serve"]
    if serve is None:
        return f"no setting gives {wanted:g} tokens/s per user at context {context} on {result['gpu']['name']}"
    what = "plain decoding" if serve["mechanism"] == "plain" else f"{serve['mechanism']} d={serve['d']}"
    gpu_low, gpu_high = serve.get("output_tokens_per_s_interval") or (None, None)
    user_low, user_high = serve.get("tokens_per_s_per_request_interval") or (None, None)
    line = (
        f"serve {what} up to B={serve['batch_size']}: {serve['output_tokens_per_s']:,.0f} tokens/s per GPU"
        + ("" if gpu_low is None else f" [{gpu_low:,.0f}, {gpu_high:,.0f}]")
        + f", {serve['tokens_per_s_per_request']:.0f} tokens/s per user"
        + ("" if user_low is None else f" [{user_low:.0f}, {user_high:.0f}]")
        + f" (>= {wanted:g}) at context {context}, predicted"
    )
    if user_low is not None and user_low < wanted:
        line += f"; its 80 % range reaches below {wanted:g} tokens/s per user: measure before relying on it"
    return line


def interval_label(interval: list[float] | None, unscored: bool = False) -> str:
    """`[low, high]`, with `*` where the interval was widened for a path no published case scored."""
    return "-" if not interval else f"[{interval[0]:.2f}, {interval[1]:.2f}]" + ("*" if unscored else "")


def beside_lines(calibration: dict[str, Any]) -> list[str]:
    """The terminal's lines for the K=0 tax and T_draft fitted beside the three constants."""

    def held(value: float | None) -> str:
        return "-" if value is None else f"{value:+.1%}"

    lines = [f"fitted beside: {calibration['fitted_beside']}"]
    for p in (calibration.get("k0_tax") or {}).get("points", []):
        lines.append(
            f"  K=0 tax B={p['batch_size']} context {p['context']}: plain {p['t_plain_ms']:.2f} ms, idle "
            f"{p['t_idle_ms']:.2f} ms ({p['tax_ms']:+.2f} ms); T_idle fit {p['error']:+.1%}, held out {held(p['held_out_error'])}"
        )
    for kind, fit in calibration["t_draft"].items():
        for p in fit.get("points", []):
            lines.append(
                f"  T_draft {p['drafter']} B={p['batch_size']} D={p['d']} context {p['context']}: measured "
                f"{p['t_draft_ms']:.2f} ms of a {p['t_step_ms']:.2f} ms step; off by {p['error']:+.1%} of the step "
                f"fitted, {held(p['held_out_error'])} held out ({kind})"
            )
    return lines
