"""The optimiser both drafters train with."""

from __future__ import annotations

__all__ = ["PROBE_STEPS", "Optimiser", "steps_to_train", "weights_digest"]

# The determinism probe: the trainable weights' digest after this many steps, recorded by a build
# (speclens_drafter.json `training_probe`) and given again by training that many steps alone.
PROBE_STEPS = 3


def steps_to_train(planned: int, stop_after: int | None) -> int:
    """The plan's steps, or its first ``stop_after`` of them (the determinism probe)."""
    return planned if stop_after is None else min(stop_after, planned)


def weights_digest(params: list) -> str:
    """sha256 over the bytes of ``params`` (as trained: float32 masters), in order."""
    import hashlib

    digest = hashlib.sha256()
    for param in params:
        digest.update(param.detach().contiguous().numpy().tobytes())
    return digest.hexdigest()


class Optimiser:
    """AdamW over ``params`` for ``steps`` steps: a linear warm-up over the first 5%, then a linear
    decay to a tenth of ``lr``; gradients clipped to norm 1. After PROBE_STEPS steps, ``probe``
    holds the weights' digest (None before)."""

    def __init__(self, params: list, lr: float, steps: int):
        import torch

        self.params = params
        self.done = 0
        self.probe: str | None = None
        self.adamw = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
        warmup = max(1, steps // 20)
        self.schedule = torch.optim.lr_scheduler.LambdaLR(
            self.adamw, lambda s: min(1.0, (s + 1) / warmup) * max(0.1, 1.0 - s / max(steps, 1))
        )

    def step(self, loss) -> float:
        """One update from ``loss``; returns its value."""
        import torch

        self.adamw.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.adamw.step()
        self.schedule.step()
        self.done += 1
        if self.done == PROBE_STEPS:
            self.probe = weights_digest(self.params)
        return float(loss.detach())
