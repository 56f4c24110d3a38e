import pytest

import optima_envs
from optima_envs.tasks.synth_arith import SynthArithConfig, SynthArithSource
from optima_envs.tasks.synth_hop import SynthHopConfig, SynthHopSource
from optima_envs.test import play, share_evidence_then


class TestSynthHop:
    def test_instances_are_reproducible_and_split_dependent(self):
        a = SynthHopSource(SynthHopConfig()).get(5)
        b = SynthHopSource(SynthHopConfig()).get(5)
        c = SynthHopSource(SynthHopConfig(split="test")).get(5)
        assert a == b and a.question != c.question

    @pytest.mark.parametrize("hops", [2, 3])
    def test_chain_facts_and_answer(self, hops):
        source = SynthHopSource(SynthHopConfig(hops=hops, comparison_rate=0.0, distractors=3))
        for i in range(20):
            inst = source.get(i)
            support = [e.text for e in inst.evidence if e.supporting]
            assert len(support) == hops and len(inst.evidence) == hops + 3
            assert inst.gold in support[-1]

    def test_comparison_answer_is_older(self):
        source = SynthHopSource(SynthHopConfig(comparison_rate=1.0))
        for i in range(20):
            inst = source.get(i)
            years = {e.text.split(" was born in ")[0]: int(e.text.rstrip(".").split()[-1])
                     for e in inst.evidence if e.supporting}
            assert inst.gold == min(years, key=years.get)

    @pytest.mark.parametrize("num_agents", [2, 3])
    def test_no_agent_holds_all_supporting_facts(self, num_agents):
        env = optima_envs.make("synth-hop-ia", num_agents=num_agents, hops=3)
        for seed in range(30):
            env.reset(seed=seed)
            support = {e for e in env.state.instance.evidence if e.supporting}
            for pile in env.state.evidence:
                assert not support <= set(pile)
            if num_agents <= len(support):
                assert all(any(e.supporting for e in pile) for pile in env.state.evidence)

    def test_split_order_depends_on_seed_only(self):
        env = optima_envs.make("synth-hop-ia", distractors=6)
        piles = []
        for seed in (1, 1, 2):
            env.reset(seed=seed, options={"index": 0})
            piles.append(env.state.evidence)
        assert piles[0] == piles[1] and piles[0] != piles[2]

    def test_oracle_scores_one(self):
        env = optima_envs.make("synth-hop-ia", hops=3, distractors=4)
        for index in range(25):
            gold = env.task.source.get(index).gold
            trace = play(env, {a: share_evidence_then(gold) for a in env.possible_agents}, seed=index,
                         options={"index": index})
            assert trace[-1][4]["alice"]["score"] == 1.0


class TestSynthArith:
    def test_gold_is_nonnegative_integer(self):
        source = SynthArithSource(SynthArithConfig(steps=5))
        for i in range(50):
            assert int(source.get(i).gold) >= 0

    def test_debate_roles_and_termination(self):
        env = optima_envs.make("synth-arith-debate")
        obs, _ = env.reset(seed=0, options={"index": 0})
        gold = env.state.instance.gold
        assert obs["alice"]["role"] == "solver" and obs["bob"]["role"] == "critic"
        env.step({"alice": f"So \\boxed{{{gold}}}"})
        infos = env.step({"bob": f"Not \\boxed{{{int(gold) + 1}}}"})[4]
        assert infos["bob"]["message_answer"] is None, "the critic's answers are not parsed"
        _, rewards, terms, _, infos = env.step({"alice": f"Still \\boxed{{{gold}}}"})
        assert all(terms.values()) and rewards["alice"] == 1.0 and infos["alice"]["end_reason"] == "agreed"
