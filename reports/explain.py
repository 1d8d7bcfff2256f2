"""`python -m reports.explain <run A> <run B>`: why two ALs differ.

A and B are speclens run dirs, or B is another tool's per-request export (`vllm bench serve
--save-result` JSON, aiperf's profile_export.jsonl, specdec_bench's output; speclens/file_formats/peer_exports.py).
Prints, and writes into --out as explain.md and explain.json: the settings that differ (most
consequential first), whether the prompts and their token ids are the same, where the outputs part,
and the AL difference split into additive parts that sum to it (speclens/attribution.py), with the
one line a user needs. A peer's figure is compared by its own formula: the difference splits into
what the definitions make of the same records, and what the measurements differ by.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from reports.table import cell, markdown_table, text_table
from speclens.attribution import Tally, split_difference
from speclens.errors import ArgumentParser, SpeclensError, guarded
from speclens.figures.metrics import output_positions
from speclens.figures.peer_figures import PEER_FORMULAS, drafted_turns, peer_figures, specdec_bench_requests
from speclens.file_formats.peer_exports import PeerExport, read_peer_export
from speclens.file_formats.reading import Run, read_run
from speclens.file_formats.summary_file import SUMMARY_FILE
from speclens.files import output_dir, output_path, write_json_atomic, write_text_atomic

EXPLAIN_MD = "explain.md"
EXPLAIN_JSON = "explain.json"
KEY = ["request_id", "turn"]

# Settings by how much they move AL, most first (a key ranks by its longest listed prefix; unlisted
# keys come last, by name): what is drafted from and verified, then what is sampled and how long,
# which prompts, then what moves the numerics.
CONSEQUENCE = (
    "runner",
    "fingerprints.target",
    "fingerprints.draft",
    "config.target.chat_template",
    "config.chat_template_kwargs",
    "config.sampling.temperature",
    "config.sampling.top_p",
    "config.d",
    "speculative_config",
    "config.drafter",
    "config.sampling.max_tokens",
    "fingerprints.dataset",
    "config.dataset",
    "config.seed",
    "config.reasoning",
    "versions.vllm",
    "model_runner",
    "numerics.dtype",
    "numerics.batch_invariant",
    "numerics.threads",
    "config.batch_sizes",
    "config.engine",
    "numerics",
    "versions",
)
# Stamp keys that say nothing about what was measured: when, where the files were, how it printed.
IGNORED = (
    "started_at",
    "config_fingerprint",
    "target_dir",
    "fitted_defaults",
    "draft_build",
    "git_sha",
    "config.force",
    "config.verbose",
    "config.logger",
    "config.target.model",
    "config.drafter.model",
    # where the prompt file was: fingerprints.dataset says what it held
    "config.dataset.path",
    "speculative_config.model",
    "numerics.reproducible",
)
# Settings that move the outputs' tokens without changing what is asked (a parting from them is
# numerics), and those that change the question.
NUMERICS_SETTINGS = ("numerics", "versions", "model_runner", "config.engine", "config.batch_sizes", "gpu", "runner")
DRAFTER_SETTINGS = ("fingerprints.draft", "config.d", "speculative_config", "config.drafter")
SAMPLING_SETTINGS = ("config.sampling.temperature", "config.sampling.top_p", "config.chat_template_kwargs")
PROMPT_SETTINGS = ("fingerprints.dataset", "config.dataset", "config.seed", "config.target.chat_template")
# The parts of the difference (speclens/attribution.py groups).
ONLY_A, ONLY_B = "prompts only in A", "prompts only in B"
BEFORE_PARTING, AFTER_PARTING = "parted outputs, before they part", "parted outputs, from where they part"
IDENTICAL = "identical outputs, other acceptance"
DEFINITION, MEASUREMENT = "definition (the same records, the peer's formula)", "measurement (the peer's records)"
UNATTRIBUTED = "not attributable (a side has no per-request acceptance)"
# A difference smaller than this is no difference (float noise of two sums).
SAME_AL = 1e-9


@dataclass
class Side:
    """One run as explain reads it: its AL, settings, and per turn (request_id, turn) its prompt
    digest, output and acceptance."""

    path: Path
    tool: str
    al: float | None
    settings: dict[str, Any]
    # index KEY: prompt_digest, tokens (tuple or None), finish_reason
    turns: pd.DataFrame
    # index KEY: accepted, drafts (None: no per-request acceptance)
    tallies: pd.DataFrame | None
    # request_id, turn, output_position, num_accepted (None: no step records)
    steps: pd.DataFrame | None
    figure_name: str = "AL"
    run: Run | None = None
    peer: PeerExport | None = None


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict) and node:
        out: dict[str, Any] = {}
        for key, value in node.items():
            out |= flatten(value, f"{prefix}.{key}" if prefix else str(key))
        return out
    return {prefix: node}


def ignored(key: str) -> bool:
    return any(key == i or key.startswith(i + ".") for i in IGNORED)


def rank(key: str) -> tuple[int, str]:
    matches = [i for i, p in enumerate(CONSEQUENCE) if key == p or key.startswith(p + ".")]
    return (min(matches) if matches else len(CONSEQUENCE), key)


def run_settings(run: Run) -> dict[str, Any]:
    stamp = {k: v for k, v in run.stamp.items() if k != "schema_version"}
    numerics = run.summary.numerics
    if numerics is not None:
        stamp["numerics"] = {k: v for k, v in vars(numerics).items() if k not in ("model_runner", "gpu")}
    return {k: v for k, v in flatten(stamp).items() if not ignored(k)}


def speclens_side(path: Path) -> Side:
    run = read_run(path)
    outputs = run.outputs
    if not outputs.empty:
        # one output per turn: the smallest batch size's, where a run measured several
        outputs = outputs.sort_values("batch_size", kind="stable").drop_duplicates(KEY)
    turns = pd.DataFrame(
        {
            "prompt_digest": outputs.get("prompt_digest", pd.Series([None] * len(outputs))).to_numpy(),
            "tokens": [tuple(t) for t in outputs["token_ids"]] if not outputs.empty else [],
            "finish_reason": outputs.get("finish_reason", pd.Series([None] * len(outputs))).to_numpy(),
        },
        index=pd.MultiIndex.from_frame(outputs[KEY]) if not outputs.empty else None,
    )
    steps, requests = run.steps, run.requests
    tallies = steps_or_totals(steps, requests)
    step_rows = None
    if not steps.empty:
        step_rows = pd.DataFrame(
            {
                "request_id": steps["request_id"].to_numpy(),
                "turn": steps["turn"].to_numpy(),
                "output_position": output_positions(steps, requests),
                "num_accepted": steps["num_accepted"].to_numpy(),
            }
        )
    return Side(path, "speclens", run.summary.al, run_settings(run), turns, tallies, step_rows, run=run)


def steps_or_totals(steps: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame | None:
    """Accepted tokens and drafted steps per turn, over every batch size the run measured (None:
    counters only, no per-request acceptance)."""
    turns = drafted_turns(steps, requests)
    if turns.empty:
        return None
    return turns.groupby(KEY)[["accepted", "drafts"]].sum()


def peer_side(path: Path) -> Side:
    peer = read_peer_export(path)
    turns = pd.DataFrame(
        {
            "prompt_digest": [None] * len(peer.turns),
            "tokens": [t.tokens for t in peer.turns],
            "finish_reason": [None] * len(peer.turns),
        },
        index=pd.MultiIndex.from_tuples([(t.request_id, 0) for t in peer.turns], names=KEY) if peer.turns else None,
    )
    return Side(path, peer.tool, peer.al, peer.settings, turns, None, None, figure_name=peer.figure, peer=peer)


def read_side(path: Path) -> Side:
    if path.is_dir():
        if not (path / SUMMARY_FILE).is_file():
            raise SpeclensError(f"{path} holds no finished run (no {SUMMARY_FILE}); give a run dir or a peer's export")
        return speclens_side(path)
    if not path.is_file():
        raise SpeclensError(f"{path} does not exist")
    return peer_side(path)


@dataclass
class Outputs:
    """The shared turns' outputs compared."""

    identical: list[tuple[str, int]] = field(default_factory=list)
    # turn -> the output index where the two part
    parted: dict[tuple[str, int], int] = field(default_factory=dict)
    # parted turns where one output is the other's start, the shorter stopped by max_tokens
    cut: list[tuple[str, int]] = field(default_factory=list)
    unknown: list[tuple[str, int]] = field(default_factory=list)


