"""Whether the partners told the answerer what it lacked: the referential game's check (the
speaker named the target and no other object), the gold-text default on information-asymmetric
tasks, the record-level check used by selection, and selection's `informative_only`."""

from __future__ import annotations

import re

import pytest

import optima_envs
from optima_agents.policies import ScriptedPolicy
from optima_agents.rollout import EpisodeSpec, rollout
from optima_envs.core.places import partners_informed
from optima_envs.errors import ConfigError
from optima_envs.tasks.referential import LETTERS, names_only_target, oracle_policies
from optima_train.informative import record_informed
from optima_train.selection import Candidate, select_best


def referential(index: int = 0):
    env = optima_envs.make("referential-game", split="validation")
    env.reset(seed=0, options={"index": index})
    return env


def referential_pick(split: str = "validation"):
    """The record of one referential game whose listener picks A at once."""
    return rollout("referential-game", ScriptedPolicy(lambda o: "<A>A</A>"), [EpisodeSpec(seed=0, index=0)],
                   env_kwargs={"split": split}, progress=False)[0]


class TestReferentialCheck:
    def test_naming_the_target_alone_is_informative(self):
        state = referential().state
        target = state.instance.meta["listener_view"][LETTERS.index(state.instance.gold)]
        assert names_only_target(state.instance, state.evidence, [f"It is the {target}."])
        assert partners_informed(referential().task, state.instance, state.evidence, [(0, f"The {target}!")])

    def test_naming_another_object_or_two_objects_or_none_is_not(self):
        state = referential().state
        view, gold = state.instance.meta["listener_view"], LETTERS.index(state.instance.gold)
        other = next(d for i, d in enumerate(view) if i != gold)
        inst, ev = state.instance, state.evidence
        assert not names_only_target(inst, ev, [f"It is the {other}."])
        assert not names_only_target(inst, ev, [f"Either the {view[gold]} or the {other}."])
        assert not names_only_target(inst, ev, ["Pick the one I mean."])

    def test_only_the_speakers_messages_count(self):
        env = referential()
        state = env.state
        target = state.instance.meta["listener_view"][LETTERS.index(state.instance.gold)]
        assert not partners_informed(env.task, state.instance, state.evidence, [(1, f"The {target}?")])


class TestDefaultCheck:
    def test_partner_questions_need_the_gold_from_a_partner_and_others_always_pass(self):
        env = optima_envs.make("synth-hop-ia", hops=2, distractors=0, comparison_rate=0.0, split="validation")
        seen = {}
        for i in range(40):
            env.reset(seed=1_000_000 + i, options={"index": i})
            s = env.state
            gold = s.instance.gold
            said, silent = partners_informed(env.task, s.instance, s.evidence, [(1, f"It is {gold}.")]), \
                partners_informed(env.task, s.instance, s.evidence, [(1, "I do not know."), (0, f"It is {gold}.")])
            in_own = any(gold in e.render() for e in s.evidence[0])
            assert said is True
            assert silent is in_own  # alone: nothing was needed; partner: the answerer said it, not the partner
            seen[in_own] = True
        assert seen == {True: True, False: True}

    def test_debates_have_no_check(self):
        env = optima_envs.make("synth-arith-debate")
        env.reset(seed=0, options={"index": 0})
        assert partners_informed(env.task, env.state.instance, env.state.evidence, [(1, "42")]) is None


class TestRecordInformed:
    def test_oracle_dialogues_are_informative_and_a_lying_speaker_is_not(self):
        env = optima_envs.make("referential-game", split="validation")
        agents = env.possible_agents
        oracle = oracle_policies(agents)
        honest = ScriptedPolicy(lambda o: oracle[o["agent"]](o), name="oracle")
        liar = ScriptedPolicy(lambda o: "It is round." if o["agent"] == agents[0] else "<A>A</A>", name="liar")
        specs = [EpisodeSpec(seed=i, index=i) for i in range(6)]
        kwargs = {"env_kwargs": {"split": "validation"}, "progress": False}
        told = rollout("referential-game", honest, specs, **kwargs)
        untold = rollout("referential-game", liar, specs, **kwargs)
        assert all(r.score == 1.0 for r in told)
        assert [record_informed(env, r) for r in told] == [True] * 6
        assert [record_informed(env, r) for r in untold] == [False] * 6

    def test_another_env_is_refused(self):
        with pytest.raises(ValueError, match="rebuilt instance"):
            record_informed(referential(), referential_pick(split="train"))


class TestInformativeOnly:
    def test_uninformative_right_answers_are_not_ranked(self):
        cands = [Candidate(0, "a", 1.0, informative=False), Candidate(1, "a", 0.5, informative=True),
                 Candidate(2, "b", 1.0, informative=False)]
        res = select_best(cands, keep_fraction=1.0, min_score=None, informative_only=True)
        assert [c.key for c in res.selected] == [1]
        assert res.stats["uninformative"] == 2 and res.stats["groups"] == 2 and res.stats["groups_ranked"] == 1
        assert [c.key for c in select_best(cands, keep_fraction=1.0, min_score=None).selected] == [0, 2]

    def test_unchecked_candidates_are_refused(self):
        with pytest.raises(ConfigError, match=re.escape("informative_only needs every candidate checked")):
            select_best([Candidate(0, "a", 1.0)], informative_only=True)


