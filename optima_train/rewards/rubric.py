"""The reward rubric: defined in `optima_envs.rewards.rubric` (pure, usable below the trainers); kept
importable from here."""

from optima_envs.rewards.rubric import (
    RewardInputs,
    RewardTerm,
    RewardTermFn,
    RewardWeights,
    Rubric,
    default_rubric,
)

__all__ = ["RewardInputs", "RewardTerm", "RewardTermFn", "RewardWeights", "Rubric", "default_rubric"]