def parting(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    """The first output index where a and b differ (the shorter's length where one starts the other); None if equal."""
    if a == b:
        return None
    n = min(len(a), len(b))
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if len(diff) else n


def compare_outputs(a: Side, b: Side, shared: list[tuple[str, int]]) -> Outputs:
    out = Outputs()
    for key in shared:
        ta, tb = a.turns.at[key, "tokens"], b.turns.at[key, "tokens"]
        if ta is None or tb is None:
            out.unknown.append(key)
            continue
        at = parting(ta, tb)
        if at is None:
            out.identical.append(key)
            continue
        out.parted[key] = at
        shorter = a if len(ta) <= len(tb) else b
        if at == min(len(ta), len(tb)) and shorter.turns.at[key, "finish_reason"] in ("length", None):
            out.cut.append(key)
    return out


def tally(side: Side, keys: list[tuple[str, int]], parted_at: dict | None = None, before: bool = True) -> Tally:
    """The side's accepted tokens and drafted steps over these turns; with `parted_at` (turn -> the
    output index where the two runs part), only its steps starting before it (`before`) or from it."""
    if not keys:
        return Tally()
    if parted_at is None:
        rows = side.tallies.reindex(pd.MultiIndex.from_tuples(keys, names=KEY)).dropna()
        return Tally(int(rows["accepted"].sum()), int(rows["drafts"].sum()))
    steps = side.steps
    at = pd.Series(parted_at, dtype="int64")
    at.index = at.index.set_names(KEY)
    starts = steps.set_index(KEY).join(at.rename("at"), how="inner")
    chosen = starts[(starts["output_position"] < starts["at"]) == before]
    return Tally(int(chosen["num_accepted"].sum()), int(len(chosen)))


def attribute(a: Side, b: Side, shared: list, only_a: list, only_b: list, outputs: Outputs) -> dict[str, float]:
    """The parts of AL(B) - AL(A), one per group of drafted steps."""
    if a.tallies is None or b.tallies is None:
        return {}
    parted = list(outputs.parted)
    groups = {ONLY_A: (tally(a, only_a), Tally()), ONLY_B: (Tally(), tally(b, only_b))}
    if a.steps is not None and b.steps is not None:
        groups[BEFORE_PARTING] = (tally(a, parted, outputs.parted, True), tally(b, parted, outputs.parted, True))
        groups[AFTER_PARTING] = (tally(a, parted, outputs.parted, False), tally(b, parted, outputs.parted, False))
    else:  # totals per turn only: a parted turn is one piece
        groups[AFTER_PARTING] = (tally(a, parted), tally(b, parted))
    same = outputs.identical + outputs.unknown
    groups[IDENTICAL] = (tally(a, same), tally(b, same))
    return split_difference(groups)


def settings_differ(a: Side, b: Side) -> list[dict[str, Any]]:
    """The settings both sides record, with other values (a key a speclens stamp leaves out is its
    default, so between two runs it is compared; a peer's export records none of speclens's keys,
    so between a run and a peer nothing is: settings_unknown)."""
    keys = sorted((set(a.settings) | set(b.settings)) if b.peer is None else set(), key=rank)
    return [
        {"key": k, "a": a.settings.get(k), "b": b.settings.get(k)}
        for k in keys
        if a.settings.get(k) != b.settings.get(k)
    ]


def settings_unknown(a: Side, b: Side) -> list[str]:
    """A's settings that B's side does not record (a peer's D, drafter, sampling): unknown, not different."""
    return sorted(set(a.settings) - set(b.settings), key=rank) if b.peer is not None else []


def short(key: str) -> str:
    return key.rsplit(".", 1)[-1]


def among(differ: list[dict[str, Any]], prefixes: tuple[str, ...]) -> list[dict[str, Any]]:
    return [d for d in differ if any(d["key"] == p or d["key"].startswith(p + ".") for p in prefixes)]


def said(settings: list[dict[str, Any]], most: int = 2) -> str:
    """The first `most` settings as `name A vs B`, one setting said once (numerics.dtype and
    config.engine.dtype are one)."""
    phrases = list(dict.fromkeys(f"{short(d['key'])} {d['a']} vs {d['b']}" for d in settings))
    return ", ".join(phrases[:most])


def where(report: dict[str, Any], name: str, share: float) -> str:
    """Which steps carry the largest part, as a phrase."""
    if name in (ONLY_A, ONLY_B):
        return f"{share:.0%} of it is in prompts only in one run"
    if name in (AFTER_PARTING, BEFORE_PARTING):
        side = "after" if name == AFTER_PARTING else "before"
        return f"{share:.0%} of it is in the steps {side} the outputs part"
    if name == IDENTICAL:
        return f"{share:.0%} of it is in identical outputs, accepted otherwise"
    return f"{share:.0%} of it is not attributable to steps"


def also(differ: list[dict[str, Any]], named: list[dict[str, Any]]) -> str:
    """The other settings that differ, said after the cause (at most two)."""
    rest = [d for d in differ if d not in named]
    return f"; also different: {said(rest)}" if rest else ""


def conclusion(report: dict[str, Any], differ: list[dict[str, Any]]) -> str:
    """The one line: the settings that differ in order of cause (the engine that measured, the target,
    then the drafter and D, then sampling and lengths, then the prompts, then engine and numerics),
    with where the largest part of the difference lies."""
    difference, parts = report["difference"], report["parts"]
    if difference is None:
        return "a side has no AL to compare"
    if abs(difference) < SAME_AL:
        return "the two runs measure the same AL"
    if not parts:
        return f"AL differs by {difference:+.4f}; the records do not say where (no per-request acceptance on a side)"
    name = max(parts, key=lambda k: abs(parts[k]))
    share = parts[name] / difference
    if name == DEFINITION:
        return (
            f"the difference is one of definitions: {report['b']['figure']} by {report['b']['tool']}'s formula over "
            f"speclens's own records gives {report['peer_formula_on_a']:.4f} ({share:.0%} of the difference)"
        )
    if name == MEASUREMENT:
        unknown = len(report["settings_unknown"])
        return (
            f"the peer measured other acceptance ({share:.0%} of the difference is in its own records); its export "
            f"does not record {unknown} of A's settings (drafter, D, sampling among them), so which differ is unknown"
        )
    engines = [d for d in differ if d["key"] == "runner" and "fake" in (d["a"], d["b"])]
    if engines:
        fake = "A" if engines[0]["a"] == "fake" else "B"
        return (
            f"the engines differ ({said(engines)}): {fake}'s acceptance is the fake engine's script, not a model's, "
            f"so no setting explains the difference ({where(report, name, share)})"
        )
    for cause, what in (
        (among(differ, ("fingerprints.target",)), "the targets differ"),
        (among(differ, DRAFTER_SETTINGS), "the drafters differ"),
    ):
        if cause:
            # another method: its own knobs differing too is no news
            method = [d for d in cause if d["key"] == "speculative_config.method"]
            return f"{what} ({said(method or cause)}): {where(report, name, share)}{also(differ, cause)}"
    if name in (ONLY_A, ONLY_B):
        cause = among(differ, PROMPT_SETTINGS)
        because = f" ({said(cause)})" if cause else ""
        return f"the difference comes from the prompts{because}: {share:.0%} of it is in prompts only in one run"
    if name in (AFTER_PARTING, BEFORE_PARTING):
        outputs = report["outputs"]
        sampling = among(differ, SAMPLING_SETTINGS)
        max_tokens = [d for d in differ if d["key"] == "config.sampling.max_tokens"]
        if sampling:
            return f"the sampling differs ({said(sampling)}): {where(report, name, share)}{also(differ, sampling)}"
        if max_tokens and outputs["cut_by_max_tokens"] >= outputs["parted"] / 2 and name == AFTER_PARTING:
            low = min(max_tokens[0]["a"], max_tokens[0]["b"])
            return f"the difference comes from {said(max_tokens)}: {share:.0%} of it is in tokens past {low}"
        cause = among(differ, NUMERICS_SETTINGS)
        because = f"; settings that move the tokens differ: {said(cause)}" if cause else ""
        side = "after" if name == AFTER_PARTING else "before"
        return (
            f"the outputs part on {outputs['parted']} of {report['prompts']['shared']} shared prompts and "
            f"{share:.0%} of the difference is in their steps {side} the parting{because}"
        )
    cause = among(differ, NUMERICS_SETTINGS)
    because = f": {said(cause)}" if cause else " with the same settings"
    return f"the same outputs were drafted or accepted differently{because} ({share:.0%} of the difference)"


def explain(path_a: Path, path_b: Path, allow_different_targets: bool = False) -> dict[str, Any]:
    a, b = read_side(path_a), read_side(path_b)
    if a.tool != "speclens":
        raise SpeclensError(f"{path_a}: run A must be a speclens run dir (a peer's export goes second)")
    check_targets(a, b, allow_different_targets)
    keys_a, keys_b = list(a.turns.index), set(b.turns.index)
    shared = [k for k in keys_a if k in keys_b]
    only_a = [k for k in keys_a if k not in keys_b]
    only_b = sorted(keys_b - set(keys_a))
    outputs = compare_outputs(a, b, shared)
    differ = settings_differ(a, b)
    digests = [(a.turns.at[k, "prompt_digest"], b.turns.at[k, "prompt_digest"]) for k in shared]
    known = [(x, y) for x, y in digests if x is not None and y is not None]
    report: dict[str, Any] = {
        "a": {"path": str(path_a), "tool": a.tool, "figure": a.figure_name},
        "b": {"path": str(path_b), "tool": b.tool, "figure": b.figure_name},
        "al_a": a.al,
        "al_b": b.al,
        "difference": b.al - a.al if a.al is not None and b.al is not None else None,
        "settings_differ": [d["key"] for d in differ],
        "settings": {d["key"]: [d["a"], d["b"]] for d in differ},
        # A's settings a peer's export does not record: unknown, not different
        "settings_unknown": settings_unknown(a, b),
        "peer_settings": dict(b.peer.settings) if b.peer is not None else {},
        "prompts": {
            "shared": len(shared),
            "only_in_a": len(only_a),
            "only_in_b": len(only_b),
            # None: a side did not record its prompts' token ids
            "same_token_ids": sum(x == y for x, y in known) if known else None,
            # of those that differ, later turns whose earlier turn's output parted (they carry it)
            "differ_by_an_earlier_answer": sum(
                x != y and k[1] > 0 and (k[0], k[1] - 1) in outputs.parted
                for k, (x, y) in zip(shared, digests)
                if x and y
            ),
            "different_token_ids": sorted(f"{k[0]}#{k[1]}" for k, (x, y) in zip(shared, digests) if x and y and x != y),
        },
        "outputs": {
            "identical": len(outputs.identical),
            "parted": len(outputs.parted),
            "cut_by_max_tokens": len(outputs.cut),
            "not_recorded": len(outputs.unknown),
            # turns with no counterpart on the other side (another request id or turn): not compared
            "unmatched_a": len(only_a),
            "unmatched_b": len(only_b),
            "parted_at": {f"{k[0]}#{k[1]}": v for k, v in sorted(outputs.parted.items())},
        },
    }
    if b.peer is not None:
        report |= peer_parts(a, b)
    else:
        parts = attribute(a, b, shared, only_a, only_b, outputs)
        if not parts and report["difference"] is not None and abs(report["difference"]) >= SAME_AL:
            parts = {UNATTRIBUTED: report["difference"]}
        report["parts"] = parts
    report["conclusion"] = conclusion(report, differ)
    return report


def peer_parts(a: Side, b: Side) -> dict[str, Any]:
    """A peer's figure against a speclens run: its formula over A's own records first (definition),
    then the rest (measurement); the two parts sum to the difference."""
    assert a.run is not None and b.peer is not None
    figures = peer_figures(a.run.steps, a.run.requests)
    on_a = None if figures is None else PEER_FORMULAS[b.peer.tool](figures)
    out: dict[str, Any] = {"parts": {}, "peer_formula_on_a": on_a}
    if b.peer.tool == "specdec_bench":
        out["per_request"] = per_request_figures(a, b.peer)
    if on_a is not None and a.al is not None and b.al is not None:
        out["parts"] = {DEFINITION: on_a - a.al, MEASUREMENT: b.al - on_a}
    return out


def per_request_figures(a: Side, peer: PeerExport, most: int = 5) -> dict[str, Any] | None:
    """Where the peer's per-request figures name speclens's request ids: each against its formula on A's
    records, the largest differences first."""
    assert a.run is not None
    ours = specdec_bench_requests(a.run.steps, a.run.requests)
    theirs = {t.request_id: t.al for t in peer.turns if t.al is not None}
    shared = sorted(set(theirs) & set(ours.index)) if ours is not None else []
    if not shared:
        return None
    rows = [{"request": r, "speclens_records": float(ours.at[r, "al"]), "peer": theirs[r]} for r in shared]
    rows.sort(key=lambda row: -abs(row["peer"] - row["speclens_records"]))
    return {
        "matched": len(shared),
        "mean_difference": float(np.mean([row["peer"] - row["speclens_records"] for row in rows])),
        "largest_differences": rows[:most],
    }


def check_targets(a: Side, b: Side, allowed: bool) -> None:
    ta, tb = a.settings.get("fingerprints.target"), b.settings.get("fingerprints.target")
    if ta and tb and ta != tb and not allowed:
        raise SpeclensError(
            f"{a.path} and {b.path} measured different targets ({ta[:19]} vs {tb[:19]}); their ALs are not "
            "explained by settings: pass --allow-different-targets to compare them anyway"
        )


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# Why the two ALs differ",
        "",
        f"A: `{report['a']['path']}` ({report['a']['tool']} {report['a']['figure']} {cell(report['al_a'], 4)})  ",
        f"B: `{report['b']['path']}` ({report['b']['tool']} {report['b']['figure']} {cell(report['al_b'], 4)})  ",
        f"difference (B - A): {cell(report['difference'], 4, signed=True)}",
        "",
        f"**{report['conclusion']}**",
        "",
        "## Parts of the difference",
        "",
        markdown_table(["part", "AL", "share"], part_rows(report)),
        "",
        "## Settings that differ (most consequential first)",
        "",
    ]
    rows = [[k, json.dumps(v[0]), json.dumps(v[1])] for k, v in report["settings"].items()]
    lines += [markdown_table(["setting", "A", "B"], rows) if rows else "none", ""]
    if report["settings_unknown"]:
        lines += [f"Unknown (B's export does not record them): {unknown_said(report)}", ""]
    lines += ["## Prompts and outputs", ""]
    lines += [f"- {line}" for line in prompt_lines(report)]
    return "\n".join(lines) + "\n"


