"""The inference systems on a scripted model: who sees what, how votes and tokens add up, and
that failures are counted apart from wrong answers."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from optima_agents.policies.base import Action, PolicyCapabilities, SamplingParams
from optima_envs.errors import ConfigError
from optima_eval.heldout import HeldOut
from optima_eval.systems import SystemContext, list_systems, make_system, parse_system
from optima_eval.systems.base import Sample, majority, prefix_vote, vote_key


class SeededScript:
    """Replies `fn(observation, seed)`; records every request. Its token ids are one per word."""

    capabilities = PolicyCapabilities(with_sampling=True)

    def __init__(self, fn, sampling=None, log=None):
        self.fn, self.sampling = fn, sampling or SamplingParams()
        self.log = [] if log is None else log

    def with_sampling(self, sampling):
        return SeededScript(self.fn, sampling, self.log)

    def act(self, requests):
        self.log.extend(requests)
        out = []
        for r in requests:
            text = self.fn(r.observation, r.seed)
            if text is None:
                out.append(Action(text="", finish_reason="error", error="HTTP 503"))
            else:
                out.append(Action(text=text, token_ids=tuple(range(len(text.split())))))
        return out

    def identity(self):
        return {"backend": "scripted", "model": "seeded-script", "sampling": self.sampling.to_dict()}


def _context(policy, env_id="synth-hop-ia", count=4, **env_kwargs):
    questions = HeldOut(env_id, env_kwargs, count=count, seed=5).questions()
    return SystemContext(env_id, env_kwargs, questions, policy, max_new_tokens=32), questions


def _gold(observation):
    """The gold answer of the question in the prompt (synth-hop questions are unique per index)."""

    return GOLD[re.search(r"Question: (.*)", _prompt(observation)).group(1)]


def _prompt(observation):
    return observation["transcript"][0]["text"] if observation["transcript"] else observation["system_prompt"]


GOLD: dict[str, str] = {}


@pytest.fixture(autouse=True)
def golds():
    for q in HeldOut("synth-hop-ia", {}, count=4, seed=5).questions():
        GOLD[q.instance.question] = q.instance.gold_text


class TestRegistry:
    def test_the_seven_systems(self):
        assert set(list_systems()) == {"cot", "sc", "solo", "mad", "mas", "autoform", "mas-sc"}

    def test_specs(self):
        assert parse_system("sc:k=4:temperature=0.5") == ("sc", {"k": 4, "temperature": 0.5})
        assert make_system("sc:k=2").k == 2 and make_system("sc", k=3).k == 3

    @pytest.mark.parametrize("spec, message", [
        ("nope", "unknown system 'nope'; choose one of ["),
        ("sc:n=4", "system 'sc' has no setting(s) ['n']; its settings: ['k', 'temperature']"),
        ("sc:k=0", "system 'sc': k must be a positive int, got 0"),
        ("sc:k", "a setting (colon-separated) takes key=value (e.g. sc:k=4), got 'k'"),
        ("mad:temperature=-1", "temperature must be a number >= 0"),
    ])
    def test_bad_specs(self, spec, message):
        with pytest.raises(ConfigError, match=re.escape(message)):
            make_system(spec)


class TestChainOfThought:
    def test_one_agent_sees_all_the_evidence(self):
        policy = SeededScript(lambda obs, seed: f"So the answer is <A>{_gold(obs)}</A>")
        context, questions = _context(policy)
        outcomes = make_system("cot").run(context)
        assert [o.score for o in outcomes] == [1.0] * 4
        assert [o.tokens for o in outcomes] == [5 + len(q.instance.gold_text.split()) - 1 for q in questions]
        prompt = policy.log[0].observation["transcript"][0]["text"]
        for piece in questions[0].all_evidence:
            assert piece.render() in prompt
        assert {len(q.evidence) for q in questions} == {2} and all(q.evidence[0] and q.evidence[1] for q in questions)
        assert policy.log[0].observation["agent"] == "solver" and "<A>answer</A>" in prompt

    def test_greedy_by_default(self):
        policy = SeededScript(lambda obs, seed: "<A>x</A>")
        context, _ = _context(policy, count=1)
        make_system("cot").run(context)
        assert policy.log  # ran
        assert context.policy_with(temperature=0).sampling.temperature == 0.0

    def test_infra_failure_is_not_a_wrong_answer(self):
        policy = SeededScript(lambda obs, seed: None)
        context, _ = _context(policy, count=2)
        outcomes = make_system("cot").run(context)
        assert all(o.infra_failure and o.score is None and not o.scored for o in outcomes)


class TestSelfConsistency:
    def test_majority_and_summed_tokens(self):
        def fn(obs, seed):  # two of three samples right, with seed-dependent choice
            return f"<A>{_gold(obs)}</A>" if seed % 3 else "<A>wrong thing</A>"

        policy = SeededScript(fn)
        context, _ = _context(policy)
        outcomes = make_system("sc:k=5").run(context)
        assert len(policy.log) == 4 * 5
        assert len({r.seed for r in policy.log}) == 20
        for o in outcomes:
            wins = sum(s.score == 1.0 for s in o.samples)
            assert o.score == (1.0 if wins > 5 - wins else 0.0)
            assert o.tokens == sum(s.tokens for s in o.samples)

    def test_a_prefix_of_samples_is_a_smaller_k(self):
        policy = SeededScript(lambda obs, seed: f"<A>{seed % 4}</A>")
        context, _ = _context(policy, count=2)
        big = make_system("sc:k=4").run(context)
        small = make_system("sc:k=2").run(replace(context, policy=SeededScript(policy.fn)))
        assert [prefix_vote(o, 2) for o in big] == small


class TestVote:
    def test_keys(self):
        assert vote_key("$18.00") == vote_key("18") and vote_key("The Paris") == vote_key("paris")
        assert vote_key("(B)") == vote_key("B") and vote_key(None) is None and vote_key("...") is None
        assert vote_key("A") == vote_key("(A)") == "a" != vote_key("B")

    def test_tie_goes_to_the_first_and_failures_do_not_vote(self):
        s = lambda answer, score, fail=False: Sample(answer, None if fail else score, True, 3, infra_failure=fail)  # noqa: E731
        out = majority([s("x", 0.0), s("y", 1.0), s("y", 1.0, fail=True), s("x", 0.0), s("y", 1.0)], 0, "q")
        assert out.answer == "x" and out.score == 0.0 and out.tokens == 15
        everyone_failed = majority([s("a", 0, True), s("b", 0, True)], 0, "q")
        assert everyone_failed.infra_failure and not everyone_failed.scored


class TestDebate:
    def test_rounds_read_the_others_and_keep_own_evidence(self):
        def fn(obs, seed):
            turn = len(obs["transcript"])
            return "I am not sure." if turn == 1 else f"After reading them: <A>{_gold(obs)}</A>"

        policy = SeededScript(fn)
        context, questions = _context(policy, count=2)
        outcomes = make_system("mad:agents=3:rounds=2").run(context)
        assert len(policy.log) == 2 * 3 * 3
        assert [o.score for o in outcomes] == [1.0, 1.0]
        first = [r for r in policy.log if len(r.observation["transcript"]) == 1]
        evidence = [r.observation["transcript"][0]["text"] for r in first[:3]]
        assert len(set(evidence)) == 3  # each debater holds its own share
        later = [r for r in policy.log if len(r.observation["transcript"]) == 3][0]
        assert "These are the answers to the question from other agents" in later.observation["transcript"][2]["text"]
        assert later.observation["transcript"][2]["text"].count("One agent: I am not sure.") == 2
        assert outcomes[0].tokens == sum(s.tokens for s in outcomes[0].samples) == 3 * (4 + 2 * 4)


class TestDialogue:
    def test_mas_autoform_and_mas_sc_play_the_env(self):
        seen = []

        def fn(obs, seed):
            seen.append(obs["system_prompt"])
            return f"<A>{_gold_from_system(obs)}</A>"

        policy = SeededScript(fn)
        context, _ = _context(policy, count=3)
        mas = make_system("mas").run(context)
        assert [o.score for o in mas] == [1.0] * 3 and all(o.tokens > 0 for o in mas)
        auto = make_system("autoform").run(context)
        assert [o.score for o in auto] == [1.0] * 3
        assert any("not natural language" in p for p in seen)
        voted = make_system("mas-sc:k=3").run(context)
        assert all(len(o.samples) == 3 and o.tokens == 3 * m.tokens for o, m in zip(voted, mas))


    def test_mas_sc_plays_its_samples_together_as_separately_seeded_policies_would(self):
        """All k x questions dialogues share the engine's batches, and each sample draws what a
        policy seeded with that sample's seed would draw playing alone."""
        from optima_agents.policies.base import request_row_seed
        from optima_agents.rollout.engine import EpisodeSpec, RolloutEngine, derive_seed

        class RowSeeded(SeededScript):
            """Answers the gold when the seed it would sample with is even, else a wrong city."""

            def with_sampling(self, sampling):
                return RowSeeded(self.fn, sampling, self.log)

            def act(self, requests):
                self.log.append(len(requests))
                return [Action(text=f"<A>{self.fn(r.observation, request_row_seed(self.sampling, r, 0, i))}</A>",
                               token_ids=(1,)) for i, r in enumerate(requests)]

        def fn(obs, seed):
            return _gold_from_system(obs) if seed % 2 == 0 else "Nowhere"

        batches: list[int] = []
        context, questions = _context(RowSeeded(fn, log=batches), count=3)
        voted = make_system("mas-sc:k=4").run(context)
        assert batches[0] == 4 * 3
        for sample in range(4):
            alone = RowSeeded(fn).with_sampling(SamplingParams(temperature=0.7, max_new_tokens=32,
                                                               seed=derive_seed(sample)))
            records = RolloutEngine("synth-hop-ia", alone).run([EpisodeSpec(seed=q.seed, index=q.index)
                                                                for q in questions])
            assert [o.samples[sample].answer for o in voted] == [r.final_answer for r in records]
        assert len({o.samples[s].answer for o in voted for s in range(4)}) > 1  # the seeds did differ


def _gold_from_system(obs):
    return GOLD[re.search(r"Question: (.*)", obs["system_prompt"]).group(1)]


def test_a_policy_without_with_sampling_is_refused_clearly():
    from optima_eval.systems import SystemContext

    class Fixed:
        def act(self, requests):
            return [Action(text="<A>x</A>") for _ in requests]

    context = SystemContext("synth-hop-ia", {}, [], Fixed(), max_new_tokens=8)
    with pytest.raises(ConfigError, match="does not declare the with_sampling capability"):
        context.policy_with(temperature=0.0)
