"""What selection keeps per answer place, counted on a scripted run's sampled dialogues."""

from __future__ import annotations

import pytest

from benchmarks.selection_places import iteration_places, run_iterations


def test_place_grouping_keeps_every_question_place_that_has_a_right_dialogue(tmp_path):
    from optima_agents.policies import ScriptedPolicy
    from optima_train.config.io import load_config
    from optima_train.isft import ISFTConfig, ISFTTrainer
    from tests.train.test_isft import Stop, answer_own_city, stop_after, tiny_overrides

    out = tmp_path / "run"
    cfg = load_config(ISFTConfig, None, [
        *tiny_overrides(out), "task.train_questions=6", "generation.samples_per_question=4",
        "task.env_kwargs={distractors: 2, comparison_rate: 0.0}", "selection.keep_fraction=1.0",
        "selection.min_score=1.0", "reward.lambda_loss=0", "eval.baseline=false"])
    with pytest.raises(Stop):
        ISFTTrainer(cfg, policy_factory=lambda m, s: ScriptedPolicy(answer_own_city),
                    on_step_done=stop_after(0, "scoring")).train()
    assert run_iterations(out) == [0]
    rows = {r["place"]: r for r in iteration_places(out, 0)}
    assert sum(r["dialogues"] for r in rows.values()) == 24
    alone, partner = rows["alone"], rows["partner"]
    assert alone["right"] > 0 and partner["right"] > 0  # the scripted partner names its own city
    for row in rows.values():
        assert row["kept_by_question_and_place"] == row["questions_with_right"]
        assert row["kept_by_question_and_place_grounded"] <= row["right_grounded"] <= row["right"]
    assert partner["kept_by_question"] < partner["kept_by_question_and_place"]  # the shorter alone one wins
    # The scripted first speaker answers at once with a city it holds, before hearing its partner's
    # link fact (a guess where the partner holds one); the partner hears every fact first.
    assert alone["right_grounded"] < alone["right"] and partner["right_grounded"] == partner["right"]
