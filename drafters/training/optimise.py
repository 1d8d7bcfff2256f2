"""The optimiser both drafters train with."""

from __future__ import annotations

__all__ = ["Optimiser"]


class Optimiser:
    """AdamW over ``params`` for ``steps`` steps: a linear warm-up over the first 5%, then a linear
    decay to a tenth of ``lr``; gradients clipped to norm 1."""

    def __init__(self, params: list, lr: float, steps: int):
        import torch

        self.params = params
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
        return float(loss.detach())
