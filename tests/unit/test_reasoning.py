"""Thinking vs answer: the boundary (text delimiters, vLLM's parsers), the one segment rule, and
the per-segment figures of a scripted run, checked against hand-computed values."""

from __future__ import annotations

import json

import pytest

from runners.fake_engine import decode, output_token
from speclens.errors import ConfigError
from speclens.file_formats.records import read_parquet
from speclens.segments import ANSWER, THINKING, Boundary, passes_by_segment, step_segment, text_boundary
from tests.unit.test_commands_fake import fake_run

# The fake's outputs are tokens 100, 101, ... decoded as "w100 w101 ...": "w104" ends token 4.
END = "w104"


def fake_output(n: int) -> list[int]:
    return [output_token(i) for i in range(n)]


def test_thinking_ends_with_the_token_that_completes_the_delimiter():
    assert text_boundary("", fake_output(9), decode, END) == Boundary(5, closed=True)
    # the delimiter ends inside token 5's text ("w105"): BPE merged it with what follows, and the
    # token that completes it is thinking
    assert text_boundary("", fake_output(9), decode, "w104 w1") == Boundary(6, closed=True)
    # the first occurrence counts
    assert text_boundary("", fake_output(60), decode, END) == Boundary(5, closed=True)


def test_an_output_that_never_closes_thinking_is_all_thinking():
    boundary = text_boundary("", fake_output(4), decode, END)
    assert boundary == Boundary(4, closed=False) and boundary.unclosed
    assert text_boundary("", [], decode, END) == Boundary(0, closed=False)


def test_with_a_start_delimiter_thinking_needs_an_opening():
    output = fake_output(9)
    # neither the prompt nor the output opens thinking: all answer
    assert text_boundary("w1 w3", output, decode, END, start="w9") == Boundary(0, closed=False)
    # the output opens it (token 2), and the end is looked for after the opening
    assert text_boundary("w1", output, decode, END, start="w102") == Boundary(5, closed=True)
    assert text_boundary("w1", output, decode, "w101", start="w102") == Boundary(9, closed=False)
    # the template opened it in the prompt: the output starts in thinking
    assert text_boundary("user w7 w9", output, decode, END, start="w9") == Boundary(5, closed=True)
    # a prompt whose last delimiter closed thinking does not open it
    assert text_boundary("w9 w104 w5", output, decode, END, start="w9") == Boundary(0, closed=False)


def test_a_step_belongs_where_its_first_token_is():
    assert step_segment(position=14, prompt_tokens=10, thinking_tokens=5) == THINKING  # crosses: tokens 4, 5, ...
    assert step_segment(position=15, prompt_tokens=10, thinking_tokens=5) == ANSWER


def test_target_passes_split_by_their_first_token():
    # 10 tokens, boundary 5: prefill token 0, undrafted token 1, a step at 2 accepting 3 (2..5,
    # crossing), a step at 6 accepting 3 (6..9)
    assert passes_by_segment([(2, 3), (6, 3)], 10, 5) == (3, 1)
    # the last step's tokens past the output's end (cut at max_tokens) cover nothing
    assert passes_by_segment([(1, 5)], 4, 2) == (2, 0)
    assert passes_by_segment([], 3, 0) == (0, 3)


