"""What a rollout's reward is computed from, and the Optima reward adapted to tree search.

A tree's node values must be comparable across search iterations, so the token term cannot be
normalised within whatever batch of rollouts happens to finish together (the ranking reward's
"group" mode). `OptimaTreeReward` fixes `max_tokens` for the whole search instead, as the
reference does (there: the 85th percentile of the token counts of 100 dialogues sampled with
the current model); left unset, it is frozen from the first batch it scores (the root
expansions of every tree: dialogues sampled from the current model at the search temperature).

With `grounded_only`, a rollout's task score counts only when every answer in it was given by an
agent that could know it then (`optima_envs.core.places.answers_grounded`). A right guess then
scores as a wrong answer, so node values, and the DPO pairs read from them, prefer the turn
that passes a fact over the short turn that guesses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from optima_agents.mcts.errors import MCTSConfigError
from optima_envs.core.places import answers_grounded, seat_messages
from optima_envs.rewards import DialogueSample, RewardWeights, Turn, compute_rewards


@dataclass(frozen=True)
class FinishedDialogue:
    """One rollout that reached a leaf: the env state there and how the dialogue ended.

    `end_reason` is the env's ("agreed", "max_turns", ...) or "max_depth" when the search cut the
    dialogue; a cut dialogue has no task score, and counts as a score of 0 (as in the reference).
    `score_ok` False means the task metric failed: such a rollout is not backed up.
    """

    tree_id: str
    leaf_id: int
    agents: tuple[str, ...]
    utterances: tuple[tuple[str, str], ...]  # (speaker, text)
    tokens: int
    score: float | None
    score_ok: bool
    end_reason: str
    state: Any = None


TreeReward = Callable[[Sequence[FinishedDialogue]], Sequence[tuple[float | None, Mapping[str, float]]]]
"""Maps finished rollouts to (reward, components) in order. A reward of None drops that rollout
(nothing is backed up): use it for dialogues that cannot be scored, never for wrong answers."""


def score_only_reward(dialogues: Sequence[FinishedDialogue]) -> list[tuple[float | None, dict[str, float]]]:
    """The task score alone (for tests and ablations)."""
    return [(None if not d.score_ok else float(d.score or 0.0), {"score": float(d.score or 0.0)}) for d in dialogues]


class OptimaTreeReward:
    """The Optima reward (`optima_envs.rewards.compute_rewards`) with a fixed token scale.

    Args:
        weights: `RewardWeights` (default: the project's defaults).
        turn_loss: per-utterance loss under the frozen reference model (a `ReadabilityScorer`);
            needed when `weights.lambda_loss > 0`.
        max_tokens: the token normaliser; None freezes it from the first call, at
            `token_percentile` of that batch's token counts (the reference's rule, 85).
        grounded_only: count a rollout's task score only when its answers were grounded (module
            docstring); the components then hold `grounded` (1.0 or 0.0).
        rubric_overrides: passed to `compute_rewards` (repeat_ratio, repeat_min_chars).
    """

    def __init__(self, weights: Any = None, turn_loss: Callable | None = None, *, max_tokens: float | None = None,
                 token_percentile: float = 85.0, grounded_only: bool = False, **rubric_overrides: Any):
        self.weights = weights if weights is not None else RewardWeights()
        if self.weights.lambda_loss > 0 and turn_loss is None:
            raise MCTSConfigError(
                f"reward.lambda_loss is {self.weights.lambda_loss} but no reference model was given: pass "
                "turn_loss=ReadabilityScorer(...) or set reward.lambda_loss=0"
            )
        if not 0 < token_percentile <= 100:
            raise MCTSConfigError(f"token_percentile must be in (0, 100], got {token_percentile}")
        self.turn_loss = turn_loss
        self.max_tokens = max_tokens
        self.token_percentile = token_percentile
        self.grounded_only = grounded_only
        self.rubric_overrides = rubric_overrides

    @classmethod
    def without_reference_model(cls, **kwargs: Any) -> "OptimaTreeReward":
        """Score and token cost only (lambda_loss 0): the default when no reference model is given."""
        return cls(RewardWeights(lambda_loss=0.0), None, **kwargs)

    def __call__(self, dialogues: Sequence[FinishedDialogue]) -> list[tuple[float | None, dict[str, float]]]:
        if not dialogues:
            return []
        if self.max_tokens is None:
            counts = [d.tokens for d in dialogues if d.score_ok]
            # +1 as the reference does, so the percentile dialogue costs slightly under 1
            self.max_tokens = float(np.percentile(counts, self.token_percentile)) + 1.0 if counts else 1.0
        grounded = [_grounded(d) if self.grounded_only else True for d in dialogues]
        samples = [
            DialogueSample(
                group=d.tree_id, agents=d.agents, utterances=tuple(Turn(s, t) for s, t in d.utterances),
                tokens=d.tokens, score=d.score if d.end_reason != "max_depth" and ok else 0.0,
                score_ok=d.score_ok,
            )
            for d, ok in zip(dialogues, grounded)
        ]
        batch = compute_rewards(samples, weights=self.weights, turn_loss=self.turn_loss, max_tokens=self.max_tokens,
                                **self.rubric_overrides)
        extra = [{"grounded": float(ok)} if self.grounded_only else {} for ok in grounded]
        return [(r.reward, {**_numeric(r.components), **e}) for r, e in zip(batch.results, extra)]


def _grounded(dialogue: FinishedDialogue) -> bool:
    """`answers_grounded` on a rollout's final env state."""
    state = dialogue.state
    if state is None:
        raise MCTSConfigError(f"grounded_only needs each rollout's env state; rollout {dialogue.leaf_id} of tree "
                              f"{dialogue.tree_id!r} has none")
    grounded = answers_grounded(state.instance, state.evidence, seat_messages(state.messages, dialogue.agents))
    if grounded is None:
        raise MCTSConfigError(f"reward.grounded_only needs a task whose evidence marks its supporting facts; tree "
                              f"{dialogue.tree_id!r} (instance {state.instance.instance_id!r}) marks none "
                              "(set reward.grounded_only: false)")
    return grounded


def _numeric(components: Mapping[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in components.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
