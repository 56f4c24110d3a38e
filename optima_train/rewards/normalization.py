"""`max_tokens` for the token term: defined in `optima_envs.rewards.normalization` (pure, usable below the trainers); kept
importable from here."""

from optima_envs.rewards.normalization import (
    TokenNormalization,
    max_tokens_for,
)

__all__ = ["TokenNormalization", "max_tokens_for"]