def test_per_segment_figures_match_hand_computation(tmp_path):
    summary, out, _ = fake_run(tmp_path, f"reasoning.end={END}")
    # test_commands_fake.SCRIPT; boundary 5 in every output (q1#0: 9 tokens, q1#1: 6, q2#0: 10).
    # thinking steps: q1#0 (offset 1, acc 3); q1#1 (1, 2) and (4, 1: crosses); q2#0 (2, 3: crosses)
    # answer steps: q1#0 (5, 1), (8, 0); q2#0 (6, 3)
    thinking, answer = summary["by_segment"]["thinking"], summary["by_segment"]["answer"]
    assert thinking["n_steps"] == 4 and answer["n_steps"] == 3
    assert thinking["n_steps"] + answer["n_steps"] == summary["n_steps"]
    assert thinking["al"] == pytest.approx(1 + 9 / 4) and answer["al"] == pytest.approx(1 + 4 / 3)
    assert thinking["per_position_acceptance"] == pytest.approx([1, 3 / 4, 2 / 4])
    assert answer["per_position_acceptance"] == pytest.approx([2 / 3, 1 / 3, 1 / 3])
    assert (thinking["output_tokens"], answer["output_tokens"]) == (15, 10)
    assert thinking["share_of_output_tokens"] == pytest.approx(0.6)
    # passes: q1#0 thinking 2 (prefill, step) answer 3; q1#1 3 and 0; q2#0 3 and 1
    assert thinking["tokens_per_step"] == pytest.approx(15 / 8) and answer["tokens_per_step"] == pytest.approx(10 / 4)
    assert (thinking["n_requests"], answer["n_requests"]) == (2, 2)
    coding, writing = summary["by_domain"]["coding"]["by_segment"], summary["by_domain"]["writing"]["by_segment"]
    assert coding["thinking"]["al"] == pytest.approx(1 + 6 / 3) and coding["answer"]["al"] == pytest.approx(1 + 1 / 2)
    assert writing["thinking"]["al"] == pytest.approx(4.0) and writing["answer"]["al"] == pytest.approx(4.0)
    assert summary["reasoning"] == {
        "boundary": "text 'w104'",
        "n_outputs": 3,
        "n_closed": 3,
        "n_unclosed": 0,
        "n_without_thinking": 0,
    }


def test_records_carry_the_segments(tmp_path):
    _, out, _ = fake_run(tmp_path, f"reasoning.end={END}")
    steps = read_parquet(out / "steps.parquet")
    # turn 0 of both conversations, then q1's turn 1
    assert list(steps.segment) == ["thinking", "answer", "answer", "thinking", "answer", "thinking", "thinking"]
    requests = read_parquet(out / "requests.parquet").set_index(["request_id", "turn"])
    assert list(requests.loc[("q1", 1), ["thinking_tokens", "answer_tokens"]]) == [5, 1]
    assert (requests.thinking_tokens + requests.answer_tokens == requests.output_tokens).all()
    assert (requests.thinking_target_steps + requests.answer_target_steps == requests.target_steps).all()


def test_without_a_boundary_there_are_no_segment_figures(tmp_path):
    summary, out, _ = fake_run(tmp_path)
    assert "by_segment" not in summary and "reasoning" not in summary
    assert "by_segment" not in summary["by_domain"]["coding"]
    assert "segment" not in read_parquet(out / "steps.parquet").columns
    on_disk = json.loads((out / "summary.json").read_text())
    assert "by_segment" not in on_disk and "by_segment" not in on_disk["operating_points"][0]


def test_a_delimiter_that_never_occurs_is_warned_about(tmp_path, capsys):
    summary, _, _ = fake_run(tmp_path, "reasoning.end=never")
    assert "thinking never ends in any of the 3 outputs" in capsys.readouterr().err
    assert summary["by_segment"]["thinking"]["share_of_output_tokens"] == 1.0
    assert summary["by_segment"]["answer"]["al"] is None and summary["reasoning"]["n_unclosed"] == 3


def test_request_granularity_keeps_tokens_but_no_segment_al(tmp_path):
    summary, _, _ = fake_run(tmp_path, f"reasoning.end={END}", "runner.record_granularity=request")
    thinking = summary["by_segment"]["thinking"]
    assert thinking["al"] is None and thinking["output_tokens"] == 15 and thinking["tokens_per_step"] is None


