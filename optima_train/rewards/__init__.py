"""The Optima reward: task score, token cost, readability and format rules, each kept separately.

    from optima_train.rewards import DialogueSample, RewardWeights, compute_rewards
    batch = compute_rewards(samples, weights=RewardWeights(lambda_token=0.5), turn_loss=scorer)

The pure reward (rubric, format rules, token normalisation, batch scoring) is defined in
`optima_envs.rewards`, so MCTS in `optima_agents` can use it without importing the trainers; it
is re-exported here. `ReadabilityScorer` (the reference-LM term) is the trainers' own and
imports torch lazily, on construction.
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
from optima_train.rewards.readability import ReadabilityScorer

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
