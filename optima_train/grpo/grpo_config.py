"""`GRPOConfig`: everything a multi-agent GRPO run needs, as one typed, checked dataclass.

    cfg = load_config(GRPOConfig, "configs/grpo/synth_hop.yaml", ["train.beta=0.04"])

It has the task, model, reward, LoRA, evaluation and run sections every algorithm shares
(`optima_train.config.sections`), and its own sampling (`generation`: a group of
`group_size` dialogues per question) and training (`train`: the clipped policy-gradient
settings) sections. Rules that link fields are checked in `__post_init__`, so a bad value fails at
parse time, before any model loads.

Defaults and where they come from: clipping 0.2 on both sides (PPO; TRL's `GRPOConfig.epsilon`),
no KL penalty (`beta: 0`, TRL's default since DAPO / Dr. GRPO), the group-std normaliser
`(r - mean) / (std + 1e-4)` (TRL's `scale_rewards="group"`), a constant LoRA learning rate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from optima_envs.errors import ConfigError
from optima_train.config.fields import help_meta as _help
from optima_train.config.fields import redefault
from optima_train.config.sampler import SCHEDULING_KEYS, RolloutSamplerSection
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

__all__ = ["GRPOConfig", "GRPOGenerationSection", "GRPORunSection", "GRPOTrainSection"]


@dataclass
class GRPOGenerationSection(RolloutSamplerSection):
    """GRPO's sampler: a group of dialogues per training question (the shared sampling fields are
    `RolloutSamplerSection`'s; there is no top_p)."""

    temperature: float = redefault(RolloutSamplerSection, "temperature", 0.7,
                                   "Sampling temperature (> 0). The policy's log-probs are taken at this temperature, "
                                   "as they were sampled. There is no top_p: the ratio needs the full distribution's "
                                   "log-probs.")
    group_size: int = field(default=8, metadata=_help(
        "G: dialogues sampled per training question; their rewards are normalised within the group."))

    def __post_init__(self) -> None:
        self.check_engine_options()
        if self.group_size < 2:
            raise ConfigError(f"generation.group_size must be >= 2, got {self.group_size}: a group of one dialogue has "
                              "no spread, so its advantage is always 0 and nothing would be learned")
        if self.temperature <= 0:
            raise ConfigError(f"generation.temperature must be > 0 for GRPO, got {self.temperature}: greedy sampling "
                              "gives every dialogue of a group the same tokens (and no sampling distribution to "
                              "take a ratio against); use e.g. 0.7")
        self.check_lengths()
        if self.max_live is not None and self.max_live < 1:
            raise ConfigError(f"generation.max_live must be >= 1 or null, got {self.max_live}")
        self.check_loads_weights("GRPO")