@pytest.mark.parametrize(
    "overrides, message",
    [
        (("reasoning.parser=deepseek_r1", "reasoning.end=x"), "reasoning.parser and reasoning.end/start both set"),
        (("reasoning.start=x",), "reasoning.start='x' needs reasoning.end"),
        (("reasoning.end=''",), "reasoning.end='': give a non-empty text"),
        (("reasoning.start=x", "reasoning.end=x"), "reasoning.start and reasoning.end are both 'x'"),
        (("reasoning.parser=deepseek_r1",), "needs the target's tokenizer"),
    ],
)
def test_bad_reasoning_keys_are_refused_naming_the_key(tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        fake_run(tmp_path, *overrides)


def test_a_whitespace_delimiter_is_matched_as_it_is_and_said_to_be_whitespace(tmp_path, capsys):
    summary, _, _ = fake_run(tmp_path, "reasoning.end=' '")
    assert "reasoning.end=' ' is whitespace only; it is matched as it is." in capsys.readouterr().err
    assert summary["reasoning"]["boundary"] == "text ' '"


def test_the_config_fingerprint_keeps_its_value_without_reasoning_keys():
    from speclens.config import config_fingerprint

    base = {"d": 3, "seed": 0}
    unset = base | {"reasoning": {"parser": None, "end": None, "start": None}, "chat_template_kwargs": {}}
    assert config_fingerprint(unset, {}) == config_fingerprint(base, {})
    assert config_fingerprint(
        unset | {"reasoning": {"parser": None, "end": "</think>", "start": None}}, {}
    ) != config_fingerprint(base, {})
    assert config_fingerprint(unset | {"chat_template_kwargs": {"enable_thinking": False}}, {}) != config_fingerprint(
        base, {}
    )


# -- vLLM's own parsers, on a tokenizer that holds <think> and </think> as tokens --------------

WORDS = ["<unk>", "<think>", "</think>", "so", "the", "answer", "is", "42", "hello", "user", "assistant"]


@pytest.fixture(scope="module")
def think_tokenizer():
    from tests.unit.conftest import word_tokenizer

    return word_tokenizer(WORDS)


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


@pytest.mark.parametrize("parser", ["deepseek_r1", "qwen3"])
def test_vllms_parsers_end_thinking_after_their_end_token(think_tokenizer, parser):
    from runners.reasoning_parser import ParserBoundary

    boundary = ParserBoundary(parser, think_tokenizer)
    prompt = ids(think_tokenizer, "user hello assistant")
    output = ids(think_tokenizer, "<think> so the answer </think> 42 hello")
    assert boundary.boundary(prompt, output) == Boundary(5, closed=True)
    # never closed: all thinking, whether the output opened it or not
    assert boundary.boundary(prompt, ids(think_tokenizer, "<think> so the")) == Boundary(3, closed=False)
    assert boundary.boundary(prompt, ids(think_tokenizer, "so the")) == Boundary(2, closed=False)
    # a template that opened thinking in the prompt (DeepSeek-R1's): the output starts in thinking
    opened = ids(think_tokenizer, "user hello assistant <think>")
    assert boundary.boundary(opened, ids(think_tokenizer, "so </think> 42")) == Boundary(2, closed=True)
    # a template that rendered an empty block (thinking off): the output is all answer
    closed = ids(think_tokenizer, "user hello assistant <think> </think>")
    assert boundary.boundary(closed, ids(think_tokenizer, "42 hello")) == Boundary(0, closed=False)


def test_an_unknown_parser_is_refused_with_the_names(think_tokenizer):
    from runners.reasoning_parser import ParserBoundary

    with pytest.raises(
        ConfigError,
        match=r"reasoning.parser='nope' is not one of vLLM's reasoning parsers; choose one "
        r"of .*deepseek_r1.*qwen3",
    ):
        ParserBoundary("nope", think_tokenizer)


def test_a_parser_whose_tokens_the_target_lacks_is_refused(think_tokenizer):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from runners.reasoning_parser import ParserBoundary

    plain = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"<unk>": 0, "a": 1}, unk_token="<unk>")), unk_token="<unk>"
    )
    with pytest.raises(ConfigError, match="reasoning.parser=deepseek_r1 does not fit the target's tokenizer"):
        ParserBoundary("deepseek_r1", plain)


# -- chat_template_kwargs reach the template ------------------------------------------------------

THINKING_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}assistant"
    "{% if enable_thinking is defined and not enable_thinking %} <think> </think>{% endif %}"
)


def saved_tokenizer(tokenizer, folder, template: str):
    tokenizer.chat_template = template
    tokenizer.save_pretrained(str(folder))
    return folder


def test_chat_template_kwargs_render_into_the_prompt(think_tokenizer, tmp_path):
    from runners.chat import ChatTokenizer

    folder = saved_tokenizer(think_tokenizer, tmp_path / "tok", THINKING_TEMPLATE)
    messages = [{"role": "user", "content": "hello"}]
    assert ChatTokenizer(folder).chat_text(messages) == "user hello assistant"
    off = ChatTokenizer(folder, {"enable_thinking": False})
    assert off.chat_text(messages) == "user hello assistant <think> </think>"
    # and the parser then sees thinking closed in the prompt: the output is all answer
    from runners.reasoning_parser import ParserBoundary

    prompt = off.chat_token_ids(messages)
    assert ParserBoundary("qwen3", off.tokenizer).boundary(prompt, ids(think_tokenizer, "42 hello")) == Boundary(
        0, False
    )


