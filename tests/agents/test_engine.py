"""The batched rollout engine: batching, per-agent policies, determinism, infra failures."""

from __future__ import annotations

import re
from typing import Any, Sequence

import pytest

import optima_envs
from optima_agents.policies import Action, ScriptedPolicy, TurnRequest
from optima_agents.rollout import EpisodeRecord, EpisodeSpec, RolloutEngine, derive_seed, episode_specs, rollout
from optima_envs.errors import ConfigError
from optima_envs.test import share_evidence_then


class Counting:
    """Wraps a policy and records every `act` call (its agents, turns and seeds)."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.sampling = inner.sampling
        self.calls: list[list[TurnRequest]] = []

    def act(self, requests: Sequence[TurnRequest]) -> list[Action]:
        self.calls.append(list(requests))
        return self.inner.act(requests)

    def identity(self) -> dict[str, Any]:
        return self.inner.identity()


def oracle(env_id: str = "synth-hop-ia", specs: Sequence[EpisodeSpec] = ()) -> ScriptedPolicy:
    """States its facts, then the gold answer (looked up by question), so both agents agree."""
    env = optima_envs.make(env_id)
    gold = {}
    for spec in specs:
        env.reset(seed=spec.seed, options=spec.reset_options())
        gold[env.state.instance.question] = env.state.instance.gold_text
    return ScriptedPolicy(lambda o: share_evidence_then(gold[o["question"]])(o), name="oracle")


def chatter(name: str) -> ScriptedPolicy:
    return ScriptedPolicy(lambda o: f"{name} says hi at turn {o['turn']}.", name=name)


class TestBatching:
    def test_one_call_per_step_with_every_live_episode(self):
        specs = episode_specs(5)
        policy = Counting(oracle(specs=specs))
        engine = RolloutEngine("synth-hop-ia", policy, progress=False)
        records = engine.run(specs)
        assert [len(c) for c in policy.calls] == [5, 5, 5, 5]  # share, share, answer, answer (agreed)
        assert engine.last_stats.policy_calls == engine.last_stats.steps == 4
        for call in policy.calls:
            assert len({r.observation["turn"] for r in call}) == 1
        assert all(r.score == 1.0 and r.end_reason == "agreed" for r in records)
        assert [r.seed for r in records] == [0, 1, 2, 3, 4] and [r.index for r in records] == [0, 1, 2, 3, 4]

    def test_each_policy_gets_one_call_per_step_with_only_its_agents(self):
        alice, bob = Counting(chatter("a")), Counting(chatter("b"))
        engine = RolloutEngine("synth-hop-ia", {"alice": alice, "bob": bob}, env_kwargs={"max_turns": 4},
                               max_live=2, progress=False)
        records = engine.run(episode_specs(3))
        # 3 episodes, 2 live at once: the third starts when the first two end, out of phase with none
        assert [len(c) for c in alice.calls] == [2, 2, 1, 1] and [len(c) for c in bob.calls] == [2, 2, 1, 1]
        assert all(r.agent == "alice" for c in alice.calls for r in c)
        assert all(r.agent == "bob" for c in bob.calls for r in c)
        assert records[2].turns[1].text == "b says hi at turn 1."
        assert records[0].policies["alice"]["model"] == "a" and records[0].policies["bob"]["model"] == "b"

    def test_refilling_slots_keeps_spec_order_and_results(self):
        specs = episode_specs(5, seed=10)
        everything = RolloutEngine("synth-hop-ia", oracle(specs=specs), progress=False).run(specs)
        two_at_a_time = RolloutEngine("synth-hop-ia", oracle(specs=specs), max_live=2, progress=False).run(specs)
        assert everything == two_at_a_time

    def test_request_seeds_come_from_episode_seed_and_turn(self):
        policy = Counting(chatter("x"))
        rollout("synth-hop-ia", policy, [EpisodeSpec(seed=7), EpisodeSpec(seed=None)],
                env_kwargs={"max_turns": 2}, progress=False)
        assert [r.seed for r in policy.calls[1]] == [derive_seed(7, 1), None]
        assert derive_seed(7, 1) != derive_seed(7, 2) and derive_seed(7, 1) == derive_seed(7, 1)


class TestRecords:
    def test_record_contents(self):
        specs = [EpisodeSpec(seed=3, index=9, options={"format_instruction": 0})]
        record = RolloutEngine("synth-hop-ia", oracle(specs=specs), progress=False).run(specs)[0]
        assert (record.env_id, record.env_version, record.seed, record.index) == ("synth-hop-ia", 2, 3, 9)
        assert record.options == {"format_instruction": 0} and record.format_instruction
        assert record.instance_id == "synth-hop-train-9" and record.agents == ("alice", "bob")
        assert record.roles == ("partner", "partner") and len(record.system_prompts) == 2
        assert record.final_answer == record.gold and record.score == 1.0 and record.scored
        assert record.total_tokens == sum(t.num_tokens for t in record.turns) == sum(record.agent_tokens.values())
        assert record.reward_components == {"score": 1.0, "tokens": float(record.total_tokens)}
        assert record.policies["alice"]["backend"] == "scripted" and record.sampling["bob"]["temperature"] == 0.0
        assert EpisodeRecord.from_dict(record.to_dict()) == record

    def test_record_carries_the_sampling_seed_its_episode_was_played_with(self):
        specs = [EpisodeSpec(seed=3, index=9), EpisodeSpec(seed=3, index=9, sampling_seed=5)]
        policy_seed, own_seed = RolloutEngine("synth-hop-ia", oracle(specs=specs), progress=False).run(specs)
        assert policy_seed.sampling["alice"]["seed"] != 5
        assert own_seed.sampling["alice"]["seed"] == own_seed.sampling["bob"]["seed"] == 5

    def test_three_agents(self):
        records = rollout("synth-hop-ia", chatter("x"), 2, env_kwargs={"num_agents": 3, "max_turns": 6},
                          progress=False)
        assert records[0].agents == ("alice", "bob", "carol") and len(records[0].turns) == 6
        assert set(records[0].agent_tokens) == {"alice", "bob", "carol"}


class TestInfraFailures:
    def test_error_action_stops_and_flags_only_that_episode(self):
        def script(o):
            if o["turn"] == 1 and "second" in o["system_prompt"]:
                return Action(text="", finish_reason="error", error="HTTP 503 after 3 retries")
            return f"turn {o['turn']}"

        specs = [EpisodeSpec(seed=0, index=0), EpisodeSpec(seed=1, index=1, options={"format_instruction": "second"})]
        engine = RolloutEngine("synth-hop-ia", ScriptedPolicy(script), env_kwargs={"max_turns": 4}, progress=False)
        ok, failed = engine.run(specs)
        assert not ok.infra_failure and ok.num_turns == 4 and ok.end_reason == "max_turns"
        assert failed.infra_failure and failed.end_reason == "infra_failure" and failed.num_turns == 1
        assert failed.error == "turn 1 (bob): HTTP 503 after 3 retries"
        assert failed.score is None and not failed.scored and failed.reward_components == {}
        assert engine.last_stats.infra_failures == 1


    def test_an_action_the_env_rejects_fails_only_that_episode(self):
        def script(o):
            if o["turn"] == 1 and "second" in o["system_prompt"]:
                return Action(text="hello", token_ids=(-5,))
            return f"turn {o['turn']}"

        specs = [EpisodeSpec(seed=0, index=0), EpisodeSpec(seed=1, index=1, options={"format_instruction": "second"})]
        ok, failed = rollout("synth-hop-ia", ScriptedPolicy(script), specs, env_kwargs={"max_turns": 3}, progress=False)
        assert not ok.infra_failure and ok.num_turns == 3
        assert failed.infra_failure and failed.num_turns == 1 and failed.score is None
        assert failed.error.startswith("turn 1 (bob): the env rejected the action: 'bob''s token_ids must be ints")

    def test_finished_episodes_reach_on_record_before_a_policy_bug_propagates(self):
        def script(o):
            if "boom" in o["system_prompt"]:
                raise KeyError("a bug in the policy")
            return f"turn {o['turn']}"

        specs = [*episode_specs(3), EpisodeSpec(seed=9, index=9, options={"format_instruction": "boom"})]
        finished: list[EpisodeRecord] = []
        engine = RolloutEngine("synth-hop-ia", ScriptedPolicy(script), env_kwargs={"max_turns": 2}, max_live=3,
                               progress=False)
        with pytest.raises(KeyError, match="a bug in the policy"):
            engine.run(specs, on_record=finished.append)
        assert [r.seed for r in finished] == [0, 1, 2] and all(r.policies for r in finished)


class TestValidation:
    def test_policy_mapping_must_cover_the_agents(self):
        with pytest.raises(ConfigError, match=re.escape("missing ['bob'], unknown ['carol']")):
            RolloutEngine("synth-hop-ia", {"alice": chatter("a"), "carol": chatter("c")}, progress=False)

    def test_wrong_number_of_actions(self):
        class Broken(ScriptedPolicy):
            def act(self, requests):
                return []

        with pytest.raises(RuntimeError, match="returned 0 actions for 2 requests"):
            rollout("synth-hop-ia", Broken(str), 2, progress=False)

    def test_env_factory_and_env_kwargs(self):
        records = rollout(lambda: optima_envs.make("synth-hop-ia", max_turns=2), chatter("x"), 1, progress=False)
        assert records[0].num_turns == 2
        with pytest.raises(ConfigError, match="env_kwargs is only used with an env id"):
            RolloutEngine(lambda: optima_envs.make("synth-hop-ia"), chatter("x"), env_kwargs={"max_turns": 2})

    def test_progress_bar_on_and_off(self, capsys):
        rollout("synth-hop-ia", chatter("x"), 2, env_kwargs={"max_turns": 2}, progress=False)
        assert capsys.readouterr() == ("", "")
        rollout("synth-hop-ia", chatter("x"), 2, env_kwargs={"max_turns": 2}, progress=True)
        assert "2/2" in capsys.readouterr().out


@pytest.mark.model
class TestWithTheModel:
    def test_greedy_runs_are_deterministic(self, hf_policy):
        def run():
            policy = Counting(hf_policy)
            engine = RolloutEngine("synth-hop-ia", policy, env_kwargs={"max_turns": 3}, progress=False)
            return engine.run(episode_specs(3, seed=5)), policy, engine.last_stats

        first, policy, stats = run()
        second, *_ = run()
        assert first == second
        live = [sum(r.num_turns > turn for r in first) for turn in range(3)]  # episodes still going
        assert [len(c) for c in policy.calls] == [n for n in live if n] and live[0] == 3
        assert stats.policy_calls == stats.steps == len(policy.calls)
        assert stats.generated_tokens > 0 and all(t.tokens_exact and t.token_ids for r in first for t in r.turns)
        assert first[0].policies["alice"]["backend"] == "hf"

    def test_model_and_script_as_partners(self, hf_policy):
        partner = Counting(chatter("scripted-bob"))
        records = rollout("synth-hop-ia", {"alice": hf_policy, "bob": partner}, 2, env_kwargs={"max_turns": 3},
                          progress=False)
        for record in records:
            assert [t.speaker for t in record.turns] == ["alice", "bob", "alice"]
            assert record.turns[1].text == "scripted-bob says hi at turn 1."
            assert record.turns[0].tokens_exact and not record.turns[1].tokens_exact
            assert record.policies["alice"]["backend"] == "hf" and record.policies["bob"]["backend"] == "scripted"
        assert [len(c) for c in partner.calls] == [2]
