"""What the reward reads of a sampled episode."""

from __future__ import annotations

from typing import Any, Hashable

from optima_envs.rewards import DialogueSample, Turn

__all__ = ["dialogue_sample"]


def dialogue_sample(record: Any, *, group: Hashable) -> DialogueSample:
    """What the reward reads of a finished `EpisodeRecord`, compared within `group` (the
    training loops group by question, `record.instance_id`)."""
    return DialogueSample(group=group, agents=tuple(record.agents),
                          utterances=tuple(Turn(t.speaker, t.text) for t in record.turns),
                          tokens=int(record.total_tokens), score=record.score, score_ok=record.score_ok,
                          infra_failed=record.infra_failure)
