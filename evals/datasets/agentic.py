"""Agent trajectories with tool calls (`dataset=agentic`): one request per assistant turn, its
prompt every recorded message before that turn, rendered with the row's tools.

Rows, from `dataset.path` (parquet or jsonl; a file, or a folder of them):
- SPEED-Bench's agentic layout: `question_id`, `category`, `turns` (OpenAI-style messages: role,
  content, `tool_calls` whose `function.arguments` is a JSON string or an object, `tool_call_id` on
  `tool` messages; keys holding None are dropped) and `extras` (a mapping or a JSON string) whose
  `tools` is a JSON string of the tool schemas;
- plain OpenAI-messages rows: `id`, `category`, `messages`, `tools`.
Without `dataset.path`, SPEED-Bench's `agentic` config from the hub (nvidia/SPEED-Bench).

The prompt of a cut point is the recorded history, not the model's own earlier answers: that is
what a trajectory is. Chat templates that drop tools, tool calls or tool results (SmolLM2's among
them) are found by rendering with and without them; such a template is refused, or with
`dataset.tools_as_text=true` the tools, calls and results are written into the messages as text
(`as_text`), so that no prompt silently loses them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals.datasets.domains import domain_of
from evals.datasets.jsonl import check_unique
from evals.datasets.speed_bench import DATA_SUFFIXES, HUB_ID, _plain, _read_file
from speclens.config import DatasetConfig
from speclens.errors import ConfigError, TemplateFailed
from speclens.generation import ChatEncoder, Prompt

ROLES = ("system", "user", "assistant", "tool")
HUB_CONFIG = "agentic"


@dataclass
class AgenticConfig(DatasetConfig):
    """Agent trajectories: dataset.path=<parquet/jsonl file or folder> (SPEED-Bench's agentic rows or
    OpenAI-messages rows), else SPEED-Bench's `agentic` config from the hub."""

    # Keep every k-th cut point of each trajectory (its assistant turns 0, k, 2k, ...).
    turn_stride: int = 1
    # Render tools, tool calls and tool results as text where the target's template drops them.
    tools_as_text: bool = False
    # Drop cut points too long for engine.max_model_len (counted per category) instead of refusing.
    drop_too_long: bool = False
    # Hub split, when reading from the hub.
    split: str = "test"


@dataclass(frozen=True)
class Trajectory:
    trajectory_id: str
    category: str
    messages: tuple[dict[str, Any], ...]
    tools: tuple[dict[str, Any], ...]


# -- reading and checking rows ------------------------------------------------------------------


def _json_field(value: Any, where: str) -> Any:
    """A field that may be a JSON string or the value itself."""
    value = _plain(value)
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: not valid JSON ({exc.msg} at character {exc.pos}).") from None
    return value


def _tools(value: Any, where: str) -> tuple[dict[str, Any], ...]:
    tools = _json_field(value, where) if value is not None else []
    tools = _plain(tools)
    if not isinstance(tools, list) or not all(isinstance(t, dict) and ("function" in t or "name" in t) for t in tools):
        raise ConfigError(
            f"{where}: must be a list of tool schemas ({{type: function, function: {{name, ...}}}}), "
            f"not {type(tools).__name__}."
        )
    return tuple(_plain_tree(t) for t in tools)


