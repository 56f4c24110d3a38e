"""The Optima reward of a finished dialogue: task score, token cost, readability and format rules,
each kept separately and combined by a rubric. Pure functions over texts and numbers, so every
layer can use them (the trainers rank samples with them, MCTS scores rollouts with them).

    from optima_envs.rewards import DialogueSample, RewardWeights, compute_rewards
    batch = compute_rewards(samples, weights=RewardWeights(lambda_token=0.5), turn_loss=scorer)

The readability term needs a per-utterance loss function (`TurnLossFn`); the model-backed one,
`ReadabilityScorer`, lives in `optima_train.rewards`, which also re-exports everything here.
"""

from optima_envs.rewards.format_rules import (
    FORMAT_RULES,
    FormatReport,
    Violation,
    check_format,
)
from optima_envs.rewards.normalization import TokenNormalization, max_tokens_for
from optima_envs.rewards.rubric import (
    RewardInputs,
    RewardTerm,
    RewardTermFn,
    RewardWeights,
    Rubric,
    default_rubric,
)
from optima_envs.rewards.scoring import (
    DialogueSample,
    RewardBatch,
    RewardResult,
    Turn,
    compute_rewards,
)
from optima_envs.rewards.turn_loss import TurnLossFn, max_turn_loss

__all__ = [
    "FORMAT_RULES",
    "DialogueSample",
    "FormatReport",
    "RewardBatch",
    "RewardInputs",
    "RewardResult",
    "RewardTerm",
    "RewardTermFn",
    "RewardWeights",
    "Rubric",
    "TokenNormalization",
    "Turn",
    "TurnLossFn",
    "Violation",
    "check_format",
    "compute_rewards",
    "default_rubric",
    "max_tokens_for",
    "max_turn_loss",
]
