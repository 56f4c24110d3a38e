"""LoRA dropout whose masks come from a fast generator, drawn four elements per random number.

PEFT applies `nn.Dropout` to the input of every LoRA adapter: with `target_modules="all-linear"`
that is seven dropouts per layer, each over a (tokens, hidden) tensor. On a CPU torch draws the
Bernoulli mask one element at a time from its Mersenne Twister (MKL's vectorised generator is
only used on Intel processors), so on the embedded model the masks cost about as much as the
matrix products they feed. `FastDropout` fills one 64-bit word per four elements from numpy's
PCG64 generator, reads each word as four 16-bit integers and drops an element when its integer
is below `round(p * 65536)` (counted from the bottom of the int16 range): the drop probability
is `p` rounded to a multiple of 1/65536 (0.05 becomes 0.0500031), and kept elements are scaled
by `1 / (1 - p_rounded)`, so the expected output equals the input as with `nn.Dropout`.

Each module owns its generator, seeded from torch's global generator when the module is built
(or from `seed=`), so a run that calls `transformers.set_seed` before swapping the modules in
draws the same masks every time.

`use_fast_dropout(model)` swaps every `nn.Dropout` inside a PEFT model's `lora_dropout`
containers; the model's other dropouts (attention, residual) are left alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["FastDropout", "rounded_probability", "use_fast_dropout"]

_LEVELS = 1 << 16
_INT16_MIN = -(1 << 15)


def rounded_probability(p: float) -> float:
    """The drop probability `FastDropout(p)` applies: `p` on a grid of 1/65536."""
    return round(p * _LEVELS) / _LEVELS


class FastDropout(nn.Module):
    """Inverted dropout with a mask drawn from 16-bit slices of PCG64's 64-bit outputs."""

    def __init__(self, p: float, *, seed: int | None = None) -> None:
        super().__init__()
        if not 0 <= p < 1:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        if rounded_probability(p) == 1:
            raise ValueError(f"dropout probability {p} rounds to 1 on FastDropout's 1/65536 grid; use at most "
                             f"{1 - 1 / _LEVELS}")
        self.p = p
        self._threshold = _INT16_MIN + round(p * _LEVELS)
        self._scale = 1.0 / (1.0 - rounded_probability(p))
        if seed is None:
            seed = int(torch.randint(0, 2**63 - 1, (1,)).item())
        self._bits = np.random.PCG64(seed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self._threshold == _INT16_MIN:
            return x
        n = x.numel()
        words = self._bits.random_raw((n + 3) // 4)
        draws = torch.from_numpy(words.view(np.int16))[:n].view(x.shape).to(x.device)
        return (x * self._scale).masked_fill_(draws < self._threshold, 0)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def use_fast_dropout(model: Any) -> int:
    """Replace the `nn.Dropout` modules in every LoRA layer's `lora_dropout` with `FastDropout` of
    the same probability; returns how many were replaced (0 for a model without LoRA dropout)."""
    replaced = 0
    for module in model.modules():
        container = getattr(module, "lora_dropout", None)
        if not isinstance(container, nn.ModuleDict):
            continue
        for name, dropout in list(container.items()):
            if isinstance(dropout, nn.Dropout) and dropout.p > 0:
                fast = FastDropout(dropout.p)
                fast.train(dropout.training)
                container[name] = fast
                replaced += 1
    return replaced