def _plain_tree(value: Any) -> Any:
    """Parquet's arrays as lists, all the way down, and keys holding None dropped."""
    value = _plain(value)
    if isinstance(value, dict):
        return {k: _plain_tree(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_plain_tree(v) for v in value]
    return value


def _message(raw: Any, where: str) -> dict[str, Any]:
    message = _plain_tree(raw)
    if not isinstance(message, dict) or message.get("role") not in ROLES:
        raise ConfigError(f"{where}: a message needs a role ({', '.join(ROLES)}), found {raw!r:.80}.")
    # OpenAI's assistant tool-call message has "content": null: empty content, which templates read
    # (dropping the key with the other None-valued ones left `message.content` undefined to them).
    message.setdefault("content", "")
    content = message["content"]
    if not isinstance(content, str):
        raise ConfigError(f"{where}.content: must be text or null, not {type(content).__name__}.")
    calls = message.get("tool_calls", [])
    if not isinstance(calls, list):
        raise ConfigError(f"{where}.tool_calls: must be a list of tool calls, not {type(calls).__name__}.")
    if "tool_call_id" in message and not isinstance(message["tool_call_id"], str):
        raise ConfigError(
            f"{where}.tool_call_id: ids must be strings (as OpenAI writes them), not "
            f"{type(message['tool_call_id']).__name__} {message['tool_call_id']!r}."
        )
    for i, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ConfigError(f"{where}.tool_calls[{i}]: needs function.name.")
        if "id" in call and not isinstance(call["id"], str):
            raise ConfigError(
                f"{where}.tool_calls[{i}].id: ids must be strings (as OpenAI writes them), not "
                f"{type(call['id']).__name__} {call['id']!r}."
            )
        arguments = _json_field(function.get("arguments", {}), f"{where}.tool_calls[{i}].function.arguments")
        if not isinstance(arguments, dict):
            raise ConfigError(f"{where}.tool_calls[{i}].function.arguments: must be a JSON object.")
        function["arguments"] = arguments
    return message


def trajectory_of(row: dict[str, Any], where: str) -> Trajectory:
    """One row, either layout, checked: each problem one line naming the row and the field."""
    layout = "turns" if row.get("turns") is not None else "messages"
    key = "question_id" if layout == "turns" else "id"
    ident = row.get(key, row.get("question_id", row.get("id")))
    if ident is None or row.get("category") is None or row.get(layout) is None:
        raise ConfigError(
            f"{where}: needs question_id, category and turns (SPEED-Bench agentic) or id, category and "
            "messages (OpenAI messages)."
        )
    where = f"{where} ({key} {ident})"
    raw_messages = _plain(row[layout])
    if not isinstance(raw_messages, list):
        raise ConfigError(f"{where}.{layout}: must be a list of messages.")
    messages = tuple(_message(m, f"{where}.{layout}[{i}]") for i, m in enumerate(raw_messages))
    if layout == "turns":
        extras = _json_field(row.get("extras"), f"{where}.extras") if row.get("extras") is not None else {}
        if not isinstance(extras, dict):
            raise ConfigError(f"{where}.extras: must be a mapping (or its JSON).")
        tools = _tools(extras.get("tools"), f"{where}.extras.tools")
    else:
        tools = _tools(row.get("tools"), f"{where}.tools")
    if not any(m["role"] == "assistant" for m in messages[1:]):
        raise ConfigError(f"{where}.{layout}: no assistant message after the first message: no turn to cut before.")
    _check_tool_results(messages, f"{where}.{layout}")
    return Trajectory(str(ident), str(row["category"]), messages, tools)


def _check_tool_results(messages: tuple[dict[str, Any], ...], where: str) -> None:
    calls: set[str] = set()
    for i, m in enumerate(messages):
        calls |= {c["id"] for c in m.get("tool_calls") or () if isinstance(c.get("id"), str)}
        if m["role"] == "tool" and m.get("tool_call_id") not in calls:
            raise ConfigError(f"{where}[{i}].tool_call_id: {m.get('tool_call_id')!r} answers no earlier tool call.")


def read_rows(cfg: AgenticConfig) -> tuple[list[tuple[dict[str, Any], str]], str]:
    """The rows and where they came from: dataset.path (a file, or every data file of a folder), else the hub."""
    if cfg.path is None:
        return _rows_from_hub(cfg), f"{HUB_ID}:{HUB_CONFIG}"
    path = Path(cfg.path).expanduser()
    if not path.exists():
        raise ConfigError(f"dataset.path={cfg.path}: no such file or folder.")
    files = sorted(p for p in path.glob("*") if p.suffix in DATA_SUFFIXES) if path.is_dir() else [path]
    if not files:
        raise ConfigError(f"dataset.path={cfg.path}: the folder holds no .parquet or .jsonl files.")
    rows = []
    for file in files:
        rows += [(r, f"{file}: row {i}") for i, r in enumerate(_read_file(file), start=1)]
    return rows, str(path)


def _rows_from_hub(cfg: AgenticConfig) -> list[tuple[dict[str, Any], str]]:
    try:
        from datasets import get_dataset_config_names, load_dataset
    except ImportError:
        raise ConfigError(
            "dataset=agentic without dataset.path reads the hub and needs `pip install datasets`."
        ) from None
    try:
        configs = get_dataset_config_names(HUB_ID)
        if HUB_CONFIG not in configs:
            raise ConfigError(
                f"dataset=agentic: {HUB_ID} has no `{HUB_CONFIG}` config (it has {', '.join(configs)}); "
                "set dataset.path=<trajectories>."
            )
        rows = load_dataset(HUB_ID, HUB_CONFIG, split=cfg.split)
    except ConfigError:
        raise
    except Exception as exc:  # the hub's own errors: no network, no access
        raise ConfigError(
            f"dataset=agentic: {HUB_ID} ({HUB_CONFIG}) could not be read from the hub "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); set "
            "dataset.path=<trajectories> (parquet or jsonl)."
        ) from None
    return [(dict(r), f"{HUB_ID}:{HUB_CONFIG}: row {i}") for i, r in enumerate(rows, start=1)]


# -- templates that drop tools --------------------------------------------------------------------


