"""Whether a sampled dialogue's partners told the answering seat what it lacked.

The record keeps the messages but not the evidence split, so the env that sampled it is reset
with the record's seed and index (the split is drawn before anything else) to recover it.
"""

from __future__ import annotations

from typing import Any

from optima_envs.core.places import partners_informed
from optima_train.examples.views import reset_as

__all__ = ["record_informed"]


def record_informed(env: Any, record: Any) -> bool | None:
    """`partners_informed` for one `EpisodeRecord`, on the (unwrapped) env it was sampled from.

    Raises:
        ValueError: the env rebuilds another instance (it is not the one the record came from).
    """
    reset_as(env, record, "checking")
    state = env.unwrapped.state
    seats = {name: i for i, name in enumerate(record.agents)}
    messages = [(seats[turn.speaker], turn.text) for turn in record.turns]
    return partners_informed(env.unwrapped.task, state.instance, state.evidence, messages)
