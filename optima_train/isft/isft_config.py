"""`ISFTConfig`: everything an iSFT run needs, as one typed, checked dataclass.

Load it with `optima_train.config_io.load_config(ISFTConfig, path, overrides)`; every field can
be set in YAML (`train: {learning_rate: 1e-4}`) or on the command line
(`--set train.learning_rate=1e-4`). Rules that link fields are checked in `__post_init__`, so
a bad value fails at parse time; `check_resources()` then checks what exists outside the
config (the env id and its data, the models) before any model loads.

Why not a `TrainingArguments` subclass (as TRL's configs are): one iSFT run drives generation,
scoring, selection, several trainings and evaluations; its `train` section holds the SFT
settings we choose defaults for, and `train.extra` passes any other `trl.SFTConfig` field
through (checked against `SFTConfig`'s fields at parse time).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from optima_envs.errors import ConfigError
from optima_eval.heldout import HELDOUT_SEED
from optima_train.config_base import (
    SCHEDULING_KEYS,
    TRLTrainSection,
    backend_field,
    check_backend,
    check_constrained_answers,
    constrained_answers_field,
    check_scheduling,
    launch_keys,
    max_inflight_field,
    scheduling_field,
)
from optima_train.config_base import help_meta as _help

__all__ = [
    "EvalSection", "GenerationSection", "ISFTConfig", "LoraSection", "ModelSection", "RewardSection", "RunSection",
    "SelectionSection", "TaskSection", "TrainSection",
]

@dataclass
class TaskSection:
    # env
    env_id: str = field(default="synth-hop-ia", metadata=_help("Registered env id (`optima envs` lists them)."))
    data_dir: str | None = field(default=None, metadata=_help(
        "A local folder with the dataset's files, for the training and held-out envs (None: "
        "$OPTIMA_DATA_DIR/<dataset folder> when that is set and exists, else the Hugging Face hub)."))
    env_kwargs: dict[str, Any] = field(default_factory=dict, metadata=_help(
        "Keyword arguments for optima_envs.make, shared by the training and held-out envs (e.g. max_turns)."))
    train_env_kwargs: dict[str, Any] = field(default_factory=lambda: {"split": "train"}, metadata=_help(
        "Extra make() kwargs for the training questions (e.g. {split: train})."))
    eval_env_kwargs: dict[str, Any] = field(default_factory=lambda: {"split": "validation"}, metadata=_help(
        "Extra make() kwargs for the held-out questions (e.g. {split: validation})."))
    # questions
    train_questions: int = field(default=64, metadata=_help("Training questions per iteration (instances by index)."))
    train_first_index: int = field(default=0, metadata=_help("Index of the first training question."))
    eval_first_index: int = field(default=0, metadata=_help(
        "Index of the first held-out question (use disjoint ranges when train and held-out envs are the same)."))

    def __post_init__(self) -> None:
        if self.train_questions < 1:
            raise ConfigError(f"task.train_questions must be >= 1, got {self.train_questions}")
        if self.train_first_index < 0 or self.eval_first_index < 0:
            raise ConfigError(f"task.train_first_index and task.eval_first_index must be >= 0, got "
                              f"{self.train_first_index} and {self.eval_first_index}")
        if self.data_dir is not None:
            named = [f"task.{name}.{key}" for name in ("env_kwargs", "train_env_kwargs", "eval_env_kwargs")
                     for key in ("data_dir", "data_files") if key in getattr(self, name)]
            if named:
                raise ConfigError(f"task.data_dir={self.data_dir!r} and {', '.join(named)} both say where the data "
                                  "is; keep one")

    def train_kwargs(self) -> dict[str, Any]:
        return {**self._data(), **self.env_kwargs, **self.train_env_kwargs}

    def eval_kwargs(self) -> dict[str, Any]:
        return {**self._data(), **self.env_kwargs, **self.eval_env_kwargs}

    def _data(self) -> dict[str, Any]:
        return {} if self.data_dir is None else {"data_dir": self.data_dir}


@dataclass
class ModelSection:
    name: str = field(default="smollm2-135m", metadata=_help("Starting model: registry name, local folder or hub id."))
    reference: str | None = field(default=None, metadata=_help(
        "Frozen reference model of the readability term (None: the starting model)."))
    dtype: str = field(default="auto", metadata=_help(
        "Generation and reference dtype; auto: bfloat16 where the device runs it natively (GPUs, CPUs with AMX or "
        "AVX512-BF16), float32 on other CPUs, where bf16 is emulated and many times slower.",
        choices=["auto", "bfloat16", "float32"]))
    device: str = field(default="auto", metadata=_help(
        "Where generation (hf backend), the reference model and training run; auto: cuda when available.",
        choices=["auto", "cpu", "cuda"]))
    weight_swap: str = field(default="auto", metadata=_help(
        "How each iteration's trained weights reach a vLLM engine: adapter (its LoRA adapters, stacked, served "
        "on the running engine: no restart), restart (merged weights, new engine), auto (adapter on GPUs, "
        "restart on CPUs, where vLLM's LoRA path costs more than a restart).",
        choices=["auto", "adapter", "restart"]))

    def __post_init__(self) -> None:
        from optima_train.adapter_stack import WEIGHT_SWAPS

        if self.weight_swap not in WEIGHT_SWAPS:
            raise ConfigError(f"model.weight_swap must be one of {list(WEIGHT_SWAPS)}, got {self.weight_swap!r}")

    def resolved_device(self) -> str:
        if self.device != "auto":
            return self.device
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

    def resolved_dtype(self) -> str:
        """`dtype`, with "auto" resolved for `resolved_device()`."""
        from optima_agents.models.dtypes import resolve_dtype

        return resolve_dtype(self.dtype, self.resolved_device())


@dataclass
class GenerationSection:
    backend: str = backend_field("hf", "Generation backend; it must load the weights it is given (openai cannot: "
                                       "it is refused).")
    samples_per_question: int = field(default=10, metadata=_help("N dialogues sampled per training question."))
    temperature: float = field(default=0.7, metadata=_help("Sampling temperature of training dialogues."))
    agent_temperatures: dict[str, float] = field(default_factory=dict, metadata=_help(
        "Per-agent sampling temperatures that replace `temperature` for those agents (e.g. {alice: 0.0, bob: 1.0}: "
        "a speaker that says what it would say greedily, a listener that explores its picks)."))
    top_p: float = field(default=1.0, metadata=_help("Nucleus sampling threshold of training dialogues."))
    max_new_tokens: int = field(default=128, metadata=_help("Most tokens per utterance."))
    max_turns: int | None = field(default=None, metadata=_help("Most utterances per dialogue (None: the task's, 10)."))
    format_pool_first_iteration: bool = field(default=True, metadata=_help(
        "Iteration 0 samples with a format-diverse instruction (reset option format_instruction='sample')."))
    constrained_answers: str = constrained_answers_field()
    batch_size: int = field(default=64, metadata=_help("Most sequences per generate call (hf backend)."))
    max_live: int | None = field(default=None, metadata=_help("Most episodes in flight (None: all)."))
    scheduling: str = scheduling_field()
    max_inflight: int | None = max_inflight_field()
    backend_kwargs: dict[str, Any] = field(default_factory=dict, metadata=_help(
        "Extra policy kwargs passed to optima_agents.policies.make_policy (e.g. vllm engine options)."))

    def __post_init__(self) -> None:
        check_scheduling("generation", self.scheduling, self.max_inflight)
        check_constrained_answers("generation", self.constrained_answers)
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
        if self.max_new_tokens < 1 or self.batch_size < 1:
            raise ConfigError(f"generation.max_new_tokens and batch_size must be >= 1, got "
                              f"{self.max_new_tokens} and {self.batch_size}")
        if self.max_turns is not None and self.max_turns < 1:
            raise ConfigError(f"generation.max_turns must be >= 1 or null, got {self.max_turns}")
        if not check_backend("generation.backend", self.backend).loads_weights:
            raise ConfigError(
                f"generation.backend={self.backend!r} cannot drive iSFT: every iteration trains new weights, and a "
                f"{self.backend!r} policy generates with weights a server holds, which cannot be made to load them "
                "from here. Use a backend that loads the weights it is given ('hf' or 'vllm') for the loop, and "
                f"`optima eval --backend {self.backend} ...` to evaluate a served checkpoint")


@dataclass
class RewardSection:
    score: float = field(default=1.0, metadata=_help("Weight of the task score."))
    lambda_token: float = field(default=0.5, metadata=_help("Weight of tokens / max_tokens (subtracted)."))
    lambda_loss: float = field(default=0.8, metadata=_help("Weight of 1 / max_turn_lm_loss (added); 0 skips the LM."))
    lambda_format: float = field(default=0.5, metadata=_help("Weight of the format-violation rate (subtracted)."))
    lm_loss_floor: float = field(default=1.0, metadata=_help("Lower bound on the loss in 1 / loss."))
    token_normalization: str = field(default="group", metadata=_help(
        "max_tokens: largest in the question's group, or a percentile of the iteration's batch.",
        choices=["group", "percentile"]))
    token_percentile: float = field(default=95.0, metadata=_help("Percentile for token_normalization=percentile."))
    repeat_ratio: float = field(default=90.0, metadata=_help("rapidfuzz ratio at which two turns are near-duplicates."))
    repeat_min_chars: int = field(default=12, metadata=_help("Shorter normalised turns are exempt from the repeat rule."))
    readability_batch_tokens: int = field(default=4096, metadata=_help("Padded tokens per reference-model forward."))

    def __post_init__(self) -> None:
        self.weights()  # RewardWeights checks the signs
        if not 0 < self.token_percentile <= 100:
            raise ConfigError(f"reward.token_percentile must be in (0, 100], got {self.token_percentile}")
        if not 0 <= self.repeat_ratio <= 100:
            raise ConfigError(f"reward.repeat_ratio must be in [0, 100], got {self.repeat_ratio}")

    def weights(self) -> Any:
        from optima_train.rewards import RewardWeights

        return RewardWeights(score=self.score, lambda_token=self.lambda_token, lambda_loss=self.lambda_loss,
                             lambda_format=self.lambda_format, lm_loss_floor=self.lm_loss_floor)


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

    def __post_init__(self) -> None:
        if not 0 < self.keep_fraction <= 1:
            raise ConfigError(f"selection.keep_fraction must be in (0, 1], got {self.keep_fraction}")


@dataclass
class LoraSection:
    enabled: bool = field(default=True, metadata=_help("Train a LoRA adapter (merged into the checkpoint); "
                                                       "false: full fine-tuning."))
    r: int = field(default=16, metadata=_help("LoRA rank."))
    alpha: int = field(default=32, metadata=_help("LoRA alpha."))
    dropout: float = field(default=0.05, metadata=_help("LoRA dropout."))
    target_modules: list[str] = field(default_factory=lambda: ["all-linear"], metadata=_help(
        "Modules to adapt (PEFT names; 'all-linear' for every linear layer but the head)."))

    def __post_init__(self) -> None:
        if self.r < 1 or self.alpha < 1:
            raise ConfigError(f"lora.r and lora.alpha must be >= 1, got {self.r} and {self.alpha}")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"lora.dropout must be in [0, 1), got {self.dropout}")


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
class EvalSection:
    episodes: int = field(default=200, metadata=_help("Held-out dialogues per evaluation (greedy)."))
    baseline: bool = field(default=True, metadata=_help("Also evaluate the starting model before iteration 0."))
    max_new_tokens: int | None = field(default=None, metadata=_help("Per-utterance limit (None: generation's)."))
    every: int = field(default=1, metadata=_help("Evaluate after every this many iterations (the last always)."))
    seed: int = field(default=HELDOUT_SEED, metadata=_help(
        "Reset seed of held-out dialogue 0 (dialogue i: seed+i), which deals its evidence. Independent of "
        "run.seed, so runs with different seeds, every stage of a run and the leaderboard (same default) play "
        "the same held-out dialogues."))

    def __post_init__(self) -> None:
        if self.episodes < 1 or self.every < 1:
            raise ConfigError(f"eval.episodes and eval.every must be >= 1, got {self.episodes} and {self.every}")


@dataclass
class RunSection:
    output_dir: str = field(default="runs/isft", metadata=_help("Run directory (resumed when it exists)."))
    iterations: int = field(default=2, metadata=_help("iSFT iterations (may be raised when resuming)."))
    seed: int = field(default=0, metadata=_help("Seeds sampling, evidence deals and training."))
    progress: bool = field(default=True, metadata=_help("Show progress bars."))
    num_threads: int | None = field(default=None, metadata=_help(
        "torch CPU threads for the whole run (None: torch's default). 1 is faster on a CPU shared with other "
        "busy processes."))

    def __post_init__(self) -> None:
        if self.iterations < 1:
            raise ConfigError(f"run.iterations must be >= 1, got {self.iterations}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ConfigError(f"run.num_threads must be >= 1 or null, got {self.num_threads}")


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
    RESUMABLE = ("run.iterations", "run.progress", "run.num_threads", "train.padding_free", *SCHEDULING_KEYS,
                 *launch_keys("train"))

    #: What one reported unit of `--plan` is called.
    PLAN_PERIOD = "iteration"

    def plan_workload(self) -> list:
        """What one iteration samples and trains (`optima train ... --plan`)."""
        from optima_train.plan_config import isft_stage

        return [isft_stage(self, self.generation, self.train, "train", self.task.train_questions)]
    def __post_init__(self) -> None:
        t = self.task
        if t.train_kwargs() == t.eval_kwargs():
            train = range(t.train_first_index, t.train_first_index + t.train_questions)
            held = range(t.eval_first_index, t.eval_first_index + self.eval.episodes)
            if train.start < held.stop and held.start < train.stop:
                raise ConfigError(
                    f"training questions {train.start}..{train.stop - 1} and held-out questions {held.start}.."
                    f"{held.stop - 1} come from the same env (task.train_env_kwargs == task.eval_env_kwargs) and "
                    "overlap; use different splits or disjoint task.train_first_index / task.eval_first_index"
                )
