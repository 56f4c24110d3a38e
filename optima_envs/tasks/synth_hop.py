"""`synth-hop-ia`: multi-hop questions over an invented world, facts split between agents.

Unlimited, download-free, exact answers. Instance `i` of a split is generated from
`np.random.default_rng([seed, split, i])`, so it is the same on every machine and run.
The names are invented, so a model cannot answer from memory: it must hear its partner's facts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import numpy as np

from optima_envs.core.task import Task
from optima_envs.core.places import gold_in_text
from optima_envs.core.termination import answer_repeats_last_answer
from optima_envs.core.turn_patterns import capitalised_names, facts_then_answer
from optima_envs.core.types import Evidence, TaskInstance
from optima_envs.errors import ConfigError
from optima_envs.prompts.templates import InfoAsymmetricPrompts
from optima_envs.scoring import extract_tag, token_f1
from optima_envs.splits import deal_supporting_alternately

SPLITS = {"train": 0, "validation": 1, "test": 2}
UNLIMITED = 10**9

_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "gr", "st", "tr")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ei", "ou")
_CODAS = ("", "", "n", "r", "l", "s", "th", "x")


@dataclass(frozen=True)
class SynthHopConfig:
    """Difficulty knobs. hops: 2 (founder -> birthplace) or 3 (-> country); distractors: extra
    facts about other entities; comparison_rate: share of "who was born first" questions."""

    hops: int = 2
    distractors: int = 2
    comparison_rate: float = 0.25
    split: Literal["train", "validation", "test"] = "train"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.hops not in (2, 3):
            raise ConfigError(f"synth-hop-ia: hops must be 2 or 3, got {self.hops}")
        if not 0 <= self.distractors <= 20:
            raise ConfigError(f"synth-hop-ia: distractors must be in [0, 20], got {self.distractors}")
        if not 0.0 <= self.comparison_rate <= 1.0:
            raise ConfigError(f"synth-hop-ia: comparison_rate must be in [0, 1], got {self.comparison_rate}")
        if self.split not in SPLITS:
            raise ConfigError(f"synth-hop-ia: split must be one of {sorted(SPLITS)}, got {self.split!r}")


class _Names:
    """Invented, pronounceable, unique-within-an-instance names."""

    def __init__(self, rng: np.random.Generator):
        self.rng, self.used = rng, set()

    def __call__(self, syllables: int = 2) -> str:
        while True:
            parts = [self._pick(_ONSETS) + self._pick(_VOWELS) for _ in range(syllables)]
            name = ("".join(parts) + self._pick(_CODAS)).capitalize()
            if name not in self.used:
                self.used.add(name)
                return name

    def _pick(self, options: tuple[str, ...]) -> str:
        return options[int(self.rng.integers(len(options)))]


class SynthHopSource:
    """Indexed generator of instances (len is effectively unlimited)."""

    def __init__(self, config: SynthHopConfig):
        self.config = config

    def __len__(self) -> int:
        return UNLIMITED

    def get(self, index: int) -> TaskInstance:
        rng = np.random.default_rng([self.config.seed, SPLITS[self.config.split], index])
        names = _Names(rng)
        if rng.random() < self.config.comparison_rate:
            question, gold, support, kind = _comparison(rng, names)
        else:
            question, gold, support, kind = _chain(self.config.hops, names)
        noise = [_distractor(rng, names) for _ in range(self.config.distractors)]
        evidence = tuple(Evidence(f, supporting=True) for f in support) + tuple(Evidence(f) for f in noise)
        return TaskInstance(instance_id=f"synth-hop-{self.config.split}-{index}", question=question,
                            gold=gold, evidence=evidence, meta={"kind": kind, "hops": len(support)})


def _chain(hops: int, names: _Names) -> tuple[str, str, list[str], str]:
    company, founder, city = names(3), names(2), names(2)
    facts = [f"{company} was founded by {founder}.", f"{founder} was born in {city}."]
    if hops == 2:
        return f"In which city was the founder of {company} born?", city, facts, "chain"
    country = names(3)
    facts.append(f"{city} is a city in {country}.")
    return f"In which country was the founder of {company} born?", country, facts, "chain"


def _comparison(rng: np.random.Generator, names: _Names) -> tuple[str, str, list[str], str]:
    first, second = names(2), names(2)
    year_a = int(rng.integers(1900, 1990))
    year_b = year_a + int(rng.integers(1, 30)) * (1 if rng.random() < 0.5 else -1)
    facts = [f"{first} was born in {year_a}.", f"{second} was born in {year_b}."]
    older = first if year_a < year_b else second
    return f"Who was born first, {first} or {second}?", older, facts, "comparison"


def _distractor(rng: np.random.Generator, names: _Names) -> str:
    kind = int(rng.integers(4))
    if kind == 0:
        return f"{names(3)} was founded by {names(2)}."
    if kind == 1:
        return f"{names(2)} was born in {names(2)}."
    if kind == 2:
        return f"{names(2)} is a city in {names(3)}."
    return f"{names(2)} was born in {int(rng.integers(1900, 1990))}."


def _score_f1(answer: str, instance: TaskInstance) -> float:
    return token_f1(answer, instance.gold)


_CITY_OF_BIRTH = re.compile(r"was born in ([A-Z][a-z]+)\.")
_CITY_IN = re.compile(r"^([A-Z][a-z]+) is a city in ([A-Z][a-z]+)\.")


def answer_candidates(instance: TaskInstance) -> tuple[str, ...]:
    """The instance's entities of the question's answer type, in first-seen order: the two people
    of a comparison, the cities of a 2-hop chain (birthplaces and cities of any fact, distractors
    included), the countries of a 3-hop chain. The gold answer is always one of them."""
    texts = [e.text for e in instance.evidence]
    if instance.meta["kind"] == "comparison":
        return capitalised_names([instance.question.split(" ", 1)[-1]])
    if instance.meta["hops"] == 3:
        return tuple(dict.fromkeys(m.group(2) for t in texts if (m := _CITY_IN.match(t))))
    return tuple(dict.fromkeys([m.group(1) for t in texts for m in _CITY_OF_BIRTH.finditer(t)]
                               + [m.group(1) for t in texts if (m := _CITY_IN.match(t))]))


def turn_pattern(instance: TaskInstance, evidence: tuple[str, ...], heard: tuple[str, ...] = ()) -> str:
    """A turn of the speaker holding `evidence`: some of its facts verbatim, then optionally an
    answer among the `answer_candidates` it has seen named (in the question, its own facts or the
    partners' messages it has read), so a constrained turn never names a place the speaker was
    not told: an answer that needs the partner waits for the partner's message."""
    seen = " ".join((instance.question, *evidence, *heard))
    names = [n for n in answer_candidates(instance) if gold_in_text(n, seen)]
    return facts_then_answer(evidence, names)


def make_task(*, hops: int = 2, distractors: int = 2, comparison_rate: float = 0.25,
              split: str = "train", seed: int = 0) -> Task:
    """Build the `synth-hop-ia` task; the keyword arguments are the `SynthHopConfig` knobs."""
    config = SynthHopConfig(hops=hops, distractors=distractors, comparison_rate=comparison_rate,
                            split=split, seed=seed)
    return Task(
        name="synth-hop-ia",
        family="ia",
        source=SynthHopSource(config),
        split_evidence=deal_supporting_alternately,
        prompts=InfoAsymmetricPrompts(),
        extract=extract_tag,
        metric=_score_f1,
        termination=answer_repeats_last_answer,
        answer_format="<A>answer</A>",
        turn_pattern=turn_pattern,
    )
