"""`ISFTConfig`: everything an iSFT run needs, as one typed, checked dataclass.

Load it with `optima_train.config.io.load_config(ISFTConfig, path, overrides)`; every field can
be set in YAML (`train: {learning_rate: 1e-4}`) or on the command line
(`--set train.learning_rate=1e-4`). Rules that link fields are checked in `__post_init__`, so
a bad value fails at parse time; `check_resources()` then checks what exists outside the
config (the env id and its data, the models) before any model loads.

The task, model, reward, LoRA, evaluation and run sections are the ones every algorithm shares
(`optima_train.config.sections`); iSFT's own are its sampler (`generation`, a
`RolloutSamplerSection`), `selection` and `train`.

Why not a `TrainingArguments` subclass (as TRL's configs are): one iSFT run drives generation,
scoring, selection, several trainings and evaluations; its `train` section holds the SFT
settings we choose defaults for, and `train.extra` passes any other `trl.SFTConfig` field
through (checked against `SFTConfig`'s fields at parse time).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from optima_envs.errors import ConfigError
from optima_train.config.fields import help_meta as _help
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

__all__ = ["GenerationSection", "ISFTConfig", "SelectionSection", "TrainSection"]


@dataclass
class GenerationSection(RolloutSamplerSection):
    """iSFT's sampler: N dialogues per training question (the shared sampling fields are
    `RolloutSamplerSection`'s)."""

    samples_per_question: int = field(default=10, metadata=_help("N dialogues sampled per training question."))
    agent_temperatures: dict[str, float] = field(default_factory=dict, metadata=_help(
        "Per-agent sampling temperatures that replace `temperature` for those agents (e.g. {alice: 0.0, bob: 1.0}: "
        "a speaker that says what it would say greedily, a listener that explores its picks)."))
    top_p: float = field(default=1.0, metadata=_help("Nucleus sampling threshold of training dialogues."))
    format_pool_first_iteration: bool = field(default=True, metadata=_help(
        "Iteration 0 samples with a format-diverse instruction (reset option format_instruction='sample')."))
    new_questions_each_iteration: bool = field(default=False, metadata=_help(
        "Iteration i samples questions task.train_first_index + i * task.train_questions onwards, so each "
        "iteration trains on games it has not seen; false: the same questions every iteration."))
    enumerate_answers: bool = field(default=False, metadata=_help(
        "Score each sampled dialogue once per answer move, its last turn replaced by each (tasks with a closed set "
        "of moves whose answer ends the dialogue, Task.answer_options: a game's picks), so selection finds the "
        "right answer wherever the messages carry it, not only where the answerer sampled it."))

    def temperatures_by_agent(self) -> dict[str, float]:
        return dict(self.agent_temperatures)

    def __post_init__(self) -> None:
        self.check_engine_options()
        if self.samples_per_question < 1:
            raise ConfigError(f"generation.samples_per_question must be >= 1, got {self.samples_per_question}")
        if self.temperature < 0:
            raise ConfigError(f"generation.temperature must be >= 0, got {self.temperature}")
        bad = {a: t for a, t in self.agent_temperatures.items()
               if isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0}
        if bad:
            raise ConfigError(f"generation.agent_temperatures must map agent names to numbers >= 0, got {bad}")
        if self.samples_per_question > 1 and self.temperature == 0 and not any(self.agent_temperatures.values()):
            raise ConfigError(f"generation.samples_per_question={self.samples_per_question} with generation."
                              "temperature=0 samples the same greedy dialogue N times; set temperature > 0 (e.g. 0.7)")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"generation.top_p must be in (0, 1], got {self.top_p}")
        self.check_lengths()
        self.check_loads_weights("iSFT", f" for the loop, and `optima eval --backend {self.backend} ...` to evaluate "
                                         "a served checkpoint")


GROUP_BY = ("question", "question_and_place")


