"""The target's own greedy answers to the training prompts, generated with vLLM.

The same tokens on every machine of one kind, by construction: float32 (bf16 greedy decoding
parts at near-ties with the thread count and batch shape: 3 of 56 answers did between one core
and two) on one thread (ANSWER_THREADS, bound by vLLM's VLLM_CPU_OMP_THREADS_BIND to the first
CPU the caller may use), so no reduction order depends on how many cores the machine or a
`taskset` gives; vLLM's engine runs in its own process, out of the caller's thread settings.
Eager, as speclens's own engines: vLLM's compiled graph on CPU (no inductor) runs the same
operations, the same tokens (56 of 56 answers), after a minute of compiling at every start.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from drafters.training.corpus import TrainingPrompt
from speclens.machine import native_bf16

__all__ = [
    "ANSWER_DTYPE",
    "ANSWER_THREADS",
    "Sample",
    "compute_dtype",
    "generate_answers",
    "generate_answers_apart",
    "training_autocast",
    "training_threads",
]

ANSWER_DTYPE = "float32"
ANSWER_THREADS = 1


def training_autocast():
    """The training's mixed precision: bf16 autocast where the CPU has native bf16, float32 (no
    autocast) elsewhere, where torch's bf16 products take a fallback some 20 times slower. Either way the build is the same bytes on machines of one CPU (speclens/machine.py)."""
    import torch

    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=native_bf16())


def compute_dtype():
    """The dtype the target's hidden states are computed and kept in (training_autocast's)."""
    import torch

    return torch.bfloat16 if native_bf16() else torch.float32


def training_threads() -> int:
    """Torch threads for training: every core (vLLM may have lowered the count), at most 16."""
    return max(1, min(os.cpu_count() or 1, 16))


@dataclass(frozen=True)
class Sample:
    domain: str
    prompt_ids: tuple[int, ...]
    answer_ids: tuple[int, ...]

    @property
    def ids(self) -> list[int]:
        return [*self.prompt_ids, *self.answer_ids]


def generate_answers(
    target: pathlib.Path, prompts: list[TrainingPrompt], max_tokens: int, max_model_len: int = 1024
) -> list[Sample]:
    """One greedy answer of at most ``max_tokens`` per prompt (needs vllm, CPU or GPU)."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"  # see the module's docstring
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = str(min(os.sched_getaffinity(0)))  # ANSWER_THREADS
    from tqdm import tqdm
    from vllm import LLM, SamplingParams

    from speclens.console import console

    def bar(*args, **kwargs):
        return tqdm(*args, **{**kwargs, "desc": "speclens: the target's answers", "file": console()})

    llm = LLM(
        model=str(target),
        max_model_len=max_model_len,
        dtype=ANSWER_DTYPE,
        seed=0,
        max_num_seqs=128,
        enforce_eager=True,
    )
    try:
        outputs = llm.chat(
            [[{"role": "user", "content": p.text}] for p in prompts],
            SamplingParams(temperature=0.0, max_tokens=max_tokens),
            use_tqdm=bar,
        )
    finally:
        llm.llm_engine.engine_core.shutdown()
    return [
        Sample(p.domain, tuple(o.prompt_token_ids), tuple(o.outputs[0].token_ids))
        for p, o in zip(prompts, outputs, strict=True)
    ]


def generate_answers_apart(target: pathlib.Path, prompts: list[TrainingPrompt], max_tokens: int) -> list[Sample]:
    """generate_answers in a process of its own, so that vLLM's OpenMP set-up and thread binding
    stay out of the caller: torch training in the process that ran it went several times slower."""
    with tempfile.TemporaryDirectory(prefix="speclens-answers-") as tmp:
        request, answers = pathlib.Path(tmp) / "request.json", pathlib.Path(tmp) / "answers.json"
        request.write_text(
            json.dumps(
                {"target": str(target), "max_tokens": max_tokens, "prompts": [[p.domain, p.text] for p in prompts]}
            )
        )
        subprocess.run([sys.executable, "-m", "drafters.training.selfdistill", str(request), str(answers)], check=True)
        rows = json.loads(answers.read_text())
    return [Sample(domain, tuple(prompt_ids), tuple(answer_ids)) for domain, prompt_ids, answer_ids in rows]


if __name__ == "__main__":  # generate_answers_apart's child: request.json in, answers.json out
    asked = json.loads(pathlib.Path(sys.argv[1]).read_text())
    made = generate_answers(
        pathlib.Path(asked["target"]), [TrainingPrompt(*p) for p in asked["prompts"]], asked["max_tokens"]
    )
    pathlib.Path(sys.argv[2]).write_text(json.dumps([[s.domain, s.prompt_ids, s.answer_ids] for s in made]))
