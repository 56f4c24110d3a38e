"""Scripted policies for the planner tests: known utterances, so rewards and trees are known."""

from __future__ import annotations

from collections import defaultdict
from typing import Callable, Mapping, Sequence

from optima_agents.policies.base import Action, SamplingParams, TurnRequest


class TurnScript:
    """Replies by turn number: turn t cycles through `script[t]` (one counter per turn), so with
    rollouts_per_expansion=3 the three rollouts of one expansion say script[t][0], [1], [2].
    Records every call's batch size. `fail` names (turn, call index) pairs that fail. With
    `with_ids=False` it reports no token ids, as a server that returns none does."""

    def __init__(self, script: Mapping[int, Sequence[str]], default: str = "<A>x</A>",
                 fail: set[tuple[int, int]] = frozenset(), with_ids: bool = True):
        self.script, self.default, self.fail, self.with_ids = script, default, fail, with_ids
        self.counters: dict[int, int] = defaultdict(int)
        self.calls: list[int] = []
        self.sampling = SamplingParams(temperature=0.7, max_new_tokens=256)

    def act(self, requests: Sequence[TurnRequest]) -> list[Action]:
        self.calls.append(len(requests))
        out = []
        for r in requests:
            turn = r.observation["turn"]
            options = self.script.get(turn, [self.default])
            k = self.counters[turn]
            self.counters[turn] += 1
            if (turn, k) in self.fail:
                out.append(Action(text="", finish_reason="error", error="HTTP 503"))
                continue
            text = options[k % len(options)]
            ids = tuple(range(len(text.split()))) if self.with_ids else ()
            out.append(Action(text=text, token_ids=ids))
        return out

    def identity(self):
        return {"backend": "scripted"}


class SeededChoice:
    """Picks one of `options` from the request seed alone: a stand-in for a seeded sampler,
    whose output does not depend on the batch it is in."""

    def __init__(self, options: Sequence[str]):
        self.options = options
        self.sampling = SamplingParams(temperature=0.7, max_new_tokens=256)

    def act(self, requests: Sequence[TurnRequest]) -> list[Action]:
        return [Action(text=self.options[r.seed % len(self.options)]) for r in requests]

    def identity(self):
        return {"backend": "seeded-choice"}


def first_utterance_reward(values: Mapping[str, float]) -> Callable:
    """Reward = values[first utterance] (0 if absent); the components carry it as 'score'."""

    def reward(dialogues):
        out = []
        for d in dialogues:
            v = values.get(d.utterances[0][1], 0.0) if d.utterances else 0.0
            out.append((v, {"score": v, "tokens": float(d.tokens)}))
        return out

    return reward
