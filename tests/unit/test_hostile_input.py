"""Hostile input refused in one line before anything is computed on it (issue 33's table): each
test names its row."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest

import speclens
from evals.pipeline.run_job import run
from speclens.errors import ConfigError, CorruptRecord
from tests.unit.conftest import compose_run, fake_overrides

ROWS = [{"question_id": f"q{i}", "category": "coding", "turns": [f"task {i}"]} for i in range(3)]


@pytest.fixture
def fake_run(tmp_path) -> Path:
    out = tmp_path / "run"
    run(compose_run(*fake_overrides(tmp_path, ROWS), "drafter=ngram", "d=3"), out, progress=lambda label: None)
    return out


@pytest.mark.parametrize("figure", ["NaN", "Infinity", "-Infinity"])
def test_p1_a_summary_holding_a_non_finite_figure_is_a_corrupt_record_naming_its_key(fake_run, figure):
    path = fake_run / "summary.json"
    text = path.read_text()
    data = json.loads(text)
    assert math.isfinite(data["by_domain"]["coding"]["al"])
    data["by_domain"]["coding"]["al"] = "@@"
    path.write_text(json.dumps(data).replace('"@@"', figure))
    with pytest.raises(CorruptRecord, match=r"summary.json holds a non-finite figure at by_domain\.coding\.al"):
        _ = speclens.read_run(fake_run).summary
    path.write_text(text)
    assert speclens.read_run(fake_run).summary.al == data["al"]


def test_api2_the_bootstraps_arguments_are_checked_by_name():
    steps = pd.DataFrame({"request_id": ["a", "a", "b"], "num_accepted": [1, 2, 0]})
    assert speclens.al_ci95(steps, seed=0, samples=10) is not None
    for bad in ({"seed": 0, "samples": 0}, {"seed": -1}, {"seed": 1.5}, {"seed": 0, "samples": True}):
        name = "samples" if "samples" in bad else "seed"
        with pytest.raises(ValueError, match=f"al_ci95: {name} must be an integer"):
            speclens.al_ci95(steps, **bad)


def test_api2_nan_or_negative_counts_are_refused_not_read_as_zero():
    assert speclens.al(pd.DataFrame({"request_id": ["a", "b"], "num_accepted": [1.0, 2.0]})) == 2.5
    for bad in (float("nan"), -1.0, float("inf")):
        with pytest.raises(ValueError, match="steps.num_accepted holds a count that is not a finite number"):
            speclens.al(pd.DataFrame({"request_id": ["a", "b"], "num_accepted": [1.0, bad]}))


def _rows(*categories: str) -> list[dict]:
    return [{"question_id": f"q{i}", "category": c, "turns": [f"task {i}"]} for i, c in enumerate(categories)]


@pytest.mark.parametrize("category, said", [("all", "the name speclens gives the whole run's group"), (" ", "empty")])
def test_d1_t1_a_category_named_all_or_empty_is_refused_before_an_engine_starts(
    tmp_path, engines_started, category, said
):
    from speclens.errors import ConfigError

    overrides = fake_overrides(tmp_path, _rows("coding", category, "writing"))
    with pytest.raises(ConfigError, match=said):
        run(compose_run(*overrides, "drafter=ngram", "d=3"), tmp_path / "run", progress=lambda label: None)
    assert engines_started == []


def test_t1_m1_categories_with_control_characters_or_html_are_shown_as_text(tmp_path, capsys):
    from reports.build import build
    from reports.table import result_table

    hostile = ["\x1b]0;pwned\x07\x1b[31mred", "line\nbreak\u202eevil", "<script>alert(1)</script>"]
    out = tmp_path / "run"
    run(compose_run(*fake_overrides(tmp_path, _rows(*hostile)), "drafter=ngram", "d=3"), out, progress=lambda _: None)
    table = result_table(speclens.read_run(out).summary)
    assert "\x1b" not in table and "\x07" not in table and "\u202e" not in table
    assert "\\x1b]0;pwned\\x07\\x1b[31mred" in table and "line\\x0abreak\\u202eevil" in table
    # a ranked sweep's report.md and ranking.md name every domain in their tables and headings
    from reports.ranking_tables import write_ranking
    from tests.unit.test_step_costs import measure

    measure(tmp_path / "ranked", 2, rows=_rows(*hostile))
    measure(tmp_path / "ranked", 1, rows=_rows(*hostile))
    sweep = tmp_path / "ranked" / "sweep"
    _, md = build(sweep)
    write_ranking([sweep])
    for text in (md.read_text(), (sweep / "ranking.md").read_text()):
        assert "<script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
        assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text


def test_api1_staging_and_failed_attempt_dirs_are_not_runs_to_the_reader_or_the_reports(fake_run, tmp_path):
    import shutil

    from reports.runs import find_runs
    from speclens.file_formats.run_files import FAILED_ATTEMPT, STAGING_PREFIX

    steps = len(speclens.read_sweep(fake_run).steps)
    shutil.copytree(fake_run, fake_run / f"{STAGING_PREFIX}4242", ignore=shutil.ignore_patterns(".incoming-*"))
    shutil.copytree(fake_run, fake_run / FAILED_ATTEMPT / "x", ignore=shutil.ignore_patterns(".incoming-*"))
    sweep = speclens.read_sweep(fake_run)
    assert [run.path for run in sweep.runs] == [fake_run] and len(sweep.steps) == steps
    assert [run.path for run in find_runs(fake_run)] == [fake_run]


# SmolLM2's own template (ChatML, `message['content']` concatenated): what failed on content null.
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _agentic(tmp_path, rows):
    from tests.fixtures.trajectories import write_rows

    return write_rows(tmp_path / "t.jsonl", rows)


@pytest.mark.parametrize("as_text", [False, True])
def test_a1_content_null_beside_tool_calls_is_empty_content(tmp_path, encoder_with, as_text):
    from evals.datasets.agentic import AgenticConfig, load
    from speclens.errors import ConfigError
    from tests.fixtures.trajectories import messages, openai_row

    msgs = messages(1)
    msgs[2]["content"] = None  # the assistant's tool-call message, as OpenAI writes it
    data = _agentic(tmp_path, [openai_row("q1", "swe", msgs)])
    if not as_text:  # ChatML drops tools: refused for that, not for a template error
        with pytest.raises(ConfigError, match="drops tools, tool calls from the prompt"):
            load(AgenticConfig(path=str(data)), encoder_with(CHATML))
        return
    prompts = load(AgenticConfig(path=str(data), tools_as_text=True), encoder_with(CHATML))
    assert prompts[1].messages[2]["content"].startswith('<tool_call>{"arguments": {"pattern": "bug0"}')


def test_a1_a_template_that_fails_is_one_line_naming_the_trajectory(tmp_path, encoder_with):
    from evals.datasets.agentic import AgenticConfig, load
    from speclens.errors import TemplateFailed, user_message
    from tests.fixtures.trajectories import messages, openai_row

    failing = "{{ messages[0]['content'] + messages[99]['content'] }}"
    data = _agentic(tmp_path, [openai_row("q7", "swe", messages(1))])
    with pytest.raises(TemplateFailed) as caught:
        load(AgenticConfig(path=str(data), tools_as_text=True), encoder_with(failing))
    line = user_message(caught.value)
    assert "trajectory 'q7'" in line and "chat template of" in line and "\n" not in line


@pytest.mark.parametrize(
    "field, value, said",
    [
        ("tool_calls", 5, r"\.tool_calls: must be a list of tool calls, not int"),
        ("call id", 7, r"\.tool_calls\[0\]\.id: ids must be strings .*not int 7"),
        ("tool_call_id", 7, r"\.tool_call_id: ids must be strings .*not int 7"),
    ],
)
def test_a2_a3_tool_calls_and_ids_of_the_wrong_type_are_one_line(tmp_path, field, value, said):
    from evals.datasets.agentic import AgenticConfig, load
    from speclens.errors import ConfigError
    from tests.fixtures.trajectories import messages, openai_row

    msgs = messages(1)
    if field == "tool_calls":
        msgs[2]["tool_calls"] = value
    elif field == "call id":
        msgs[2]["tool_calls"][0]["id"] = value
    else:
        msgs[3]["tool_call_id"] = value
    data = _agentic(tmp_path, [openai_row("q1", "swe", msgs)])
    with pytest.raises(ConfigError, match=said):
        load(AgenticConfig(path=str(data)), None)


class _Parser:
    """A stand-in for one of vLLM's reasoning parsers: its markers, and methods that may not exist."""

    def __init__(self, start="<think>", end="</think>", start_id=None, provides=True):
        self.reasoning_start_str, self.reasoning_end_str, self.provides = start, end, provides
        if start_id is not None:
            self.start_token_id = start_id

    def is_reasoning_end(self, ids):
        return False

    def extract_content_ids(self, ids):
        if not self.provides:
            raise NotImplementedError("only boundary detection")
        return ids


