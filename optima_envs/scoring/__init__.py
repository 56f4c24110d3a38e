"""Answer extraction and metrics: pure functions that turn a message into a score.

`extract_*` pull the final answer out of a message (`Extraction`), the metrics compare it with
the gold answer, and `score_response` composes the two into a `ScoreResult` that separates a
wrong answer (score 0.0) from an answer that could not be scored (`ok=False`).
"""

from optima_envs.scoring.extract import Extraction, ExtractionMethod, extract_boxed, extract_tag
from optima_envs.scoring.metrics import (
    choice_match,
    exact_match,
    math_equivalent,
    max_over_aliases,
    numeric_match,
    token_f1,
    triviaqa_f1,
    word_match,
)
from optima_envs.scoring.normalize import (
    normalize_answer,
    normalize_triviaqa,
    parse_bare_number,
    parse_number,
)
from optima_envs.scoring.result import Extractor, Metric, ScoreResult, score_answer, score_response

__all__ = [
    "Extraction",
    "ExtractionMethod",
    "Extractor",
    "Metric",
    "ScoreResult",
    "choice_match",
    "exact_match",
    "extract_boxed",
    "extract_tag",
    "math_equivalent",
    "max_over_aliases",
    "normalize_answer",
    "normalize_triviaqa",
    "numeric_match",
    "parse_bare_number",
    "parse_number",
    "score_answer",
    "score_response",
    "token_f1",
    "triviaqa_f1",
    "word_match",
]