@dataclass
class SelectionSection:
    keep_fraction: float = field(default=0.7, metadata=_help("Share of questions (by best reward) kept."))
    reward_threshold: float | None = field(default=None, metadata=_help("Keep only questions whose best reward is >= this."))
    min_score: float | None = field(default=0.5, metadata=_help(
        "Keep only questions whose best dialogue's task score is >= this (null: no bar)."))
    informative_only: bool = field(default=False, metadata=_help(
        "Rank only dialogues whose partners told the answerer what it lacked (the task's informative "
        "check; on questions the answerer can answer alone every dialogue counts): a right answer "
        "after messages that carry nothing is a guess."))
    grounded_only: bool = field(default=False, metadata=_help(
        "Rank only dialogues in which every answer was given by a seat that could know it: it held every "
        "supporting fact, its own or written out in a partner's earlier message, or a partner had written the "
        "answer (tasks whose evidence marks supporting facts). With distractors most right answers are lucky "
        "guesses among the names an agent holds; training on them teaches answering before listening."))
    group_by: str = field(default="question", metadata=_help(
        "What the best dialogue is chosen within: `question`, or `question_and_place` (a question and "
        "where its answer lay in that sample's evidence: with the seat, with its partner, or named in the "
        "question). Tasks that re-deal the evidence per sample need the second: per question, a dialogue "
        "whose answerer held the answer is the shorter, so those where the partner had to tell it are "
        "never kept."))
    train_agents: list[str] | None = field(default=None, metadata=_help(
        "The agents whose turns become SFT rows (null: every agent that spoke), e.g. [bob] to train a listener "
        "on its picks while the speaker's turns, already right, cost no training time."))

    def __post_init__(self) -> None:
        if not 0 < self.keep_fraction <= 1:
            raise ConfigError(f"selection.keep_fraction must be in (0, 1], got {self.keep_fraction}")
        if self.group_by not in GROUP_BY:
            raise ConfigError(f"selection.group_by must be one of {list(GROUP_BY)}, got {self.group_by!r}")
        if self.train_agents is not None and (
                isinstance(self.train_agents, str) or not self.train_agents
                or not all(isinstance(a, str) for a in self.train_agents)):
            raise ConfigError(f"selection.train_agents must be a non-empty list of agent names (e.g. [bob]) or null, "
                              f"got {self.train_agents!r}")


@dataclass
class TrainSection(TRLTrainSection):
    """iSFT's training settings: the shared TRL fields (`TRLTrainSection`, with its defaults), checked
    against `trl.SFTConfig`."""

    TRL_CONFIG = "SFTConfig"
    METHOD = "iSFT"

    padding_free: bool = field(default=True, metadata=_help(
        "Concatenate each batch into one row with restarting position ids (TRL's padding-free collator), so no "
        "compute goes to pad tokens; the loss is the padded batches' (tests/train/test_padding_free.py). Examples "
        "are cut to train.max_length first, keeping the start."))


@dataclass
class ISFTConfig:
    """Iterative SFT (docs/design.md section 2): sample N dialogues per question, rank by the Optima
    reward, keep the best per question and the top questions, fine-tune, repeat.

    Sections: task, model, generation, reward, selection, lora, train, eval, run (see each
    field's `metadata["help"]`, or `optima train isft --help-config`).
    """

    task: TaskSection = field(default_factory=TaskSection)
    model: ModelSection = field(default_factory=ModelSection)
    generation: GenerationSection = field(default_factory=GenerationSection)
    reward: RewardSection = field(default_factory=RewardSection)
    selection: SelectionSection = field(default_factory=SelectionSection)
    lora: LoraSection = field(default_factory=LoraSection)
    train: TrainSection = field(default_factory=TrainSection)
    eval: EvalSection = field(default_factory=EvalSection)
    run: RunSection = field(default_factory=RunSection)

    #: Fields that may differ when resuming a run (everything else must match the stored config).
    RESUMABLE: ClassVar[tuple[str, ...]] = ("run.iterations", "run.progress", "run.num_threads", "train.padding_free",
                                            *SCHEDULING_KEYS, *launch_keys("train"))

    #: What one reported unit of `--plan` is called.
    PLAN_PERIOD = "iteration"

    @property
    def sampler(self) -> GenerationSection:
        """The section the training dialogues are sampled with."""
        return self.generation

    def plan_workload(self) -> list:
        """What one iteration samples and trains (`optima train ... --plan`)."""
        from optima_train.plan.workload import isft_stage

        return [isft_stage(self, self.generation, self.train, "train", self.task.train_questions)]

    def __post_init__(self) -> None:
        fresh = self.generation.new_questions_each_iteration
        check_question_ranges(self.task, self.eval, self.task.train_first_index,
                              self.task.train_questions * (self.run.iterations if fresh else 1),
                              span=" (over all iterations)" if fresh else "")

    def train_indices(self, iteration: int) -> range:
        """The instance indices of the questions sampled in `iteration`."""
        start = self.task.train_first_index
        if self.generation.new_questions_each_iteration:
            start += iteration * self.task.train_questions
        return range(start, start + self.task.train_questions)
