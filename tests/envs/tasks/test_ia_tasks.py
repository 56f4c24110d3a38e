"""The four information-asymmetric QA tasks as envs: evidence splits, dialogues, scoring."""

from collections import Counter

import pytest

import optima_envs
from optima_envs.test import FIXTURES, env_kwargs, play, scripted, share_evidence_then

IA_IDS = ["hotpotqa-ia", "2wikimqa-ia", "triviaqa-ia", "cbt-ia"]


def make(env_id, **kwargs):
    return optima_envs.make(env_id, **{**env_kwargs(env_id), **kwargs})


def final_info(trace, agent="alice"):
    return trace[-1][4][agent]


@pytest.mark.parametrize("env_id", IA_IDS)
class TestEveryIATask:
    def test_oracle_scores_one(self, env_id):
        env = make(env_id)
        for index in range(min(15, len(env.task.source))):
            gold = env.task.source.get(index).gold_text
            trace = play(env, {a: share_evidence_then(gold) for a in env.possible_agents}, seed=index,
                         options={"index": index})
            info = final_info(trace)
            assert (info["score"], info["end_reason"], info["score_ok"]) == (1.0, "agreed", True), info

    def test_wrong_answer_scores_below_one(self, env_id):
        env = make(env_id)
        trace = play(env, {a: share_evidence_then("Zebulon Quortz") for a in env.possible_agents}, seed=0)
        assert final_info(trace)["score"] < 1.0

    def test_all_evidence_is_dealt_once(self, env_id):
        env = make(env_id)
        for seed in range(10):
            env.reset(seed=seed)
            dealt = Counter(e for pile in env.state.evidence for e in pile)
            assert dealt == Counter(env.state.instance.evidence)

    def test_same_seed_same_split_other_seed_other_order(self, env_id):
        env = make(env_id)
        splits = {}
        for seed in (5, 5, 6, 7, 8):
            env.reset(seed=seed, options={"index": 0})
            splits.setdefault(seed, []).append(env.state.evidence)
        assert splits[5][0] == splits[5][1]
        assert any(splits[s][0] != splits[5][0] for s in (6, 7, 8))

    def test_prompt_has_question_and_own_evidence_only(self, env_id):
        env = make(env_id)
        observations, _ = env.reset(seed=1)
        alice, bob = observations["alice"], observations["bob"]
        assert env.state.instance.question in alice["system_prompt"]
        assert alice["evidence"] and all(f"- {piece}" in alice["system_prompt"] for piece in alice["evidence"])
        assert not any(f"- {piece}" in alice["system_prompt"] for piece in set(bob["evidence"]) - set(alice["evidence"]))
        assert env.task.answer_format.split(">")[0] == "<A"

    def test_agreement_is_an_answer_repeating_the_last_answer_given(self, env_id):
        # The reference rule: messages without an answer are skipped, an empty tag is no answer.
        env = make(env_id)
        env.reset(seed=0)
        policy = scripted(["<A>x</A>", "<A>y</A>", "no answer here", "<A></A>", "<A>y</A>", "<A>y</A>"])
        ends = []
        while env.agents:
            ends.append(env.step({env.current_speaker: policy({})})[4]["alice"].get("end_reason"))
        assert ends == [None, None, None, None, "agreed"]


class TestMultiHopSplit:
    @pytest.mark.parametrize("env_id", ["hotpotqa-ia", "2wikimqa-ia"])
    @pytest.mark.parametrize("num_agents", [2, 3])
    def test_supporting_paragraphs_are_spread(self, env_id, num_agents):
        env = make(env_id, num_agents=num_agents)
        checked = 0
        for seed in range(40):
            env.reset(seed=seed)
            support = {e for e in env.state.instance.evidence if e.supporting}
            if len(support) < 2:
                continue
            checked += 1
            assert not any(support <= set(pile) for pile in env.state.evidence), "one agent holds all support"
            if len(support) >= num_agents:
                assert all(any(e.supporting for e in pile) for pile in env.state.evidence)
        assert checked >= 30

    def test_distractors_go_to_either_agent_and_position_varies(self):
        env = make("hotpotqa-ia")
        holders, first_supporting = Counter(), Counter()
        for seed in range(40):
            env.reset(seed=seed, options={"index": 0})
            for agent, pile in enumerate(env.state.evidence):
                holders.update((e.title, agent) for e in pile if not e.supporting)
                first_supporting[pile[0].supporting] += 1
        titles = {title for title, _ in holders}
        assert len(titles) == 8 and all(holders[(t, 0)] and holders[(t, 1)] for t in titles)
        assert first_supporting[True] and first_supporting[False], "supporting paragraphs always first or last"

    def test_first_sentence_only_shortens_the_prompt(self):
        full = make("hotpotqa-ia").reset(seed=0)[0]["alice"]["system_prompt"]
        short = make("hotpotqa-ia", first_sentence_only=True).reset(seed=0)[0]["alice"]["system_prompt"]
        assert len(short) < len(full)


