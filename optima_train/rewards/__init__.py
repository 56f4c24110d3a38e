"""The Optima reward: task score, token cost, readability and format rules, each kept separately.

    from optima_train.rewards import DialogueSample, RewardWeights, compute_rewards
    batch = compute_rewards(samples, weights=RewardWeights(lambda_token=0.5), turn_loss=scorer)

`ReadabilityScorer` (the reference-LM term) imports torch lazily, on construction.
"""

from optima_train.rewards.format_rules import (
    FORMAT_RULES,
    FormatReport,
    Violation,
    check_format,
)
from optima_train.rewards.normalization import TokenNormalization, max_tokens_for
from optima_train.rewards.readability import (
    ReadabilityScorer,
    TurnLossFn,
    max_turn_loss,
)
from optima_train.rewards.rubric import (
    RewardInputs,
    RewardTerm,
    RewardTermFn,
    RewardWeights,
    Rubric,
    default_rubric,
)
from optima_train.rewards.scoring import (
    DialogueSample,
    RewardBatch,
    RewardResult,
    Turn,
    compute_rewards,
)

__all__ = [
    "FORMAT_RULES",
    "DialogueSample",
    "FormatReport",
    "ReadabilityScorer",
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
