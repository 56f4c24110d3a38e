"""Enumerated final answers (`generation.enumerate_answers`): each variant is what the env would
have recorded had the answerer made that move, records without an ending answer pass through,
open-answer tasks are refused, and an iSFT run with enumeration trains the listener on right
picks only where the speaker told it (`selection.train_agents`)."""

from __future__ import annotations

import pytest

import optima_envs
from optima_agents.policies import ScriptedPolicy
from optima_agents.rollout import EpisodeSpec, rollout
from optima_envs.errors import ConfigError
from optima_envs.tasks.referential import LETTERS, oracle_policies
from optima_train.answer_variants import ENUMERATED, answer_variants, enumerate_answers
from optima_train.isft.isft_trainer import sample_positions

GAMES = 6


def char_ids(text: str) -> list[int]:
    """A stand-in tokenizer: one id per character, so a move's cost is its length."""
    return [ord(c) for c in text]


def pair(pick: str | None):
    """The oracle speaker, and a listener that always writes `pick` (None: a question, no pick)."""
    env = optima_envs.make("referential-game", split="validation")
    oracle = oracle_policies(env.possible_agents)
    speaker = env.possible_agents[0]

    def act(observation):
        if observation["agent"] == speaker:
            return oracle[speaker](observation)
        return "Which one?" if pick is None else pick
    return ScriptedPolicy(act, name=f"listener-{pick}")


def play(pick: str | None, games: int = GAMES, **env_kwargs):
    return rollout("referential-game", pair(pick), [EpisodeSpec(seed=i, index=i) for i in range(games)],
                   env_kwargs={"split": "validation", **env_kwargs}, progress=False)


def referential_env():
    return optima_envs.make("referential-game", split="validation")


class TestAnswerVariants:
    def test_each_variant_is_the_record_the_env_makes_for_that_pick(self):
        env = referential_env()
        sampled = play("<A>A</A>")
        variants = enumerate_answers(sampled, env, char_ids)
        replays = {letter: play(f"<A>{letter}</A>") for letter in LETTERS[:6]}
        for game, record in enumerate(sampled):
            mine = [v for v in variants if v.instance_id == record.instance_id]
            count = len(record.system_prompts[1].split("\n- ")) - 1  # the listener's lettered objects
            assert [v.final_answer for v in mine] == list(LETTERS[:count])
            assert mine[0] is record  # the sampled pick keeps its own record
            assert sum(v.score for v in mine) == 1.0  # one object is the target
            for v in mine:
                replay = replays[v.final_answer][game]
                assert (v.score, v.final_answer, v.end_reason) == (replay.score, replay.final_answer, replay.end_reason)
                assert v.turns[:-1] == record.turns[:-1]  # what the listener was told is unchanged
                if v is not record:
                    assert v.turns[-1].token_ids == tuple(char_ids(v.turns[-1].text))
                    assert (v.turns[-1].finish_reason, v.turns[-1].logprobs) == (ENUMERATED, None)  # not sampled
                assert v.total_tokens == sum(t.num_tokens for t in v.turns) == sum(v.agent_tokens.values())
                assert v.reward_components == {"score": v.score, "tokens": float(v.total_tokens)}

    def test_a_dialogue_without_an_ending_answer_passes_through_alone(self):
        env = referential_env()
        asked = play(None, games=2, max_turns=2)
        assert all(r.final_answer is None and r.end_reason == "max_turns" for r in asked)
        assert enumerate_answers(asked, env, char_ids) == asked

    def test_a_record_from_another_game_keeps_its_own_moves(self):
        env = referential_env()
        record = play("<A>A</A>", games=1)[0]
        instance = env.task.source.get(record.index)
        assert [v.final_answer for v in answer_variants(record, env.task, instance, char_ids)][0] == "A"

    @pytest.mark.parametrize("env_id, reason", [("synth-hop-ia", "closed set of answer moves"),
                                                ("negotiation-game", "scores the whole dialogue")])
    def test_open_answers_and_whole_dialogue_scores_are_refused(self, env_id, reason):
        env = optima_envs.make(env_id)
        if env_id == "negotiation-game":  # give it options so the second check is the one that refuses
            from dataclasses import replace
            env.task = replace(env.task, answer_options=lambda instance: ("<A>accept</A>",))
        with pytest.raises(ConfigError, match=reason):
            enumerate_answers([], env, char_ids)

    def test_sample_positions_count_within_each_question(self):
        records = play("<A>A</A>", games=2)
        variants = enumerate_answers(records, referential_env(), char_ids)
        positions = sample_positions(variants)
        per_game = [sum(1 for v in variants if v.instance_id == r.instance_id) for r in records]
        assert positions == [*range(per_game[0]), *range(per_game[1])]


@pytest.mark.model  # the trainer tokenises the moves and the SFT rows with the embedded model's tokenizer
class TestEnumeratedISFT:
    def test_every_told_game_gives_a_right_listener_row(self, tmp_path):
        from tests.train.test_isft import Stop, stop_after

        from optima_train.config.io import load_config
        from optima_train.isft import ISFTConfig, ISFTTrainer
        from optima_train.run_dir import RunDir, read_json

        out = tmp_path / "run"
        cfg = load_config(ISFTConfig, None, [
            f"run.output_dir={out}", "run.iterations=1", "run.progress=false", "run.num_threads=1",
            "task.env_id=referential-game", "task.train_questions=4", "generation.samples_per_question=1",
            "generation.max_turns=2", "generation.enumerate_answers=true", "generation.format_pool_first_iteration=false",
            "selection.keep_fraction=1.0", "selection.min_score=1.0", "selection.informative_only=true",
            "selection.train_agents=[bob]", "reward.lambda_loss=0", "eval.baseline=false", "eval.episodes=2"])
        trainer = ISFTTrainer(cfg, policy_factory=lambda model, sampling: pair("<A>A</A>"),
                              on_step_done=stop_after(0, "selection"))
        with pytest.raises(Stop):
            trainer.train()
        run = RunDir(out)
        generation = read_json(run.step_dir(0, "generation") / "DONE.json")
        assert generation["sampled"] == 4 and generation["episodes"] > 4 * 3  # 4 to 6 picks per game
        import pyarrow.parquet as pq

        rows = pq.read_table(run.step_dir(0, "selection") / "sft.parquet").to_pylist()
        assert len(rows) == 4 and {r["agent"] for r in rows} == {"bob"}
        games = [optima_envs.make("referential-game", split="train").task.source.get(i) for i in range(4)]
        picks = sorted(r["messages"][-1]["content"] for r in rows)
        assert picks == sorted(f"<A>{g.gold}</A>" for g in games)  # the right pick, whatever was sampled

    def test_an_agent_the_env_lacks_is_refused(self, tmp_path):
        from tests.train.test_isft import scripted_factory, tiny_overrides

        from optima_train.config.io import load_config
        from optima_train.isft import ISFTConfig, ISFTTrainer

        cfg = load_config(ISFTConfig, None, [*tiny_overrides(tmp_path / "run"), "reward.lambda_loss=0",
                                             "eval.baseline=false", "selection.train_agents=[carol]"])
        with pytest.raises(ConfigError, match=r"train_agents names \['carol'\]"):
            ISFTTrainer(cfg, policy_factory=scripted_factory([])).train()