class TestTriviaQA:
    def test_any_alias_scores_one(self):
        env = make("triviaqa-ia", split="train")
        index = next(i for i in range(len(env.task.source)) if env.task.source.get(i).instance_id == "qb_4412")
        for alias in ("Sir Arthur Conan Doyle", "arthur conan doyle", "Doyle, Arthur Conan"):
            trace = play(env, {a: share_evidence_then(alias) for a in env.possible_agents}, seed=0,
                         options={"index": index})
            assert final_info(trace)["score"] == 1.0
        trace = play(env, {a: share_evidence_then("Doyle") for a in env.possible_agents}, seed=0,
                     options={"index": index})
        assert 0.0 < final_info(trace)["score"] < 1.0

    def test_snippets_are_dealt_alternately(self):
        env = make("triviaqa-ia", split="train")
        for seed in range(10):
            env.reset(seed=seed)
            sizes = [len(pile) for pile in env.state.evidence]
            assert max(sizes) - min(sizes) <= 1

    def test_gold_in_infos_is_the_alias_tuple(self):
        env = make("triviaqa-ia")
        trace = play(env, {a: share_evidence_then("x") for a in env.possible_agents}, seed=0, options={"index": 0})
        assert final_info(trace)["gold"] == env.state.instance.gold and isinstance(final_info(trace)["gold"], tuple)


class TestCBT:
    def test_halves_are_contiguous_story_parts(self):
        env = make("cbt-ia")
        orders = set()
        for seed in range(8):
            env.reset(seed=seed)
            story = env.state.instance.evidence
            piles = env.state.evidence
            assert sorted(map(len, piles)) == [10, 10]
            assert {piles[0], piles[1]} == {story[:10], story[10:]}
            orders.add(piles[0] == story[:10])
        assert orders == {True, False}, "the halves should go to the agents in a seeded random order"

    def test_alternate_split(self):
        env = make("cbt-ia", evidence_split="alternate")
        env.reset(seed=0)
        assert [len(p) for p in env.state.evidence] == [10, 10]
        assert env.state.evidence[0] not in (env.state.instance.evidence[:10], env.state.instance.evidence[10:])

    def test_candidates_and_instruction_in_prompt(self):
        observations, _ = make("cbt-ia").reset(seed=0, options={"index": 0})
        prompt = observations["bob"]["system_prompt"]
        assert "Candidates: basket, bread, cottage, forest, key, king, man, miller, river, sun" in prompt
        assert "give the chosen candidate word as <A>word</A>" in prompt and "XXXXX" in prompt

    @pytest.mark.parametrize("answer, score", [("man", 1.0), ("The man", 1.0), ("I think it is the man", 1.0),
                                               ("miller", 0.0), ("man or miller", 0.0), ("woman", 0.0)])
    def test_word_scoring(self, answer, score):
        env = make("cbt-ia")  # story 0: gold "man"; "miller" is another candidate
        trace = play(env, {a: share_evidence_then(answer) for a in env.possible_agents}, seed=0, options={"index": 0})
        assert final_info(trace)["score"] == score

    def test_named_entity_subset(self):
        env = make("cbt-ia", data_dir=FIXTURES / "cbt", subset="NE")
        env.reset(seed=0)
        assert env.state.instance.gold == "Wenna" and env.state.instance.meta["subset"] == "NE"
