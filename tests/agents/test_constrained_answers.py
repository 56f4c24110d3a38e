"""Constrained answer moves: the tasks' answer patterns, the engine's requests, and the real
backends generating only replies that match.

Exploration for a model that does not write moves a task can read: `EpisodeSpec(constrain_answers=True)`
makes the engine ask for every answering agent's turn constrained to `Task.answer_pattern`.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Sequence

import pytest

import optima_envs
from optima_agents.policies import Action, PolicyCapabilities, SamplingParams, ScriptedPolicy, TurnRequest
from optima_agents.rollout import RolloutEngine, episode_specs
from optima_envs.errors import ConfigError
from optima_envs.tasks.negotiation import Game, format_take
from optima_envs.tasks.referential import LETTERS
from tests.agents.conftest_servers import vllm_policy  # noqa: F401  (fixture)


class ConstrainedScript(ScriptedPolicy):
    """A scripted policy that honours constraints by answering the first move its pattern allows,
    and keeps every request it saw."""

    capabilities = PolicyCapabilities(with_sampling=True, constraints=True)

    def __init__(self, free_text: str = "It is the large one."):
        super().__init__(lambda observation: free_text, name="constrained-script")
        self.seen: list[TurnRequest] = []

    def act(self, requests: Sequence[TurnRequest]) -> list[Action]:
        self.seen.extend(requests)
        return [Action(text=_first_match(r.constraint)) if r.constraint else a
                for r, a in zip(requests, super().act(requests))]


class FactCopier(ConstrainedScript):
    """Answers every constrained turn with the speaker's first fact, as the turn pattern allows."""

    def act(self, requests: Sequence[TurnRequest]) -> list[Action]:
        self.seen.extend(requests)
        return [Action(text=r.observation["evidence"][0]) for r in requests]


def _first_match(pattern: str) -> str:
    """`<A>[ABCD]</A>` -> `<A>A</A>`: the first alternative of every class and group."""
    text = re.sub(r"\[(.)[^\]]*\]", r"\1", pattern)
    text = re.sub(r"\(([^|)]*)[^)]*\)", r"\1", text)
    assert re.fullmatch(pattern, text), (pattern, text)
    return text


def constrained(specs: Sequence[Any]) -> list[Any]:
    return [dataclasses.replace(s, constrain_answers=True) for s in specs]


class TestPatterns:
    def test_a_pick_pattern_admits_exactly_the_games_labels(self):
        env = optima_envs.make("referential-game")
        for index in range(20):
            env.reset(seed=index, options={"index": index})
            instance = env.state.instance
            pattern = env.task.answer_pattern(instance)
            count = len(instance.meta["listener_view"])
            assert [x for x in LETTERS if re.fullmatch(pattern, f"<A>{x}</A>")] == list(LETTERS[:count])
            assert env.task.extract(f"<A>{instance.gold}</A>").answer == instance.gold
            assert not re.fullmatch(pattern, f"I pick <A>{instance.gold}</A>")  # the move and nothing else

    def test_a_move_pattern_admits_accept_and_proposals_the_pool_can_honour(self):
        env = optima_envs.make("negotiation-game")
        for index in range(20):
            env.reset(seed=index, options={"index": index})
            instance = env.state.instance
            game, pattern = Game.of(instance), env.task.answer_pattern(instance)
            assert re.fullmatch(pattern, "<A>accept</A>")
            assert re.fullmatch(pattern, f"<A>{instance.gold}</A>")
            assert re.fullmatch(pattern, f"<A>propose {format_take(game.items, game.counts)}</A>")
            too_many = tuple(n + 1 if i == 0 else n for i, n in enumerate(game.counts))
            assert not re.fullmatch(pattern, f"<A>propose {format_take(game.items, too_many)}</A>")

    def test_tasks_without_moves_have_no_pattern(self):
        assert optima_envs.make("synth-arith-debate").task.answer_pattern is None
        assert optima_envs.make("synth-arith-debate").task.turn_pattern is None

    def test_a_synth_hop_turn_shares_only_the_speakers_own_facts_then_may_name_an_answer_it_has_seen(self):
        env = optima_envs.make("synth-hop-ia")
        told = 0
        for index in range(30):
            observations, _ = env.reset(seed=index, options={"index": index})
            instance = env.state.instance
            own, partner = (observations[a]["evidence"] for a in ("alice", "bob"))
            alone = env.task.turn_pattern(instance, own, ())
            heard = env.task.turn_pattern(instance, own, (" ".join(partner),))
            seen = instance.gold in " ".join((instance.question, *own))
            told += not seen
            assert bool(re.fullmatch(alone, f"{own[0]} <A>{instance.gold}</A>")) == seen
            assert re.fullmatch(heard, " ".join(own) + f" <A>{instance.gold}</A>")  # told, it may answer
            assert not any(re.fullmatch(heard, fact) for fact in partner if fact not in own)
            assert not re.fullmatch(heard, f"{own[0]} <A>Nobody</A>")  # answers name the instance's entities
            assert not re.fullmatch(heard, f"I know this. <A>{instance.gold}</A>")
        assert 0 < told < 30  # both kinds of question were checked

