"""`synth-arith-debate`: multi-step arithmetic word problems, solved in a solver/critic debate.

Generated from `np.random.default_rng([seed, split, index])`; every intermediate value is a
non-negative integer, so the gold answer is exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from optima_envs.core.task import Task
from optima_envs.core.termination import answer_repeats_last_answer
from optima_envs.core.types import TaskInstance
from optima_envs.errors import ConfigError
from optima_envs.prompts.templates import DebatePrompts
from optima_envs.scoring import extract_boxed, numeric_match
from optima_envs.splits import no_evidence
from optima_envs.tasks.synth_hop import SPLITS, UNLIMITED

_PEOPLE = (("Mia", "She"), ("Leo", "He"), ("Ana", "She"), ("Omar", "He"), ("Yuki", "She"), ("Ravi", "He"))
_ITEMS = ("apples", "marbles", "stickers", "books", "coins", "shells")


@dataclass(frozen=True)
class SynthArithConfig:
    """Difficulty knobs: steps (operations after the start), max_start (largest start value)."""

    steps: int = 3
    max_start: int = 50
    split: Literal["train", "validation", "test"] = "train"
    seed: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.steps <= 8:
            raise ConfigError(f"synth-arith-debate: steps must be in [1, 8], got {self.steps}")
        if self.max_start < 2:
            raise ConfigError(f"synth-arith-debate: max_start must be >= 2, got {self.max_start}")
        if self.split not in SPLITS:
            raise ConfigError(f"synth-arith-debate: split must be one of {sorted(SPLITS)}, got {self.split!r}")


class SynthArithSource:
    def __init__(self, config: SynthArithConfig):
        self.config = config

    def __len__(self) -> int:
        return UNLIMITED

    def get(self, index: int) -> TaskInstance:
        rng = np.random.default_rng([self.config.seed, SPLITS[self.config.split], index])
        name, pronoun = _PEOPLE[int(rng.integers(len(_PEOPLE)))]
        item = _ITEMS[int(rng.integers(len(_ITEMS)))]
        value = int(rng.integers(2, self.config.max_start + 1))
        sentences = [f"{name} has {value} {item}."]
        for _ in range(self.config.steps):
            sentence, value = _operation(rng, pronoun, item, value)
            sentences.append(sentence)
        question = " ".join(sentences) + f" How many {item} does {name} have now?"
        return TaskInstance(instance_id=f"synth-arith-{self.config.split}-{index}", question=question,
                            gold=str(value), meta={"steps": self.config.steps})


def _operation(rng: np.random.Generator, pronoun: str, item: str, value: int) -> tuple[str, int]:
    kind = int(rng.integers(5))
    if kind == 0:
        b = int(rng.integers(1, 20))
        return f"{pronoun} buys {b} more.", value + b
    if kind == 1 and value > 1:
        b = int(rng.integers(1, value))
        return f"{pronoun} gives {b} to a friend.", value - b
    if kind == 2:
        boxes, per_box = int(rng.integers(2, 6)), int(rng.integers(2, 10))
        return f"{pronoun} buys {boxes} boxes with {per_box} {item} in each.", value + boxes * per_box
    if kind == 3 and value <= 200:
        return f"{pronoun} doubles the number of {item}.", value * 2
    divisors = [k for k in (2, 3, 4, 5) if value % k == 0]
    if divisors:
        k = divisors[int(rng.integers(len(divisors)))]
        friends = "a friend" if k == 2 else f"{k - 1} friends"
        return f"{pronoun} shares them equally with {friends} and keeps one share.", value // k
    b = int(rng.integers(1, 20))
    return f"{pronoun} finds {b} more.", value + b


def _score_numeric(answer: str, instance: TaskInstance) -> float:
    return numeric_match(answer, instance.gold)


def make_task(*, steps: int = 3, max_start: int = 50, split: str = "train", seed: int = 0) -> Task:
    """Build the `synth-arith-debate` task; the keyword arguments are the `SynthArithConfig` knobs."""
    config = SynthArithConfig(steps=steps, max_start=max_start, split=split, seed=seed)
    return Task(
        name="synth-arith-debate",
        family="debate",
        source=SynthArithSource(config),
        split_evidence=no_evidence,
        prompts=DebatePrompts(answer_instruction="Give the final answer as \\boxed{number}."),
        extract=extract_boxed,
        metric=_score_numeric,
        termination=answer_repeats_last_answer,
        answer_format="\\boxed{number}",
    )
