"""The sampler sections: where a training loop's dialogues come from, and the backend that makes them.

    SamplerSection               backend, batch_size, backend_kwargs, max_turns (every sampler)
      RolloutSamplerSection      + temperature, max_new_tokens, constrained_answers, max_live,
                                   scheduling, max_inflight (whole dialogues, through the rollout engine)
        GenerationSection        + samples_per_question, agent_temperatures, top_p, ... (iSFT)
        GRPOGenerationSection    + group_size (GRPO)
      SearchSection              + questions, min_kept_pairs, round_trees, ... (iDPO's MCTS)

Every algorithm config names its sampler section with a `sampler` property; the training loop
(`optima_train.loop.IterativeTrainer`) builds its generation policy from that section, and the
held-out dialogues use its `max_turns`. A section's `SECTION` is its key in the config, which
messages name (`generation.max_turns must be ...`).

The `backend` field takes any registered backend name (`check_backend` checks it against the
backend registry, not a fixed list).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from optima_envs.errors import ConfigError
from optima_train.config.fields import help_meta

__all__ = ["BACKEND_HELP", "CONSTRAINED_ANSWERS", "SCHEDULING_KEYS", "RolloutSamplerSection", "SamplerSection",
           "backend_field", "check_backend", "check_constrained_answers", "check_scheduling",
           "constrained_answers_field", "constrains", "max_inflight_field", "scheduling_field"]

BACKEND_HELP = ("hf (transformers), vllm (in-process) or openai (OpenAI-compatible servers), or any backend "
                "installed through the entry-point group optima.backends")


def backend_field(default: str, text: str) -> Any:
    """A `backend` field: any registered backend name (`check_backend` checks it)."""
    return field(default=default, metadata=help_meta(f"{text} One of: {BACKEND_HELP}."))


def check_backend(where: str, name: str) -> Any:
    """The registered backend `name` (`optima_agents.policies.registry.BackendSpec`), for the
    config field `where`.

    Raises:
        ConfigError: `name` is not registered; the message lists the registered backends and
            says how to register one.
    """
    from optima_agents.policies.registry import backend_spec

    try:
        return backend_spec(name)
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}") from None


def scheduling_field() -> Any:
    """A generation section's `scheduling`: how the rollout engine sends turns to the backend."""
    from optima_agents.rollout.scheduling import SCHEDULINGS

    return field(default="auto", metadata=help_meta(
        "How turns reach the backend: lock-step (one batched call per step), continuous (each episode's next turn "
        "as soon as its previous reply is in; backends that submit, vllm and openai) or auto (continuous where the "
        "backend supports it). The records are the same either way.", choices=list(SCHEDULINGS)))


def max_inflight_field() -> Any:
    """A generation section's `max_inflight`: the most turn requests outstanding at once."""
    return field(default=None, metadata=help_meta(
        "Most turn requests outstanding at once, one per live episode (None: every episode in lock step, 256 in "
        "continuous mode; max_live also applies, the smaller wins)."))


def check_scheduling(section: str, scheduling: str, max_inflight: int | None) -> None:
    """Checks a generation section's `scheduling` and `max_inflight` (`section` names it).

    Raises:
        ConfigError: an unknown scheduling or a max_inflight below 1.
    """
    from optima_agents.rollout.scheduling import SCHEDULINGS, check_max_inflight

    if scheduling not in SCHEDULINGS:
        raise ConfigError(f"{section}.scheduling must be one of {list(SCHEDULINGS)}, got {scheduling!r}")
    check_max_inflight(max_inflight, field=f"{section}.max_inflight")


#: When a loop samples answer moves constrained to the task's answer pattern.
CONSTRAINED_ANSWERS = ("never", "first_iteration", "always")


def constrained_answers_field() -> Any:
    """A generation section's `constrained_answers`: exploration for a model that does not write
    moves the task can read yet."""
    return field(default="never", metadata=help_meta(
        "Sample each answering agent's turns constrained to the task's turn pattern (e.g. synth-hop-ia: some of "
        "one's own facts verbatim, then optionally an answer) or else its answer pattern (one readable move and "
        "nothing else; tasks with either, on vllm or openai): never, first_iteration (like the format "
        "pool: the first iteration explores with it, training and evaluation never use it) or always (every "
        "iteration's sampling; held-out evaluation stays unconstrained).", choices=list(CONSTRAINED_ANSWERS)))


