"""reports.build: the self-contained, interactive HTML report, opened in a real headless browser
(Debian's chromium) with no network, and its markdown twin."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from reports.build import al_digits, build
from reports.build import main as build_main
from tests.unit.test_step_costs import measure

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# The answer first, then the evidence in the order a reader checks it.
SECTIONS = (
    "What to serve",
    "AL vs D per domain",
    "Ranking",
    "Measured vs predicted speedup",
    "Speedup account",
    "Throughput vs interactivity",
    "Latency",
    "Per-position acceptance",
    "Acceptance histogram",
    "AL by context position",
    "AL by output position",
    "AL per request",
    "Runs",
    "Drafters",
    "Run stamp",
)
# No request leaves the browser: every host resolves nowhere.
OFFLINE = ["--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9"]


def sweep(tmp_path: Path) -> Path:
    measure(tmp_path, 2)
    measure(tmp_path, 1)
    return tmp_path / "sweep"


def chromium(*args: str) -> str:
    assert Path(CHROMIUM).exists(), "Debian's chromium is needed for this test: `make test` installs it"
    cmd = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=10000", *OFFLINE, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=True).stdout


def opened(page: Path) -> dict[str, str]:
    """What the page's own check wrote on <body> once its charts were drawn, at 1280 px; a
    screenshot is kept beside the page (a test artifact when an assertion fails)."""
    dom = chromium("--window-size=1280,900", "--dump-dom", page.as_uri())
    chromium("--window-size=1280,900", f"--screenshot={page.with_suffix('.png')}", page.as_uri())
    body = re.search(r"<body([^>]*)>", dom).group(1)
    return dict(re.findall(r'data-([a-z-]+)="([^"]*)"', body))


def test_report_has_every_section_and_its_markdown_twin(tmp_path):
    root = sweep(tmp_path)
    html_file, md_file = build(root)
    html, md = html_file.read_text(), md_file.read_text()
    titles = re.findall(r"<h2>([^<]+)</h2>", html)
    assert titles == list(SECTIONS) and re.findall(r"^## (.+)$", md, re.M) == list(SECTIONS)
    # self-contained: plotly.js inside the page, nothing fetched (no external script, image or link)
    markup = re.sub(r"<script\b.*?</script>", "", html, flags=re.S)
    assert "<img" not in markup and not re.search(r"(src|href)=", markup) and "<script src" not in html
    assert len(html) > 3_000_000 and "Plotly.newPlot" in html
    # the markdown twin keeps static images, beside it
    images = re.findall(r"!\[[^\]]*\]\((report_[^)]+\.png)\)", md)
    # AL vs D for `all` and `coding`, measured vs predicted, 4 waterfalls, throughput, per position, histogram,
    # AL per request
    assert (
        len(images) == 11
        and "report_al_per_request.png" in images
        and all((root / f).stat().st_size > 5000 for f in images)
    )
    # the ranking's measured speedup and the guideline verdict appear in both
    assert "guideline 2 suggests D=15" in html and "guideline 2 suggests D=15" in md


def test_the_sweeps_report_opens_offline_answer_first_every_chart_drawn_nothing_overflowing(tmp_path):
    root = sweep(tmp_path)
    assert build_main([str(root)]) == 0
    page = opened(root / "report.html")
    shot = root / "report.png"
    assert page["ready"] == "1" and page["errors"] == "", f"{page} (screenshot: {shot})"
    assert page["first-section"] == "what-to-serve", shot
    assert int(page["scroll-width"]) <= int(page["inner-width"]) == 1280, f"overflows: {page} ({shot})"
    # AL vs D (2 D), measured vs predicted, 4 speedup-account waterfalls (2 runs x 2 B), throughput vs
    # interactivity, per-position acceptance, the histogram, AL per request; AL by context and by output
    # position have one bin each: not drawn
    assert page["charts"] == page["charts-rendered"] == "10", f"{page} ({shot})"
    assert (
        "AL by context position: not drawn (every drafted step started at 0–255 tokens"
        in (root / "report.html").read_text()
    )
    assert (
        "AL by output position: not drawn (every drafted step started at 0–31 generated tokens"
        in (root / "report.html").read_text()
    )


def test_a_single_unranked_run_opens_with_its_headline_and_the_command_that_ranks_it(tmp_path):
    summary, out = measure(tmp_path, 2, "baseline=false", "batch_sizes=[1]")
    html_file, md_file = build(out)
    page = opened(html_file)
    assert page["errors"] == "" and page["first-section"] == "headline-al"
    assert int(page["scroll-width"]) <= int(page["inner-width"])
    # one run at one D: AL per domain as bars (all, coding); per position, histogram, AL per request; no
    # speedup chart
    assert page["charts"] == page["charts-rendered"] == "4", page
    md = md_file.read_text()
    lo, hi = summary["al_ci95"]
    shown = f"{summary['al']:.{al_digits([lo, hi])}f} [{lo:.3f}, {hi:.3f}]"  # the decimals its CI justifies
    # the fake engine's figures headline only where nothing was measured, and say so
    assert f"Highest AL (fake, not measured): ngram d=2, {shown}." in md
    assert f"python -m evals.run drafter=ngram d=2 dataset=jsonl baseline=true force=true hydra.run.dir={out}" in md


def test_report_refuses_an_empty_dir(tmp_path, capsys):
    assert build_main([str(tmp_path)]) == 2
    assert "no finished runs" in capsys.readouterr().err


def test_the_report_shows_latency_where_it_was_measured(tmp_path):
    measure(tmp_path, 2)
    build(tmp_path / "sweep")
    md = (tmp_path / "sweep" / "report.md").read_text()
    section = md.split("## Latency")[1].split("## ")[0]
    assert "| ngram d=2 | B=1 |" in section and "| ngram d=2 | B=2 |" in section
    # the fake's scripted steps: TPOT p50 at B=1 is 102/18 ms (see test_step_costs), the TPOT speedup 198/102
    assert f"{102 / 18:.1f} / " in section and f"| {198 / 102:.2f} |" in section
    throughput = md.split("## Throughput vs interactivity")[1].split("\n## ")[0]
    assert "![throughput_vs_interactivity]" in throughput


def test_the_ranking_carries_latency_where_it_was_measured(tmp_path):
    import pandas as pd

    from reports.rank import main as rank_main

    measure(tmp_path, 2)
    assert rank_main([str(tmp_path / "sweep")]) == 0
    ranking = pd.read_csv(tmp_path / "sweep" / "ranking.csv")
    at_1 = ranking[(ranking.domain == "all") & (ranking.batch_size == 1)].set_index("drafter")
    # the fake's scripted steps (see test_step_costs): TPOT p50 102/18 ms speculative, 198/18 ms plain
    assert at_1.loc["ngram", "tpot_p50_ms"] == pytest.approx(102 / 18)
    assert at_1.loc["ngram", "latency_speedup"] == pytest.approx(198 / 102)
    assert at_1.loc["none", "tpot_p50_ms"] == pytest.approx(198 / 18) and at_1.loc["none", "latency_speedup"] == 1.0
    assert "TPOT p50 ms" in (tmp_path / "sweep" / "ranking.md").read_text()


def test_the_report_shows_each_speedup_account_closing(tmp_path):
    summary, _ = measure(tmp_path, 2)
    build(tmp_path / "sweep")
    section = (tmp_path / "sweep" / "report.md").read_text().split("## Speedup account")[1].split("\n## ")[0]
    for point in summary["operating_points"]:
        account = point["speedup_account"]
        row = next(line for line in section.splitlines() if line.startswith(f"| ngram d=2 | {point['batch_size']} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[2] == f"{point['predicted_speedup']:.3f}" and cells[3] == f"{account['factors']['prefill']:.3f}"
        assert cells[7] == cells[8] == f"{point['speedup']:.3f}"  # product = measured
    assert section.count("![account_") == 2


def test_the_run_stamp_names_how_speclens_built_the_draft(tmp_path):
    import json

    from speclens.file_formats.drafter_build import DRAFTER_FACTS_FILE, describe_build
    from tests.unit.conftest import write_checkpoint
    from tests.unit.test_drafters import _build_facts

    draft = write_checkpoint(tmp_path / "built-draft")
    facts = _build_facts(mechanism="draft_model", library="transformers 5.19.0", heldout_greedy_agreement=0.4374)
    (draft / DRAFTER_FACTS_FILE).write_text(json.dumps(facts))
    _, out = measure(tmp_path, 2, "drafter=draft_model", f"drafter.model={draft}", "batch_sizes=[1]")
    assert json.loads((out / "stamp.json").read_text())["draft_build"] == facts
    build(tmp_path / "sweep")
    stamp = (tmp_path / "sweep" / "report.md").read_text().split("## Run stamp")[1]
    fingerprint = json.loads((out / "stamp.json").read_text())["fingerprints"]["draft"]
    assert f"Draft {fingerprint}: {describe_build(facts)}." in stamp
    assert "held-out greedy agreement 0.44, 10.0 min" in describe_build(facts)


def test_the_report_shows_acceptance_per_segment_where_thinking_was_split(tmp_path):
    from tests.unit.test_step_costs import PROMPTS, SCRIPTS

    measure(tmp_path, 2, "reasoning.end=w102")
    root = tmp_path / "sweep"
    html, md = (f.read_text() for f in build(root))
    assert "<h2>Thinking vs answer</h2>" in html and "## Thinking vs answer" in md
    # every output's tokens 0..2 are thinking (the delimiter is token 2): 3 of each output's tokens
    outputs = len(PROMPTS) * 2  # two batch sizes
    tokens = sum(1 + sum(1 if s is None else s + 1 for s in SCRIPTS[2]) for _ in range(outputs))
    assert "| ngram d=2 | thinking |" in md and f"| {3 * outputs} | {3 * outputs / tokens:.2f} |" in md
    assert "Thinking ends by text 'w102'" in md
    measure(tmp_path / "other", 2)
    assert "Thinking vs answer" not in build(tmp_path / "other" / "sweep")[1].read_text()