def _tokenizer_with(tmp_path, tokens: list[str]):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({"<unk>": 0, **{t: i + 1 for i, t in enumerate(tokens)}}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>")


@pytest.mark.parametrize(
    "parser, said",
    [
        (
            _Parser(),
            r"marks thinking with '<think>' \.\.\. '</think>', and the target's vocabulary has no token '<think>'",
        ),
        (_Parser(start="<|open|>think<|sep|>", end="</think>"), "has no token '<|open|>'"),
        (_Parser(provides=False), "does not provide extract_content_ids on token ids"),
    ],
)
def test_r1_r2_a_parser_that_cannot_split_this_targets_outputs_is_refused(tmp_path, parser, said):
    from runners.reasoning_parser import check_parser
    from speclens.errors import ConfigError

    tokens = [] if "vocabulary" in said or "<|open|>" in said else ["<think>", "</think>"]
    with pytest.raises(ConfigError, match=said):
        check_parser("p", parser, _tokenizer_with(tmp_path, tokens))


def test_r2_a_parser_whose_markers_are_in_the_vocabulary_is_accepted_unless_it_maps_them_elsewhere(tmp_path):
    from runners.reasoning_parser import check_parser
    from speclens.errors import ConfigError

    tokenizer = _tokenizer_with(tmp_path, ["<think>", "</think>", "word"])
    check_parser("p", _Parser(start_id=1), tokenizer)  # <think> is token 1
    with pytest.raises(ConfigError, match=r"resolves '<think>' to token 0, which is '<unk>'"):
        check_parser("p", _Parser(start_id=0), tokenizer)


def exit_status(main, argv: list[str]) -> int:
    """A command's exit status, whether its main returns it or exits with it (Hydra's apps)."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


BAD_CONFIGS = [
    (b"[1, 2]", "holds a list, not a JSON object of model settings"),
    (b'{"text_config": "garbage"}', "text_config must be an object of model settings, not str"),
    (b'{"num_attention_heads": "nine"}', "num_attention_heads='nine' is impossible"),
    (b'\xff\xfe{"vocab_size": 1}', r"is not UTF-8 text \(byte 0\)"),
    (b'{"num_attention_heads": -9, "num_key_value_heads": 3}', "num_attention_heads=-9 is impossible"),
    (b'{"num_attention_heads": 9, "num_key_value_heads": 0}', "num_key_value_heads=0 is impossible"),
    (b'{"num_hidden_layers": 0}', "num_hidden_layers=0 is impossible"),
    (b'{"text_config": {"hidden_size": 1.5}}', r"text_config\.hidden_size=1\.5 is impossible"),
    (b'{"num_attention_heads": 9, "num_key_value_heads": 2}', "num_attention_heads=9 is not a multiple of"),
]


@pytest.mark.parametrize("content, said", BAD_CONFIGS)
@pytest.mark.parametrize("command", ["evals.run", "evals.guidelines"])
def test_g1_g2_g3_an_impossible_config_json_is_one_line_exit_2_before_an_engine(
    tmp_path, capsys, engines_started, content, said, command
):
    import importlib

    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_bytes(content)
    main = importlib.import_module(command).main
    args = ["target=custom", f"target.model={target}", "runner=fake", "drafter=ngram", "d=3"]
    if command == "evals.run":
        args.append(f"hydra.run.dir={tmp_path / 'run'}")
    assert exit_status(main, args if command == "evals.run" else args[:2]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("speclens: error: target.model=") and len(err.splitlines()) == 1
    assert re.search(said, err), err
    assert engines_started == []


def test_g1_a_target_without_tokenizer_files_is_refused_naming_them(tmp_path, capsys):
    from evals.run import main

    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "vocab_size": 100}))
    assert (
        exit_status(main, ["target=custom", f"target.model={target}", "drafter=none", f"hydra.run.dir={tmp_path}"]) == 2
    )
    err = capsys.readouterr().err
    assert (
        "the folder holds no tokenizer (tokenizer.json, tokenizer_config.json, tokenizer.model, vocab.json, *.tiktoken)"
        in err
        and len(err.splitlines()) == 1
    )


def test_rp1_replays_terminal_table_names_the_segment_of_each_row_where_thinking_was_split():
    from evals.replay import replay_table

    rows = [
        {
            "domain": d,
            "segment": seg,
            "drafter": "ngram",
            "d": k,
            "al": 2.0 + k / 10,
            "al_ci95_lo": 1.9,
            "al_ci95_hi": 2.5,
            "tokens_per_step": 1.5,
            "source": "replayed",
        }
        for d in ("all", "coding")
        for seg in ("all", "thinking", "answer")
        for k in (1, 2)
    ]
    lines = replay_table(pd.DataFrame(rows)).splitlines()
    assert lines[0].split() == [
        "drafter",
        "d",
        "segment",
        "al",
        "al_ci95_lo",
        "al_ci95_hi",
        "tokens_per_step",
        "source",
    ]
    assert [line.split()[:3] for line in lines[2:]] == [
        ["ngram", str(k), seg] for seg in ("all", "thinking", "answer") for k in (1, 2)
    ]
    unsplit = replay_table(pd.DataFrame([r for r in rows if r["segment"] == "all"])).splitlines()
    assert "segment" not in unsplit[0] and len(unsplit) == 2 + 2


def test_pf1_many_categories_draw_a_bounded_number_of_pngs(tmp_path):
    import time

    from reports.build import MAX_DOMAIN_IMAGES, build
    from tests.unit.test_step_costs import measure

    rows = [{"question_id": f"q{i}", "category": f"c{i:02d}", "turns": [f"task {i}"]} for i in range(30)]
    rows += [{"question_id": "q99", "category": "c29", "turns": ["one more"]}]  # c29: the most requests
    for d in (1, 2):
        measure(tmp_path, d, rows=rows)
    started = time.perf_counter()
    _, md = build(tmp_path / "sweep")
    seconds = time.perf_counter() - started
    drawn = sorted(p.name for p in (tmp_path / "sweep").glob("report_al_vs_d_*.png"))
    assert len(drawn) == MAX_DOMAIN_IMAGES and "report_al_vs_d_all.png" in drawn and "report_al_vs_d_c29.png" in drawn
    assert "the other 19 are in report.html and curves.csv" in md.read_text()
    print(f"reports.build over 30 categories and 2 runs: {seconds:.1f} s")


@pytest.mark.parametrize("file, value", [("steps.parquet", float("nan")), ("requests.parquet", float("inf"))])
def test_p1_records_holding_a_non_finite_figure_are_corrupt(fake_run, file, value):
    from speclens.file_formats.records import read_parquet, write_parquet

    path = fake_run / file
    frame = read_parquet(path)
    column = "num_accepted" if file == "steps.parquet" else "output_tokens"
    frame[column] = frame[column].astype(float)
    frame.loc[frame.index[1], column] = value
    write_parquet(frame, path)
    with pytest.raises(CorruptRecord, match=rf"{file} holds a non-finite {column} \({value}\) in row 1"):
        read_parquet(path)


@pytest.mark.parametrize(
    "where, value, rule",
    [
        (("al",), 0.5, r"field al=0\.5: must be >= 1; a corrupt record"),
        (("by_domain", "coding", "al"), 4.5, r"field by_domain\.coding\.al=4\.5: an AL is in \[1, 1 \+ d\]"),
        (("per_position_acceptance", 1), 1.2, r"field per_position_acceptance\[1\]=1\.2: must be <= 1"),
        (("n_steps",), -3, r"field n_steps=-3: must be >= 0"),
        (("n_steps",), 2.5, r"field n_steps=2\.5: must be a whole number"),
        (("acceptance_histogram", 0), -2, r"field acceptance_histogram\[0\]=-2: must be >= 0"),
        (("d",), 0, r"field d=0: must be >= 1"),
    ],
)
def test_p1_a_summary_figure_out_of_its_range_is_a_corrupt_record_naming_field_and_rule(fake_run, where, value, rule):
    path = fake_run / "summary.json"
    data = json.loads(path.read_text())
    node = data
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = value
    path.write_text(json.dumps(data))
    with pytest.raises(CorruptRecord, match=rule):
        _ = speclens.read_run(fake_run).summary


def test_p1_calibration_on_a_negative_or_zero_step_cost_is_one_line(tmp_path, capsys):
    from evals.whatif import main
    from speclens.gpu_model.calibrate import StepCostPoint, fit
    from speclens.gpu_model.model_shape import shape_of

    config = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_hidden_layers": 2}
    shape = shape_of(config | {"vocab_size": 100})
    points = [StepCostPoint(1, 0, 100, 2.0), StepCostPoint(4, 0, 100, 0.0), StepCostPoint(4, 3, 100, 5.0)]
    with pytest.raises(ConfigError, match=r"step cost measured at B=4, D=0, context 100 is 0 ms"):
        fit(shape, points)
    sweep = tmp_path / "sweep"
    run(
        compose_run(*fake_overrides(tmp_path, ROWS), "drafter=ngram", "d=3", "baseline=true", "batch_sizes=[1,2]"),
        sweep / "d3",
        progress=lambda label: None,
    )
    data = json.loads((sweep / "d3" / "summary.json").read_text())
    data["operating_points"][0]["t_verif"]["median_ms"] = -3.0
    (sweep / "d3" / "summary.json").write_text(json.dumps(data))
    assert main([f"calibrate={sweep}", "drafter=ngram", "al=1.5", "d=1", f"out={tmp_path / 'out'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "t_verif.median_ms=-3.0: must be >= 0" in err


def test_p1_a_stamp_field_of_the_wrong_type_or_missing_is_one_line_or_a_note(fake_run, tmp_path, capsys):
    from evals.whatif import main as whatif_main
    from reports.build import main as build_main

    sweep = fake_run.parent
    path = fake_run / "stamp.json"
    stamp = json.loads(path.read_text())
    path.write_text(json.dumps(stamp | {"target_dir": 5}))
    assert build_main([str(sweep)]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("stamp.json does not have the layout of a run stamp (field target_dir=5: must be a string)")
    )
    path.write_text(json.dumps({k: v for k, v in stamp.items() if k != "target_dir"}))
    # a stamp naming no target: the GPU prediction says so in a note; whatif asks for target.model
    assert build_main([str(sweep), "--gpu=h100_sxm"]) == 0
    assert "run: not predicted (its stamp names no target folder)" in (sweep / "report.md").read_text()
    assert whatif_main([str(fake_run), "gpu=h100_sxm", f"out={tmp_path / 'out'}"]) == 2
    assert capsys.readouterr().err.strip().startswith("speclens: error: give target.model=<folder or hub id>")
