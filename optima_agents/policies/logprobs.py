"""Per-token log-probabilities of generated text: what the numbers mean, and pure functions that
tie them to an action's token ids.

Meaning, the same for every backend: `Action.logprobs[k]` is log p(token_ids[k] | prompt,
token_ids[:k]) under the distribution that token was drawn from, i.e. the log-softmax of the
model's logits divided by the temperature, restricted to the top-p nucleus and renormalised.
Under greedy decoding (temperature 0) it is the model's own distribution (temperature 1, no
nucleus), so the values equal a teacher-forced forward pass of the same model in the same dtype.
With `top_p == 1` (the default) the number is `log_softmax(logits / T)[token]`, what a trainer
recomputes from the model; with `top_p < 1` it is higher by -log(nucleus mass).

Backends report log-probs for the ids they generated; the stored reply is the *cleaned* text
and its canonical ids (`chat.clean_output`), usually the generated ids cut at the end-of-turn
token. `align_logprobs` keeps the log-probs when the stored ids are a prefix of the generated
ones and gives None otherwise (a re-encoded reply: its ids are not the tokens that were sampled,
so no sampled log-prob belongs to them).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

__all__ = ["align_logprobs", "check_logprob", "sampled_logprobs"]


def align_logprobs(generated_ids: Sequence[int], generated_logprobs: Sequence[float],
                   token_ids: Sequence[int]) -> tuple[float, ...] | None:
    """The log-probs of `token_ids`, taken from those of the generated ids they start.

    Args:
        generated_ids: the ids as the backend generated them (end-of-turn token, padding included).
        generated_logprobs: one log-prob per generated id.
        token_ids: the ids stored for the reply (e.g. `CleanedOutput.token_ids`).

    Returns:
        `generated_logprobs[:len(token_ids)]` when `token_ids` is a prefix of `generated_ids`;
        None when it is not (the stored ids were re-encoded and were never sampled as such).

    Raises:
        ValueError: the generated ids and their log-probs differ in length (a backend bug).
    """
    if len(generated_ids) != len(generated_logprobs):
        raise ValueError(f"got {len(generated_logprobs)} log-probs for {len(generated_ids)} generated token ids; "
                         f"a backend must report exactly one per generated token")
    n = len(token_ids)
    if tuple(int(i) for i in generated_ids[:n]) != tuple(int(i) for i in token_ids):
        return None
    return tuple(float(v) for v in generated_logprobs[:n])


def sampled_logprobs(token_ids: Sequence[int], positions: Sequence[Mapping[int, Any] | None]) -> tuple[float, ...]:
    """Each generated token's log-prob, from per-position maps token id -> log-prob.

    This is the shape vLLM returns (`CompletionOutput.logprobs`: a list, or a `FlatLogprobs`
    that reads like one, of `{token_id: Logprob}` per position); a value may be a number or an
    object with a `.logprob` attribute. Only the sampled token's entry is read.

    Raises:
        ValueError: the counts differ, a position lacks its sampled token, or a value is not a
            log-probability (not a number, NaN, or above 0).
    """
    if len(positions) != len(token_ids):
        raise ValueError(f"got log-probs for {len(positions)} positions but {len(token_ids)} generated tokens")
    out = []
    for k, (token, entry) in enumerate(zip(token_ids, positions)):
        if not entry or token not in entry:
            raise ValueError(f"position {k} has no log-prob for its sampled token {token} "
                             f"(has {sorted(entry) if entry else 'none'})")
        value = entry[token]
        out.append(check_logprob(getattr(value, "logprob", value), f"log-prob of token {token} at position {k}"))
    return tuple(out)


#: Log-probs above 0 are impossible; this much is allowed for float rounding of a near-certain token.
_ROUNDING = 1e-4


def check_logprob(value: Any, where: str) -> float:
    """`value` as a float when it is a log-probability (a real number, not NaN, at most 0 up to
    rounding); -inf passes (an impossible token). Raises ValueError naming `where` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where} must be a number, got {type(value).__name__} {value!r}")
    value = float(value)
    if math.isnan(value) or value > _ROUNDING:
        raise ValueError(f"{where} must be a log-probability (<= 0), got {value!r}")
    return value
