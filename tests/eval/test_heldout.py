"""One held-out set: the engine's episodes and the systems' questions are the same deals."""

from __future__ import annotations

import optima_envs
from optima_eval.heldout import HELDOUT_SEED, HeldOut


def test_specs_and_questions_name_the_same_instances_and_deals():
    held = HeldOut("synth-hop-ia", {"split": "validation"}, count=4, first_index=3)
    specs, questions = held.specs({"format_instruction": "x"}), held.questions()
    assert [(s.seed, s.index) for s in specs] == [(q.seed, q.index) for q in questions] == \
        [(HELDOUT_SEED + i, 3 + i) for i in range(4)]
    assert all(s.options == {"format_instruction": "x"} for s in specs)
    env = optima_envs.make("synth-hop-ia", split="validation")
    for spec, question in zip(specs, questions):
        env.reset(seed=spec.seed, options={"index": spec.index})
        assert env.state.instance.instance_id == question.instance.instance_id
        assert env.state.evidence == question.evidence


def test_registered_starts_from_the_envs_heldout_split():
    held = HeldOut.registered("synth-hop-ia", {"max_turns": 2}, count=2)
    assert held.env_kwargs == {**optima_envs.spec("synth-hop-ia").heldout_kwargs, "max_turns": 2}
    assert held.seed == HELDOUT_SEED and held.questions()[0].instance.instance_id.startswith("synth-hop-validation")


def test_a_generated_task_has_no_data_to_key():
    assert HeldOut("synth-hop-ia", count=1).data == (None, ())
