"""The target's own greedy answers to the training prompts, generated with vLLM.

Bit-stable on one machine kind: vLLM's engine runs in its own process, whose
worker computes the same tokens whatever CPUs the caller was given. In-process
(VLLM_ENABLE_V1_MULTIPROCESSING=0, as speclens's runner and tests set it) bf16
decoding follows the caller's thread count, and 3 of 56 answers parted at
near-ties between one core and two.
"""

from __future__ import annotations

import os
import pathlib
from dataclasses import dataclass

from drafters.training.corpus import TrainingPrompt

__all__ = ["Sample", "generate_answers", "training_threads"]


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
    from tqdm import tqdm
    from vllm import LLM, SamplingParams

    from core.console import console

    def bar(*args, **kwargs):
        return tqdm(*args, **{**kwargs, "desc": "speclens: the target's answers", "file": console()})

    llm = LLM(model=str(target), max_model_len=max_model_len, dtype="bfloat16", seed=0, max_num_seqs=128)
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
