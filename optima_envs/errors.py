"""Typed exceptions for the environment suite: one base class, one subclass per failure."""

from __future__ import annotations


class OptimaError(Exception):
    """Base class of every error the Optima packages raise on purpose."""


class UnknownEnvError(OptimaError, KeyError):
    """Raised when `make` is given an id that is not registered."""

    def __str__(self) -> str:  # KeyError quotes its message; show it plainly.
        return str(self.args[0]) if self.args else ""


class DeprecatedEnvError(UnknownEnvError):
    """Raised when an id names an old version that has been replaced."""


class RegistrationError(OptimaError):
    """Raised when an env spec is registered twice or is malformed."""


class InvalidActionError(OptimaError, TypeError):
    """Raised when `step` gets an action of the wrong type or for an agent not in the game."""


class EpisodeEndedError(OptimaError, RuntimeError):
    """Raised when `step` is called after the episode has terminated or been truncated."""


class ResetNeededError(OptimaError, RuntimeError):
    """Raised when `step`, `snapshot` or `render` is called before `reset`."""


class InvalidSnapshotError(OptimaError, ValueError):
    """Raised when `restore` gets a snapshot taken from a different env or task."""


class ConfigError(OptimaError, ValueError):
    """Raised when an env, task or trainer option has an impossible value."""


class PluginError(ConfigError):
    """Raised when an installed plug-in (an entry point) cannot be imported or is not what its registry takes."""


class DataError(OptimaError, ValueError):
    """Raised when a dataset file is missing or a row is malformed (names file and line/row)."""


class DataNotFoundError(DataError, FileNotFoundError):
    """Raised when no dataset file exists at the path tried; the message says how to provide it."""


class ScoringError(OptimaError):
    """Raised inside a metric when an answer cannot be scored (recorded in infos, never scored 0)."""
