"""Shared base for drafters that load a draft checkpoint (draft model, EAGLE heads)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from drafters.base import Drafter, DrafterConfig, check_path_hints
from speclens.config import Choice
from speclens.errors import ConfigError
from speclens.file_formats.drafter_build import DRAFTER_FACTS_FILE
from speclens.model_facts import MASK_TOKEN_KEYS, ModelFacts, parallel_drafting_token
from speclens.weights import safetensors_problem


class SampleMethod(Choice):
    greedy = "greedy"
    probabilistic = "probabilistic"


@dataclass
class CheckpointDrafterConfig(DrafterConfig):
    # Local folder or hub id; `'${target.model}'` drafts with the target itself.
    model: str | None = None
    # vLLM's draft_sample_method (verify.draft_sampling is its documented spelling).
    sample_method: SampleMethod = SampleMethod.greedy


@dataclass
class ParallelDraftingConfig(CheckpointDrafterConfig):
    """A drafter vLLM can run in parallel-drafting mode (the EAGLE family and draft models)."""

    # vLLM's parallel_drafting: all D drafts in one pass (P-EAGLE, PARD), masked slots filled with
    # the checkpoint's mask token; needs a checkpoint trained for it.
    parallel_drafting: bool = False


class CheckpointDrafter(Drafter):
    needs_checkpoint = True
    vllm_method: str = ""
    # The checkpoint's config.json `architectures` must name one of these (when set).
    required_architectures: tuple[str, ...] = ()

    def checkpoint_kind_error(self, draft: ModelFacts) -> str | None:
        """Why this checkpoint is not of the kind the method needs (None when it is)."""
        if self.required_architectures and not set(self.required_architectures) & set(draft.architectures):
            return (
                f"its architectures are {list(draft.architectures)}, drafter={self.name} needs one of "
                f"{list(self.required_architectures)}"
            )
        return None

    def checkpoint(self) -> str | None:
        return self.cfg.model

    @property
    def parallel(self) -> bool:
        """Whether it drafts all D tokens in one pass (drafter.parallel_drafting=true)."""
        return bool(getattr(self.cfg, "parallel_drafting", False))

    def speculative_config(self, d: int) -> dict[str, Any]:
        spec = {
            "method": self.vllm_method,
            "model": self.cfg.model,
            "num_speculative_tokens": d,
            "draft_sample_method": SampleMethod(self.cfg.sample_method).value,
        }
        return spec | ({"parallel_drafting": True} if self.parallel else {})

    def validate(self, d: int, target: ModelFacts, draft: ModelFacts | None) -> None:
        if draft is not None:
            check_path_hints(self.vllm_method, draft.path, "drafter.model")
        super().validate(d, target, draft)
        assert draft is not None
        check_weights(self.name, Path(draft.path))

    def check_pair(self, d: int, target: ModelFacts, draft: ModelFacts | None) -> None:
        super().check_pair(d, target, draft)
        if draft is None:
            raise ConfigError(f"drafter={self.name} needs drafter.model=<local path or hub id>.")
        kind_error = self.checkpoint_kind_error(draft)
        if kind_error:
            raise ConfigError(f"drafter.model={draft.path} is not a {self.name} checkpoint: {kind_error}.")
        if self.parallel and parallel_drafting_token(draft.raw) is None:
            raise ConfigError(
                f"drafter.parallel_drafting=true: drafter.model={draft.path} was not trained for parallel drafting: its "
                f"config.json names no mask token ({', '.join(MASK_TOKEN_KEYS)}), which vLLM fills the slots it "
                "drafts in parallel with; use a checkpoint trained for it (P-EAGLE, PARD) or leave parallel_drafting off."
            )
        if draft.vocab_size != target.vocab_size:
            raise ConfigError(
                f"drafter.model={draft.path} has vocab_size={draft.vocab_size} but "
                f"target.model={target.path} has vocab_size={target.vocab_size}; "
                f"drafter={self.name} needs the target's vocabulary."
            )


def check_weights(drafter: str, folder: Path) -> None:
    """Refuse a local checkpoint whose weights are cut short, saying how to get whole ones."""
    if not folder.is_dir():
        return  # a hub id: vLLM fetches it whole
    problem = safetensors_problem(folder)
    if problem is None:
        return
    if (folder / DRAFTER_FACTS_FILE).is_file():  # built by speclens: it builds it again
        fix = (
            f"delete {folder} and run `python -m evals.embedded_drafters {drafter}` (or any run with "
            f"drafter={drafter}) to build it again"
        )
    else:
        fix = "copy or export the checkpoint again"
    raise ConfigError(f"drafter.model={folder}: {problem}; {fix}.")
