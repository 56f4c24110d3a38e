"""Choosing each next token from llama.cpp's logits: greedy, or seeded temperature / top-p draws.

The llama.cpp backend samples in numpy, not with llama.cpp's sampler chain, for three reasons:
- **One row, one generator.** Each row draws from its own `numpy.random.Generator`, seeded with
  the row's seed (`base.request_row_seed`), so a sampled reply does not depend on which other
  requests shared the batch, as with the other backends.
- **The same rule as `HFPolicy`.** Temperature, then the nucleus (the smallest set of most likely
  tokens whose mass reaches `top_p`, including the token that crosses it), then one uniform draw
  mapped through the cumulative distribution.
- **Log-probs under the distribution drawn from** (`optima_agents.policies.logprobs`): the
  chosen token's log-probability after temperature and the renormalised nucleus; under greedy
  decoding, the model's own log-softmax at the argmax. llama.cpp's samplers do not report it.

The logits are float32 from llama.cpp; the arithmetic here is float64, so sampling adds no
rounding of its own.
"""

from __future__ import annotations

import numpy as np

from optima_agents.policies.base import SamplingParams

__all__ = ["RowSampler"]


class RowSampler:
    """Picks one row's tokens under `sampling`, drawing from a generator seeded with `seed`.

    Args:
        sampling: temperature 0 is greedy (argmax; the seed is unused).
        seed: the row's seed (`request_row_seed`).
    """

    def __init__(self, sampling: SamplingParams, seed: int):
        self.temperature = float(sampling.temperature)
        self.top_p = float(sampling.top_p)
        self.rng = np.random.default_rng(seed) if self.temperature > 0 else None

    def choose(self, logits: np.ndarray, *, want_logprob: bool = False) -> tuple[int, float | None]:
        """The next token id for one row's logits, and its log-probability when asked.

        Args:
            logits: the row's `(n_vocab,)` float32 logits.
            want_logprob: also return the chosen token's log-probability (see the module doc).

        Returns:
            `(token_id, logprob or None)`.
        """
        if self.rng is None:
            token = int(np.argmax(logits))
            if not want_logprob:
                return token, None
            scores = logits.astype(np.float64)
            return token, float(scores[token] - _logsumexp(scores))
        scores = logits.astype(np.float64) / self.temperature
        logp = scores - _logsumexp(scores)
        probs = np.exp(logp)
        if self.top_p < 1.0:
            order = np.argsort(-probs, kind="stable")
            sorted_probs = probs[order]
            before = np.cumsum(sorted_probs) - sorted_probs  # mass strictly before each token
            sorted_probs[before >= self.top_p] = 0.0
            probs = np.zeros_like(probs)
            probs[order] = sorted_probs
        cdf = np.cumsum(probs)
        draw = self.rng.random() * cdf[-1]
        # The first token whose cumulative mass exceeds the draw: never one the nucleus cut
        # (its mass is 0, so an earlier token already exceeds the draw).
        token = min(int(np.searchsorted(cdf, draw, side="right")), len(cdf) - 1)
        if not want_logprob:
            return token, None
        value = logp[token]
        if self.top_p < 1.0:
            value = min(value - np.log(probs.sum()), 0.0)
        return token, float(value)


def _logsumexp(scores: np.ndarray) -> float:
    top = float(scores.max())
    return top + float(np.log(np.exp(scores - top).sum()))
