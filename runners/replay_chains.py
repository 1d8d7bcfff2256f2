"""The drafts `evals.replay` replays for drafters whose first k proposals from a position do not
depend on D >= k: every start's, computed once (drafts[k - 1, p], margins the same shape; see
runners/head_chain.py): an EAGLE or EAGLE-3 head's or an MTP layer's chains, or a parallel draft
model's mask blocks (runners/parallel_draft.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from runners.head_chain import head_predictions
from runners.parallel_draft import parallel_predictions
from speclens.checkpoints import read_config
from speclens.errors import ConfigError
from speclens.model_facts import MASK_TOKEN_KEYS, parallel_drafting_token

# kind -> what computes it: "eagle", "eagle3", "mtp" (head_chain) or "pard" (parallel_draft)
PARALLEL_DRAFT = "pard"


def replay_chains(
    target_dir: Path,
    draft_dir: Path,
    kind: str,
    sequences: Sequence[Sequence[int]],
    first_starts: Sequence[int],
    d_max: int,
    dtype: str,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per sequence (drafts, margins) from every start at or after first_starts (the positions a
    run drafts from: its prompt's last)."""
    if kind != PARALLEL_DRAFT:
        return head_predictions(target_dir, draft_dir, kind, sequences, d_max, dtype)
    config = read_config(draft_dir, "drafter.model")
    mask_token = parallel_drafting_token(config)
    if mask_token is None:
        raise ConfigError(f"drafter.model={draft_dir} names no mask token ({', '.join(MASK_TOKEN_KEYS)}).")
    return parallel_predictions(draft_dir, sequences, first_starts, d_max, dtype, mask_token)
