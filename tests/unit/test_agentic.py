"""dataset=agentic on trajectories the tests write (both layouts): cut points, tool rendering,
by_turn, and every bad row refused in one line naming the file, the row and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from evals.pipeline.run_job import run
from runners.fake_engine import chat_token_ids
from speclens.errors import ConfigError
from speclens.file_formats.records import read_parquet
from tests.fixtures.trajectories import TOOLS, messages, openai_row, speed_bench_row, write_rows
from tests.unit.conftest import compose_run, write_checkpoint, write_script


def agentic_run(tmp_path: Path, data: Path, *overrides: str, script: dict | None = None):
    target = tmp_path / "target"
    if not target.exists():
        write_checkpoint(target)
    extra = [f"runner.script={write_script(tmp_path / 'script.json', script)}"] if script else []
    cfg = compose_run(
        "runner=fake",
        "target=custom",
        f"target.model={target}",
        "dataset=agentic",
        f"dataset.path={data}",
        "drafter=ngram",
        "d=3",
        *extra,
        *overrides,
    )
    out = tmp_path / "run"
    return run(cfg, out, progress=lambda label: None).to_dict(), out


def test_one_request_per_assistant_turn_with_the_recorded_history(tmp_path):
    data = write_rows(
        tmp_path / "t.jsonl", [openai_row("swe1", "swe", messages(2)), openai_row("tau1", "retail", messages(1))]
    )
    summary, out = agentic_run(tmp_path, data)
    requests = read_parquet(out / "requests.parquet").set_index("request_id")
    assert sorted(requests.index) == ["swe1@0", "swe1@1", "swe1@2", "tau1@0", "tau1@1"]
    assert requests.loc["swe1@1", "agent_turn"] == 1 and requests.loc["swe1@1", "category"] == "swe"
    # the prompt of turn k is every recorded message before the k-th assistant message, with the tools
    full = messages(2)
    for turn, cut in ((0, 2), (1, 4), (2, 6)):
        assert requests.loc[f"swe1@{turn}", "prompt_tokens"] == len(chat_token_ids(full[:cut], TOOLS))
    assert set(summary["by_turn"]) == {"0", "1", "2"}
    assert summary["by_turn"]["2"]["n_requests"] == 1 and summary["by_turn"]["0"]["n_requests"] == 2
    assert set(summary["by_domain"]) == {"swe", "retail"}
    assert set(read_parquet(out / "steps.parquet").agent_turn) <= {0, 1, 2}


def test_by_turn_matches_hand_computation(tmp_path):
    data = write_rows(tmp_path / "t.jsonl", [openai_row("a", "swe", messages(1)), openai_row("b", "swe", messages(1))])
    script = {"a@0#0": [3, 3], "b@0#0": [1, 1], "a@1#0": [0, 0, 0], "b@1#0": [2]}
    summary, _ = agentic_run(tmp_path, data, script=script)
    assert summary["by_turn"]["0"]["al"] == pytest.approx(1 + 8 / 4) and summary["by_turn"]["0"]["n_steps"] == 4
    assert summary["by_turn"]["1"]["al"] == pytest.approx(1 + 2 / 4)
    assert summary["al"] == pytest.approx(1 + 10 / 8)


def test_both_layouts_and_parquet_give_the_same_prompts(tmp_path):
    rows = [("swe1", "swe", messages(2)), ("tau1", "retail", messages(1))]
    jsonl = write_rows(tmp_path / "plain.jsonl", [openai_row(*r) for r in rows])
    folder = tmp_path / "speed"
    folder.mkdir()
    write_rows(folder / "agentic.jsonl", [speed_bench_row(*r) for r in rows])
    pq = tmp_path / "pq"
    pq.mkdir()
    # in parquet, messages are structs holding every key (null where a message lacks it)
    pd.DataFrame([openai_row(*r) for r in rows]).to_parquet(pq / "a.parquet")
    seen = []
    for i, data in enumerate((jsonl, folder, pq)):
        _, out = agentic_run(tmp_path / f"r{i}", data)
        seen.append(read_parquet(out / "requests.parquet").set_index("request_id").prompt_tokens.sort_index().to_dict())
    assert seen[0] == seen[1] == seen[2] and len(seen[0]) == 5


def test_turn_stride_keeps_every_kth_cut_point(tmp_path):
    data = write_rows(tmp_path / "t.jsonl", [openai_row("swe1", "swe", messages(4))])
    _, out = agentic_run(tmp_path, data, "dataset.turn_stride=2")
    assert sorted(read_parquet(out / "requests.parquet").request_id) == ["swe1@0", "swe1@2", "swe1@4"]


def bad(msgs_edit) -> dict:
    row = speed_bench_row("q1", "swe", messages(1))
    msgs_edit(row)
    return row


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda r: r.update(turns=[m for m in r["turns"] if m["role"] != "assistant"]),
            r"t.jsonl: row 2 \(question_id q1\).turns: no assistant message",
        ),
        (
            lambda r: r["turns"][3].update(tool_call_id="nope"),
            r"t.jsonl: row 2 \(question_id q1\).turns\[3\].tool_call_id: 'nope' answers no earlier tool call",
        ),
        (
            lambda r: r["turns"][2]["tool_calls"][0]["function"].update(arguments="{pattern: "),
            r"row 2 \(question_id q1\).turns\[2\].tool_calls\[0\].function.arguments: not valid JSON",
        ),
        (
            lambda r: r.update(extras=json.dumps({"tools": json.dumps({"name": "grep"})})),
            r"row 2 \(question_id q1\).extras.tools: must be a list of tool schemas",
        ),
        (lambda r: r["turns"][1].update(role="robot"), r"row 2 \(question_id q1\).turns\[1\]: a message needs a role"),
    ],
)
def test_bad_rows_are_refused_naming_file_row_and_field(tmp_path, edit, message):
    data = write_rows(tmp_path / "t.jsonl", [speed_bench_row("q0", "swe", messages(1)), bad(edit)])
    with pytest.raises(ConfigError, match=message):
        agentic_run(tmp_path, data)


def test_duplicate_trajectory_ids_are_refused(tmp_path):
    data = write_rows(tmp_path / "t.jsonl", [openai_row("q1", "swe", messages(1))] * 2)
    with pytest.raises(ConfigError, match="question_id values are not unique: q1"):
        agentic_run(tmp_path, data)


def test_cut_points_too_long_are_refused_or_dropped_and_counted(tmp_path):
    long = messages(1)
    long[1] = {"role": "user", "content": "word " * 900}
    data = write_rows(
        tmp_path / "t.jsonl", [openai_row("big", "swe", long), openai_row("small", "retail", messages(1))]
    )
    with pytest.raises(ConfigError, match="do not fit engine.max_model_len=512.*dataset.drop_too_long=true"):
        agentic_run(tmp_path, data, "engine.max_model_len=512")
    summary, out = agentic_run(tmp_path, data, "engine.max_model_len=512", "dataset.drop_too_long=true")
    assert json.loads((out / "stamp.json").read_text())["dropped_too_long"] == {"swe": 2}
    assert set(read_parquet(out / "requests.parquet").request_id) == {"small@0", "small@1"}


# -- templates that drop tools ----------------------------------------------------------------------

IGNORING = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
RENDERING = (
    "{% if tools %}tools: {{ tools | tojson }}\n{% endif %}{% for m in messages %}{{ m['role'] }}: "
    "{{ m['content'] }}{% for c in m.get('tool_calls') or [] %} call {{ c['function'] | tojson }}{% endfor %}\n"
    "{% endfor %}assistant:"
)


def test_a_template_that_drops_tools_is_refused_naming_what_it_drops(tmp_path, encoder_with):
    from evals.datasets.agentic import AgenticConfig, load

    data = write_rows(tmp_path / "t.jsonl", [openai_row("q1", "swe", messages(1))])
    with pytest.raises(ConfigError, match=r"drops tools, tool calls from the prompt .*dataset.tools_as_text=true"):
        load(AgenticConfig(path=str(data)), encoder_with(IGNORING))
    # a template that renders all three is used as it is
    prompts = load(AgenticConfig(path=str(data)), encoder_with(RENDERING))
    assert prompts[1].tools and prompts[1].messages[2]["tool_calls"]


def test_tools_as_text_writes_them_into_the_messages(tmp_path, encoder_with):
    from evals.datasets.agentic import AgenticConfig, load

    data = write_rows(tmp_path / "t.jsonl", [openai_row("q1", "swe", messages(1))])
    encoder = encoder_with(IGNORING)
    prompts = load(AgenticConfig(path=str(data), tools_as_text=True), encoder)
    last = prompts[1]
    assert last.tools is None and [m["role"] for m in last.messages] == ["system", "user", "assistant", "user"]
    text = encoder.chat_text(list(last.messages))
    assert text.startswith('system: Tools you can call:\n{"function": {"name": "grep"')
    assert '<tool_call>{"arguments": {"pattern": "bug0"}, "name": "grep"}</tool_call>' in text
    assert "user: <tool_response>\nsrc/a.py:0: bug0 here\n</tool_response>" in text


def test_the_table_and_the_report_show_al_by_agent_turn(tmp_path, capsys):
    from reports.build import build

    data = write_rows(tmp_path / "t.jsonl", [openai_row("a", "swe", messages(1)), openai_row("b", "swe", messages(1))])
    script = {"a@0#0": [3, 3], "b@0#0": [1, 1], "a@1#0": [0, 0, 0], "b@1#0": [2]}
    agentic_run(tmp_path, data, script=script)
    assert "agent turn  requests  steps    AL" in capsys.readouterr().out
    html, md = (f.read_text() for f in build(tmp_path / "run"))
    assert "<h2>AL by agent turn</h2>" in html and "| ngram d=3 | 1 | 2 | 4 | 1.500 |" in md


def test_the_projects_own_trajectories_are_deterministic_and_load(tmp_path):
    from evals.datasets.agent_trajectories import main as write_trajectories

    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert (
        write_trajectories([str(a), "--per-category", "2"]) == 0
        and write_trajectories([str(b), "--per-category", "2"]) == 0
    )
    assert a.read_bytes() == b.read_bytes()
    summary, out = agentic_run(tmp_path, a)
    requests = read_parquet(out / "requests.parquet")
    # each trajectory has four assistant turns after its first message
    assert len(requests) == 4 * 4 and set(requests.category) == {"coding_agent", "support_agent"}
    coding = json.loads(a.read_text().splitlines()[0])
    # the coding agent's tool results are the standard library's real source
    read = coding["messages"][5]["content"]
    assert "def " in read and coding["messages"][4]["tool_calls"][0]["function"]["name"] == "read_file"


def test_without_a_path_the_hub_config_is_read_or_refused_in_one_line(tmp_path, monkeypatch):
    import datasets

    from evals.datasets.agentic import AgenticConfig, load

    monkeypatch.setattr(datasets, "get_dataset_config_names", lambda hub_id: ["qualitative", "throughput_1k"])
    with pytest.raises(
        ConfigError,
        match=r"nvidia/SPEED-Bench has no `agentic` config \(it has qualitative, "
        r"throughput_1k\); set dataset.path=<trajectories>",
    ):
        load(AgenticConfig(), None)

    def offline(hub_id):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "get_dataset_config_names", offline)
    with pytest.raises(ConfigError, match=r"could not be read from the hub \(ConnectionError: no network\)"):
        load(AgenticConfig(), None)
    rows = [speed_bench_row("q1", "swe", messages(1))]
    monkeypatch.setattr(datasets, "get_dataset_config_names", lambda hub_id: ["agentic"])
    monkeypatch.setattr(datasets, "load_dataset", lambda hub_id, config, split: rows)
    assert [p.request_id for p in load(AgenticConfig(), None)] == ["q1@0", "q1@1"]
