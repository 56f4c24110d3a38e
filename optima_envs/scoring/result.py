"""Score one response end to end: extract the answer, apply the metric, record what happened.

The rule this module enforces: a missing answer is a wrong answer (score 0.0, `ok=True`), but
an answer that could not be scored is a recorded failure (score `None`, `ok=False`, with the
error), never a silent 0 that would be charged to the policy. `score_response` is the one place
this happens: `DialogueEnv` scores a dialogue's final answer with it too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from optima_envs.errors import ScoringError
from optima_envs.scoring.extract import Extraction

__all__ = ["Extractor", "Metric", "ScoreResult", "score_answer", "score_response"]

Extractor = Callable[[str], Extraction]
"""Maps a whole message to its `Extraction` (answer `None` when there is none, never blank);
never raises."""

Metric = Callable[[str, Any], float]
"""Scores an extracted answer against the gold in [0, 1]; raises `ScoringError` (or
`TimeoutError`) when the pair cannot be scored."""


@dataclass(frozen=True)
class ScoreResult:
    """The outcome of scoring one response.

    Attributes:
        score: The metric's value in [0, 1], 0.0 for a missing answer, `None` when scoring failed.
        ok: False exactly when scoring failed (then `error` says why).
        answer: The extracted answer, or `None`.
        extraction_method: The extraction filter that found the answer, or "none".
        fallback: True when a fallback filter found the answer.
        error: The failure message when `ok` is False, else `None`.
    """

    score: float | None
    ok: bool
    answer: str | None
    extraction_method: str
    fallback: bool
    error: str | None

    def to_info(self) -> dict[str, float | bool | str | None]:
        """A plain dict of Python scalars for env `infos` (deterministic: no timings)."""
        return asdict(self)


def score_response(text: str, gold: Any, *, extractor: Extractor, metric: Metric) -> ScoreResult:
    """Extract the answer from `text` and score it against `gold`.

    No answer (which includes an empty one, `<A></A>`) scores 0.0 with `ok=True` and the
    metric is not called. A `ScoringError` or `TimeoutError` from the metric gives
    `score=None`, `ok=False` and the error message; any other exception is a bug and
    propagates.

    Args:
        text: One message (in a dialogue, the last message that gave an answer).
        gold: Whatever `metric` takes as its second argument (a task's metric takes the
            `TaskInstance`).
        extractor: E.g. `extract_tag` or `functools.partial(extract_boxed, strict=True)`.
        metric: E.g. `token_f1` or `functools.partial(max_over_aliases, token_f1)`.

    Returns:
        The `ScoreResult`.
    """
    extraction = extractor(text)
    score, error = score_answer(extraction.answer, gold, metric=metric)
    return ScoreResult(score=score, ok=error is None, error=error, answer=extraction.answer,
                       extraction_method=extraction.method, fallback=extraction.fallback)


def score_answer(answer: str | None, gold: Any, *, metric: Metric) -> tuple[float | None, str | None]:
    """The metric on an answer already extracted: `(score, None)`, `(0.0, None)` for no answer,
    or `(None, error)` when the metric cannot score it (`ScoringError`, `TimeoutError`).

    Also what re-scores a stored answer when a metric changes, with no model run again."""
    if answer is None:
        return 0.0, None
    try:
        return float(metric(answer, gold)), None
    except (ScoringError, TimeoutError) as error:
        return None, f"{type(error).__name__}: {error}"
