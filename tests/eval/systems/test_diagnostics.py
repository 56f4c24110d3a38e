"""Whether a score came from talking, on scripted pairs: the message ablation (a listener that
copies the speaker loses everything under the swap; a pair that ignores its partner loses
nothing), the `solo` no-talk ceiling, and where each answer lies."""

from __future__ import annotations

import re
from typing import Any, Mapping

import pytest

import optima_envs
from optima_agents.policies import ScriptedPolicy
from optima_envs.core.places import answer_place
from optima_envs.errors import ConfigError
from optima_envs.tasks.negotiation import Game, format_take
from optima_envs.tasks.referential import oracle_policies
from optima_eval.heldout import HeldOut
from optima_eval.systems import SystemContext, make_system
from optima_eval.systems.ablation import MessageAblation, swap_donors

QUESTIONS = 24


def seat_script(by_agent: Mapping[str, Any]) -> ScriptedPolicy:
    """One policy for a pair: each agent's own script, by the observation's agent."""
    return ScriptedPolicy(lambda o: by_agent[o["agent"]](o), name="pair")


def context(env_id: str, policy: Any, ablation: MessageAblation | None = None, **kwargs: Any) -> SystemContext:
    questions = HeldOut(env_id, {"split": "validation", **kwargs}, count=QUESTIONS).questions()
    return SystemContext(env_id, {"split": "validation", **kwargs}, questions, policy, progress=False,
                         ablation=ablation)


def mean(outcomes) -> float:
    return sum(o.score for o in outcomes) / len(outcomes)


def ablated_runs(policy: Any, env_id: str = "referential-game") -> tuple[list, list, list]:
    """The plain dialogues, then the same questions swapped and removed."""
    mas = make_system("mas")
    base = mas.run(context(env_id, policy))
    donors = swap_donors({o.position: o.transcript for o in base})
    return (base, mas.run(context(env_id, policy, MessageAblation("swap", donors))),
            mas.run(context(env_id, policy, MessageAblation("remove"))))


class TestMessageAblation:
    def test_a_listener_that_copies_the_speaker_loses_everything_under_the_swap(self):
        base, swapped, removed = ablated_runs(seat_script(oracle_policies(("alice", "bob"))))
        assert mean(base) == 1.0
        assert all(o.transcript and o.transcript[0]["speaker"] == "alice" for o in base)
        # Another game's description names none of this game's objects, or the wrong one.
        assert mean(swapped) == 0.0
        assert mean(removed) == 0.0

    def test_a_pair_that_ignores_its_partner_loses_nothing(self):
        def speaker(o):
            return "Hello."

        def listener(o):
            return f"<A>{o['evidence'][-1].split(':')[0]}</A>"  # its last object, whatever was said

        base, swapped, removed = ablated_runs(seat_script({"alice": speaker, "bob": listener}))
        assert [o.score for o in swapped] == [o.score for o in base] == [o.score for o in removed]
        assert 0 < mean(base) < 1  # some picks right, some wrong: the equality is not trivial

    def test_the_recorded_dialogue_is_the_real_one(self):
        policy = seat_script(oracle_policies(("alice", "bob")))
        base, swapped, _ = ablated_runs(policy)
        # The speaker still said its own game's description; only the listener's view changed.
        assert [o.transcript[0] for o in swapped] == [o.transcript[0] for o in base]

    def test_donors_are_a_derangement(self):
        donors = swap_donors({p: [{"speaker": "a", "text": str(p)}] for p in range(5)})
        assert [d[0]["text"] for _, d in sorted(donors.items())] == ["1", "2", "3", "4", "0"]
        with pytest.raises(ConfigError, match="at least two"):
            swap_donors({0: []})
        with pytest.raises(ConfigError, match="no donor dialogue for held-out position 7"):
            MessageAblation("swap", donors).options(7)
        with pytest.raises(ConfigError, match="mode is one of"):
            MessageAblation("mute")

    def test_donors_come_from_the_same_swap_group_where_there_is_one(self):
        transcripts = {p: [{"speaker": "a", "text": str(p)}] for p in range(6)}
        groups = {0: "x", 1: "y", 2: "x", 3: "z", 4: "y", 5: "x"}
        donors = swap_donors(transcripts, groups)
        # 0 -> 2 -> 5 -> 0 within x, 1 <-> 4 within y; 3 is alone in z and takes the next question
        assert {p: int(d[0]["text"]) for p, d in donors.items()} == {0: 2, 1: 4, 2: 5, 3: 4, 4: 1, 5: 0}

    def test_negotiation_games_swap_with_a_game_of_the_same_items(self):
        from optima_eval.heldout import HeldOut
        from optima_eval.systems.ablation import swap_groups

        heldout = HeldOut("negotiation-game", {"split": "validation"}, count=40)
        questions = heldout.questions()
        groups = swap_groups(heldout.task, questions)
        assert groups == {q.position: tuple(q.instance.meta["items"]) for q in questions}
        donors = swap_donors({q.position: [{"speaker": "a", "text": str(q.position)}] for q in questions}, groups)
        matched = [p for p, d in donors.items() if groups[int(d[0]["text"])] == groups[p]]
        shared = [p for p in groups if list(groups.values()).count(groups[p]) > 1]
        assert matched == shared and len(shared) >= 20
        assert swap_groups(HeldOut("referential-game").task, questions[:2]) is None

    def test_only_ablatable_systems_say_so(self):
        assert make_system("mas").ablatable and make_system("autoform").ablatable
        assert not make_system("mas-sc").ablatable and not make_system("cot").ablatable