def dropped_by_template(encoder: ChatEncoder, trajectories: list[Trajectory], source: str = "") -> list[str]:
    """What the target's chat template leaves out of a rendered prompt: `tools`, `tool calls`,
    `tool results` (each found by rendering with and without it); [] where the encoder renders
    no template text (the fake engine, which renders all of them). A template that fails on a
    trajectory is refused naming it."""
    chat_text = getattr(encoder, "chat_text", None)
    if chat_text is None or not getattr(encoder, "has_template", False):
        return []

    def render(trajectory: Trajectory, messages: list[dict[str, Any]], tools=None) -> str:
        try:
            return chat_text(messages, tools) if tools else chat_text(messages)
        except TemplateFailed as exc:
            raise TemplateFailed(f"{source}: trajectory {trajectory.trajectory_id!r}: {exc}") from None

    dropped = []
    with_tools = next((t for t in trajectories if t.tools), None)
    if with_tools is not None and render(with_tools, list(with_tools.messages), with_tools.tools) == render(
        with_tools, list(with_tools.messages)
    ):
        dropped.append("tools")
    with_calls = next((t for t in trajectories if any(m.get("tool_calls") for m in t.messages)), None)
    if with_calls is not None:
        bare = [{k: v for k, v in m.items() if k != "tool_calls"} for m in with_calls.messages]
        if render(with_calls, list(with_calls.messages)) == render(with_calls, bare):
            dropped.append("tool calls")
    with_results = next((t for t in trajectories if any(m["role"] == "tool" for m in t.messages)), None)
    if with_results is not None:
        marked = [
            m | {"content": f"{m.get('content') or ''} speclens-probe"} if m["role"] == "tool" else m
            for m in with_results.messages
        ]
        if "speclens-probe" not in render(with_results, marked):
            dropped.append("tool results")
    return dropped


def as_text(trajectory: Trajectory) -> Trajectory:
    """The trajectory with its tools, tool calls and tool results written as text, for templates
    that drop them. The layout:
    - the tool schemas, one JSON object per line after the line "Tools you can call:", open the
      first system message (or a system message of their own at the start);
    - each tool call follows its assistant message's content as
      `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, one per line;
    - each tool result becomes a user message `<tool_response>\\n...\\n</tool_response>`."""
    messages = []
    for m in trajectory.messages:
        if m["role"] == "tool":
            messages.append({"role": "user", "content": f"<tool_response>\n{m.get('content') or ''}\n</tool_response>"})
            continue
        calls = [
            json.dumps({"name": c["function"]["name"], "arguments": c["function"]["arguments"]}, sort_keys=True)
            for c in m.get("tool_calls") or ()
        ]
        text = "\n".join([m.get("content") or "", *(f"<tool_call>{c}</tool_call>" for c in calls)]).strip()
        messages.append({"role": m["role"], "content": text})
    if trajectory.tools:
        schemas = "Tools you can call:\n" + "\n".join(json.dumps(t, sort_keys=True) for t in trajectory.tools)
        if messages and messages[0]["role"] == "system":
            messages[0] = {"role": "system", "content": f"{schemas}\n\n{messages[0]['content']}"}
        else:
            messages.insert(0, {"role": "system", "content": schemas})
    return Trajectory(trajectory.trajectory_id, trajectory.category, tuple(messages), ())


# -- cut points -------------------------------------------------------------------------------------


def cut_points(trajectory: Trajectory, stride: int) -> list[Prompt]:
    """One prompt per assistant turn (every `stride`-th), holding every message before it."""
    prompts = []
    turn = 0
    for i, m in enumerate(trajectory.messages):
        if m["role"] != "assistant" or i == 0:
            continue
        if turn % stride == 0:
            prompts.append(
                Prompt(
                    f"{trajectory.trajectory_id}@{turn}",
                    domain_of(trajectory.category),
                    trajectory.category,
                    (),
                    trajectory.messages[:i],
                    trajectory.tools or None,
                    turn,
                )
            )
        turn += 1
    return prompts


def load(cfg: AgenticConfig, encoder: ChatEncoder) -> list[Prompt]:
    if isinstance(cfg.turn_stride, bool) or not isinstance(cfg.turn_stride, int) or cfg.turn_stride < 1:
        raise ConfigError(f"dataset.turn_stride={cfg.turn_stride!r}: must be a whole number >= 1.")
    rows, source = read_rows(cfg)
    trajectories = [trajectory_of(row, where) for row, where in rows]
    if not trajectories:
        raise ConfigError(f"{source}: no trajectories in it.")
    check_unique([Prompt(t.trajectory_id, t.category, t.category, ()) for t in trajectories], source, "question_id")
    dropped = dropped_by_template(encoder, trajectories, source)
    if dropped and not cfg.tools_as_text:
        raise ConfigError(
            f"the target's chat template drops {', '.join(dropped)} from the prompt ({getattr(encoder, 'source', 'the target')}): "
            "its prompts would silently lose them. Serve a target whose template renders tools, or set "
            "dataset.tools_as_text=true to write them into the messages as text."
        )
    if cfg.tools_as_text:
        trajectories = [as_text(t) for t in trajectories]
    return [p for t in trajectories for p in cut_points(t, cfg.turn_stride)]
