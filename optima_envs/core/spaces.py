"""Spaces for text dialogue.

Gymnasium's `Text` space only accepts a fixed character set; dialogue actions are arbitrary
Unicode, so these spaces accept any string and sample random Unicode (seeded by the space's
own RNG, as Gymnasium spaces are), which makes PettingZoo's API tests exercise odd inputs.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
from gymnasium import spaces

from optima_envs.core.tokens import MAX_TOKEN_ID

# Printable ranges, plus a few troublemakers (RTL, combining marks, emoji, CJK, NUL).
_CODEPOINT_RANGES = ((0x20, 0x7E), (0xA0, 0x24F), (0x590, 0x5FF), (0x300, 0x36F),
                     (0x4E00, 0x4FFF), (0x1F300, 0x1F5FF), (0x0, 0x1F))


def _random_text(rng: np.random.Generator, max_chars: int) -> str:
    length = int(rng.integers(0, max_chars + 1)) if max_chars else 0
    ranges = rng.integers(0, len(_CODEPOINT_RANGES), size=length)
    chars = [chr(int(rng.integers(_CODEPOINT_RANGES[r][0], _CODEPOINT_RANGES[r][1] + 1)))
             for r in ranges]
    return "".join(chars)


class MessageSpace(spaces.Space[Any]):
    """Any message: a `str`, or a mapping with `text` (str) and optional `token_ids` (ints).

    `sample()` returns random Unicode strings of up to `sample_max_chars` characters; longer
    messages are still valid actions (the env truncates and flags them).
    """

    def __init__(self, sample_max_chars: int = 64, seed: int | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.sample_max_chars = sample_max_chars

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        return _random_text(self.np_random, self.sample_max_chars)

    def contains(self, x: Any) -> bool:
        if isinstance(x, str):
            return True
        if isinstance(x, Mapping) and isinstance(x.get("text"), str):
            ids = x.get("token_ids")
            if ids is None:
                return True
            if not isinstance(ids, (list, tuple, np.ndarray)):
                return False
            in_range = all(isinstance(i, (int, np.integer)) and not isinstance(i, bool)
                           and 0 <= int(i) <= MAX_TOKEN_ID for i in ids)
            return in_range and (len(ids) > 0 or not x["text"])
        return False

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "MessageSpace()"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, MessageSpace)


class UnicodeText(spaces.Space[str]):
    """Any `str`; samples random Unicode of up to `sample_max_chars` characters."""

    def __init__(self, sample_max_chars: int = 32, seed: int | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.sample_max_chars = sample_max_chars

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        return _random_text(self.np_random, self.sample_max_chars)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "UnicodeText()"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, UnicodeText)


class AgentName(spaces.Space[Any]):
    """One of the agents' names (or None, where `allow_none`: nobody speaks after the end)."""

    def __init__(self, agents: tuple[str, ...], allow_none: bool = False, seed: int | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.agents, self.allow_none = agents, allow_none

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        return self.agents[int(self.np_random.integers(len(self.agents)))]

    def contains(self, x: Any) -> bool:
        return x in self.agents or (self.allow_none and x is None)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"AgentName({self.agents}, allow_none={self.allow_none})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, AgentName) and (other.agents, other.allow_none) == (self.agents, self.allow_none)


class DialogueObservationSpace(spaces.Dict):
    """The observation an agent gets: who it is, what it knows, what was said, whose turn it is.

    Keys: agent, role, question, system_prompt (str); evidence (tuple of str); transcript
    (tuple of {"speaker", "text"}); speaker (the agent to talk now, None after the end);
    turn, max_turns (int).
    """

    def __init__(self, agents: tuple[str, ...], max_turns: int = 10, seed: int | None = None):
        message = spaces.Dict({"speaker": AgentName(agents), "text": UnicodeText()})
        super().__init__({
            "agent": AgentName(agents),
            "role": UnicodeText(),
            "question": UnicodeText(),
            "evidence": spaces.Sequence(UnicodeText(), stack=False),
            "system_prompt": UnicodeText(),
            "transcript": spaces.Sequence(message, stack=False),
            "speaker": AgentName(agents, allow_none=True),
            "turn": spaces.Discrete(max_turns + 1),
            "max_turns": spaces.Discrete(max_turns + 1),
        }, seed=seed)
