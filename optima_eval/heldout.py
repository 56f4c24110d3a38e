"""The held-out set: the questions every model is judged on, the same for every caller.

Question i is instance `first_index + i` with the evidence dealt by reset seed `seed + i`. The
training loops' evaluations (`optima_eval.evaluation`), the leaderboard's cells, `optima eval`
and the diagnostics all build their episodes or questions from one `HeldOut`, so a checkpoint's
evaluation during training and its board cell play the same dialogues.

    held = HeldOut.registered("synth-hop-ia", count=200)   # the env's registered held-out split
    held.specs()        # EpisodeSpecs for the rollout engine
    held.questions()    # Questions (instance + evidence deal) for the systems
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

__all__ = ["HELDOUT_SEED", "HeldOut", "registered_kwargs"]

#: Reset seed of held-out question 0. Far from the training seeds (which count up from
#: `run.seed`), so a held-out deal never repeats a training one, and independent of the run
#: seed, so runs with different seeds meet the same held-out dialogues.
HELDOUT_SEED = 1_000_000


def registered_kwargs(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The `make()` kwargs of `env_id`'s held-out questions: its registered held-out split
    (`EnvSpec.heldout_kwargs`) with `env_kwargs` on top.

    Raises:
        UnknownEnvError: `env_id` is not registered.
    """
    import optima_envs

    return {**optima_envs.spec(env_id).heldout_kwargs, **dict(env_kwargs or {})}


@dataclass(frozen=True)
class HeldOut:
    """`count` questions of `env_id` (made with `env_kwargs`) from `first_index`, dealt by `seed + i`."""

    env_id: str
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    count: int = 200
    seed: int = HELDOUT_SEED
    first_index: int = 0

    @classmethod
    def registered(cls, env_id: str, env_kwargs: Mapping[str, Any] | None = None, **fields: Any) -> "HeldOut":
        """The env's registered held-out split (`EnvSpec.heldout_kwargs`), with `env_kwargs` on top."""
        return cls(env_id, registered_kwargs(env_id, env_kwargs), **fields)

    def specs(self, options: Mapping[str, Any] | None = None) -> list[Any]:
        """The rollout engine's `EpisodeSpec`s, with `options` as every episode's reset options."""
        from optima_agents.rollout import EpisodeSpec

        return [EpisodeSpec(seed=self.seed + i, index=self.first_index + i, options=dict(options or {}))
                for i in range(self.count)]

    def questions(self) -> list[Any]:
        """The systems' `Question`s: each instance with the evidence its reset deals."""
        from optima_eval.systems.base import Question

        env = self._env
        questions = []
        for i in range(self.count):
            env.reset(seed=self.seed + i, options={"index": self.first_index + i})
            state = env.state
            questions.append(Question(position=i, seed=self.seed + i, index=self.first_index + i,
                                      instance=state.instance, evidence=state.evidence))
        return questions

    @functools.cached_property
    def _env(self) -> Any:
        """The env, made once (its data read once) for the questions and the data identity."""
        import optima_envs

        return optima_envs.make(self.env_id, **dict(self.env_kwargs))

    @property
    def task(self) -> Any:
        """The env's composed `Task` (None for an env without one)."""
        return getattr(getattr(self._env, "unwrapped", self._env), "task", None)

    @property
    def source(self) -> Any:
        """The task's data source (None for a task without one)."""
        return getattr(self.task, "source", None)

    @functools.cached_property
    def data(self) -> tuple[dict[str, Any] | None, tuple[Path, ...]]:
        """What identifies the task's data and the local files it reads (`data_identity`); read once."""
        from optima_envs.data.identity import data_identity

        return data_identity(self.source)
