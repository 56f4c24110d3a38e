"""`IDPOConfig`: everything an iDPO run needs, as one typed, checked dataclass.

    cfg = load_config(IDPOConfig, "configs/idpo/synth_hop.yaml", ["train.beta=0.2"])

It has the task, model, reward, LoRA, evaluation and run sections every algorithm shares
(`optima_train.config.sections`), and adds the search (`search`, `mcts`), pair extraction
(`pairs`) and DPO training (`train`) sections. Rules that link fields are checked in
`__post_init__`, so a bad value fails at parse time, before any model loads.

Defaults and where they come from ("paper": arXiv 2410.08115; "reference": thunlp/Optima):
MCTS and pair settings see `optima_agents.mcts.mcts_config`; DPO + NLL on chosen with weight 1
(reference `run_rpo.py`: `rpo_alpha = 1.0`), beta 0.1 (reference recipes 0.1 and 0.5; paper
0.1-0.5), one epoch, cosine schedule, 10% warmup (reference recipes). The learning rate is a
LoRA one (the reference trains all weights at 5e-7).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from optima_agents.mcts.mcts_config import MCTSConfig, PairConfig
from optima_envs.errors import ConfigError
from optima_train.config.fields import help_meta as _help
from optima_train.config.fields import redefault
from optima_train.config.sampler import SamplerSection, backend_field
from optima_train.config.sections import (
    EvalSection,
    LoraSection,
    ModelSection,
    RewardSection,
    RunSection,
    TaskSection,
    check_question_ranges,
)
from optima_train.config.train import TRLTrainSection, launch_keys

__all__ = ["DPOTrainSection", "IDPOConfig", "IDPORunSection", "SearchRewardSection", "SearchSection"]


@dataclass
class SearchSection(SamplerSection):
    """iDPO's sampler: the MCTS search over dialogue turns, tree by tree (the backend fields are
    `SamplerSection`'s; the search settings are the `mcts` section)."""

    SECTION = "search"

    backend: str = backend_field("hf", "Generation backend of the search.")
    backend_kwargs: dict[str, Any] = field(default_factory=dict, metadata=_help(
        "Extra policy kwargs (vllm: gpu_memory_utilization...; openai: base_urls, api_key...)."))
    questions: int | None = field(default=None, metadata=_help(
        "Trees (training questions) searched per iteration (None: task.train_questions)."))
    new_questions_each_iteration: bool = field(default=True, metadata=_help(
        "Iteration i searches questions train_first_index + i * train_questions onwards (the reference draws "
        "fresh questions every iteration); false: the same questions every iteration."))
    min_kept_pairs: int | None = field(default=None, metadata=_help(
        "Search trees in rounds of round_trees until the kept pairs reach this many, with `questions` trees as "
        "the budget (how many trees give a pair depends on the model: a confident one gives fewer); None: search "
        "all `questions` trees at once."))
    round_trees: int = field(default=160, metadata=_help(
        "Trees per round when min_kept_pairs is set; a round's trees are searched together, so larger rounds "
        "batch better and may overshoot the target by more."))

    def __post_init__(self) -> None:
        if self.min_kept_pairs is not None and self.min_kept_pairs < 1:
            raise ConfigError(f"search.min_kept_pairs must be >= 1 or null, got {self.min_kept_pairs}")
        if self.round_trees < 1:
            raise ConfigError(f"search.round_trees must be >= 1, got {self.round_trees}")
        if self.batch_size < 1:
            raise ConfigError(f"search.batch_size must be >= 1, got {self.batch_size}")
        self.check_max_turns()
        if self.questions is not None and self.questions < 1:
            raise ConfigError(f"search.questions must be >= 1 or null, got {self.questions}")
        spec = self.backend_spec()
        if "base_urls" in spec.options and not self.backend_kwargs.get("base_urls"):
            raise ConfigError(f"search.backend={self.backend!r} needs search.backend_kwargs.base_urls "
                              "(the servers that serve the model being trained)")


