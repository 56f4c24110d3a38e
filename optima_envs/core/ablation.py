"""Message ablation: what an agent sees of its partners' messages, for telling whether a score
came from talking.

`reset(options={"ablation": {...}})` changes only the observations: the dialogue is played,
recorded, costed and scored as usual, but the ablated agents' views of the other agents'
messages are altered.

- `{"mode": "remove"}`: the other agents' messages are left out of the view, so each agent sees
  only its own turns (a dialogue in which nobody hears anybody).
- `{"mode": "swap", "messages": [{"turn": t, "text": ...}, ...]}`: each message of another
  agent is shown with the text another episode had at the same turn position (the donor
  messages, typically a different question's dialogue); a turn the donor has no message for is
  left out. In the emergent-communication literature this is the test that a listener uses a
  message: replaced by another episode's, its accuracy should fall to chance.
- `"agents": [...]` (optional) limits the ablation to those agents' views (default: every agent).

Pure functions over the env's messages; the env applies them in `observations_for`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from optima_envs.core.text import first_unencodable
from optima_envs.core.types import Message
from optima_envs.errors import ConfigError

__all__ = ["ABLATION_MODES", "Ablation", "ablated_transcript", "parse_ablation"]

ABLATION_MODES = ("swap", "remove")


@dataclass(frozen=True)
class Ablation:
    """A checked ablation: its mode, the donor texts by turn (swap), and whose views it alters
    (None: every agent's)."""

    mode: str
    donor: Mapping[int, str]
    agents: frozenset[str] | None = None

    def applies_to(self, agent: str) -> bool:
        return self.agents is None or agent in self.agents


def parse_ablation(value: Any, agents: Sequence[str]) -> Ablation:
    """The `ablation` reset option as an `Ablation`, or a ConfigError that says what is wrong."""
    example = "{'mode': 'remove'} or {'mode': 'swap', 'messages': [{'turn': 0, 'text': '...'}]}"
    if not isinstance(value, Mapping):
        raise ConfigError(f"options['ablation'] must be a dict such as {example}, got {type(value).__name__}")
    unknown = sorted(set(value) - {"mode", "messages", "agents"})
    if unknown:
        raise ConfigError(f"options['ablation'] has unknown key(s) {unknown}; its keys: mode, messages, agents")
    mode = value.get("mode")
    if mode not in ABLATION_MODES:
        raise ConfigError(f"options['ablation']['mode'] must be one of {list(ABLATION_MODES)}, got {mode!r}")
    messages = value.get("messages")
    if mode == "remove" and messages is not None:
        raise ConfigError("options['ablation'] in mode 'remove' takes no messages (they are for mode 'swap')")
    donor = _donor(messages) if mode == "swap" else {}
    chosen = value.get("agents")
    if chosen is not None:
        if isinstance(chosen, str) or not all(isinstance(a, str) for a in chosen):
            raise ConfigError(f"options['ablation']['agents'] must be a list of agent names, got {chosen!r}")
        strangers = sorted(set(chosen) - set(agents))
        if strangers:
            raise ConfigError(f"options['ablation']['agents'] names {strangers}, not agents of this env {list(agents)}")
    return Ablation(mode, donor, None if chosen is None else frozenset(chosen))


def _donor(messages: Any) -> dict[int, str]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise ConfigError("options['ablation'] in mode 'swap' needs 'messages': a list of {'turn': int, 'text': str}, "
                          f"the donor episode's messages; got {type(messages).__name__}")
    donor: dict[int, str] = {}
    for i, m in enumerate(messages):
        turn, text = (m.get("turn"), m.get("text")) if isinstance(m, Mapping) else (None, None)
        if isinstance(turn, bool) or not isinstance(turn, int) or turn < 0 or not isinstance(text, str):
            raise ConfigError(f"options['ablation']['messages'][{i}] must be {{'turn': int >= 0, 'text': str}}, got {m!r}")
        if turn in donor:
            raise ConfigError(f"options['ablation']['messages'] gives turn {turn} twice")
        if first_unencodable(text) is not None:
            raise ConfigError(f"options['ablation']['messages'][{i}] holds text UTF-8 cannot encode; pass valid text")
        donor[turn] = text
    return donor


def ablated_transcript(messages: Sequence[Message], viewer: str, ablation: Ablation | None) -> tuple[dict[str, Any], ...]:
    """`viewer`'s transcript: every message as the env recorded it, except that, under an
    ablation that applies to the viewer, the other agents' messages are removed or swapped."""
    if ablation is None or not ablation.applies_to(viewer):
        return tuple(m.as_observation() for m in messages)
    out = []
    for m in messages:
        if m.speaker == viewer:
            out.append(m.as_observation())
        elif ablation.mode == "swap" and m.turn in ablation.donor:
            out.append({"speaker": m.speaker, "text": ablation.donor[m.turn]})
    return tuple(out)
