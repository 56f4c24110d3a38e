"""Contract checks and scripted players shipped with the package, for our envs and yours."""

from optima_envs.test.checks import (
    check_env,
    check_parallel_api,
    check_seed_determinism,
    check_snapshot_roundtrip,
)
from optima_envs.test.scripted import play, random_messages, scripted, share_evidence_then

__all__ = ["check_env", "check_parallel_api", "check_seed_determinism", "check_snapshot_roundtrip", "play",
           "random_messages", "scripted", "share_evidence_then"]
