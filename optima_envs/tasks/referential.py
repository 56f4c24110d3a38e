"""`referential-game`: a cooperative game with hidden information.

A speaker sees which of several invented objects (size, colour, material, shape) is the target
and describes it; a listener, who sees the same objects in its own shuffled order under its own
labels (the speaker numbers them, the listener letters them), picks one with `<A>letter</A>`.
The listener's first readable pick ends the game: 1 if it is the target, else 0.

Instance `i` of a split is generated from `np.random.default_rng([seed, split, i])`; both views
(their orders and labels) belong to the instance, so the same index is the same game everywhere.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, Sequence

import numpy as np

from optima_envs.core.places import always_partner
from optima_envs.core.task import Role, Task
from optima_envs.core.types import Evidence, Message, TaskInstance
from optima_envs.errors import ConfigError
from optima_envs.scoring import Extraction, extract_tag
from optima_envs.tasks.synth_hop import SPLITS, UNLIMITED

SIZES = ("small", "medium", "large")
COLOURS = ("red", "blue", "green", "yellow", "purple", "orange")
MATERIALS = ("wooden", "glass", "metal", "stone", "paper")
SHAPES = ("cube", "sphere", "cone", "pyramid", "cylinder", "ring")
ATTRIBUTES = (SIZES, COLOURS, MATERIALS, SHAPES)
LETTERS = "ABCDEFGH"
QUESTION = "Which object is the target?"

SPEAKER_ROLE = Role("speaker", "You know which object is the target; describe it so your partner can pick it.",
                    gives_answer=False)
LISTENER_ROLE = Role("listener", "Your partner knows which object is the target; pick it from their description.")


@dataclass(frozen=True)
class ReferentialConfig:
    """Difficulty knobs: between min_candidates and max_candidates objects per game, each
    distractor differing from the target in 1 to max_differences of the 4 attributes."""

    min_candidates: int = 4
    max_candidates: int = 6
    max_differences: int = 2
    split: Literal["train", "validation", "test"] = "train"
    seed: int = 0

    def __post_init__(self) -> None:
        if not 2 <= self.min_candidates <= self.max_candidates <= len(LETTERS):
            raise ConfigError(f"referential-game: need 2 <= min_candidates <= max_candidates <= {len(LETTERS)}, "
                              f"got {self.min_candidates} and {self.max_candidates}")
        if not 1 <= self.max_differences <= len(ATTRIBUTES):
            raise ConfigError(f"referential-game: max_differences must be in [1, {len(ATTRIBUTES)}], "
                              f"got {self.max_differences}")
        if self.split not in SPLITS:
            raise ConfigError(f"referential-game: split must be one of {sorted(SPLITS)}, got {self.split!r}")


class ReferentialSource:
    """Indexed generator of games (len is effectively unlimited)."""

    def __init__(self, config: ReferentialConfig):
        self.config = config

    def __len__(self) -> int:
        return UNLIMITED

    def get(self, index: int) -> TaskInstance:
        c = self.config
        rng = np.random.default_rng([c.seed, SPLITS[c.split], index])
        count = int(rng.integers(c.min_candidates, c.max_candidates + 1))
        target = tuple(int(rng.integers(len(values))) for values in ATTRIBUTES)
        objects = [target]
        while len(objects) < count:
            candidate = _vary(rng, target, c.max_differences)
            if candidate not in objects:
                objects.append(candidate)
        descriptions = [describe(o) for o in objects]
        speaker_order, listener_order = rng.permutation(count), rng.permutation(count)
        listener_view = tuple(descriptions[int(k)] for k in listener_order)
        gold = LETTERS[int(np.flatnonzero(listener_order == 0)[0])]
        meta = {"speaker_view": tuple(descriptions[int(k)] for k in speaker_order),
                "speaker_target": int(np.flatnonzero(speaker_order == 0)[0]) + 1, "listener_view": listener_view}
        return TaskInstance(instance_id=f"referential-{c.split}-{index}", question=QUESTION, gold=gold, meta=meta)


def _vary(rng: np.random.Generator, target: tuple[int, ...], max_differences: int) -> tuple[int, ...]:
    """The target with 1 to `max_differences` attributes changed to other values."""
    changed = rng.choice(len(ATTRIBUTES), size=int(rng.integers(1, max_differences + 1)), replace=False)
    out = list(target)
    for a in changed:
        out[a] = (target[a] + int(rng.integers(1, len(ATTRIBUTES[a])))) % len(ATTRIBUTES[a])
    return tuple(out)


def describe(obj: Sequence[int]) -> str:
    """"small red glass cube": the attributes in a fixed order, so descriptions are unique."""
    return " ".join(values[i] for values, i in zip(ATTRIBUTES, obj))


# --- reading a pick ------------------------------------------------------------------------

_PICK = re.compile(r"[(\[]?\s*(?:(?:candidate|object|option)\s+)?([A-Za-z])\s*[)\]]?\s*[.!]?", re.IGNORECASE)


def parse_pick(text: str, labels: str = LETTERS) -> str | None:
    """The one label a pick names ("B", "b", "(B)", "B.", "object B"), upper-cased, or None
    when it names none or several ("B or C", "B, C") or a letter that is not a label."""
    match = _PICK.fullmatch(text.strip())
    if match is None:
        return None
    label = match.group(1).upper()
    return label if label in labels else None


def extract_pick(text: str, labels: str = LETTERS) -> Extraction:
    """The label in the message's last `<A>...</A>`, read strictly: a pick is a move that ends
    the game, so neither a lenient fallback nor an unreadable pick counts as one."""
    tagged = extract_tag(text, strict=True).answer
    label = parse_pick(tagged, labels) if tagged is not None else None
    if label is None:
        return Extraction(answer=None, method="none", fallback=False)
    return Extraction(answer=label, method="tag", fallback=False)


def score_pick(answer: str, instance: TaskInstance) -> float:
    """1.0 when the answer picks the listener's label of the target."""
    labels = LETTERS[:len(instance.meta["listener_view"])]
    return float(parse_pick(answer, labels) == instance.gold)


