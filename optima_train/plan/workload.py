"""An algorithm's workload for `--plan`: the dialogues one iteration samples and the examples it trains.

An algorithm's config declares it: `plan_workload() -> list[Stage]`, built from the stage builders
here (`isft_stage`, `idpo_stage`, `grpo_stage`) or a `Stage` of its own, and `PLAN_PERIOD`, what
one reported iteration is called (`"iteration"`, or `"cycle"` for iSFT-DPO).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from optima_train.config.sampler import SamplerSection
from optima_train.config.train import TRLTrainSection

__all__ = ["DEFAULT_TURNS", "Stage", "agents", "grpo_stage", "idpo_stage", "isft_stage", "workload"]

DEFAULT_TURNS = 10  # the paper tasks' dialogue limit when a config leaves max_turns null


@dataclass(frozen=True)
class Stage:
    """One repeated unit of an algorithm's work: dialogues sampled with the config's section
    `sampler`, then examples trained with its train section `train_name` (`train`).

    `repeats` is how often it runs per reported iteration (an iSFT-DPO cycle runs its iSFT stage
    `cycles.isft_iterations` times). `examples` is an upper bound (every question kept, every
    branching node paired); `preference` examples are (chosen, rejected) pairs.
    """

    name: str
    sampler: SamplerSection
    train_name: str
    train: TRLTrainSection
    dialogues: int
    dialogues_how: str
    turns: int
    max_new_tokens: int
    examples: int
    examples_how: str
    preference: bool = False
    repeats: int = 1

    @property
    def sampler_name(self) -> str:
        """The sampler section's key in the config (`generation`, `search`)."""
        return self.sampler.SECTION


def workload(cfg: Any) -> tuple[str, list[Stage]]:
    """(what one iteration is called, its stages), as the config declares them
    (`plan_workload()`, `PLAN_PERIOD`); a config that declares none gets no stages."""
    declared = getattr(cfg, "plan_workload", None)
    if not callable(declared):
        return "iteration", []
    return getattr(cfg, "PLAN_PERIOD", "iteration"), list(declared())


def agents(cfg: Any) -> int:
    """Agents per dialogue (one training example each in iSFT): env_kwargs.num_agents, else 2."""
    return int(cfg.task.env_kwargs.get("num_agents", 2))


def isft_stage(cfg: Any, gen: Any, train: Any, train_name: str, questions: int, repeats: int = 1) -> Stage:
    """Sampled dialogues, the kept ones trained on: one SFT example per agent of each kept dialogue."""
    kept = math.ceil(questions * cfg.selection.keep_fraction)
    return Stage("iSFT", gen, train_name, train, questions * gen.samples_per_question,
                 f"{questions:,} questions x {gen.samples_per_question} samples", gen.max_turns or DEFAULT_TURNS,
                 gen.max_new_tokens, kept * agents(cfg),
                 f"{kept:,} kept questions ({cfg.selection.keep_fraction:.0%}) x {agents(cfg)} agents",
                 repeats=repeats)


def idpo_stage(cfg: Any, search: Any, train: Any, train_name: str, trees: int, repeats: int = 1) -> Stage:
    """MCTS over dialogue turns, its branching nodes paired for DPO."""
    m = cfg.mcts
    rollouts = m.iterations * m.rollouts_per_expansion
    pairs = math.floor(m.iterations * cfg.pairs.keep_fraction)
    turns = search.max_turns or m.max_depth or DEFAULT_TURNS
    return Stage("iDPO", search, train_name, train, trees * rollouts,
                 f"{trees:,} trees x {m.iterations} expansions x {m.rollouts_per_expansion} rollouts", turns,
                 m.max_new_tokens, trees * pairs,
                 f"{trees:,} trees x {pairs} pairs ({m.iterations} expansions x keep {cfg.pairs.keep_fraction:g})",
                 preference=True, repeats=repeats)


def grpo_stage(cfg: Any) -> Stage:
    """A group of dialogues per training question, every agent's turns of every dialogue trained
    on (a group whose rewards are all equal has zero advantage but is still a row)."""
    gen = cfg.generation
    dialogues = cfg.task.train_questions * gen.group_size
    return Stage("GRPO", gen, "train", cfg.train, dialogues,
                 f"{cfg.task.train_questions:,} questions x {gen.group_size} per group", gen.max_turns or DEFAULT_TURNS,
                 gen.max_new_tokens, dialogues * agents(cfg), f"{dialogues:,} dialogues x {agents(cfg)} agents")
