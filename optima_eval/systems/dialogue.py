"""The env's own multi-agent dialogue as a system: `mas` (any model or checkpoint, plain or
with a format instruction), `autoform` (the dialogue told to use a concise non-natural-language
format, after Chen et al. 2024, "AutoForm"), and `mas-sc` (k sampled dialogues per question and
a majority vote over their final answers).

A dialogue's tokens are every utterance of every agent (the env's `total_tokens`); its answer
and score are the env's (the task's termination rule and final-answer scoring). `mas` and
`autoform` keep each question's transcript and can be played under a message ablation
(`SystemContext.ablation`, `optima_eval.systems.ablation`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

from optima_agents.rollout.engine import EpisodeSpec, RolloutEngine, derive_seed
from optima_eval.systems.base import (
    Outcome,
    Question,
    Sample,
    System,
    SystemContext,
    as_outcome,
    check_positive,
    check_temperature,
    majority,
)

__all__ = ["AUTOFORM_INSTRUCTION", "AutoForm", "Dialogue", "DialogueVote", "dialogue_outcome", "dialogue_sample", "play"]

#: Our wording of AutoForm's instruction: any compact format the agents choose, not prose.
AUTOFORM_INSTRUCTION = ("Communicate in whatever concise format suits the task best, not natural language: for "
                        "example structured data, key-value pairs, code, or logical expressions. Use as few words "
                        "as you can.")


def play(context: SystemContext, questions: Sequence[Question], *, temperature: float,
         sampling_seeds: Sequence[int], format_instruction: str | None) -> list[list[Any]]:
    """One dialogue per question and sampling seed, all through one rollout engine run (so the
    engine keeps every dialogue of every sample in flight together), under the context's message
    ablation when it has one; the `EpisodeRecord`s as `[sample][question]`."""
    policy = context.policy_with(temperature=temperature)
    options = {"format_instruction": format_instruction} if format_instruction else {}
    ablation = context.ablation
    specs = [EpisodeSpec(seed=q.seed, index=q.index, sampling_seed=s,
                         options={**options, **(ablation.options(q.position) if ablation else {})})
             for s in sampling_seeds for q in questions]
    engine = RolloutEngine(context.env_id, policy, env_kwargs=dict(context.env_kwargs), progress=context.progress)
    records = engine.run(specs)
    n = len(questions)
    return [records[i * n:(i + 1) * n] for i in range(len(sampling_seeds))]


def dialogue_sample(record: Any) -> Sample:
    """An `EpisodeRecord` as a `Sample`."""
    return Sample(answer=record.final_answer, score=record.score, score_ok=record.score_ok,
                  tokens=record.total_tokens, infra_failure=record.infra_failure,
                  score_error=record.score_error, error=record.error)


def dialogue_outcome(record: Any, question: Question) -> Outcome:
    """A single dialogue's outcome, with its transcript (the donor of a swap ablation)."""
    outcome = as_outcome(dialogue_sample(record), question.position, question.instance.instance_id)
    return replace(outcome, transcript=tuple({"speaker": t.speaker, "text": t.text} for t in record.turns))


@dataclass
class Dialogue(System):
    """The env's dialogue, once per question.

    format_instruction (str, *optional*): added to every agent's system prompt (None: plain).
    temperature (float, defaults to 0.0): 0 is greedy, as held-out evaluation plays it.
    """

    format_instruction: str | None = None
    temperature: float = 0.0

    name = "mas"
    summary = "the env's multi-agent dialogue, plain or with a format instruction"
    ablatable = True

    def __post_init__(self) -> None:
        check_temperature(self.name, self.temperature)

    def run(self, context: SystemContext) -> list[Outcome]:
        [records] = play(context, context.questions, temperature=self.temperature, sampling_seeds=[0],
                         format_instruction=self.format_instruction)
        return [dialogue_outcome(r, q) for q, r in zip(context.questions, records)]


@dataclass
class AutoForm(Dialogue):
    """The env's dialogue with AutoForm's instruction to talk in a concise non-natural-language
    format (`AUTOFORM_INSTRUCTION`, a setting)."""

    format_instruction: str | None = AUTOFORM_INSTRUCTION

    name = "autoform"
    summary = "the dialogue told to communicate in a concise non-natural-language format"


@dataclass
class DialogueVote(System):
    """`k` sampled dialogues per question (same question, same evidence deal, different sampling
    seeds) and a majority vote over their final answers; tokens are summed. All k x questions
    dialogues run in one engine run, each sample with its own sampling seed.

    k (int, defaults to 8): dialogues per question.
    temperature (float, defaults to 0.7): sampling temperature.
    format_instruction (str, *optional*): as for `mas`.
    """

    k: int = 8
    temperature: float = 0.7
    format_instruction: str | None = None

    name = "mas-sc"
    summary = "k sampled dialogues, majority vote over their answers; tokens summed"

    def __post_init__(self) -> None:
        check_positive(self.name, k=self.k)
        check_temperature(self.name, self.temperature)

    def run(self, context: SystemContext) -> list[Outcome]:
        questions = context.questions
        runs = play(context, questions, temperature=self.temperature,
                    sampling_seeds=[derive_seed(sample) for sample in range(self.k)],
                    format_instruction=self.format_instruction)
        return [majority([dialogue_sample(run[i]) for run in runs], q.position, q.instance.instance_id)
                for i, q in enumerate(questions)]
