"""speclens's own agent trajectories, for `dataset=agentic` where SPEED-Bench's are out of reach:
`python -m evals.datasets.agent_trajectories <out.jsonl> [--per-category N] [--seed S]`.

Two kinds of agent, both written deterministically from a seed, OpenAI-messages rows:
- `coding_agent`: answers a question about a function of Python's standard library by grepping for
  it, reading it and grepping for its callers; the tool results are the library's real source
  (the long-context prompts' texts, evals/datasets/long_context.py), so a drafter that copies from
  the context meets what coding agents' contexts hold;
- `support_agent`: a shop's customer-service agent that looks an order up and refunds an item;
  tool results are JSON records.
Nothing is copied from SPEED-Bench or any other set.
"""

from __future__ import annotations

import ast
import json
import random
import sys
from pathlib import Path
from typing import Any

from evals.datasets.long_context import SOURCE_MODULES, _source
from speclens.errors import ArgumentParser, guarded
from speclens.files import write_text_atomic


def _tool(name: str, description: str, **properties: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {k: {"type": v} for k, v in properties.items()},
                "required": list(properties),
            },
        },
    }


CODING_TOOLS = [
    _tool(
        "grep", "Search the checkout for a regular expression; prints path:line: text.", pattern="string", path="string"
    ),
    _tool("read_file", "Print lines start..end of a file, numbered.", path="string", start="integer", end="integer"),
]
SUPPORT_TOOLS = [
    _tool("lookup_order", "Fetch an order by its id.", order_id="string"),
    _tool("refund", "Refund one item of an order.", order_id="string", sku="string", amount="number"),
]
PRODUCTS = [
    ("kettle", 34.9),
    ("desk lamp", 22.5),
    ("headphones", 59.0),
    ("backpack", 41.25),
    ("coffee grinder", 48.0),
    ("phone case", 12.99),
    ("yoga mat", 19.5),
    ("water bottle", 9.75),
    ("keyboard", 74.0),
    ("monitor stand", 29.0),
]


def _call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _functions(module: str) -> list[ast.FunctionDef]:
    tree = ast.parse(_source(module))
    return [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef)
        and ast.get_docstring(n)
        and not n.name.startswith("_")
        and n.end_lineno - n.lineno < 60
    ]


def _numbered(lines: list[str], start: int) -> str:
    return "\n".join(f"{start + i:5d}  {line}" for i, line in enumerate(lines))


def coding_trajectory(index: int, rng: random.Random) -> dict[str, Any]:
    module = rng.choice([m for m in SOURCE_MODULES if _functions(m)])
    fn = rng.choice(_functions(module))
    path = "Lib/" + module.replace(".", "/") + ".py"
    lines = _source(module).splitlines()
    defs = [f"{path}:{i + 1}:{line}" for i, line in enumerate(lines) if f"def {fn.name}(" in line]
    calls = [f"{path}:{i + 1}:{line}" for i, line in enumerate(lines) if f"{fn.name}(" in line and "def " not in line]
    doc = ast.get_docstring(fn).split("\n\n")[0].replace("\n", " ")
    messages = [
        {
            "role": "system",
            "content": "You are a coding agent working in a checkout of CPython. Inspect files with "
            "the tools before you answer; quote the code you rely on.",
        },
        {
            "role": "user",
            "content": f"What does `{fn.name}` in `{module}` do, and where is it used? Then suggest a "
            "unit test for it.",
        },
        {
            "role": "assistant",
            "content": "I'll find the definition first.",
            "tool_calls": [_call("call_1", "grep", pattern=f"def {fn.name}\\(", path=path)],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "\n".join(defs) or "(no matches)"},
        {
            "role": "assistant",
            "content": f"Found it at line {fn.lineno}. Reading the function.",
            "tool_calls": [_call("call_2", "read_file", path=path, start=fn.lineno, end=fn.end_lineno)],
        },
        {
            "role": "tool",
            "tool_call_id": "call_2",
            "content": _numbered(lines[fn.lineno - 1 : fn.end_lineno], fn.lineno),
        },
        {
            "role": "assistant",
            "content": "Now the places that call it.",
            "tool_calls": [_call("call_3", "grep", pattern=f"{fn.name}\\(", path="Lib/")],
        },
        {"role": "tool", "tool_call_id": "call_3", "content": "\n".join(calls[:12]) or "(no matches)"},
        {
            "role": "assistant",
            "content": f"`{fn.name}` ({path}, line {fn.lineno}): {doc} It is called in "
            f"{len(calls)} place(s) in the module. A test would call `{module}.{fn.name}` "
            "with a small input and compare the result with the documented behaviour.",
        },
    ]
    return {"id": f"coding_agent-{index:03d}", "category": "coding_agent", "messages": messages, "tools": CODING_TOOLS}


