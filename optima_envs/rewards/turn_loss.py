"""The readability term's interface: per-utterance losses in, the dialogue's loss out.

The loss itself comes from a frozen reference model (`optima_train.rewards.ReadabilityScorer`
is one); the reward only needs this callable type and the rule that a dialogue's readability
loss is its largest per-turn loss.
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

__all__ = ["TurnLossFn", "max_turn_loss"]

TurnLossFn = Callable[[Sequence[str]], "list[float | None]"]
"""Maps utterance texts to their mean token NLL (None for a text with no tokens), in order."""


def max_turn_loss(losses: Iterable[float | None]) -> float | None:
    """The dialogue's readability loss: the largest per-turn loss (None if no turn has one)."""
    present = [x for x in losses if x is not None]
    return max(present) if present else None