class TestEngine:
    def test_only_answering_turns_are_constrained_and_records_say_so(self):
        policy = ConstrainedScript()
        specs = constrained(episode_specs(6, seed=3))
        records = RolloutEngine("referential-game", policy, progress=False).run(specs)
        by_agent = {a: [r.constraint for r in policy.seen if r.agent == a] for a in ("alice", "bob")}
        assert by_agent["alice"] and all(c is None for c in by_agent["alice"])  # the speaker gives no answer
        assert by_agent["bob"] and all(c and c.startswith("<A>[") for c in by_agent["bob"])
        assert all(r.final_answer is not None and r.num_turns == 2 for r in records)  # every pick readable
        assert all(r.sampling["bob"]["constrained_answers"] is True for r in records)
        assert all("constrained_answers" not in r.sampling["alice"] for r in records)

    def test_unconstrained_specs_send_no_constraint(self):
        policy = ConstrainedScript(free_text="<A>B</A>")
        records = RolloutEngine("referential-game", policy, progress=False).run(episode_specs(3))
        assert all(r.constraint is None for r in policy.seen)
        assert all("constrained_answers" not in r.sampling["bob"] for r in records)

    def test_a_task_without_a_pattern_is_refused(self):
        with pytest.raises(ConfigError, match="synth-arith-debate declares no answer_pattern or turn_pattern"):
            RolloutEngine("synth-arith-debate", ConstrainedScript(), progress=False).run(constrained(episode_specs(1)))

    def test_a_task_with_a_turn_pattern_constrains_each_turn_to_the_speakers_own_facts(self):
        policy = FactCopier()
        records = RolloutEngine("synth-hop-ia", policy, progress=False).run(constrained(episode_specs(4, seed=5)))
        assert len(policy.seen) == sum(r.num_turns for r in records) > 0
        for request in policy.seen:
            own = request.observation["evidence"]
            assert request.constraint is not None and all(re.fullmatch(request.constraint, fact) for fact in own)
        assert all(r.sampling[a]["constrained_answers"] is True for r in records for a in ("alice", "bob"))

    def test_a_policy_that_cannot_constrain_is_refused(self):
        plain = ScriptedPolicy(lambda o: "<A>A</A>")
        with pytest.raises(ConfigError, match="need policies that declare the constraints capability.*ScriptedPolicy"):
            RolloutEngine("referential-game", plain, progress=False).run(constrained(episode_specs(1)))


class TestOpenAIBody:
    def test_a_constraint_becomes_vllms_structured_outputs(self):
        from optima_agents.policies import OpenAIPolicy

        policy = OpenAIPolicy("m", base_urls=["http://127.0.0.1:9/v1"])
        observation = {"agent": "bob", "system_prompt": "s", "transcript": ({"speaker": "alice", "text": "hi"},)}
        body = policy._body(TurnRequest("bob", observation, seed=1, constraint="<A>[AB]</A>"), seed=1)
        assert body["structured_outputs"] == {"regex": "<A>[AB]</A>"}
        assert "structured_outputs" not in policy._body(TurnRequest("bob", observation, seed=1), seed=1)
        policy.close()


@pytest.mark.model
class TestVLLM:
    def test_sampled_picks_all_match_the_pattern(self, vllm_policy):
        policy = vllm_policy.with_sampling(SamplingParams(temperature=1.0, max_new_tokens=24, seed=0))
        specs = constrained(episode_specs(8, seed=11))
        records = RolloutEngine("referential-game", policy, env_kwargs={"max_turns": 2}, progress=False).run(specs)
        env = optima_envs.make("referential-game")
        for record in records:
            env.reset(seed=record.seed, options={"index": record.index})
            pick = record.turns[1]
            assert re.fullmatch(env.task.answer_pattern(env.state.instance), pick.text), pick.text
            assert record.final_answer is not None

    @pytest.mark.parametrize("sampled_turns", ["values_first", "values_then_split"])
    def test_sampled_negotiations_open_with_the_openers_own_table(self, vllm_policy, sampled_turns):
        policy = vllm_policy.with_sampling(SamplingParams(temperature=1.0, max_new_tokens=48, seed=0))
        kwargs = {"max_turns": 3, "sampled_turns": sampled_turns}
        records = RolloutEngine("negotiation-game", policy, env_kwargs=kwargs, progress=False).run(
            constrained(episode_specs(6, seed=4)))
        env = optima_envs.make("negotiation-game", **kwargs)
        for record in records:
            env.reset(seed=record.seed, options={"index": record.index})
            game = Game.of(env.state.instance)
            assert record.turns[0].text == f"My values: {format_take(game.items, game.values[0])}."
            for k, turn in enumerate(record.turns[1:], start=1):
                heard = tuple(t.text for t in record.turns[:k] if t.speaker != turn.speaker)
                evidence = (f"Your value per item: {format_take(game.items, game.values[k % 2])}",)
                assert re.fullmatch(env.task.turn_pattern(env.state.instance, evidence, heard), turn.text), turn.text
            if sampled_turns == "values_then_split":  # state, propose, accept: every sampled dialogue is a deal
                assert len(record.turns) == 3 and record.end_reason == "accepted" and record.score_ok

    def test_sampled_synth_hop_turns_all_match_the_speakers_turn_pattern(self, vllm_policy):
        policy = vllm_policy.with_sampling(SamplingParams(temperature=1.0, max_new_tokens=64, seed=0))
        records = RolloutEngine("synth-hop-ia", policy, env_kwargs={"max_turns": 2}, progress=False).run(
            constrained(episode_specs(6, seed=2)))
        env = optima_envs.make("synth-hop-ia")
        for record in records:
            observations, _ = env.reset(seed=record.seed, options={"index": record.index})
            for k, turn in enumerate(record.turns):
                heard = tuple(t.text for t in record.turns[:k] if t.speaker != turn.speaker)
                pattern = env.task.turn_pattern(env.state.instance, observations[turn.speaker]["evidence"], heard)
                assert re.fullmatch(pattern, turn.text), turn.text
