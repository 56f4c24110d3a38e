"""The batched rollout engine and the episode records it produces."""

from optima_agents.rollout.engine import (
    EnvFactory,
    EpisodeSpec,
    RecordHook,
    RolloutEngine,
    RolloutStats,
    derive_seed,
    episode_specs,
    rollout,
)
from optima_agents.rollout.records import EpisodeRecord, TurnRecord

__all__ = [
    "EnvFactory",
    "EpisodeRecord",
    "EpisodeSpec",
    "RecordHook",
    "RolloutEngine",
    "RolloutStats",
    "TurnRecord",
    "derive_seed",
    "episode_specs",
    "rollout",
]
