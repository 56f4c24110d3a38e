"""Message ablation of a dialogue system: the same held-out questions played again with the
partners' messages removed from every agent's view, or swapped for another question's messages
at the same turn positions (`optima_envs.core.ablation` does it inside the env).

The drop in score, `comm_gain = score - score_ablated`, is what talking contributed: a pair
whose listener copies the speaker loses everything under the swap, and a pair that ignores its
partner loses nothing. Donors for the swap are the base run's own dialogues, question `p`
taking the next question's (a fixed derangement, so no question keeps its own messages); on a
task with a `swap_group` (a game whose moves name its own items), the next question of the same
group, so the swapped message can be read and only what it says changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable, Mapping, Sequence

from optima_envs.core.ablation import ABLATION_MODES
from optima_envs.errors import ConfigError

__all__ = ["ABLATION_MODES", "MessageAblation", "swap_donors", "swap_groups"]

Transcript = Sequence[Mapping[str, str]]


@dataclass(frozen=True)
class MessageAblation:
    """How a cell's dialogues are ablated: `mode` ("remove" or "swap") and, for "swap", each
    held-out position's donor transcript."""

    mode: str
    donors: Mapping[int, Transcript] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in ABLATION_MODES:
            raise ConfigError(f"a message ablation's mode is one of {list(ABLATION_MODES)}, got {self.mode!r}")

    @classmethod
    def swap(cls, outcomes: Sequence[Any], task: Any, questions: Sequence[Any]) -> "MessageAblation":
        """The swap of a base run's dialogues (`outcomes` of `questions`): each question takes the
        transcript of the next one, of the same swap group where `task` has one."""
        return cls("swap", swap_donors({o.position: o.transcript for o in outcomes}, swap_groups(task, questions)))

    def options(self, position: int) -> dict[str, Any]:
        """The env's reset option for the question at `position`."""
        if self.mode == "remove":
            return {"ablation": {"mode": "remove"}}
        if position not in self.donors:
            raise ConfigError(f"the swap ablation has no donor dialogue for held-out position {position}")
        messages = [{"turn": turn, "text": m["text"]} for turn, m in enumerate(self.donors[position])]
        return {"ablation": {"mode": "swap", "messages": messages}}


def swap_donors(transcripts: Mapping[int, Transcript],
                groups: Mapping[int, Hashable] | None = None) -> dict[int, Transcript]:
    """Position -> the transcript of the next position in order (cyclically), the next one in the
    same group where `groups` gives each position's group and another position shares it.

    Raises:
        ConfigError: fewer than two transcripts (a swap needs another question's messages).
    """
    positions = sorted(transcripts)
    if len(positions) < 2:
        raise ConfigError(f"a swap ablation needs at least two held-out dialogues, got {len(positions)}")
    donors = {}
    for i, p in enumerate(positions):
        after = positions[i + 1:] + positions[:i]
        same = [q for q in after if groups is not None and groups[q] == groups[p]]
        donors[p] = transcripts[(same or after)[0]]
    return donors


def swap_groups(task: Any, questions: Sequence[Any]) -> dict[int, Hashable] | None:
    """Each question's swap group by position (`Task.swap_group`), or None for a task without one."""
    group = getattr(task, "swap_group", None)
    return None if group is None else {q.position: group(q.instance) for q in questions}