def lone_answer(observation) -> str:
    """The CoT prompt an agent answers alone: reply with its first object's letter, or propose to
    take every item of the pool."""
    prompt = observation["transcript"][-1]["text"]
    if "Which object is the target?" in prompt:
        return f"<A>{re.search(r'- ([A-F]): ', prompt).group(1)}</A>"
    items = re.findall(r"(\w+)=(\d+)", prompt.split("What you know:")[1])
    return "<A>propose " + " ".join(f"{item}=9" for item, _ in items) + "</A>"


class TestSolo:
    def test_the_listener_alone_picks_without_the_speaker(self):
        seen: list[str] = []
        policy = ScriptedPolicy(lambda o: seen.append(o["transcript"][-1]["text"]) or lone_answer(o))
        ctx = context("referential-game", policy)
        outcomes = make_system("solo").run(ctx)
        assert all(len(o.samples) == 1 for o in outcomes)  # only the listener gives answers
        expected = [float(q.instance.gold == "A") for q in ctx.questions]
        assert [o.score for o in outcomes] == expected and 0 < sum(expected) < QUESTIONS
        # It saw its own lettered objects and nothing of the speaker's view.
        assert len(seen) == QUESTIONS
        assert all("- A: " in text and "Target" not in text and "- 1: " not in text for text in seen)

    def test_each_seat_alone_and_the_best_counts_scored_from_its_own_seat(self):
        def take_all(observation):
            prompt = observation["transcript"][-1]["text"]
            question = re.search(r"Split the pool: (.*)\.", prompt).group(1)
            pool = {item: int(n) for n, item in re.findall(r"(\d+) (\w+)", question)}
            return "<A>propose " + " ".join(f"{item}={n}" for item, n in pool.items()) + "</A>"

        ctx = context("negotiation-game", ScriptedPolicy(take_all))
        outcomes = make_system("solo").run(ctx)
        for q, o in zip(ctx.questions, outcomes):
            game = Game.of(q.instance)
            seat0, seat1 = game.score(game.counts), game.score(game.rest(game.counts))
            assert [s.score for s in o.samples] == [seat0, seat1]
            assert o.score == max(seat0, seat1)
            assert o.tokens == sum(s.tokens for s in o.samples)
            assert o.answer == f"propose {format_take(game.items, game.counts)}"


class TestPlaces:
    def test_synth_hop_places_follow_the_gold_text(self):
        env = optima_envs.make("synth-hop-ia", hops=2, distractors=0, comparison_rate=0.5, split="validation")
        seen = set()
        for i in range(40):
            env.reset(seed=1_000_000 + i, options={"index": i})
            state = env.state
            place = answer_place(env.task, state.instance, state.evidence)
            gold = state.instance.gold
            in_own = any(gold in e.render() for e in state.evidence[0])
            expected = "named" if gold in state.instance.question else "alone" if in_own else "partner"
            assert place == expected
            seen.add(place)
        assert seen == {"alone", "partner", "named"}

    def test_games_always_need_the_partner_and_debates_have_no_split(self):
        for env_id, expected in (("referential-game", "partner"), ("negotiation-game", "partner"),
                                 ("synth-arith-debate", None)):
            env = optima_envs.make(env_id)
            env.reset(seed=0, options={"index": 0})
            assert answer_place(env.task, env.state.instance, env.state.evidence) == expected
