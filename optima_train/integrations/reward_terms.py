"""The Optima reward's terms as other stacks want them: one named, weighted value per term, so
score, token cost and readability stay separate columns there as they are here."""

from __future__ import annotations

from typing import Mapping

from optima_envs.rewards import RewardResult, Rubric

__all__ = ["REWARD_COLUMNS", "weighted_terms"]

#: The rubric's reward terms and the column name each gets outside Optima.
REWARD_COLUMNS: Mapping[str, str] = {"score": "optima_score", "token_cost": "optima_token_cost",
                                     "readability": "optima_readability", "format_penalty": "optima_format"}


def weighted_terms(result: RewardResult, rubric: Rubric) -> dict[str, float]:
    """Each rubric term of a rewarded dialogue times its weight (their sum is `result.reward`)."""
    return {name: weight * float(result.components[name]) for name, weight in rubric.weights.items()
            if name in REWARD_COLUMNS}
