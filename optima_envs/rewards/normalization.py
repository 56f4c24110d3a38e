"""`max_tokens` for the token term `tokens / max_tokens`, chosen within a group or from a batch.

- ``group`` (the default, the paper's choice for ranking): `max_tokens` is the largest token
  count among the dialogues of the same group (all samples for one question), so the longest
  sample of a question costs 1 and the others less. A group whose dialogues all have 0 tokens
  costs 0.
- ``percentile``: `max_tokens` is the `percentile`-th percentile (default 95) of the token counts
  of a reference batch (by default every dialogue being scored together, e.g. one iteration's
  samples), the same for every group. Costs are not clipped: a dialogue longer than the
  percentile costs more than 1, which is the point of using a percentile (outliers are not
  what sets the scale). This makes rewards comparable across questions.

Only dialogues that take part in ranking should be passed (infra failures excluded), so a
failed, empty sample never sets the scale.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Hashable, Literal, Sequence

import numpy as np

from optima_envs.errors import ConfigError

__all__ = ["TokenNormalization", "max_tokens_for"]

TokenNormalization = Literal["group", "percentile"]


def max_tokens_for(tokens: Sequence[int], groups: Sequence[Hashable], *, mode: TokenNormalization = "group",
                   percentile: float = 95.0, reference: Sequence[int] | None = None) -> list[float]:
    """The `max_tokens` denominator for each dialogue.

    Args:
        tokens: total tokens of each dialogue.
        groups: the group key of each dialogue (e.g. its instance id), same length as `tokens`.
        mode: "group" or "percentile" (see the module docstring).
        percentile: for "percentile", in (0, 100].
        reference: for "percentile", the batch the percentile is taken over (default `tokens`).

    Returns:
        One denominator per dialogue (0.0 means "no tokens to normalise by": the cost is 0).

    Raises:
        ConfigError: unknown mode, a percentile outside (0, 100], or mismatched lengths.
    """
    if len(tokens) != len(groups):
        raise ConfigError(f"max_tokens_for: {len(tokens)} token counts but {len(groups)} group keys")
    if mode == "group":
        best: dict[Hashable, int] = defaultdict(int)
        for t, g in zip(tokens, groups):
            best[g] = max(best[g], int(t))
        return [float(best[g]) for g in groups]
    if mode == "percentile":
        if not 0 < percentile <= 100:
            raise ConfigError(f"reward.token_percentile must be in (0, 100], got {percentile}")
        ref = list(tokens if reference is None else reference)
        value = float(np.percentile(np.asarray(ref, dtype=float), percentile)) if ref else 0.0
        return [value] * len(tokens)
    raise ConfigError(f"reward.token_normalization must be 'group' or 'percentile', got {mode!r}")
