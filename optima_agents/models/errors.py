"""Typed exceptions for model lookup and download.

They derive from `OptimaError` so that one `except OptimaError` in the CLI catches every failure
we raise on purpose, and from the matching builtin so that generic callers still work
(`except LookupError`, `except RuntimeError`).
"""

from __future__ import annotations

from optima_envs.errors import OptimaError

__all__ = ["ChecksumMismatchError", "ModelNotFoundError", "ModelPullError"]


class ModelNotFoundError(OptimaError, LookupError):
    """Raised when a name, folder or hub id does not lead to a usable model; says how to get one."""

    def __str__(self) -> str:  # LookupError subclasses like KeyError quote; show it plainly.
        return str(self.args[0]) if self.args else ""


class ModelPullError(OptimaError, RuntimeError):
    """Raised when downloading, converting or verifying a registry model fails."""


class ChecksumMismatchError(ModelPullError):
    """Raised when a downloaded file's sha256 differs from the one pinned in the registry."""