def part_rows(report: dict[str, Any]) -> list[list[str]]:
    difference = report["difference"] or 0.0
    return [
        [name, cell(value, 4, signed=True), f"{value / difference + 0.0:.0%}" if abs(difference) >= SAME_AL else "-"]
        for name, value in report["parts"].items()
    ]


def prompt_lines(report: dict[str, Any]) -> list[str]:
    prompts, outputs = report["prompts"], report["outputs"]
    if report["b"]["tool"] != "speclens" and not prompts["shared"]:
        return [f"prompts and outputs: not matched ({report['b']['tool']}'s export names its requests its own way)"]
    same = prompts["same_token_ids"]
    lines = [
        f"prompts: {prompts['shared']} shared, {prompts['only_in_a']} only in A, {prompts['only_in_b']} only in B",
        "token ids after templating: "
        + ("not recorded on a side" if same is None else f"{same} of the shared prompts the same")
        + (
            f" ({prompts['differ_by_an_earlier_answer']} differ as later turns carrying an earlier answer that parted)"
            if prompts.get("differ_by_an_earlier_answer")
            else ""
        ),
        f"outputs: {outputs['identical']} identical, {outputs['parted']} parted"
        + (
            f" ({outputs['cut_by_max_tokens']} where the shorter stopped at max_tokens)"
            if outputs["cut_by_max_tokens"]
            else ""
        )
        + (f", {outputs['not_recorded']} not recorded on a side" if outputs["not_recorded"] else "")
        + (
            f"; unmatched (no turn of the same id on the other side, not compared): {outputs['unmatched_a']} of A's, "
            f"{outputs['unmatched_b']} of B's"
            if outputs["unmatched_a"] or outputs["unmatched_b"]
            else ""
        ),
    ]
    per_request = report.get("per_request")
    if per_request:
        first = per_request["largest_differences"][0]
        lines.append(
            f"per request ({per_request['matched']} matched by id): the peer's figure minus its formula on A's records "
            f"{per_request['mean_difference']:+.4f} on average, most at {first['request']} "
            f"({first['peer']:.4f} vs {first['speclens_records']:.4f})"
        )
    if outputs["parted_at"]:
        at = np.array(list(outputs["parted_at"].values()))
        lines.append(
            f"where they part (output token index): first {int(at.min())}, median {int(np.median(at))}; whether a "
            "parting was a near-tie is not in the records (a run's lossless check classifies its own, baseline=true)"
        )
    return lines