def check_constrained_answers(section: str, value: str) -> None:
    if value not in CONSTRAINED_ANSWERS:
        raise ConfigError(f"{section}.constrained_answers must be one of {list(CONSTRAINED_ANSWERS)}, got {value!r}")


def constrains(value: str, it: int) -> bool:
    """Whether iteration `it` samples answers constrained under the setting `value`."""
    return value == "always" or (value == "first_iteration" and it == 0)


#: The scheduling fields of a `generation` section: they change how fast dialogues are sampled,
#: never which, so a run may resume with other values.
SCHEDULING_KEYS = ("generation.scheduling", "generation.max_inflight")


@dataclass
class SamplerSection:
    """What every sampler section holds: the backend that generates, how it is built, and the
    longest dialogue. A subclass sets `SECTION`, adds its own fields and checks them in
    `__post_init__` with the helpers below (in the order its messages should come)."""

    #: The section's key in a config, which messages name.
    SECTION: ClassVar[str] = "generation"

    backend: str = backend_field("hf", "Generation backend.")
    batch_size: int = field(default=64, metadata=help_meta("Most sequences per generate call (hf backend)."))
    backend_kwargs: dict[str, Any] = field(default_factory=dict, metadata=help_meta(
        "Extra policy kwargs passed to optima_agents.policies.make_policy (e.g. vllm engine options)."))
    max_turns: int | None = field(default=None, metadata=help_meta(
        "Most utterances per dialogue (None: the task's, 10)."))

    def check_max_turns(self) -> None:
        """Raises `ConfigError` for a `max_turns` below 1."""
        if self.max_turns is not None and self.max_turns < 1:
            raise ConfigError(f"{self.SECTION}.max_turns must be >= 1 or null, got {self.max_turns}")

    def backend_spec(self) -> Any:
        """The registered backend (`check_backend`); raises `ConfigError` for an unknown name."""
        return check_backend(f"{self.SECTION}.backend", self.backend)


@dataclass
class RolloutSamplerSection(SamplerSection):
    """A sampler of whole dialogues through the rollout engine (`optima_agents.rollout`), with the
    weights each iteration trains: its backend must load weights it is given."""

    backend: str = backend_field("hf", "Generation backend; it must load the weights it is given (openai cannot: "
                                       "it is refused).")
    temperature: float = field(default=0.7, metadata=help_meta("Sampling temperature of training dialogues."))
    max_new_tokens: int = field(default=128, metadata=help_meta("Most tokens per utterance."))
    constrained_answers: str = constrained_answers_field()
    max_live: int | None = field(default=None, metadata=help_meta("Most episodes in flight (None: all)."))
    scheduling: str = scheduling_field()
    max_inflight: int | None = max_inflight_field()

    def temperatures_by_agent(self) -> Mapping[str, float]:
        """The agents that sample at a temperature of their own instead of `temperature` (none here)."""
        return {}

    def check_engine_options(self) -> None:
        """Raises `ConfigError` for an unknown `scheduling` or `constrained_answers`, or a
        `max_inflight` below 1."""
        check_scheduling(self.SECTION, self.scheduling, self.max_inflight)
        check_constrained_answers(self.SECTION, self.constrained_answers)

    def check_lengths(self) -> None:
        """Raises `ConfigError` for a `max_new_tokens`, `batch_size` or `max_turns` below 1."""
        if self.max_new_tokens < 1 or self.batch_size < 1:
            raise ConfigError(f"{self.SECTION}.max_new_tokens and batch_size must be >= 1, got "
                              f"{self.max_new_tokens} and {self.batch_size}")
        self.check_max_turns()

    def check_loads_weights(self, method: str, advice: str = "") -> None:
        """Raises `ConfigError` for a backend that cannot load the weights `method` trains (a
        client of a server that serves its own); `advice` ends the message."""
        if not self.backend_spec().loads_weights:
            raise ConfigError(
                f"{self.SECTION}.backend={self.backend!r} cannot drive {method}: every iteration trains new weights, "
                f"and a {self.backend!r} policy generates with weights a server holds, which cannot be made to load "
                f"them from here. Use a backend that loads the weights it is given ('hf' or 'vllm'){advice}")
