"""Contract checks, scripted players and dataset fixtures shipped with the package, for our envs
and yours. Importing it does not import pytest: these run in any script or test runner."""

from optima_envs.test.checks import (
    check_env,
    check_parallel_api,
    check_seed_determinism,
    check_snapshot_roundtrip,
)
from optima_envs.test.datasets import FIXTURES, env_kwargs
from optima_envs.test.scripted import play, random_messages, scripted, share_evidence_then

__all__ = ["FIXTURES", "check_env", "check_parallel_api", "check_seed_determinism", "check_snapshot_roundtrip",
           "env_kwargs", "play", "random_messages", "scripted", "share_evidence_then"]