@dataclass
class GRPOTrainSection(TRLTrainSection):
    """GRPO's training settings: the shared fields (`TRLTrainSection`; the defaults below differ),
    passed to `transformers.TrainingArguments` (`train.extra` is checked against
    `optima_train.grpo.grpo_trainer.GRPOArguments`), plus the clipped objective's own."""

    METHOD = "GRPO"
    OWNED = (*TRLTrainSection.OWNED, "temperature", "remove_unused_columns")
    OWNED_NOTE = " (temperature is generation.temperature)"

    init: str = field(default="previous", metadata=_help(
        "Weights each iteration trains from: the previous iteration's, i.e. the policy that sampled the batch (the "
        "ratio is taken against it, so 'base' is refused)."))
    learning_rate: float = redefault(TRLTrainSection, "learning_rate", 2e-5, "Peak learning rate (LoRA).")
    num_train_epochs: float = redefault(TRLTrainSection, "num_train_epochs", 1.0,
                                        "Passes over the iteration's batch (PPO epochs); the ratio to the sampling "
                                        "policy grows with each step after the first.")
    lr_scheduler_type: str = redefault(TRLTrainSection, "lr_scheduler_type", "constant")
    extra: dict[str, Any] = field(default_factory=dict, metadata=_help(
        "Any other field of transformers.TrainingArguments, passed through; checked at parse time."))
    epsilon_low: float = field(default=0.2, metadata=_help(
        "Lower clip: the ratio is clipped at 1 - epsilon_low for tokens of negative advantage."))
    epsilon_high: float = field(default=0.2, metadata=_help(
        "Upper clip: the ratio is clipped at 1 + epsilon_high for tokens of positive advantage (DAPO: 0.28)."))
    beta: float = field(default=0.0, metadata=_help(
        "Weight of the per-token KL penalty to the reference (the iteration's starting weights, i.e. the model "
        "with the LoRA adapter disabled); 0 turns it off (the KL is still logged)."))
    advantage_eps: float = field(default=1e-4, metadata=_help("eps in (r - mean) / (std + eps) within a group."))
    old_logprobs: str = field(default="backend", metadata=_help(
        "Where the sampling policy's log-probs come from: the backend's, recorded while sampling, wherever they "
        "line up with the trained tokens (recomputed with the training model before the update where absent); "
        "or 'recompute': always the training model's, before the update.", choices=["backend", "recompute"]))

    def __post_init__(self) -> None:
        if self.init != "previous":
            raise ConfigError(f"train.init={self.init!r} cannot drive GRPO: the clipped ratio compares the trained "
                              "policy with the one that sampled the batch (the previous iteration's model), so "
                              "training must start from it; use train.init=previous")
        if not 0 <= self.epsilon_low < 1:
            raise ConfigError(f"train.epsilon_low must be in [0, 1), got {self.epsilon_low}")
        if self.epsilon_high < 0:
            raise ConfigError(f"train.epsilon_high must be >= 0, got {self.epsilon_high}")
        if self.beta < 0:
            raise ConfigError(f"train.beta must be >= 0 (0 turns the KL penalty off), got {self.beta}")
        if self.advantage_eps < 0:
            raise ConfigError(f"train.advantage_eps must be >= 0, got {self.advantage_eps}")
        super().__post_init__()

    def _arguments_class(self) -> tuple[type, str]:
        from optima_train.grpo.grpo_trainer import GRPOArguments

        return GRPOArguments, "transformers.TrainingArguments"


@dataclass
class GRPORunSection(RunSection):
    output_dir: str = field(default="runs/grpo", metadata=_help("Run directory (resumed when it exists)."))


@dataclass
class GRPOConfig:
    """Multi-agent GRPO: sample a group of dialogues per training question, normalise the Optima
    reward within each group, and take clipped policy-gradient steps on every agent's own tokens
    (LoRA merged into the checkpoint), evaluate, repeat.

    Sections: task, model, generation, reward, lora, train, eval, run (see each field's
    `metadata["help"]`, or `optima train grpo --help-config`). Dialogues per iteration:
    `task.train_questions * generation.group_size` (the same questions every iteration, new
    seeds, as iSFT samples them).
    """

    task: TaskSection = field(default_factory=TaskSection)
    model: ModelSection = field(default_factory=ModelSection)
    generation: GRPOGenerationSection = field(default_factory=GRPOGenerationSection)
    reward: RewardSection = field(default_factory=RewardSection)
    lora: LoraSection = field(default_factory=LoraSection)
    train: GRPOTrainSection = field(default_factory=GRPOTrainSection)
    eval: EvalSection = field(default_factory=EvalSection)
    run: GRPORunSection = field(default_factory=GRPORunSection)

    #: Fields that may differ when resuming a run (everything else must match the stored config).
    RESUMABLE: ClassVar[tuple[str, ...]] = ("run.iterations", "run.progress", "run.num_threads", *SCHEDULING_KEYS,
                                            *launch_keys("train"))

    #: What one reported unit of `--plan` is called.
    PLAN_PERIOD = "iteration"

    @property
    def sampler(self) -> GRPOGenerationSection:
        """The section the groups of dialogues are sampled with."""
        return self.generation

    def plan_workload(self) -> list:
        """What one iteration samples and trains (`optima train ... --plan`)."""
        from optima_train.plan.workload import grpo_stage

        return [grpo_stage(self)]

    def __post_init__(self) -> None:
        check_question_ranges(self.task, self.eval, self.task.train_first_index, self.task.train_questions)

    @property
    def dialogues_per_iteration(self) -> int:
        return self.task.train_questions * self.generation.group_size
