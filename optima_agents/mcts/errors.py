"""Typed exceptions of the MCTS planner: one base class, one subclass per failure."""

from __future__ import annotations

from optima_envs.errors import OptimaError


class MCTSError(OptimaError):
    """Base class of every error the MCTS planner raises on purpose."""


class MCTSConfigError(MCTSError, ValueError):
    """Raised when an `MCTSConfig` or `PairConfig` field is out of range or contradicts another."""


class TreeInvariantError(MCTSError, AssertionError):
    """Raised when `Tree.check_invariants` finds a visit count, value or expansion that cannot be."""


class EnvNotSearchableError(MCTSError, TypeError):
    """Raised when the planner is given an env without `snapshot()`/`restore()`/`current_speaker`."""
