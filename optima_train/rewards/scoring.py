"""Scoring a batch of dialogues: defined in `optima_envs.rewards.scoring` (pure, usable below the trainers); kept
importable from here."""

from optima_envs.rewards.scoring import (
    DialogueSample,
    ExclusionReason,
    RewardBatch,
    RewardResult,
    Turn,
    compute_rewards,
)

__all__ = ["DialogueSample", "ExclusionReason", "RewardBatch", "RewardResult", "Turn", "compute_rewards"]
