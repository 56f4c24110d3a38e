"""Selection for iSFT: best sample per question, then the top questions above a threshold.

Pure and deterministic (docs/design.md section 2):

1. Drop candidates without a reward (scoring or infrastructure failures; counted, never 0),
   with `informative_only` those whose partners did not tell the answerer what it lacked
   (`Candidate.informative` False: a right answer there is a guess), and with `grounded_only`
   those where some answer was given by a seat that could not know it yet (`Candidate.grounded`
   False).
2. Per group, keep the best candidate: highest reward, then fewest tokens, then lowest sample
   index (so ties never depend on input order). A group is a question, or, when the evidence is
   re-dealt per sample, a question and where its answer lies (`candidate(place=...)`): ranked
   against each other, a dialogue whose answerer holds the answer is shorter than one where the
   partner must tell it, so per question the dialogues that needed talking would never be kept.
3. Rank the groups by that best reward and keep the top `keep_fraction` of them, rounded up
   (so a non-empty batch keeps at least one group), ties broken as in step 2 and then by group.
4. Of those, keep only the ones whose best reward is >= `reward_threshold` (if set) and whose
   task score is >= `min_score` (if set).

`SelectionResult.stats` says how many were dropped at each step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Hashable, Sequence

from optima_envs.errors import ConfigError

__all__ = ["Candidate", "SelectionResult", "candidate", "select_best"]


@dataclass(frozen=True)
class Candidate:
    """One scored sample. `reward` None means excluded from ranking (`excluded` says why)."""

    key: Hashable  # what identifies the sample (e.g. an episode id)
    group: Hashable  # the question it answers
    reward: float | None
    score: float | None = None
    tokens: int = 0
    sample_index: int = 0
    excluded: str | None = None
    informative: bool | None = None  # the partners' messages carried the answer (None: not checked)
    grounded: bool | None = None  # every answer was given by a seat that could know it (None: not checked)


def candidate(key: Hashable, record: Any, *, sample_index: int = 0, informative: bool | None = None,
              grounded: bool | None = None, place: str | None = None) -> Candidate:
    """An `EpisodeRecord` with its reward components attached as a candidate: grouped by its
    question (and by `place`, where its answer lay in this sample's evidence, when given), ranked
    by `reward_components["reward"]`, excluded when it has no usable score."""
    excluded = None if record.scored else ("infra_failure" if record.infra_failure else "scoring_failure")
    group = record.instance_id if place is None else (record.instance_id, place)
    return Candidate(key=key, group=group, reward=record.reward_components.get("reward"),
                     score=record.score, tokens=record.total_tokens, sample_index=sample_index, excluded=excluded,
                     informative=informative, grounded=grounded)


@dataclass(frozen=True)
class SelectionResult:
    selected: list[Candidate]
    stats: dict[str, int]


def _rank(c: Candidate) -> tuple:
    return (-c.reward, c.tokens, c.sample_index, str(c.key))


def select_best(candidates: Sequence[Candidate], *, keep_fraction: float = 0.7,
                reward_threshold: float | None = None, min_score: float | None = None,
                informative_only: bool = False, grounded_only: bool = False) -> SelectionResult:
    """Pick the training dialogues of one iteration.

    Args:
        candidates: every sample of the iteration, scored.
        keep_fraction: share of questions (by best reward) kept, in (0, 1].
        reward_threshold: keep only questions whose best reward is at least this (None: no bar).
        min_score: keep only questions whose best sample's task score is at least this.
        informative_only: rank only candidates whose `informative` is True.
        grounded_only: rank only candidates whose `grounded` is True.

    Returns:
        The selected candidates (best reward first) and counts: candidates, excluded (and per
        reason), uninformative (with `informative_only`), ungrounded (with `grounded_only`),
        groups, groups_ranked, after_fraction, below_threshold, below_min_score, selected.

    Raises:
        ConfigError: keep_fraction outside (0, 1]; `informative_only` or `grounded_only` with a
            candidate that was not checked (None).
    """
    if not 0 < keep_fraction <= 1:
        raise ConfigError(f"selection.keep_fraction must be in (0, 1], got {keep_fraction}")
    def has_reward(c: Candidate) -> bool:
        return c.reward is not None and not math.isnan(c.reward)

    ranked = [c for c in candidates if has_reward(c)]
    excluded = [c for c in candidates if not has_reward(c)]
    dropped: dict[str, int] = {}
    for flag, check, on in (("informative_only", "informative", informative_only),
                            ("grounded_only", "grounded", grounded_only)):
        if not on:
            continue
        unchecked = [c.key for c in ranked if getattr(c, check) is None]
        if unchecked:
            raise ConfigError(f"selection.{flag} needs every candidate checked; {len(unchecked)} were not "
                              f"(e.g. {unchecked[0]!r}): the task holds no private evidence to check it against (debate)")
        dropped[f"un{check}"] = sum(1 for c in ranked if not getattr(c, check))
        ranked = [c for c in ranked if getattr(c, check)]
    best: dict[Hashable, Candidate] = {}
    for c in ranked:
        if c.group not in best or _rank(c) < _rank(best[c.group]):
            best[c.group] = c
    order = sorted(best.values(), key=lambda c: (*_rank(c), str(c.group)))
    top = order[: math.ceil(keep_fraction * len(order))]
    below_threshold, below_score, selected = [], [], []
    for c in top:
        if reward_threshold is not None and c.reward < reward_threshold:
            below_threshold.append(c)
        elif min_score is not None and (c.score is None or c.score < min_score):
            below_score.append(c)
        else:
            selected.append(c)
    stats = {
        "candidates": len(candidates),
        "excluded": len(excluded),
        **{f"excluded_{reason}": sum(1 for c in excluded if (c.excluded or "no_reward") == reason)
           for reason in sorted({c.excluded or "no_reward" for c in excluded})},
        **dropped,
        "groups": len({c.group for c in candidates}),
        "groups_ranked": len(order),
        "after_fraction": len(top),
        "below_threshold": len(below_threshold),
        "below_min_score": len(below_score),
        "selected": len(selected),
    }
    return SelectionResult(selected, stats)
