"""Re-score a finished cell's stored answers with the task's current metric.

A cell keeps every answer its system gave (the vote's winner and each sample), so when a metric
is corrected the board can be brought up to date without running any model again: the vote's
winner does not change (votes count answers, not scores), only the scores do.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence, TypeVar

from optima_envs.scoring import Metric, score_answer
from optima_eval.systems import Outcome, Sample

__all__ = ["rescore_outcomes"]

Scored = TypeVar("Scored", Outcome, Sample)


def rescore_outcomes(outcomes: Sequence[Outcome], golds: Mapping[int, Any],
                     metric: Metric) -> tuple[list[Outcome], int]:
    """Every outcome and sample scored again from its stored answer against `golds[position]`
    (what `metric` takes as gold: a task's metric takes the `TaskInstance`). Infra failures stay
    as they are. Returns the outcomes and how many questions' final score changed."""
    rescored, changed = [], 0
    for outcome in outcomes:
        if outcome.infra_failure:
            rescored.append(outcome)
            continue
        gold = golds[outcome.position]
        new = _rescore(outcome, gold, metric)
        new = dataclasses.replace(new, samples=tuple(_rescore(s, gold, metric) for s in outcome.samples))
        changed += (new.score, new.score_ok) != (outcome.score, outcome.score_ok)
        rescored.append(new)
    return rescored, changed


def _rescore(item: Scored, gold: Any, metric: Metric) -> Scored:
    if item.infra_failure:
        return item
    score, error = score_answer(item.answer, gold, metric=metric)
    return dataclasses.replace(item, score=score, score_ok=error is None, score_error=error)
