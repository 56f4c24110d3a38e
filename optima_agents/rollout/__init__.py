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
from optima_agents.rollout.scheduling import DEFAULT_MAX_INFLIGHT, SCHEDULINGS, Scheduling

__all__ = [
    "DEFAULT_MAX_INFLIGHT",
    "EnvFactory",
    "EpisodeRecord",
    "EpisodeSpec",
    "RecordHook",
    "RolloutEngine",
    "RolloutStats",
    "SCHEDULINGS",
    "Scheduling",
    "TurnRecord",
    "derive_seed",
    "episode_specs",
    "rollout",
]
