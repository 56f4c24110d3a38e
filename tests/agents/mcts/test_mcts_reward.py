import re

import pytest

from optima_agents.mcts import FinishedDialogue, MCTSConfigError, OptimaTreeReward
from optima_agents.mcts.reward import score_only_reward


def _d(tokens: int, score: float | None = 1.0, score_ok: bool = True, end_reason: str = "agreed"):
    return FinishedDialogue(tree_id="t", leaf_id=1, agents=("alice", "bob"),
                            utterances=(("alice", "facts " * tokens), ("bob", "<A>x</A>")), tokens=tokens,
                            score=score, score_ok=score_ok, end_reason=end_reason)


class TestOptimaTreeReward:
    def test_token_scale_is_frozen_from_the_first_batch(self):
        from optima_train.rewards import RewardWeights

        reward = OptimaTreeReward(RewardWeights(lambda_loss=0.0, lambda_token=0.5, lambda_format=0.0),
                                  token_percentile=100.0)
        first = reward([_d(10), _d(20)])
        assert reward.max_tokens == 21.0
        assert first[0][0] == pytest.approx(1.0 - 0.5 * 10 / 21)
        later = reward([_d(42)])  # a longer dialogue later costs more than 1, it does not rescale
        assert later[0][0] == pytest.approx(1.0 - 0.5 * 42 / 21)
        assert later[0][1]["token_cost"] == pytest.approx(2.0) and later[0][1]["max_tokens"] == 21.0
        assert all(isinstance(v, float) for v in later[0][1].values())

    def test_unscorable_dialogues_are_dropped_and_cut_ones_score_zero(self):
        reward = OptimaTreeReward.without_reference_model(max_tokens=100.0)
        (r_bad, _), (r_cut, comps) = reward([_d(5, score=None, score_ok=False), _d(5, score=None, end_reason="max_depth")])
        assert r_bad is None
        assert comps["score"] == 0.0 and r_cut < 0

    def test_readability_needs_a_reference_model(self):
        with pytest.raises(MCTSConfigError, match=re.escape("pass turn_loss=ReadabilityScorer(...)")):
            OptimaTreeReward()

    def test_readability_term_uses_turn_loss(self):
        from optima_train.rewards import RewardWeights

        reward = OptimaTreeReward(RewardWeights(lambda_loss=1.0, lambda_token=0.0, lambda_format=0.0),
                                  lambda texts: [2.0 for _ in texts], max_tokens=10.0)
        (value, comps), = reward([_d(3)])
        assert value == pytest.approx(1.0 + 1.0 / 2.0) and comps["max_turn_lm_loss"] == 2.0


def test_score_only_reward():
    assert score_only_reward([_d(3, score=0.5), _d(3, score=None, score_ok=False)]) == [
        (0.5, {"score": 0.5}), (None, {"score": 0.0})]
