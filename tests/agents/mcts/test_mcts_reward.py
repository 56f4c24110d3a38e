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


class TestGroundedOnly:
    @staticmethod
    def _with_state(evidence, messages, score=1.0):
        from optima_envs.core.state import DialogueState
        from optima_envs.core.types import Message, TaskInstance

        instance = TaskInstance(instance_id="q", question="In which city was the founder of Zorp born?", gold="Krelo")
        state = DialogueState(instance=instance, roles=(), evidence=evidence, system_prompts=(), format_instruction=None,
                              messages=tuple(Message(k, s, t, None, 3, a) for k, (s, t, a) in enumerate(messages)))
        return FinishedDialogue(tree_id="t", leaf_id=1, agents=("alice", "bob"),
                                utterances=tuple((s, t) for s, t, _ in messages), tokens=10, score=score, score_ok=True,
                                end_reason="agreed", state=state)

    @staticmethod
    def _chain():
        from optima_envs.core.types import Evidence

        return ((Evidence("Bami was born in Krelo.", supporting=True),),
                (Evidence("Zorp was founded by Bami.", supporting=True),))

    def test_a_right_guess_scores_as_wrong_and_a_told_answer_counts(self):
        guess = self._with_state(self._chain(), [("alice", "<A>Krelo</A>", "Krelo"), ("bob", "<A>Krelo</A>", "Krelo")])
        told = self._with_state(self._chain(), [("alice", "Bami was born in Krelo.", None),
                                                ("bob", "<A>Krelo</A>", "Krelo"), ("alice", "<A>Krelo</A>", "Krelo")])
        reward = OptimaTreeReward.without_reference_model(max_tokens=100.0, grounded_only=True)
        (r_guess, c_guess), (r_told, c_told) = reward([guess, told])
        assert (c_guess["score"], c_guess["grounded"]) == (0.0, 0.0)
        assert (c_told["score"], c_told["grounded"]) == (1.0, 1.0)
        assert r_told > r_guess
        plain = OptimaTreeReward.without_reference_model(max_tokens=100.0)
        (r_plain, c_plain), = plain([guess])
        assert c_plain["score"] == 1.0 and "grounded" not in c_plain and r_plain == pytest.approx(r_told)

    def test_a_rollout_it_cannot_check_is_refused(self):
        from optima_envs.core.types import Evidence

        reward = OptimaTreeReward.without_reference_model(max_tokens=100.0, grounded_only=True)
        with pytest.raises(MCTSConfigError, match="grounded_only needs each rollout's env state"):
            reward([_d(3)])
        unmarked = self._with_state(((Evidence("x"),), (Evidence("y"),)), [("alice", "<A>Krelo</A>", "Krelo")])
        with pytest.raises(MCTSConfigError, match=re.escape("marks none (set reward.grounded_only: false)")):
            reward([unmarked])
