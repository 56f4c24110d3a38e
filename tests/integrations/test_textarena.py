"""TextArena games played as Optima envs, with the real textarena package: the rollout engine
plays them with scripted players, token costs and final rewards are the game's, and the env
passes the contract checks every Optima env passes."""

from __future__ import annotations

import random

import pytest

from optima_agents.policies import ScriptedPolicy
from optima_agents.rollout import EpisodeSpec, RolloutEngine
from optima_envs.errors import ConfigError, EpisodeEndedError
from optima_envs.test.checks import check_parallel_api, check_seed_determinism, check_snapshot_roundtrip

textarena = pytest.importorskip("textarena")
from optima_envs.integrations.textarena import GAME_SPEAKER, make_textarena_env  # noqa: E402


def words(text: str) -> int:
    return len(text.split())


def moves(*texts: str) -> ScriptedPolicy:
    """A player that says `texts` in order, one per turn of its own."""
    return ScriptedPolicy(lambda observation: texts[sum(m["speaker"] == observation["agent"]
                                                         for m in observation["transcript"])])


def test_scripted_tictactoe_through_the_engine_records_costs_and_the_win():
    env = make_textarena_env("TicTacToe-v0", tokenizer=words)
    players = {"alice": moves("I take the corner [0]", "[1]", "top row [2]"),
               "bob": moves("hello", "[3]", "[4]")}
    (record,) = RolloutEngine(env, players, progress=False).run([EpisodeSpec(seed=0, index=5)])

    # bob's "hello" is an invalid move: the game lets him move again, so he speaks twice in a row.
    assert [t.speaker for t in record.turns] == ["alice", "bob", "bob", "alice", "bob", "alice"]
    assert [t.num_tokens for t in record.turns] == [5, 1, 1, 1, 1, 3]
    assert record.agent_tokens == {"alice": 9, "bob": 3} and record.total_tokens == 12
    assert record.end_reason == "game_over" and record.score == 1.0 and record.score_ok
    assert record.instance_id == "TicTacToe-v0/5" and record.env_id == "TicTacToe-v0"
    assert "Tic Tac Toe" in record.system_prompts[0] and "Player 1" in record.system_prompts[1]


def test_final_rewards_are_the_games_own_and_views_carry_the_game_messages():
    env = make_textarena_env("TicTacToe-v0")
    env.reset(seed=1, options={"index": 2})
    for who, move in [("alice", "[4]"), ("bob", "[0]"), ("alice", "[2]"), ("bob", "[1]"), ("alice", "[6]")]:
        assert env.current_speaker == who
        observations, rewards, terminations, truncations, infos = env.step({who: move})
    assert rewards == {"alice": 1.0, "bob": -1.0}
    assert all(terminations.values()) and not any(truncations.values()) and env.agents == []
    assert infos["bob"]["score"] == 1.0 and infos["bob"]["game_rewards"] == {"alice": 1.0, "bob": -1.0}
    view = observations["bob"]["transcript"]
    assert [m["text"] for m in view if m["speaker"] == "alice"] == ["[4]", "[2]", "[6]"]
    assert any(m["speaker"] == GAME_SPEAKER and "placed their symbol" in m["text"] for m in view)
    with pytest.raises(EpisodeEndedError):
        env.step({"alice": "[8]"})


def test_negotiation_trade_matches_textarena_played_directly():
    """The same actions on the bare TextArena game (same deal) give the same rewards and the same
    resources: the adapter changes what the players see, not the game."""
    actions = ["Let us trade. [Offer: 1 Wheat -> 1 Sheep]", "[Accept] Deal.", "[Offer: 2 Ore -> 1 Wood]",
               "[Deny]", *["Nothing more."] * 6]
    env = make_textarena_env("SimpleNegotiation-v0-short")
    env.reset(options={"index": 11})
    for text in actions:
        if not env.agents:
            break
        _, rewards, *_ = env.step({env.current_speaker: text})

    bare = textarena.make("SimpleNegotiation-v0-short")
    bare.reset(num_players=2, seed=11)
    done = False
    for text in actions:
        if done:
            break
        done, _ = bare.step(text)
    assert done and not env.agents
    assert rewards == {"alice": float(bare.state.rewards[0]), "bob": float(bare.state.rewards[1])}
    assert env._game.state.game_state["player_resources"] == bare.state.game_state["player_resources"]
    assert env.state.outcome["score"] == (rewards["alice"] + 1) / 2


@pytest.mark.parametrize("game", ["TicTacToe-v0", "SimpleNegotiation-v0-short"])
def test_contract_checks_pass(game):
    check_parallel_api(make_textarena_env(game))
    check_seed_determinism(lambda: make_textarena_env(game))
    check_snapshot_roundtrip(make_textarena_env(game))


def test_interleaved_episodes_equal_one_at_a_time_and_leave_global_random_alone():
    """TextArena draws from Python's global `random`; each episode has its own saved state, so the
    engine's interleaving changes nothing, and the caller's `random` is untouched."""
    specs = [EpisodeSpec(seed=s, index=s) for s in range(4)]
    say = ScriptedPolicy(lambda observation: f"[Offer: 1 Wheat -> 1 Wood] turn {observation['turn']}")
    random.seed(123)
    before = random.getstate()
    together = RolloutEngine(make_textarena_env("SimpleNegotiation-v0-short"), say, progress=False).run(specs)
    assert random.getstate() == before
    alone = RolloutEngine(make_textarena_env("SimpleNegotiation-v0-short"), say, progress=False, max_live=1).run(specs)
    assert [r.to_dict() for r in together] == [r.to_dict() for r in alone]
    assert len({r.system_prompts for r in together}) == 4  # four different deals


def test_bad_arguments_fail_clearly():
    with pytest.raises(ConfigError, match="no game"):
        make_textarena_env("NoSuchGame-v0")
    with pytest.raises(ConfigError, match="distinct agent names"):
        make_textarena_env("TicTacToe-v0", agent_names=["game", "bob"])
    env = make_textarena_env("TicTacToe-v0")
    with pytest.raises(ConfigError, match="only"):
        env.reset(options={"format_instruction": "Be brief."})
    with pytest.raises(ConfigError, match="non-negative int"):
        env.reset(options={"index": -1})
