"""The reward as a rubric of named, weighted terms (verifiers-style); a metric is a weight-0 term.

The Optima reward (docs/design.md section 2), plus an explicit format penalty:

    R = w_score * score - lambda_token * tokens / max_tokens
        + lambda_loss / max(max_turn_lm_loss, lm_loss_floor) - lambda_format * format_rate

Every term reads one `RewardInputs` (the raw components of one dialogue) and returns a float;
the rubric's total is the weighted sum. All terms, including weight-0 metrics, are returned by
name so they can be stored beside the episode and logged.

`lm_loss_floor` guards the `1 / loss` term: degenerate repetitive text can have a tiny loss,
and without a floor `lambda_loss / loss` would outweigh the task score. With the default 1.0
the readability term is at most `lambda_loss`. A dialogue with no scorable utterance (all
empty) gets a readability term of 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from optima_envs.errors import ConfigError

__all__ = ["RewardInputs", "RewardTerm", "RewardTermFn", "RewardWeights", "Rubric", "default_rubric"]


@dataclass(frozen=True)
class RewardInputs:
    """The raw components of one dialogue's reward.

    score: the task score in [0, 1]. tokens: total tokens of the utterances. max_tokens: the
    normaliser of `tokens` (see `normalization`). max_turn_lm_loss: the largest per-turn mean NLL
    under the reference model (None if no turn had tokens). format_rate: share of utterances
    breaking a format rule. format_counts: violations per rule.
    """

    score: float
    tokens: int
    max_tokens: float
    max_turn_lm_loss: float | None
    format_rate: float = 0.0
    format_counts: Mapping[str, int] = field(default_factory=dict)

    @property
    def token_cost(self) -> float:
        return self.tokens / self.max_tokens if self.max_tokens > 0 else 0.0


RewardTermFn = Callable[[RewardInputs], float]
"""Maps one dialogue's raw components to the value of one term (before weighting)."""


@dataclass(frozen=True)
class RewardTerm:
    """A named term; `weight` 0 makes it a logged metric that does not move the reward."""

    name: str
    fn: RewardTermFn
    weight: float = 1.0


@dataclass(frozen=True)
class RewardWeights:
    """The rubric's weights (typed, so a config can hold them).

    score (float, defaults to 1.0): weight of the task score.
    lambda_token (float, defaults to 0.5): weight of `tokens / max_tokens` (subtracted).
    lambda_loss (float, defaults to 0.8): weight of `1 / max_turn_lm_loss` (added); 0 skips the
        reference model entirely.
    lambda_format (float, defaults to 0.5): weight of the format-violation rate (subtracted).
    lm_loss_floor (float, defaults to 1.0): lower bound on the loss in `1 / loss`.
    """

    score: float = 1.0
    lambda_token: float = 0.5
    lambda_loss: float = 0.8
    lambda_format: float = 0.5
    lm_loss_floor: float = 1.0

    def __post_init__(self) -> None:
        for name in ("lambda_token", "lambda_loss", "lambda_format"):
            if getattr(self, name) < 0:
                raise ConfigError(f"reward.{name} must be >= 0 (it is subtracted or added by its sign "
                                  f"in the formula), got {getattr(self, name)}")
        if self.lm_loss_floor <= 0:
            raise ConfigError(f"reward.lm_loss_floor must be > 0, got {self.lm_loss_floor}")


@dataclass(frozen=True)
class Rubric:
    """A set of weighted terms; `evaluate` returns every term's value and the weighted total."""

    terms: tuple[RewardTerm, ...]

    def __post_init__(self) -> None:
        names = [t.name for t in self.terms]
        if len(set(names)) != len(names) or "reward" in names:
            raise ConfigError(f"rubric term names must be unique and not 'reward', got {names}")

    def evaluate(self, inputs: RewardInputs) -> tuple[float, dict[str, float]]:
        values = {t.name: float(t.fn(inputs)) for t in self.terms}
        total = sum(t.weight * values[t.name] for t in self.terms if t.weight)
        return float(total), values

    @property
    def weights(self) -> dict[str, float]:
        return {t.name: t.weight for t in self.terms}


def default_rubric(weights: RewardWeights = RewardWeights()) -> Rubric:
    """The Optima reward as a rubric (see the module docstring), plus weight-0 metrics."""
    floor = weights.lm_loss_floor

    def readability(x: RewardInputs) -> float:
        return 0.0 if x.max_turn_lm_loss is None else 1.0 / max(x.max_turn_lm_loss, floor)

    return Rubric((
        RewardTerm("score", lambda x: x.score, weights.score),
        RewardTerm("token_cost", lambda x: x.token_cost, -weights.lambda_token),
        RewardTerm("readability", readability, weights.lambda_loss),
        RewardTerm("format_penalty", lambda x: x.format_rate, -weights.lambda_format),
        RewardTerm("tokens", lambda x: float(x.tokens), 0.0),
        RewardTerm("max_tokens", lambda x: float(x.max_tokens), 0.0),
    ))
