"""The Optima reward: task score, token cost, readability and format rules, each kept separately.

    from optima_train.rewards import DialogueSample, RewardWeights, compute_rewards
    batch = compute_rewards(samples, weights=RewardWeights(lambda_token=0.5), turn_loss=scorer)

The pure reward (rubric, format rules, token normalisation, batch scoring) is defined in
`optima_envs.rewards`, so MCTS in `optima_agents` can use it without importing the trainers; it
is re-exported here. `ReadabilityScorer` (the reference-LM term) is the trainers' own and
imports torch lazily, on construction; `dialogue_sample` reads an `EpisodeRecord` as the reward's input.
"""

from optima_envs import rewards as _pure
from optima_envs.rewards import *  # noqa: F403 (the pure reward, re-exported)
from optima_train.rewards.episodes import dialogue_sample
from optima_train.rewards.readability import ReadabilityScorer

__all__ = [*_pure.__all__, "ReadabilityScorer", "dialogue_sample"]
