"""The sections every training algorithm's config shares: the task and its questions, the model,
the reward, the LoRA adapter, the held-out evaluation and the run; and `TrainingConfig`, what the
training loop reads of a config.

An algorithm's config is a dataclass that holds these sections under the same keys (`task`,
`model`, `reward`, `lora`, `eval`, `run`), its sampler section (`optima_train.config.sampler`),
its `train` section (`optima_train.config.train.TRLTrainSection`) and its own; a section whose
defaults differ for the method is a subclass (e.g. a `RunSection` with another `output_dir`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from optima_envs.errors import ConfigError
from optima_eval.heldout import HELDOUT_SEED, registered_kwargs
from optima_train.config.fields import help_meta as _help
from optima_train.config.sampler import SamplerSection
from optima_train.config.train import TRLTrainSection

__all__ = ["EvalSection", "LoraSection", "ModelSection", "RewardSection", "RunSection", "TaskSection", "TrainingConfig",
           "check_question_ranges"]


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
    eval_env_kwargs: dict[str, Any] = field(default_factory=dict, metadata=_help(
        "Extra make() kwargs for the held-out questions, over the env's registered held-out split "
        "(EnvSpec.heldout_kwargs, e.g. {split: validation}); once parsed, the two together."))
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
        self.eval_env_kwargs = _heldout_kwargs(self.env_id, self.eval_env_kwargs)

    def train_kwargs(self) -> dict[str, Any]:
        return {**self._data(), **self.env_kwargs, **self.train_env_kwargs}

    def eval_kwargs(self) -> dict[str, Any]:
        return {**self._data(), **self.env_kwargs, **self.eval_env_kwargs}

    def _data(self) -> dict[str, Any]:
        return {} if self.data_dir is None else {"data_dir": self.data_dir}


def _heldout_kwargs(env_id: str, stated: dict[str, Any]) -> dict[str, Any]:
    """The held-out kwargs a config means: the env's registered held-out split with what it
    states on top, so a training run judges its models on the questions the leaderboard plays. A
    stored config holds the result, which resolves to itself. An unknown env id keeps what is
    stated; the run's data check names the id."""
    from optima_envs.errors import UnknownEnvError

    try:
        return registered_kwargs(env_id, stated)
    except UnknownEnvError:
        return dict(stated)


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
class LoraSection:
    enabled: bool = field(default=True, metadata=_help("Train a LoRA adapter (merged into the checkpoint); "
                                                       "false: full fine-tuning."))
    r: int = field(default=16, metadata=_help("LoRA rank."))
    alpha: int = field(default=32, metadata=_help("LoRA alpha."))
    dropout: float = field(default=0.05, metadata=_help("LoRA dropout."))
    fast_dropout: bool = field(default=True, metadata=_help(
        "On a CPU, draw LoRA dropout masks with optima_train.fast_dropout (four elements per random number, "
        "the probability rounded to 1/65536); false: torch's nn.Dropout, one draw per element."))
    target_modules: list[str] = field(default_factory=lambda: ["all-linear"], metadata=_help(
        "Modules to adapt (PEFT names; 'all-linear' for every linear layer but the head)."))

    def __post_init__(self) -> None:
        if self.r < 1 or self.alpha < 1:
            raise ConfigError(f"lora.r and lora.alpha must be >= 1, got {self.r} and {self.alpha}")
        if not 0 <= self.dropout < 1:
            raise ConfigError(f"lora.dropout must be in [0, 1), got {self.dropout}")


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


def check_question_ranges(task: TaskSection, eval_section: EvalSection, first: int, count: int, *,
                          span: str = " (over all iterations)") -> None:
    """Refuse training questions `first .. first + count - 1` that overlap the held-out ones when
    both come from the same env; `span` follows the training range in the message.

    Raises:
        ConfigError: the two ranges overlap.
    """
    if task.train_kwargs() != task.eval_kwargs():
        return
    train = range(first, first + count)
    held = range(task.eval_first_index, task.eval_first_index + eval_section.episodes)
    if train.start < held.stop and held.start < train.stop:
        raise ConfigError(
            f"training questions {train.start}..{train.stop - 1}{span} and held-out questions "
            f"{held.start}..{held.stop - 1} come from the same env (task.train_env_kwargs == task.eval_env_kwargs) "
            "and overlap; use different splits or disjoint task.train_first_index / task.eval_first_index"
        )


class TrainingConfig(Protocol):
    """What the training loop (`optima_train.loop.IterativeTrainer`) reads of an algorithm's config:
    the shared sections, its `train` section, the section it samples with, and `RESUMABLE`, the
    dotted keys that may differ when a run resumes (every other key must match the stored config).
    A `lora` section is read where the config has one."""

    RESUMABLE: ClassVar[tuple[str, ...]]

    @property
    def task(self) -> TaskSection: ...

    @property
    def model(self) -> ModelSection: ...

    @property
    def reward(self) -> RewardSection: ...

    @property
    def eval(self) -> EvalSection: ...

    @property
    def run(self) -> RunSection: ...

    @property
    def train(self) -> TRLTrainSection: ...

    @property
    def sampler(self) -> SamplerSection:
        """The section the loop's generation policy is built from."""
        ...