def test_chat_template_kwargs_a_template_ignores_are_warned_about(think_tokenizer, tmp_path, capsys):
    from evals.pipeline.reasoning import check_template_kwargs
    from runners.chat import ChatTokenizer
    from tests.unit.conftest import compose_run

    cfg_dict = compose_run("runner=fake", "+chat_template_kwargs.enable_thinking=false")
    from evals.pipeline.compose import to_run_config

    cfg = to_run_config(cfg_dict)
    messages = [{"role": "user", "content": "hello"}]
    ignoring = saved_tokenizer(think_tokenizer, tmp_path / "ignoring", "{{ messages[0]['content'] }}")
    check_template_kwargs(cfg, ChatTokenizer(ignoring, cfg.chat_template_kwargs), messages)
    assert (
        "chat_template_kwargs (enable_thinking) do not change the target's rendered prompt" in capsys.readouterr().err
    )
    using = saved_tokenizer(think_tokenizer, tmp_path / "using", THINKING_TEMPLATE)
    check_template_kwargs(cfg, ChatTokenizer(using, cfg.chat_template_kwargs), messages)
    assert "chat_template_kwargs" not in capsys.readouterr().err


def test_speculation_profiles_per_segment_match_the_summary(tmp_path):
    summary, out, _ = fake_run(tmp_path, f"reasoning.end={END}")
    profiles = json.loads((out / "speculation_profile.json").read_text())["profiles"]
    by_key = {(p["domain"], p["segment"]): p for p in profiles}
    assert by_key[("all", "all")]["al"] == pytest.approx(summary["al"])
    for segment in ("thinking", "answer"):
        assert by_key[("all", segment)]["al"] == pytest.approx(summary["by_segment"][segment]["al"])
        assert by_key[("all", segment)]["marginal"] == pytest.approx(
            summary["by_segment"][segment]["per_position_acceptance"]
        )
        assert by_key[("coding", segment)]["al"] == pytest.approx(
            summary["by_domain"]["coding"]["by_segment"][segment]["al"]
        )


def test_wandb_gets_the_segment_figures(tmp_path):
    from reports.wandb_log import summary_figures
    from speclens.file_formats.summary_file import read_summary

    summary, out, _ = fake_run(tmp_path, f"reasoning.end={END}")
    flat = summary_figures(read_summary(out))
    assert flat["al/thinking"] == pytest.approx(1 + 9 / 4) and flat["al/answer"] == pytest.approx(1 + 4 / 3)
    assert flat["share_of_output_tokens/thinking"] == pytest.approx(0.6)
    assert flat["al/coding/thinking"] == pytest.approx(3.0)


def test_a_target_without_a_chat_template_is_refused_unless_one_is_named(think_tokenizer, tmp_path):
    """Chat prompts sent untemplated measure AL on another input than the target serves: refused in
    one line; target.chat_template names a Jinja file to use, or `plain` keeps the turns as text."""
    from evals.pipeline.compose import to_run_config
    from evals.pipeline.plan import check_chat_template_file, check_has_template
    from runners.chat import ChatTokenizer
    from tests.unit.conftest import compose_run, fake_overrides
    from tests.unit.test_commands_fake import ROWS

    think_tokenizer.chat_template = None
    think_tokenizer.save_pretrained(str(tmp_path / "base"))
    cfg = to_run_config(compose_run(*fake_overrides(tmp_path, ROWS)))
    cfg.target.model = str(tmp_path / "base")
    messages = [{"role": "user", "content": "hello"}]
    with pytest.raises(ConfigError, match=r"has no chat template .* target\.chat_template=<file\.jinja>"):
        check_has_template(cfg, ChatTokenizer(tmp_path / "base"))
    template = tmp_path / "chat.jinja"
    template.write_text(THINKING_TEMPLATE)
    named = ChatTokenizer(tmp_path / "base", chat_template=str(template))
    check_has_template(cfg, named)
    assert named.chat_text(messages) == "user hello assistant" and named.source == str(template)
    plain = ChatTokenizer(tmp_path / "base", chat_template="plain")
    check_has_template(cfg, plain)
    assert plain.chat_token_ids(messages) == think_tokenizer.encode("hello")
    cfg.target.chat_template = str(tmp_path / "missing.jinja")
    with pytest.raises(ConfigError, match=r"target\.chat_template=.*missing\.jinja: no such file"):
        check_chat_template_file(cfg)