def pick_pattern(instance: TaskInstance) -> str:
    """A reply that is one pick of this game's labels and nothing else: `<A>[A-D]</A>` for four."""
    return f"<A>[{LETTERS[:len(instance.meta['listener_view'])]}]</A>"


def pick_options(instance: TaskInstance) -> tuple[str, ...]:
    """Every pick of this game as a reply, one per label: `<A>A</A>` ... `<A>D</A>` for four."""
    return tuple(f"<A>{label}</A>" for label in LETTERS[:len(instance.meta["listener_view"])])


def first_pick_ends(history: Sequence[Message], message: Message) -> str | None:
    """Only the listener's picks are read, and the first one is final."""
    return "picked" if message.answer is not None else None


def names_only_target(instance: TaskInstance, evidence: Sequence[Sequence[Evidence]], said: Sequence[str]) -> bool:
    """The speaker's messages name the target: of the listener's objects, the target is the only
    one whose every attribute word they contain (naming two objects identifies neither)."""
    words = set(re.findall(r"[a-z]+", " ".join(said).casefold()))
    named = [i for i, d in enumerate(instance.meta["listener_view"]) if set(d.split()) <= words]
    return named == [LETTERS.index(instance.gold)]


# --- what each seat sees -------------------------------------------------------------------

def deal_views(instance: TaskInstance, num_agents: int, rng: np.random.Generator) -> tuple[tuple[Evidence, ...], ...]:
    """The speaker's numbered objects and its target number; the listener's lettered objects.
    Both views are fixed by the instance, so the RNG is not used."""
    speaker = tuple(Evidence(d, title=str(i + 1)) for i, d in enumerate(instance.meta["speaker_view"]))
    speaker += (Evidence(str(instance.meta["speaker_target"]), title="Target"),)
    listener = tuple(Evidence(d, title=LETTERS[i]) for i, d in enumerate(instance.meta["listener_view"]))
    return speaker, listener