@dataclass
class DPOTrainSection(TRLTrainSection):
    """iDPO's training settings: the shared TRL fields (`TRLTrainSection`; the defaults below differ),
    checked against `trl.DPOConfig`, plus DPO's own."""

    TRL_CONFIG = "DPOConfig"
    METHOD = "iDPO"
    OWNED = (*TRLTrainSection.OWNED, "loss_type", "loss_weights")
    OWNED_NOTE = " (rpo_alpha sets loss_type and loss_weights)"
    AT_LEAST_ONE = (*TRLTrainSection.AT_LEAST_ONE, "min_pairs")

    learning_rate: float = redefault(TRLTrainSection, "learning_rate", 5e-6,
                                     "Peak learning rate (LoRA; reference full FT 5e-7).")
    per_device_train_batch_size: int = redefault(TRLTrainSection, "per_device_train_batch_size", 2,
                                                 "Pairs per step per device.")
    gradient_accumulation_steps: int = redefault(TRLTrainSection, "gradient_accumulation_steps", 4)
    warmup_steps: float = redefault(TRLTrainSection, "warmup_steps", 0.1)
    beta: float = field(default=0.1, metadata=_help("DPO beta (paper 0.1-0.5; reference 0.1 / 0.5)."))
    rpo_alpha: float = field(default=1.0, metadata=_help(
        "Weight of the NLL loss on the chosen reply added to DPO (reference rpo_alpha 1.0; 0: plain DPO). "
        "TRL >= 1.0 spells it loss_type=[sigmoid, sft], loss_weights=[1, rpo_alpha]."))
    min_pairs: int = field(default=1, metadata=_help(
        "Fewer kept pairs than this: the iteration does not train (the model carries over) and says so."))

    def __post_init__(self) -> None:
        if self.beta <= 0:
            raise ConfigError(f"train.beta must be > 0, got {self.beta}")
        if self.rpo_alpha < 0:
            raise ConfigError(f"train.rpo_alpha must be >= 0 (0 is plain DPO), got {self.rpo_alpha}")
        super().__post_init__()


@dataclass
class SearchRewardSection(RewardSection):
    """The iSFT reward section; in a search the token scale is fixed per iteration (see
    `optima_agents.mcts.reward.OptimaTreeReward`), at `token_percentile` of the first rollouts."""

    token_percentile: float = field(default=85.0, metadata=_help(
        "Percentile of the first search round's token counts that fixes max_tokens for the whole search "
        "(reference: 85)."))
    grounded_only: bool = field(default=False, metadata=_help(
        "Count a rollout's task score only when every answer in it was given by an agent that held every "
        "supporting fact then or had been told the answer (`answers_grounded`): a right guess scores as wrong, so "
        "node values and pairs prefer passing a fact to guessing. Needs a task that marks supporting facts. "
        "Search only: iSFT's ranking filters the same way with selection.grounded_only."))


@dataclass
class IDPORunSection(RunSection):
    output_dir: str = field(default="runs/idpo", metadata=_help("Run directory (resumed when it exists)."))


@dataclass
class IDPOConfig:
    """Iterative DPO with MCTS (docs/design.md section 2): search dialogue trees on training
    questions, pair the best and worst replies of each branching node, train DPO + NLL on the
    kept pairs (LoRA merged into the checkpoint), evaluate, repeat.

    Sections: task, model, search, mcts, pairs, reward, lora, train, eval, run.
    Trees per iteration: `search.questions`, or `task.train_questions` when that is null.
    """

    task: TaskSection = field(default_factory=TaskSection)
    model: ModelSection = field(default_factory=ModelSection)
    search: SearchSection = field(default_factory=SearchSection)
    mcts: MCTSConfig = field(default_factory=MCTSConfig)
    pairs: PairConfig = field(default_factory=PairConfig)
    reward: SearchRewardSection = field(default_factory=SearchRewardSection)
    lora: LoraSection = field(default_factory=LoraSection)
    train: DPOTrainSection = field(default_factory=DPOTrainSection)
    eval: EvalSection = field(default_factory=EvalSection)
    run: IDPORunSection = field(default_factory=IDPORunSection)

    #: Fields that may differ when resuming a run (everything else must match the stored config).
    RESUMABLE: ClassVar[tuple[str, ...]] = ("run.iterations", "run.progress", "run.num_threads", *launch_keys("train"))

    #: What one reported unit of `--plan` is called.
    PLAN_PERIOD = "iteration"

    @property
    def sampler(self) -> SearchSection:
        """The section the search generates with."""
        return self.search

    def plan_workload(self) -> list:
        """What one iteration samples and trains (`optima train ... --plan`)."""
        from optima_train.plan.workload import idpo_stage

        return [idpo_stage(self, self.search, self.train, "train", self.questions)]

    def __post_init__(self) -> None:
        iterations = self.run.iterations if self.search.new_questions_each_iteration else 1
        check_question_ranges(self.task, self.eval, self.task.train_first_index, self.questions * iterations)
        if self.mcts.max_depth is not None and self.search.max_turns is not None \
                and self.mcts.max_depth > self.search.max_turns:
            raise ConfigError(f"mcts.max_depth ({self.mcts.max_depth}) exceeds search.max_turns "
                              f"({self.search.max_turns}): the env ends every dialogue first; lower mcts.max_depth "
                              "or leave it null")

    @property
    def questions(self) -> int:
        """Trees searched per iteration."""
        return self.search.questions or self.task.train_questions

    def train_indices(self, iteration: int) -> range:
        """The instance indices of the questions searched in `iteration`."""
        start = self.task.train_first_index
        if self.search.new_questions_each_iteration:
            start += iteration * self.questions
        return range(start, start + self.questions)

