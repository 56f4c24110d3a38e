"""What every inference system shares: the held-out questions it answers, what one sample and
one question's outcome record, the majority vote, the prompts of single-agent answers, and
scoring through the task's own extractor and metric.

A *system* is a way of using a model on a task: one agent thinking aloud (`cot`), several
samples and a vote (`sc`), agents debating (`mad`), or the env's own dialogue (`mas`). Every
system answers the same held-out questions (question i: instance `first_index + i`, evidence
dealt by reset seed `seed + i`, as `optima_eval.evaluation` does for the dialogue), so their
scores and token costs compare directly.

Tokens are what the model generated for the question (prompts are not counted, as in the paper):
the backend's token ids when it reports them, else the env's token counter.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, ClassVar, Mapping, Sequence

from optima_envs.core.tokens import default_token_count
from optima_envs.core.types import Evidence, TaskInstance
from optima_envs.errors import ConfigError
from optima_envs.scoring.normalize import normalize_answer, read_number
from optima_envs.scoring.result import score_response

__all__ = [
    "SOLO_INSTRUCTION", "SOLO_SYSTEM", "Outcome", "Question", "Sample", "System", "SystemContext", "answer_prompt",
    "as_outcome", "best_of", "chosen_outcome", "majority", "prefix_vote", "reply_tokens", "sample_of", "solo_observation",
    "vote_key",
]

#: The system prompt and closing instruction of one agent answering alone (CoT, SC, MAD).
SOLO_SYSTEM = "You answer questions accurately."
SOLO_INSTRUCTION = "Think step by step, then give the final answer as {answer_format}."


@dataclass(frozen=True)
class Question:
    """One held-out question as every system sees it.

    Attributes:
        position: its place in the held-out set (0, 1, ...).
        seed, index: the env's reset seed and instance index (the evidence deal and the question).
        instance: the task instance.
        evidence: the evidence of each agent of the env's deal, in agent order.
    """

    position: int
    seed: int
    index: int
    instance: TaskInstance
    evidence: tuple[tuple[Evidence, ...], ...]

    @property
    def all_evidence(self) -> tuple[Evidence, ...]:
        return tuple(piece for pieces in self.evidence for piece in pieces)


@dataclass(frozen=True)
class Sample:
    """One answer a system produced (a CoT reply, a debate's final reply, a whole dialogue).

    `score` is None when scoring failed (`score_error` says why) or the sample hit an
    infrastructure failure (`infra_failure`, `error`); a missing answer is a wrong one (0.0).
    """

    answer: str | None
    score: float | None
    score_ok: bool
    tokens: int
    infra_failure: bool = False
    score_error: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Outcome:
    """What a system produced for one question: its final answer and score, the tokens spent on
    the question (all samples, all rounds), and the samples behind a vote.

    `infra_failure` means the question could not be answered for reasons outside the model
    (every sample failed); `score_ok=False` that its final answer could not be scored. Neither
    is a wrong answer: both are counted apart and left out of the mean score. `transcript` is the
    dialogue of a single-dialogue system (`{"speaker", "text"}` per turn), kept so that a message
    ablation can swap in another question's messages.
    """

    position: int
    instance_id: str
    answer: str | None
    score: float | None
    score_ok: bool
    tokens: int
    infra_failure: bool = False
    score_error: str | None = None
    error: str | None = None
    samples: tuple[Sample, ...] = ()
    transcript: tuple[Mapping[str, str], ...] = ()

    @property
    def scored(self) -> bool:
        return not self.infra_failure and self.score_ok and self.score is not None

    def to_dict(self) -> dict[str, Any]:
        """JSON data; `transcript` only when the system recorded one, so cells without it read
        as they always did."""
        data = {**asdict(self), "samples": [s.to_dict() for s in self.samples],
                "transcript": [dict(m) for m in self.transcript]}
        if not self.transcript:
            del data["transcript"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Outcome":
        return cls(**{**data, "samples": tuple(Sample(**s) for s in data.get("samples", ())),
                      "transcript": tuple(dict(m) for m in data.get("transcript", ()))})


@dataclass
class SystemContext:
    """What a system runs with: the env (its task's prompts, extractor and metric), the
    held-out questions and the policy (a model on a backend)."""

    env_id: str
    env_kwargs: Mapping[str, Any]
    questions: Sequence[Question]
    policy: Any
    max_new_tokens: int = 128
    progress: bool = False
    ablation: Any = None
    """A `MessageAblation` to play the dialogues under (systems with `ablatable`), or None."""

    def env(self, **overrides: Any) -> Any:
        import optima_envs

        return optima_envs.make(self.env_id, **{**self.env_kwargs, **overrides})

    def policy_with(self, *, temperature: float, seed: int = 0) -> Any:
        """The policy with this system's sampling (every real backend shares its weights)."""
        from optima_agents.policies.base import SamplingParams, capabilities_of

        sampling = SamplingParams(temperature=temperature, max_new_tokens=self.max_new_tokens, seed=seed)
        if not capabilities_of(self.policy).with_sampling:
            raise ConfigError(f"the policy {type(self.policy).__name__} does not declare the with_sampling capability; "
                              "systems set their own temperature and length, so the policy must offer it (every "
                              "built-in backend does)")
        return self.policy.with_sampling(sampling)


class System:
    """Base of the registered systems: a dataclass of settings plus `run`.

    Subclasses are dataclasses whose fields are the system's settings (all recorded in the
    leaderboard's cache key), set `name`, and implement `run(context) -> list[Outcome]`, one
    outcome per question in order.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    ablatable: ClassVar[bool] = False
    """The system plays the env's dialogue once per question and honours `SystemContext.ablation`."""

    def settings(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    def env_overrides(self) -> dict[str, Any]:
        """`make()` kwargs this system sets over the task's own (e.g. how many agents it seats),
        so a board can check before running anything that the task accepts them."""
        return {}

    def run(self, context: SystemContext) -> list[Outcome]:
        raise NotImplementedError

    def with_settings(self, **settings: Any) -> "System":
        return replace(self, **settings)  # type: ignore[type-var]


def answer_prompt(instance: TaskInstance, evidence: Sequence[Evidence], answer_format: str) -> str:
    """The question as one agent answering alone reads it: the question, any options or
    candidates, the evidence it holds, and how to answer."""
    lines = [f"Question: {instance.question}"]
    if instance.choices:
        lines.extend(f"({label}) {text}" for label, text in instance.choices)
    if evidence:
        lines.append("What you know:")
        lines.extend(f"- {piece.render()}" for piece in evidence)
    lines.append(SOLO_INSTRUCTION.format(answer_format=answer_format))
    return "\n".join(lines)


def solo_observation(agent: str, system_prompt: str, transcript: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """An observation for the chat view of one agent talking with a questioner: `transcript` is
    `(speaker, text)` pairs, the agent's own turns under its name and the questioner's under
    "user" (which the chat view renders as the user role)."""
    return {"agent": agent, "system_prompt": system_prompt, "speaker": agent,
            "transcript": tuple({"speaker": s, "text": t} for s, t in transcript)}


def reply_tokens(action: Any, count: Callable[[str], int] = default_token_count) -> int:
    """Generated tokens of one reply: the backend's ids, else the counter."""
    return len(action.token_ids) if action.token_ids else (count(action.text) if action.text else 0)


def sample_of(env: Any, action: Any, instance: TaskInstance, metric: Any = None) -> Sample:
    """One reply as a `Sample`: scored with the task's own extractor and metric (or `metric`), or
    an infra failure when the backend failed."""
    tokens = reply_tokens(action)
    if action.failed:
        return Sample(None, None, True, tokens, infra_failure=True, error=action.error or "policy error")
    result = score_response(action.text, instance, extractor=env.task.extract, metric=metric or env.task.metric)
    return Sample(result.answer, result.score, result.ok, tokens, score_error=result.error)


def vote_key(answer: str | None) -> str | None:
    """What two answers must share to count as the same vote: the value of a plain number
    ("18", "$18.00"), else the SQuAD-normalised text ("The Paris" and "paris"). Option labels
    normalise alike ("A", "(A)"). None: no answer, which never wins a vote."""
    if answer is None:
        return None
    number = read_number(answer, bare=True)
    if number is not None and math.isfinite(number.value):
        return f"#{number.exact if number.exact is not None else number.value}"
    # SQuAD's normaliser drops the article "a", which is also option A's label: fall back to the
    # bare letters and digits, so "A" and "(A)" still vote together.
    key = normalize_answer(answer) or re.sub(r"[\W_]+", "", answer.casefold())
    return key or None


def majority(samples: Sequence[Sample], position: int, instance_id: str) -> Outcome:
    """The outcome of a vote: the most common answer (by `vote_key`) among the samples that ran;
    a tie goes to the answer given first. The winner's score is the score of its first sample.
    Tokens are the sum over every sample. Every sample an infra failure: the outcome is one."""
    return chosen_outcome(samples, position, instance_id, _vote_winner)


def best_of(samples: Sequence[Sample], position: int, instance_id: str) -> Outcome:
    """The outcome of the best-scoring sample among those scored (the first on ties; none scored:
    the first that ran); tokens summed over all. Every sample an infra failure: the outcome is one."""
    return chosen_outcome(samples, position, instance_id, _best_scored)


def chosen_outcome(samples: Sequence[Sample], position: int, instance_id: str,
                   choose: Callable[[list[Sample]], Sample]) -> Outcome:
    """The outcome of the sample `choose` picks among those that ran, with every sample's tokens;
    an infra failure when none ran."""
    tokens = sum(s.tokens for s in samples)
    ran = [s for s in samples if not s.infra_failure]
    if not ran:
        error = next((s.error for s in samples if s.error), "every sample failed")
        return Outcome(position, instance_id, None, None, True, tokens, infra_failure=True, error=error,
                       samples=tuple(samples))
    winner = choose(ran)
    return Outcome(position, instance_id, winner.answer, winner.score, winner.score_ok, tokens,
                   score_error=winner.score_error, samples=tuple(samples))


def _vote_winner(ran: list[Sample]) -> Sample:
    keys = [vote_key(s.answer) for s in ran]
    counts = Counter(k for k in keys if k is not None)
    if not counts:
        return ran[0]
    best = max(counts.values())
    return next(s for s, k in zip(ran, keys) if k is not None and counts[k] == best)


def _best_scored(ran: list[Sample]) -> Sample:
    scored = [s for s in ran if s.score_ok and s.score is not None]
    return max(scored, key=lambda s: s.score) if scored else ran[0]


def prefix_vote(outcome: Outcome, k: int) -> Outcome:
    """The outcome the same system would have had with only its first `k` samples (samples
    are seeded by their position, so a k-sample run draws exactly these)."""
    if k < 1 or k > len(outcome.samples):
        raise ValueError(f"prefix_vote: k must be in [1, {len(outcome.samples)}], got {k}")
    return majority(outcome.samples[:k], outcome.position, outcome.instance_id)


def as_outcome(sample: Sample, position: int, instance_id: str) -> Outcome:
    """A single-sample system's outcome."""
    return Outcome(position, instance_id, sample.answer, sample.score, sample.score_ok, sample.tokens,
                   infra_failure=sample.infra_failure, score_error=sample.score_error, error=sample.error,
                   samples=())


def check_positive(name: str, *, minimum: int = 1, **values: int) -> None:
    """Each value an int >= `minimum` (1: "a positive int")."""
    wanted = "a positive int" if minimum == 1 else f"an int >= {minimum}"
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigError(f"system {name!r}: {key} must be {wanted}, got {value!r}")


def check_temperature(name: str, temperature: float) -> None:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or temperature < 0:
        raise ConfigError(f"system {name!r}: temperature must be a number >= 0, got {temperature!r}")

