"""Where a sampled dialogue's answer lay, whether its partners told the answering seat what it
lacked, and whether every answer in it was given by a seat that could know it.

The record keeps the messages but not the evidence split, so the env that sampled it is reset
with the record's seed and index (the split is drawn before anything else) to recover it.
"""

from __future__ import annotations

from typing import Any

from optima_envs.core.places import answer_place, answers_grounded, partners_informed, seat_messages
from optima_envs.errors import ConfigError
from optima_train.examples.views import reset_as

__all__ = ["record_grounded", "record_informed", "record_place"]


def _replay(env: Any, record: Any) -> tuple[Any, Any, list[tuple[int, str, bool]]]:
    """Reset `env` to the record's instance and deal; its task, state, and the record's messages as
    (seat, text, answered) triples."""
    reset_as(env, record, "checking")
    return env.unwrapped.task, env.unwrapped.state, seat_messages(record.turns, record.agents)


def record_informed(env: Any, record: Any) -> bool | None:
    """`partners_informed` for one `EpisodeRecord`, on the (unwrapped) env it was sampled from.

    Raises:
        ValueError: the env rebuilds another instance (it is not the one the record came from).
    """
    task, state, messages = _replay(env, record)
    return partners_informed(task, state.instance, state.evidence, [(seat, text) for seat, text, _ in messages])


def record_place(env: Any, record: Any) -> str:
    """`answer_place` of one `EpisodeRecord` (`alone`, `partner` or `named`), on the (unwrapped)
    env it was sampled from.

    Raises:
        ConfigError: the task deals no private evidence (debate), so no answer has a place.
        ValueError: the env rebuilds another instance (it is not the one the record came from).
    """
    task, state, _ = _replay(env, record)
    place = answer_place(task, state.instance, state.evidence)
    if place is None:
        raise ConfigError(f"selection.group_by: question_and_place needs a task whose agents hold private evidence; "
                          f"{record.env_id} deals none (use group_by: question)")
    return place


def record_grounded(env: Any, record: Any) -> bool:
    """`answers_grounded` for one `EpisodeRecord`, on the (unwrapped) env it was sampled from.

    Raises:
        ConfigError: the task's evidence marks no supporting facts, so no answer can be checked.
        ValueError: the env rebuilds another instance (it is not the one the record came from).
    """
    _, state, messages = _replay(env, record)
    grounded = answers_grounded(state.instance, state.evidence, messages)
    if grounded is None:
        raise ConfigError(f"selection.grounded_only needs a task whose evidence marks its supporting facts; "
                          f"{record.env_id} instance {record.instance_id!r} marks none (set grounded_only: false)")
    return grounded