def unknown_said(report: dict[str, Any], most: int = 6) -> str:
    unknown = report["settings_unknown"]
    more = f" and {len(unknown) - most} more" if len(unknown) > most else ""
    return ", ".join(unknown[:most]) + more


def terminal(report: dict[str, Any]) -> str:
    out = [
        f"A {report['a']['figure']} {cell(report['al_a'], 4)}   B {report['b']['figure']} {cell(report['al_b'], 4)}   "
        f"difference {cell(report['difference'], 4, signed=True)}",
        report["conclusion"],
        "",
        text_table(["part", "AL", "share"], part_rows(report)) if report["parts"] else "no parts",
        "",
        "settings that differ: " + (", ".join(report["settings_differ"]) or "none"),
    ]
    if report["settings_unknown"]:
        out.append(f"settings unknown on B's side (its export does not record them): {unknown_said(report)}")
    return "\n".join(out + prompt_lines(report))


@guarded
def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="python -m reports.explain", description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, help="a speclens run dir")
    parser.add_argument("b", type=Path, help="another speclens run dir, or a peer's per-request export")
    parser.add_argument(
        "--out", default=None, help="where explain.md and explain.json go (default: outputs/explain/<date>/<time>)"
    )
    parser.add_argument("--allow-different-targets", action="store_true", help="compare runs of different targets")
    args = parser.parse_args(argv)
    out = output_path(time.strftime("outputs/explain/%Y-%m-%d/%H-%M-%S") if args.out is None else args.out, "--out")
    report = explain(args.a, args.b, args.allow_different_targets)
    output_dir(out, "--out")
    write_json_atomic(report, out / EXPLAIN_JSON)
    write_text_atomic(out / EXPLAIN_MD, markdown(report))
    print(terminal(report))
    print(f"explained: {out / EXPLAIN_MD}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
