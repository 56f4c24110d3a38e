"""The Optima reward on hand-made dialogues with known values."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from optima_envs.errors import ConfigError
from optima_train.rewards import (
    DialogueSample,
    ReadabilityScorer,
    RewardInputs,
    RewardWeights,
    Turn,
    check_format,
    compute_rewards,
    default_rubric,
    max_tokens_for,
    max_turn_loss,
)
from optima_envs.rewards.format_rules import normalize_for_repeat

AGENTS = ("alice", "bob")


def dialogue(*pairs: tuple[str, str]) -> tuple[Turn, ...]:
    return tuple(Turn(s, t) for s, t in pairs)


class TestFormatRules:
    def test_clean_dialogue_has_no_violation(self):
        d = dialogue(("alice", "Zoravi was founded by Kelo."), ("bob", "Kelo was born in Drai. <A>Drai</A>"),
                     ("alice", "<A>Drai</A>"))
        report = check_format(d, AGENTS)
        assert report.violations == () and report.rate == 0.0
        assert report.counts == {"speaks_for_other": 0, "empty": 0, "repeat": 0}

    @pytest.mark.parametrize("text", ["Bob: I think so.", "Sure.\nBob: I agree", "**Bob:** yes", "- bob: yes",
                                      "  BOB : yes", "> Bob: quoted", "__Bob__: x"])
    def test_speaking_for_the_other_agent(self, text):
        report = check_format(dialogue(("alice", text)), AGENTS)
        assert [(v.turn, v.rule) for v in report.violations] == [(0, "speaks_for_other")]
        assert report.rate == 1.0

    @pytest.mark.parametrize("text", ["Alice: I know X.", "I told Bob: hi", "Bobby: not an agent",
                                      "Bob said yes", "Ask bob about it"])
    def test_not_speaking_for_the_other_agent(self, text):
        assert check_format(dialogue(("alice", text)), AGENTS).violations == ()

    def test_three_agents(self):
        report = check_format(dialogue(("bob", "Carol: the answer is 3")), ("alice", "bob", "carol"))
        assert report.violations[0].rule == "speaks_for_other" and "'carol'" in report.violations[0].detail

    def test_empty_utterances_and_empty_dialogue(self):
        report = check_format(dialogue(("alice", ""), ("bob", " \n\t"), ("alice", "ok then")), AGENTS)
        assert [(v.turn, v.rule) for v in report.violations] == [(0, "empty"), (1, "empty")]
        assert report.rate == pytest.approx(2 / 3)
        empty = check_format((), AGENTS)
        assert empty.rate == 1.0 and empty.counts["empty"] == 1 and empty.violating_turns == frozenset()

    def test_exact_and_near_repeats(self):
        d = dialogue(("alice", "I know that Kelo founded Zoravi."), ("bob", "I know that Kelo founded Zoravi."),
                     ("alice", "I know that  kelo founded Zoravi!"), ("bob", "We know that Kelo founded Zoravi."),
                     ("alice", "Something else entirely, friend."))
        report = check_format(d, AGENTS)
        assert [(v.turn, v.rule) for v in report.violations] == [(1, "repeat"), (2, "repeat"), (3, "repeat")]
        assert "exactly" in report.violations[1].detail and "near-duplicate of turn 0" in report.violations[2].detail
        assert report.rate == 0.6

    def test_agreeing_on_the_answer_is_not_a_repeat(self):
        d = dialogue(("alice", "Kelo was born in Drai. <A>Drai</A>"), ("bob", "<A>Drai</A>"), ("alice", "<A>Drai</A>"),
                     ("bob", "\\boxed{42}"), ("alice", "\\boxed{42}"), ("bob", "ok"), ("alice", "ok"))
        assert check_format(d, AGENTS).violations == ()

    def test_repeat_knobs(self):
        d = dialogue(("alice", "the founder is Kelo"), ("bob", "the founder is Kelo!"))
        assert check_format(d, AGENTS, repeat_min_chars=100).violations == ()
        assert check_format(d, AGENTS, repeat_ratio=100.0).violations[0].detail == "repeats turn 0 exactly"
        d2 = dialogue(("alice", "the founder is Kelo, I think"), ("bob", "the founder is Kelo, you think"))
        assert check_format(d2, AGENTS, repeat_ratio=99.0).violations == ()
        assert check_format(d2, AGENTS, repeat_ratio=80.0).counts["repeat"] == 1

    def test_one_turn_with_two_violations_counts_once_in_the_rate(self):
        d = dialogue(("alice", "the founder of Zoravi is Kelo from Drai"), ("bob", "Alice: the founder of Zoravi is Kelo from Drai"),
                     ("alice", "fine"))
        report = check_format(d, AGENTS)
        assert [(v.turn, v.rule) for v in report.violations] == [(1, "speaks_for_other"), (1, "repeat")]
        assert report.rate == pytest.approx(1 / 3)

    def test_normalisation(self):
        assert normalize_for_repeat("  The  <A>x</A> answer\n IS \\boxed{\\frac{1}{2}} ") == "the answer is"


class TestTokenNormalisation:
    def test_group(self):
        assert max_tokens_for([10, 30, 5, 0], ["a", "a", "b", "c"]) == [30.0, 30.0, 5.0, 0.0]

    def test_percentile(self):
        tokens = list(range(1, 101))
        assert max_tokens_for(tokens, ["g"] * 100, mode="percentile", percentile=50) == [50.5] * 100
        assert max_tokens_for([1, 2], ["a", "b"], mode="percentile", percentile=100, reference=[0, 40]) == [40.0, 40.0]

    def test_errors(self):
        with pytest.raises(ConfigError, match=re.escape("reward.token_percentile must be in (0, 100], got 0")):
            max_tokens_for([1], ["a"], mode="percentile", percentile=0)
        with pytest.raises(ConfigError, match="must be 'group' or 'percentile'"):
            max_tokens_for([1], ["a"], mode="median")  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="1 token counts but 2 group keys"):
            max_tokens_for([1], ["a", "b"])


class TestRubric:
    def test_known_value(self):
        weights = RewardWeights(score=1.0, lambda_token=0.5, lambda_loss=0.8, lambda_format=0.5)
        total, values = default_rubric(weights).evaluate(
            RewardInputs(score=1.0, tokens=50, max_tokens=100, max_turn_lm_loss=2.0, format_rate=0.25))
        # 1 - 0.5 * 50/100 + 0.8 / 2.0 - 0.5 * 0.25
        assert total == pytest.approx(1.025)
        assert values == {"score": 1.0, "token_cost": 0.5, "readability": 0.5, "format_penalty": 0.25,
                          "tokens": 50.0, "max_tokens": 100.0}

    def test_loss_floor_and_missing_loss(self):
        rubric = default_rubric(RewardWeights(lm_loss_floor=1.0))
        assert rubric.evaluate(RewardInputs(0.0, 0, 0, 0.2))[1]["readability"] == 1.0
        assert rubric.evaluate(RewardInputs(0.0, 0, 0, None))[1]["readability"] == 0.0
        assert rubric.evaluate(RewardInputs(0.0, 10, 0, None))[1]["token_cost"] == 0.0

    def test_metrics_have_weight_zero(self):
        weights = default_rubric().weights
        assert weights["tokens"] == 0 and weights["max_tokens"] == 0 and weights["token_cost"] == -0.5

    def test_bad_weights(self):
        with pytest.raises(ConfigError, match=re.escape("reward.lambda_token must be >= 0")):
            RewardWeights(lambda_token=-1)
        with pytest.raises(ConfigError, match=re.escape("reward.lm_loss_floor must be > 0, got 0")):
            RewardWeights(lm_loss_floor=0)


def fake_losses(table: dict[str, float]):
    calls: list[list[str]] = []

    def turn_loss(texts):
        calls.append(list(texts))
        return [table.get(t) for t in texts]

    turn_loss.calls = calls  # type: ignore[attr-defined]
    return turn_loss


class TestComputeRewards:
    def samples(self):
        good = dialogue(("alice", "Kelo founded Zoravi."), ("bob", "<A>Drai</A>"))
        chatty = dialogue(("alice", "Bob: hello there"), ("bob", "<A>Paris</A>"))
        return [
            DialogueSample("q1", AGENTS, good, tokens=20, score=1.0),
            DialogueSample("q1", AGENTS, chatty, tokens=40, score=0.0),
            DialogueSample("q2", AGENTS, good, tokens=10, score=1.0),
            DialogueSample("q2", AGENTS, chatty, tokens=500, score=None, score_ok=False),
            DialogueSample("q2", AGENTS, (), tokens=0, score=None, infra_failed=True),
        ]

    def test_known_values(self):
        losses = fake_losses({"Kelo founded Zoravi.": 2.0, "<A>Drai</A>": 4.0, "Bob: hello there": 3.0,
                              "<A>Paris</A>": 1.5})
        batch = compute_rewards(self.samples(), weights=RewardWeights(1.0, 0.5, 0.8, 0.5), turn_loss=losses)
        r = [res.reward for res in batch.results]
        assert r[0] == pytest.approx(1 - 0.5 * 20 / 40 + 0.8 / 4.0)  # longest of q1 has 40 tokens
        assert r[1] == pytest.approx(0 - 0.5 * 1.0 + 0.8 / 3.0 - 0.5 * 0.5)
        # q2's failed 500-token sample does not set the scale: q2's max is its own 10 tokens
        assert r[2] == pytest.approx(1 - 0.5 * 1.0 + 0.8 / 4.0)
        assert r[3] is None and r[4] is None
        assert [res.excluded for res in batch.results] == [None, None, None, "scoring_failure", "infra_failure"]
        assert batch.excluded == {"infra_failure": 1, "scoring_failure": 1}
        c = batch.results[1].components
        assert c["format_speaks_for_other"] == 1 and c["format_rate"] == 0.5 and c["max_turn_lm_loss"] == 3.0
        assert c["reward"] == pytest.approx(r[1]) and c["tokens"] == 40 and c["max_tokens"] == 40
        # excluded dialogues keep their raw components but no reward terms
        assert "reward" not in batch.results[3].components and batch.results[3].components["tokens"] == 500
        # one batched call, only for ranked dialogues
        assert len(losses.calls) == 1 and len(losses.calls[0]) == 6

    def test_percentile_normalisation(self):
        batch = compute_rewards(self.samples()[:3], weights=RewardWeights(1.0, 1.0, 0.0, 0.0),
                                token_normalization="percentile", token_percentile=100)
        assert [res.components["max_tokens"] for res in batch.results] == [40.0, 40.0, 40.0]
        assert batch.results[2].reward == pytest.approx(1 - 10 / 40)

    def test_fixed_max_tokens(self):
        batch = compute_rewards(self.samples()[:3], weights=RewardWeights(1.0, 1.0, 0.0, 0.0), max_tokens=80)
        assert [res.components["max_tokens"] for res in batch.results] == [80.0, 80.0, 80.0]
        assert [res.reward for res in batch.results] == pytest.approx([1 - 20 / 80, 0 - 40 / 80, 1 - 10 / 80])
        with pytest.raises(ConfigError, match="max_tokens must be > 0, got 0"):
            compute_rewards(self.samples(), weights=RewardWeights(lambda_loss=0.0), max_tokens=0)

    def test_readability_needs_a_model_unless_its_weight_is_zero(self):
        with pytest.raises(ConfigError, match=re.escape("reward.lambda_loss > 0 needs a reference model")):
            compute_rewards(self.samples(), weights=RewardWeights(lambda_loss=0.8))
        batch = compute_rewards(self.samples(), weights=RewardWeights(lambda_loss=0.0))
        assert batch.results[0].components["max_turn_lm_loss"] is None and batch.readability_texts == 0

    def test_max_turn_loss(self):
        assert max_turn_loss([1.0, None, 3.0]) == 3.0 and max_turn_loss([None]) is None


@pytest.fixture(scope="module")
def scorer(embedded_model_dir: Path, tmp_path_factory):
    return ReadabilityScorer(str(embedded_model_dir), cache_path=tmp_path_factory.mktemp("rc") / "cache.jsonl")


@pytest.mark.model
class TestReadabilityScorer:
    def test_values_cache_and_context(self, scorer, embedded_model_dir):
        import torch

        texts = ["The capital of France is Paris.", "zxq vbn qwpl rrt ooo", "", "The capital of France is Paris."]
        losses = scorer(texts)
        assert losses[2] is None and losses[0] == losses[3]
        assert losses[0] < 3.0 < losses[1]  # plain English reads better than gibberish
        assert scorer.computed == 3  # three distinct texts (the duplicate is computed once, the empty one is free)
        # the scored context is the template's generation prompt, derived, not hard-coded
        assert scorer.tokenizer.decode(scorer.prefix_ids) == "<|im_start|>assistant\n"
        # same value as an independent float32 computation, within bf16 rounding (the scorer runs in
        # bf16 where the CPU has it, else float32)
        scored_in = next(scorer.model.parameters()).dtype
        model = scorer.model.to(torch.float32)
        try:
            ids = scorer.prefix_ids + scorer.tokenizer.encode(texts[0], add_special_tokens=False)
            labels = torch.tensor([[-100] * len(scorer.prefix_ids) + ids[len(scorer.prefix_ids):]])
            with torch.inference_mode():
                ref = model(input_ids=torch.tensor([ids]), labels=labels).loss.item()
        finally:
            scorer.model.to(scored_in)
        assert losses[0] == pytest.approx(ref, abs=0.1)
        # a second call hits the cache; a new scorer on the same file never recomputes
        assert scorer(texts[:2]) == losses[:2] and scorer.computed == 3
        again = ReadabilityScorer(scorer.model, scorer.tokenizer, cache_path=scorer._disk.path,
                                  model_key=scorer.model_key)
        assert again(texts) == losses and again.computed == 0 and again.hits == 3

    def test_batching_does_not_change_values(self, scorer):
        """Rows are padded on the right and run without an attention mask: a short text batched
        with long ones (most of its row is padding) scores as it does alone."""
        texts = [f"Fact {i}: the founder of Zoravi{i} was born in {1900 + i}." for i in range(6)] + ["Short."]
        picked = [0, 1, 2, 6]
        alone = [scorer._compute([texts[i]])[0] for i in picked]
        batched = scorer._compute(texts)
        assert all(math.isclose(a, batched[i], abs_tol=0.05) for a, i in zip(alone, picked))