class TestRecordPlace:
    def test_each_sample_has_the_place_of_its_own_evidence_deal(self):
        from optima_envs.core.places import answer_place
        from optima_train.informative import record_place

        specs = [EpisodeSpec(seed=s, index=i) for i in range(3) for s in range(6)]
        records = rollout("synth-hop-ia", ScriptedPolicy(lambda o: "<A>x</A>"), specs,
                          env_kwargs={"split": "validation", "comparison_rate": 0.0}, progress=False)
        env = optima_envs.make("synth-hop-ia", split="validation", comparison_rate=0.0)
        places = []
        for spec, record in zip(specs, records):
            env.reset(seed=spec.seed, options={"index": spec.index})
            expected = answer_place(env.task, env.state.instance, env.state.evidence)
            places.append(record_place(env, record))
            assert places[-1] == expected
        per_question = [set(places[i * 6:(i + 1) * 6]) for i in range(3)]
        assert any(p == {"alone", "partner"} for p in per_question)  # the deal differs between samples

    def test_a_debate_has_no_place(self):
        from optima_train.informative import record_place

        record = rollout("synth-arith-debate", ScriptedPolicy(lambda o: "<A>1</A>"), [EpisodeSpec(seed=0, index=0)],
                         progress=False)[0]
        with pytest.raises(ConfigError, match="group_by: question"):
            record_place(optima_envs.make("synth-arith-debate"), record)


class TestGroupByPlace:
    @staticmethod
    def record(question, reward, tokens):
        from types import SimpleNamespace

        return SimpleNamespace(scored=True, infra_failure=False, instance_id=question, score=1.0,
                               reward_components={"reward": reward}, total_tokens=tokens)

    def test_the_longer_partner_dialogue_is_kept_beside_the_alone_one(self):
        from optima_train.selection import candidate

        samples = [("q1", "alone", 0.9, 20), ("q1", "partner", 0.7, 60), ("q1", "partner", 0.6, 80),
                   ("q2", "partner", 0.8, 50)]
        by_question = [candidate(k, self.record(q, r, t)) for k, (q, _, r, t) in enumerate(samples)]
        by_place = [candidate(k, self.record(q, r, t), place=p) for k, (q, p, r, t) in enumerate(samples)]
        assert [c.key for c in select_best(by_question, keep_fraction=1.0).selected] == [0, 3]
        kept = select_best(by_place, keep_fraction=1.0)
        assert [c.key for c in kept.selected] == [0, 3, 1]
        assert [c.group for c in kept.selected] == [("q1", "alone"), ("q2", "partner"), ("q1", "partner")]
        assert kept.stats["groups"] == 3

    def test_an_unknown_grouping_is_refused(self):
        from optima_train.isft.isft_config import SelectionSection

        with pytest.raises(ConfigError, match=re.escape("selection.group_by must be one of ['question', "
                                                        "'question_and_place'], got 'place'")):
            SelectionSection(group_by="place")


class TestAnswersGrounded:
    @staticmethod
    def chain():
        from optima_envs.core.types import Evidence, TaskInstance

        instance = TaskInstance(instance_id="q", question="In which city was the founder of Zorp born?", gold="Krelo")
        evidence = ((Evidence("Bami was born in Krelo.", supporting=True), Evidence("Tailo was born in Vibri.")),
                    (Evidence("Zorp was founded by Bami.", supporting=True),))
        return instance, evidence

    def test_an_answer_before_hearing_the_link_fact_is_a_guess(self):
        from optima_envs.core.places import answers_grounded

        instance, evidence = self.chain()
        assert answers_grounded(instance, evidence, [(0, "<A>Krelo</A>", True), (1, "<A>Krelo</A>", True)]) is False

    def test_answering_after_hearing_every_fact_or_the_answer_is_grounded(self):
        from optima_envs.core.places import answers_grounded

        instance, evidence = self.chain()
        told_fact = [(0, "Bami was born in Krelo.", False), (1, "ZORP was founded by Bami. <A>Krelo</A>", True),
                     (0, "<A>Krelo</A>", True)]
        assert answers_grounded(instance, evidence, told_fact) is True  # seat 1 read the fact; seat 0 its answer
        told_only_answer = [(1, "Zorp was founded by Bami.", False), (0, "<A>Krelo</A>", True)]
        assert answers_grounded(instance, evidence, told_only_answer) is True
        # A fact written by the answering seat itself does not count as heard.
        assert answers_grounded(instance, evidence, [(0, "Zorp was founded by Bami. <A>Krelo</A>", True)]) is False

    def test_no_supporting_evidence_means_no_check(self):
        from optima_envs.core.places import answers_grounded
        from optima_envs.core.types import Evidence, TaskInstance

        instance = TaskInstance(instance_id="q", question="?", gold="A")
        assert answers_grounded(instance, ((Evidence("x"),), (Evidence("y"),)), [(0, "<A>A</A>", True)]) is None

    def test_selection_ranks_only_grounded_dialogues_and_refuses_unchecked_ones(self):
        cands = [Candidate(0, "a", 1.0, grounded=False), Candidate(1, "a", 0.5, grounded=True),
                 Candidate(2, "b", 1.0, grounded=False)]
        res = select_best(cands, keep_fraction=1.0, min_score=None, grounded_only=True)
        assert [c.key for c in res.selected] == [1] and res.stats["ungrounded"] == 2
        with pytest.raises(ConfigError, match=re.escape("grounded_only needs every candidate checked")):
            select_best([Candidate(0, "a", 1.0)], grounded_only=True)

    def test_a_record_of_a_task_without_supporting_facts_is_refused(self):
        from optima_train.informative import record_grounded

        with pytest.raises(ConfigError, match="grounded_only needs a task whose evidence marks its supporting"):
            record_grounded(referential(), referential_pick())