def support_trajectory(index: int, rng: random.Random) -> dict[str, Any]:
    order_id = f"A{rng.randrange(10_000, 99_999)}"
    items = rng.sample(PRODUCTS, rng.randint(2, 4))
    order = {
        "order_id": order_id,
        "status": "delivered",
        "customer": f"customer-{rng.randrange(1000, 9999)}",
        "items": [
            {"sku": f"SKU-{rng.randrange(100, 999)}", "name": name, "qty": 1, "price": price} for name, price in items
        ],
    }
    order["total"] = round(sum(i["price"] for i in order["items"]), 2)
    damaged = rng.choice(order["items"])
    refund = {
        "refund_id": f"R{rng.randrange(100_000, 999_999)}",
        "order_id": order_id,
        "sku": damaged["sku"],
        "amount": damaged["price"],
        "status": "approved",
    }
    listed = ", ".join(f"{i['name']} (${i['price']:.2f})" for i in order["items"])
    messages = [
        {
            "role": "system",
            "content": "You are the customer-service agent of an online shop. Look an order up before "
            "you act on it; refund only items of the order, at their price.",
        },
        {
            "role": "user",
            "content": f"Hi, my order {order_id} arrived but something in it is broken. Can I get my money back?",
        },
        {
            "role": "assistant",
            "content": "I'm sorry to hear that. Let me look the order up.",
            "tool_calls": [_call("call_1", "lookup_order", order_id=order_id)],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": json.dumps(order)},
        {
            "role": "assistant",
            "content": f"I can see order {order_id}, delivered, with {listed}. Which item is broken?",
        },
        {"role": "user", "content": f"The {damaged['name']}, it was cracked when I opened the box."},
        {
            "role": "assistant",
            "content": f"Thank you. I'm refunding the {damaged['name']} now.",
            "tool_calls": [_call("call_2", "refund", order_id=order_id, sku=damaged["sku"], amount=damaged["price"])],
        },
        {"role": "tool", "tool_call_id": "call_2", "content": json.dumps(refund)},
        {
            "role": "assistant",
            "content": f"Done: refund {refund['refund_id']} of ${damaged['price']:.2f} for the "
            f"{damaged['name']} from order {order_id} is approved.",
        },
    ]
    return {
        "id": f"support_agent-{index:03d}",
        "category": "support_agent",
        "messages": messages,
        "tools": SUPPORT_TOOLS,
    }


def trajectories(per_category: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [make(i, rng) for make in (coding_trajectory, support_trajectory) for i in range(per_category)]


@guarded
def main(argv: list[str]) -> int:
    parser = ArgumentParser(prog="python -m evals.datasets.agent_trajectories", description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the jsonl file to write (dataset=agentic dataset.path=<it>)")
    parser.add_argument("--per-category", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rows = trajectories(args.per_category, args.seed)
    write_text_atomic(args.out, "".join(json.dumps(r) + "\n" for r in rows))
    print(f"{len(rows)} trajectories: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
