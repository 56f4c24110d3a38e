"""Score a batch of dialogues: every component computed and kept, then combined by the rubric.

Dialogues whose task score could not be computed (`score_ok=False`) or whose generation hit an
infrastructure failure are *excluded*: they get `reward=None` and an `excluded` reason, are
counted in `RewardBatch.excluded`, never take part in token normalisation, and are never
treated as a score of 0.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Hashable, Literal, Sequence

from optima_envs.errors import ConfigError
from optima_envs.rewards.format_rules import check_format
from optima_envs.rewards.normalization import TokenNormalization, max_tokens_for
from optima_envs.rewards.rubric import (
    RewardInputs,
    RewardWeights,
    Rubric,
    default_rubric,
)
from optima_envs.rewards.turn_loss import TurnLossFn, max_turn_loss

__all__ = ["DialogueSample", "ExclusionReason", "RewardBatch", "RewardResult", "Turn", "compute_rewards"]

ExclusionReason = Literal["infra_failure", "scoring_failure"]


@dataclass(frozen=True)
class Turn:
    """One utterance as the reward reads it."""

    speaker: str
    text: str


@dataclass(frozen=True)
class DialogueSample:
    """One finished dialogue to be scored.

    group: the key samples are compared within (the question's instance id).
    agents: every agent's name. utterances: the turns in order. tokens: the total tokens of
    the utterances. score: the task score (None when it could not be computed).
    """

    group: Hashable
    agents: tuple[str, ...]
    utterances: tuple[Turn, ...]
    tokens: int
    score: float | None
    score_ok: bool = True
    infra_failed: bool = False


@dataclass(frozen=True)
class RewardResult:
    """The reward of one dialogue (None when excluded) and all of its components by name."""

    reward: float | None
    components: dict[str, float | int | None]
    excluded: ExclusionReason | None = None


@dataclass(frozen=True)
class RewardBatch:
    results: list[RewardResult]
    excluded: dict[str, int] = field(default_factory=dict)
    readability_texts: int = 0


def _exclusion(sample: DialogueSample) -> ExclusionReason | None:
    if sample.infra_failed:
        return "infra_failure"
    if not sample.score_ok or sample.score is None:
        return "scoring_failure"
    return None


def compute_rewards(samples: Sequence[DialogueSample], *, weights: RewardWeights = RewardWeights(),
                    rubric: Rubric | None = None, turn_loss: TurnLossFn | None = None,
                    token_normalization: TokenNormalization = "group", token_percentile: float = 95.0,
                    max_tokens: float | None = None, repeat_ratio: float = 90.0,
                    repeat_min_chars: int = 12) -> RewardBatch:
    """Compute every component and the reward of each dialogue.

    Args:
        samples: the dialogues, e.g. all N samples of every question of one iteration.
        weights: the rubric's weights (ignored when `rubric` is given).
        rubric: a custom rubric (default: `default_rubric(weights)`).
        turn_loss: per-utterance mean NLL (e.g. `optima_train.rewards.ReadabilityScorer`); required when
            `weights.lambda_loss > 0`. All utterances of all ranked dialogues go in one call.
        token_normalization, token_percentile: how `max_tokens` is chosen (`normalization`).
        max_tokens: a fixed `max_tokens` for every dialogue instead (e.g. frozen for a whole MCTS
            search, so rewards of different batches compare); must be > 0.
        repeat_ratio, repeat_min_chars: the repeat rule's knobs (`format_rules`).

    Returns:
        A `RewardBatch`: one `RewardResult` per sample (same order) and exclusion counts.

    Raises:
        ConfigError: readability is weighted but no `turn_loss` was given, or `max_tokens` <= 0.
    """
    rubric = rubric or default_rubric(weights)
    needs_lm = rubric.weights.get("readability", 0.0) != 0.0
    if needs_lm and turn_loss is None:
        raise ConfigError("reward.lambda_loss > 0 needs a reference model (turn_loss=ReadabilityScorer(...)); "
                          "pass one or set reward.lambda_loss=0")
    exclusions = [_exclusion(s) for s in samples]
    ranked = [i for i, e in enumerate(exclusions) if e is None]
    if max_tokens is not None and not max_tokens > 0:
        raise ConfigError(f"compute_rewards: max_tokens must be > 0, got {max_tokens}")
    if max_tokens is None:
        denominators = max_tokens_for([samples[i].tokens for i in ranked], [samples[i].group for i in ranked],
                                      mode=token_normalization, percentile=token_percentile)
    else:
        denominators = [float(max_tokens)] * len(ranked)
    scale = dict(zip(ranked, denominators))

    losses: dict[int, float | None] = {}
    texts: list[str] = []
    if needs_lm:
        spans = []
        for i in ranked:
            spans.append((i, len(texts), len(samples[i].utterances)))
            texts.extend(u.text for u in samples[i].utterances)
        flat = turn_loss(texts) if texts else []
        losses = {i: max_turn_loss(flat[start:start + n]) for i, start, n in spans}

    results = []
    for i, sample in enumerate(samples):
        report = check_format(sample.utterances, sample.agents, repeat_ratio=repeat_ratio,
                              repeat_min_chars=repeat_min_chars)
        components: dict[str, float | int | None] = {
            "score": sample.score, "tokens": int(sample.tokens), "num_turns": len(sample.utterances),
            "format_rate": report.rate,
            **{f"format_{rule}": n for rule, n in report.counts.items()},
        }
        if exclusions[i] is not None:
            results.append(RewardResult(None, components, exclusions[i]))
            continue
        inputs = RewardInputs(score=float(sample.score), tokens=int(sample.tokens), max_tokens=scale[i],
                              max_turn_lm_loss=losses.get(i), format_rate=report.rate, format_counts=report.counts)
        total, values = rubric.evaluate(inputs)
        components.update(values)
        components.update(max_turn_lm_loss=inputs.max_turn_lm_loss, reward=total)
        results.append(RewardResult(total, components, None))
    counts = Counter(e for e in exclusions if e is not None)
    return RewardBatch(results, {"infra_failure": counts["infra_failure"], "scoring_failure": counts["scoring_failure"]},
                       readability_texts=len(texts))