@dataclass(frozen=True)
class ReferentialPrompts:
    """Seat 0 speaks, seat 1 listens. The speaker's prompt names the target by its number and its
    description: the information is the same as the numbered list gives, but a small model told
    only the number almost never looks the description up (SmolLM2-135M, greedy, 64 games: 22% of
    its first messages named the target's description when told the number, 64% with the
    description beside it). The listener's prompt gives no example letter: with "e.g. <A>B</A>"
    the same model picked B in 68% of 1,536 sampled picks."""

    def roles(self, num_agents: int) -> tuple[Role, ...]:
        if num_agents != 2:
            raise ConfigError(f"referential-game has two seats (speaker, listener), got num_agents={num_agents}")
        return SPEAKER_ROLE, LISTENER_ROLE

    def system_prompt(self, *, agent: str, agents: Sequence[str], role: Role, instance: TaskInstance,
                      evidence: Sequence[Evidence], format_instruction: str | None) -> str:
        partner = next(a for a in agents if a != agent).capitalize()
        count = len(instance.meta["listener_view"])
        shared = (f"You are {agent.capitalize()}, the {role.name}, playing a guessing game with {partner}. You both "
                  f"see the same {count} objects, each in your own order and with your own labels.")
        if role == SPEAKER_ROLE:
            lines = [shared, f"Only you know which object is the target. Describe it so that {partner} can pick it "
                     f"out ({partner} cannot see your numbers). {partner}'s first pick ends the game, and you both "
                     "win if it is the target.", "Your objects:"]
            lines += [f"- {e.render()}" for e in evidence[:-1]]
            target = evidence[-1].text
            lines.append(f"The target is object {target}: {evidence[int(target) - 1].text}.")
        else:
            lines = [shared, f"{partner} knows which object is the target and will describe it; ask if you need "
                     f"to ({partner} cannot see your letters). Pick the target by writing its letter as "
                     "<A>letter</A> (the letter of your object): your first pick ends the game, and you both win "
                     "if it is the target.", "Your objects:"]
            lines += [f"- {e.render()}" for e in evidence]
        if format_instruction:
            lines.append(format_instruction)
        return "\n".join(lines)


# --- a scripted oracle (for tests) ---------------------------------------------------------

def oracle_policies(agents: Sequence[str]) -> dict[str, Callable[[Mapping[str, Any]], str]]:
    """Scripted optimal play from the observations alone: the speaker names the target's full
    description, the listener picks the one object it matches. Scores 1.0 in two turns."""
    def speaker(observation: Mapping[str, Any]) -> str:
        numbered = dict(e.split(": ", 1) for e in observation["evidence"])
        return f"The target is the {numbered[numbered['Target']]}."

    def listener(observation: Mapping[str, Any]) -> str:
        said = " ".join(m["text"] for m in observation["transcript"] if m["speaker"] != observation["agent"])
        matches = [e.split(": ", 1)[0] for e in observation["evidence"] if e.split(": ", 1)[1] in said]
        return f"<A>{matches[0]}</A>" if len(matches) == 1 else "Which one is it?"

    return {agents[0]: speaker, agents[1]: listener}


def make_task(*, min_candidates: int = 4, max_candidates: int = 6, max_differences: int = 2,
              split: str = "train", seed: int = 0) -> Task:
    """Build the `referential-game` task; the keyword arguments are the `ReferentialConfig` knobs."""
    config = ReferentialConfig(min_candidates=min_candidates, max_candidates=max_candidates,
                               max_differences=max_differences, split=split, seed=seed)
    labels = LETTERS[:config.max_candidates]
    return Task(
        name="referential-game",
        family="game",
        source=ReferentialSource(config),
        split_evidence=deal_views,
        prompts=ReferentialPrompts(),
        extract=functools.partial(extract_pick, labels=labels),
        metric=score_pick,
        termination=first_pick_ends,
        answer_format="<A>letter</A>",
        max_turns=6,
        num_agents=2,
        answer_pattern=pick_pattern,
        answer_options=pick_options,
        answer_place=always_partner,
        informative=names_only_target,
    )
