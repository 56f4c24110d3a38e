"""Held-out evaluation of any checkpoint: greedy dialogues, mean score and tokens with CIs.

    result, records = evaluate("runs/isft/iter_001/training/checkpoint", "synth-hop-ia",
                               env_kwargs={"split": "validation"}, episodes=200)
    result.score.mean, result.score.low, result.score.high, result.tokens.mean

**Which episodes count.** Score is averaged over *scored* episodes only; an infrastructure
failure or a metric that could not score is counted (`excluded`) and left out, never counted
as 0. Tokens are averaged over every episode that ran (scoring failures still spent tokens).

**Intervals.** 95% percentile-bootstrap intervals of the mean (2,000 resamples from a fixed
seed, so the same records always give the same interval). Why bootstrap rather than a t-interval:
per-dialogue scores are bounded and usually bimodal (F1 mostly 0 or 1) and token counts are
skewed; the bootstrap assumes no shape, and with the usual n >= 200 it agrees with a t-interval
where that one is valid.

**The held-out set** is the same for every model (`optima_eval.heldout.HeldOut`): episode i
has reset seed `seed + i` and instance index `first_index + i`, so every checkpoint meets the
same questions and the same evidence deals, and the leaderboard's cells play them too.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from optima_eval.heldout import HELDOUT_SEED, HeldOut

__all__ = ["EvalResult", "Interval", "bootstrap_interval", "build_policy", "evaluate", "summarize"]


@dataclass(frozen=True)
class Interval:
    """A mean and its confidence interval over `n` values (NaN when n == 0)."""

    mean: float
    low: float
    high: float
    n: int
    confidence: float = 0.95

    def __post_init__(self) -> None:
        # Result files store the NaN of an empty interval as null (strict JSON); read it back as NaN.
        for name in ("mean", "low", "high"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, float("nan"))

    def __str__(self) -> str:
        return f"{self.mean:.3f} [{self.low:.3f}, {self.high:.3f}]"


def bootstrap_interval(values: Sequence[float], *, confidence: float = 0.95, resamples: int = 2000,
                       seed: int = 0) -> Interval:
    """Percentile-bootstrap interval of the mean (deterministic for a given seed)."""
    x = np.asarray([float(v) for v in values], dtype=float)
    if x.size == 0:
        return Interval(float("nan"), float("nan"), float("nan"), 0, confidence)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return Interval(float(x.mean()), float(low), float(high), int(x.size), confidence)


@dataclass(frozen=True)
class EvalResult:
    """Held-out figures of one model on one env."""

    env_id: str
    env_kwargs: Mapping[str, Any]
    model: str
    episodes: int
    score: Interval
    tokens: Interval
    excluded: Mapping[str, int]
    end_reasons: Mapping[str, int]
    mean_turns: float
    sampling: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "env_kwargs": {k: str(v) if not isinstance(v, (int, float, bool, type(None))) else v
                                               for k, v in self.env_kwargs.items()}}


def summarize(records: Sequence[Any], *, env_id: str = "", env_kwargs: Mapping[str, Any] | None = None,
              model: str = "", sampling: Mapping[str, Any] | None = None) -> EvalResult:
    """Figures of a list of `EpisodeRecord`s (see the module doc for which episodes count)."""
    ran = [r for r in records if not r.infra_failure]
    scored = [r for r in ran if r.scored]
    excluded = {"infra_failure": len(records) - len(ran), "scoring_failure": len(ran) - len(scored)}
    return EvalResult(
        env_id=env_id, env_kwargs=dict(env_kwargs or {}), model=model, episodes=len(records),
        score=bootstrap_interval([r.score for r in scored]), tokens=bootstrap_interval([r.total_tokens for r in ran]),
        excluded=excluded, end_reasons=dict(Counter(r.end_reason for r in records)),
        mean_turns=float(np.mean([r.num_turns for r in ran])) if ran else float("nan"),
        sampling=dict(sampling or {}),
    )


def build_policy(backend: str, model: str, sampling: Any, *, dtype: str | None = "bfloat16",
                 batch_size: int | None = None, device: str | None = None,
                 backend_kwargs: Mapping[str, Any] | None = None) -> Any:
    """A policy for `model` on any registered backend (`optima_agents.policies.make_policy`).

    `dtype`, `batch_size` and `device` reach the backends that declare them (`BackendSpec.options`);
    `backend_kwargs` go to the backend as they are (e.g. `base_urls` for "openai", engine options
    for "vllm").
    """
    from optima_agents.policies import make_policy

    return make_policy(backend, model, sampling=sampling, dtype=dtype, batch_size=batch_size, device=device,
                       **dict(backend_kwargs or {}))


def evaluate(policy: Any, env_id: str, *, env_kwargs: Mapping[str, Any] | None = None, episodes: int = 200,
             first_index: int = 0, seed: int = HELDOUT_SEED, options: Mapping[str, Any] | None = None,
             max_live: int | None = None, progress: bool = True, model_name: str | None = None,
             ) -> tuple[EvalResult, list[Any]]:
    """Play `episodes` held-out dialogues with `policy` (a Policy, or a model name / folder for a
    greedy `HFPolicy`) and summarise them.

    Args:
        policy: the policy (its sampling is used as is), or a model to load greedily.
        env_id, env_kwargs: the env and its options (e.g. `{"split": "validation"}`).
        episodes, first_index, seed: the held-out set (see the module doc).
        options: extra reset options for every episode (e.g. `{"format_instruction": "..."}`).

    Returns:
        `(EvalResult, records)`.
    """
    from optima_agents.policies import SamplingParams
    from optima_agents.rollout import RolloutEngine

    if isinstance(policy, str):
        model_name = model_name or policy
        policy = build_policy("hf", policy, SamplingParams(temperature=0.0))
    engine = RolloutEngine(env_id, policy, env_kwargs=dict(env_kwargs or {}), max_live=max_live, progress=progress)
    records = engine.run(HeldOut(env_id, dict(env_kwargs or {}), episodes, seed, first_index).specs(options))
    identity = policy.identity()
    result = summarize(records, env_id=env_id, env_kwargs=env_kwargs, model=model_name or str(identity.get("model", "")),
                       sampling=identity.get("sampling", {}))
    return result, records
