"""Acceptance by context length as an axis (issue 47): curves per length, the report's section,
the long_context_decay diagnostic, and compare/nightly keeping each length apart.

Runs use the scripted fake engine over dataset=long_context prompts of the embedded target; the
script makes the 1k prompts accept less than the 300-token ones (the fake's own acceptance does not
depend on length). A copy of the target whose config.json says a 512-token window, run with a YaRN
extension, measures the 1k prompts past the native window."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from evals.pipeline.run_job import run
from reports.build import build
from reports.compare import compare
from reports.compare import main as compare_main
from reports.curves import write_curves
from speclens.figures.diagnostics import diagnose, long_context_decay
from speclens.figures.metrics import GroupFigures
from speclens.file_formats.run_files import REQUESTS_FILE, STEPS_FILE
from speclens.file_formats.summary_file import SUMMARY_FILE
from tests.unit.conftest import FAKE_PAIR_NOTE, compose_run, write_script
from tests.unit.test_diagnostics import facts
from tests.unit.test_long_context import smollm2  # noqa: F401 (the embedded target, shared)
from tests.unit.test_report import opened

LENGTHS = "dataset.input_tokens=[300,1000]"
EXTENDED = "+engine.rope_scaling={rope_type:yarn,factor:4}"


def script(accepted: dict[str, int], d: int, tiers=("mixed",), per_length: int = 2) -> dict:
    """Every request drafts 6 steps accepting accepted[length label] (capped at d) each."""
    return {
        f"long_context/{tier}@{label}/{i}#0": [min(accepted[label], d)] * 6
        for tier in tiers
        for label in ("300", "1k")
        for i in range(per_length // len(tiers))
    }


def short_window_target(tmp_path: Path, smollm2: Path) -> Path:  # noqa: F811
    """The embedded target with a 512-token window in its config.json (its other files linked)."""
    folder = tmp_path / "smol512"
    folder.mkdir(exist_ok=True)
    for file in smollm2.iterdir():
        if file.name != "config.json" and not (folder / file.name).exists():
            (folder / file.name).symlink_to(file)
    config = json.loads((smollm2 / "config.json").read_text()) | {"max_position_embeddings": 512}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def measure(tmp_path: Path, target: Path, out: Path, accepted: dict[str, int], d: int = 3, *extra: str) -> Path:
    tiers = ("low_entropy", "mixed") if "dataset.tier=[low_entropy,mixed]" in extra else ("mixed",)
    per_length = 4 if len(tiers) > 1 else 2
    name = f"{out.parent.name}_{out.name}".replace("=", "")  # no `=` in an override's value
    scripted = write_script(tmp_path / f"{name}.json", script(accepted, d, tiers, per_length))
    cfg = compose_run(
        "target=custom",
        f"target.model={target}",
        "runner=fake",
        f"runner.script={scripted}",
        "dataset=long_context",
        LENGTHS,
        f"dataset.num_requests={per_length}",
        "drafter=ngram",
        f"d={d}",
        *extra,
    )
    run(cfg, out, progress=lambda label: None)
    return out


FALLS = {"300": 3, "1k": 0}  # AL 4 at 300, 1 at 1k (d=3)


# -- curves ---------------------------------------------------------------------------------------


def test_curves_draw_each_length_on_its_own_never_pooled(tmp_path, smollm2):  # noqa: F811
    root = tmp_path / "sweep"
    for d in (1, 3):
        measure(tmp_path, smollm2, root / f"d={d}", FALLS, d)
    curves = write_curves(root).set_index(["domain", "d"])
    # each length its own point at each D: 300 accepts min(3, d), 1k nothing
    assert curves.loc[("all@300", 3), "al"] == pytest.approx(4.0) and curves.loc[("all@300", 1), "al"] == 2.0
    assert curves.loc[("all@1k", 3), "al"] == pytest.approx(1.0) and curves.loc[("all@1k", 1), "al"] == 1.0
    assert curves.loc[("all", 3), "al"] == pytest.approx(2.5)  # the pooled figure stays `all`
    assert curves.loc[("all@1k", 3), "input_tokens"] == 1000 and curves.loc[("mixed@300", 3), "input_tokens"] == 300
    assert pd.isna(curves.loc[("all", 3), "input_tokens"])
    assert set(curves.context_extension) == {""}  # the target's own window holds every length
    assert (root / "curve_lengths.png").stat().st_size > 5000
    assert not list(root.glob("curve_all@*.png"))  # lengths are drawn together, against D


# -- the diagnostic -------------------------------------------------------------------------------


def bucket(tokens: int, al: float, ci: list[float]) -> GroupFigures:
    return GroupFigures(al, ci, al - 0.3, 8, 40, input_tokens=tokens)


def test_al_falling_with_length_beyond_its_ci_is_named_with_both_lengths_and_what_to_do():
    lengths = {
        "1k": bucket(1000, 2.60, [2.50, 2.70]),
        "8k": bucket(8000, 2.45, [2.30, 2.55]),  # overlaps 1k's interval: no fall on its own
        "32k": bucket(32000, 1.80, [1.70, 1.90]),
    }
    (found,) = diagnose(facts(by_length=lengths))
    assert (found.code, found.severity) == ("long_context_decay", "warning")
    # the widest fall whose intervals part: 1k against 32k
    assert found.message.startswith(
        "AL falls with context length: 1.800 [1.700, 1.900] at 32k input tokens against 2.600 [2.500, 2.700] at 1k "
        "(95% CIs apart); speculation buys less at long context"
    )
    assert "choose D per length (`python -m reports.rank <dir>` ranks each length)" in found.message
    assert found.evidence["falls"] == [["1k", "32k"], ["8k", "32k"]]
    assert (found.evidence["shorter"], found.evidence["longer"]) == ("1k", "32k")
    assert "window" not in found.message  # no extension named: nothing to say of it


def test_overlapping_or_rising_lengths_and_runs_without_lengths_say_nothing():
    overlapping = {"1k": bucket(1000, 2.6, [2.4, 2.8]), "32k": bucket(32000, 2.3, [2.1, 2.5])}
    rising = {"1k": bucket(1000, 1.8, [1.7, 1.9]), "32k": bucket(32000, 2.6, [2.5, 2.7])}
    no_ci = {"1k": bucket(1000, 2.6, None), "32k": bucket(32000, 1.2, None)}
    for lengths in (overlapping, rising, no_ci, None):
        assert long_context_decay(facts(by_length=lengths)) is None


def test_the_fall_past_the_native_window_names_the_extension():
    lengths = {"4k": bucket(4000, 2.6, [2.5, 2.7]), "32k": bucket(32000, 1.8, [1.7, 1.9])}
    found = long_context_decay(facts(by_length=lengths, native_window=8192, context_extension="yarn x4 from 8192"))
    assert "; 32k was measured past the target's own window (8192 tokens), with yarn x4 from 8192;" in found.message
    assert found.evidence["context_extension"] == "yarn x4 from 8192"


def test_a_run_whose_long_prompts_accept_less_carries_the_diagnostic(tmp_path, smollm2):  # noqa: F811
    out = measure(tmp_path, short_window_target(tmp_path, smollm2), tmp_path / "run", FALLS, 3, EXTENDED)
    summary = json.loads((out / SUMMARY_FILE).read_text())
    (found,) = [d for d in summary["diagnostics"] if d["code"] == "long_context_decay"]
    assert (found["evidence"]["shorter"], found["evidence"]["longer"]) == ("300", "1k")
    assert found["evidence"]["al_shorter"] == 4.0 and found["evidence"]["al_longer"] == 1.0
    assert "1k was measured past the target's own window (512 tokens), with yarn x4 from 512" in found["message"]


# -- the report -----------------------------------------------------------------------------------


def test_the_report_draws_al_against_length_marking_what_ran_extended(tmp_path, smollm2):  # noqa: F811
    target = short_window_target(tmp_path, smollm2)
    root = tmp_path / "sweep"
    measure(tmp_path, target, root / "d=3", FALLS, 3, EXTENDED)
    measure(tmp_path, target, root / "d=1", FALLS, 1, EXTENDED)
    html_file, md_file = build(root)
    md = md_file.read_text()
    section = md.split("## AL by context length")[1].split("\n## ")[0]
    assert "Context: window 2048 (extended: yarn x4 from 512)." in section
    assert "| ngram d=3 | 300 | 300 | 2 | 12 | 4.000 | [4.000, 4.000] |" in section
    assert re.search(
        r"\| ngram d=3 \| 1k \| 1,000 \| 2 \| 12 \| 1\.000 \| .* \| extended: yarn x4 from 512 \|", section
    )
    assert "| native |" in section and "![al_by_length](report_al_by_length.png)" in section
    assert (root / "report_al_by_length.png").stat().st_size > 5000
    # the long_context_decay warning leads the evidence
    assert "| ngram d=3 | warning | long_context_decay | AL falls with context length" in md
    html = html_file.read_text()
    charts = re.search(r'<script type="application/json" id="speclens-charts">(.*?)</script>', html, re.S).group(1)
    specs = json.loads(charts.replace("<\\/", "</"))
    al = specs["chart-al-by-context-length-1"]
    d3 = next(t for t in al["data"] if t["name"] == "ngram d=3")
    assert d3["x"] == [300, 1000] and d3["y"] == [4.0, 1.0]
    assert d3["marker"]["symbol"] == ["circle", "diamond-open"]  # 1k past the 512-token window
    assert "measured with yarn x4 from 512" in d3["customdata"][1]
    assert any(t["name"].startswith("native window 512") and t["x"] == [512, 512] for t in al["data"])
    assert al["layout"]["xaxis"]["type"] == "log" and al["layout"]["xaxis"]["ticktext"] == ["300", "1k"]
    # each length's group is drawn against length, not as one more domain of AL vs D
    domains = {t.get("meta", {}).get("domain") for t in specs["chart-al-vs-d-per-domain-1"]["data"]}
    assert domains == {"all", "mixed@300", "mixed@1k"}
    page = opened(html_file)
    assert page["errors"] == "" and page["charts"] == page["charts-rendered"], page
    assert int(page["scroll-width"]) <= int(page["inner-width"])


# -- compare and nightly ----------------------------------------------------------------------------


def test_a_regression_at_one_length_is_compared_on_its_own(tmp_path, smollm2):  # noqa: F811
    tiers = "dataset.tier=[low_entropy,mixed]"
    base = measure(tmp_path, smollm2, tmp_path / "base" / "ngram", {"300": 2, "1k": 2}, 3, tiers).parent
    cand = measure(tmp_path, smollm2, tmp_path / "cand" / "ngram", {"300": 2, "1k": 0}, 3, tiers).parent
    table, notes = compare(base, cand)
    rows = table.set_index("domain")
    # two tiers at each length: the length's own row pools them, beside each tier's
    assert list(rows.index) == [
        "all",
        "low_entropy@1k",
        "low_entropy@300",
        "mixed@1k",
        "mixed@300",
        "all@300",
        "all@1k",
    ]
    assert rows.loc["all@1k", "al_diff"] == pytest.approx(-2.0) and bool(rows.loc["all@1k", "significant"])
    assert rows.loc["all@300", "al_diff"] == 0.0 and not rows.loc["all@300", "significant"]
    assert rows.loc["all@1k", "input_tokens"] == 1000 and rows.loc["all@1k", "n_requests"] == 4
    assert notes == [FAKE_PAIR_NOTE]


def test_one_tier_needs_no_row_of_its_own_per_length(tmp_path, smollm2):  # noqa: F811
    base = measure(tmp_path, smollm2, tmp_path / "base" / "ngram", {"300": 2, "1k": 2}).parent
    cand = measure(tmp_path, smollm2, tmp_path / "cand" / "ngram", {"300": 2, "1k": 0}).parent
    rows = compare(base, cand)[0].set_index("domain")
    # mixed@1k holds every 1k prompt: its row is the length's
    assert sorted(rows.index) == ["all", "mixed@1k", "mixed@300"]
    assert rows.loc["mixed@1k", "al_diff"] == pytest.approx(-2.0) and rows.loc["mixed@300", "al_diff"] == 0.0


def strip_lengths(run_dir: Path) -> None:
    """The run as a speclens from before lengths were recorded left it: no input_tokens, no by_length."""
    for name in (STEPS_FILE, REQUESTS_FILE):
        table = pq.read_table(run_dir / name)
        pq.write_table(table.drop_columns(["input_tokens"]), run_dir / name)
    summary = json.loads((run_dir / SUMMARY_FILE).read_text())
    summary.pop("by_length")
    for point in summary["operating_points"]:
        point.pop("by_length", None)
    (run_dir / SUMMARY_FILE).write_text(json.dumps(summary))


def test_lengths_on_one_side_only_are_taken_from_it_and_other_lengths_are_refused_in_one_line(
    tmp_path,
    smollm2,  # noqa: F811
    capsys,
):
    tiers = "dataset.tier=[low_entropy,mixed]"
    base = measure(tmp_path, smollm2, tmp_path / "base" / "ngram", {"300": 2, "1k": 2}, 3, tiers).parent
    cand = measure(tmp_path, smollm2, tmp_path / "cand" / "ngram", {"300": 2, "1k": 0}, 3, tiers).parent
    strip_lengths(base / "ngram")
    table, notes = compare(base, cand)
    assert table.set_index("domain").loc["all@1k", "al_diff"] == pytest.approx(-2.0)
    assert notes == [
        FAKE_PAIR_NOTE,
        f"input lengths from {cand / 'ngram'}'s records: the baseline's ({base / 'ngram'}) carry none (measured "
        "before speclens kept them); the prompts are the same, so each length is compared on both sides",
    ]
    other = measure(tmp_path, smollm2, tmp_path / "other" / "ngram", {"300": 2, "1k": 2}, 3, "dataset.input_tokens=300")
    assert compare_main([str(other.parent), str(cand)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"speclens: error: {other.parent} was measured at input lengths 300 and {cand} at 300, 1k: each length is "
        "compared with itself only; measure both over the same prompts and lengths (dataset=, dataset.input_tokens=)."
    )


def test_a_night_regressed_at_one_length_names_it_and_its_extension(tmp_path, smollm2, capsys):  # noqa: F811
    from evals.nightly import main as nightly_main

    target = short_window_target(tmp_path, smollm2)
    suite = tmp_path / "suite.yaml"
    common = ["runner=fake", "target=custom", f"target.model={target}", EXTENDED, "dataset=long_context"]
    common += [LENGTHS, "dataset.num_requests=2"]
    suite.write_text(json.dumps({"common": common, "jobs": {"ngram_d3": ["drafter=ngram", "d=3"]}}))

    def night(label: str, accepted: dict[str, int], *extra: str) -> int:
        scripted = write_script(tmp_path / f"{label}.json", script(accepted, 3))
        out = tmp_path / "nights" / label
        return nightly_main([f"suite={suite}", f"night={label}", f"out={out}", f"runner.script={scripted}", *extra])

    assert night("n1", {"300": 2, "1k": 2}) == 0
    assert night("n2", {"300": 2, "1k": 0}, f"baseline={tmp_path / 'nights' / 'n1'}") == 1
    err = capsys.readouterr().err
    assert (
        "REGRESSION drafter=ngram d=3 domain=mixed@1k: AL 3.000 -> 1.000 (-2.000, 95% CI [-2.000, -2.000], threshold "
        "0.1); measured past the target's own window, with yarn x4 from 512" in err
    )
    assert "domain=mixed@300" not in err
    # the pooled AL fell too, but only by the 1k prompts: its interval reaches zero (the 300 prompts held)
    assert "domain=all:" not in err
    n2 = pd.read_parquet(tmp_path / "nights" / "history.parquet").query("night == 'n2'").set_index("domain")
    assert (
        n2.loc["mixed@1k", "context_extension"] == "yarn x4 from 512" and n2.loc["mixed@300", "context_extension"] == ""
    )
    assert n2.loc["all", "context_extension"] == "yarn x4 from 512 at 1k" and bool(n2.loc["mixed@1k", "regressed"])
    # a night over other lengths than its baseline is refused before it runs, naming both
    assert night("n3", {"300": 2, "1k": 2}, f"baseline={tmp_path / 'nights' / 'n1'}", "dataset.input_tokens=[300]") == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("speclens: error: baseline=") and "at input lengths 300, 1k (this night's: 300;" in line
