"""An external draft model: a smaller causal LM run D times per step."""

from __future__ import annotations

from dataclasses import dataclass

from drafters.checkpoint import CheckpointDrafter, CheckpointDrafterConfig


@dataclass
class DraftModelConfig(CheckpointDrafterConfig):
    name: str = "draft_model"


class DraftModel(CheckpointDrafter):
    name = "draft_model"
    config_class = DraftModelConfig
    draft_passes = "serial"
    vllm_method = "draft_model"
