"""One agent answering alone: chain of thought (`cot`), self-consistency (`sc`), and the
no-talk ceiling (`solo`).

On information-asymmetric tasks the lone CoT agent sees the evidence of every agent (the paper's
CoT and SC baselines are single-agent upper bounds on information, so Optima's dialogue has to
beat them while each agent holds half the facts). On debate tasks it sees the problem and its
options, as the solver does. `solo` is the other bound: each agent answers from its own share
alone, and the best of them counts, which is what a team that never talks can reach.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from optima_agents.policies.base import TurnRequest
from optima_agents.rollout.engine import derive_seed
from optima_envs.core.types import Evidence, TaskInstance
from optima_eval.systems.base import (
    SOLO_SYSTEM,
    Outcome,
    Question,
    Sample,
    System,
    SystemContext,
    answer_prompt,
    as_outcome,
    best_of,
    check_positive,
    check_temperature,
    majority,
    sample_of,
    solo_observation,
)

__all__ = ["ChainOfThought", "NoTalk", "SelfConsistency", "solo_request"]

SOLVER = "solver"


def solo_request(question: Question, answer_format: str, seed: int,
                 evidence: Sequence[Evidence] | None = None) -> TurnRequest:
    """The one turn of an agent answering alone, from `evidence` (default: all the question's)."""
    pieces = question.all_evidence if evidence is None else evidence
    prompt = answer_prompt(question.instance, pieces, answer_format)
    return TurnRequest(SOLVER, solo_observation(SOLVER, SOLO_SYSTEM, [("user", prompt)]), seed=seed)


@dataclass
class ChainOfThought(System):
    """One agent, all the evidence, one reply that reasons then answers.

    temperature (float, defaults to 0.0): 0 is greedy, the usual CoT baseline.
    """

    temperature: float = 0.0

    name = "cot"
    summary = "one agent with all the evidence thinks step by step, then answers"

    def __post_init__(self) -> None:
        check_temperature(self.name, self.temperature)

    def run(self, context: SystemContext) -> list[Outcome]:
        env = context.env()
        policy = context.policy_with(temperature=self.temperature)
        questions = context.questions
        requests = [solo_request(q, env.task.answer_format, derive_seed(q.seed, 0)) for q in questions]
        actions = policy.act(requests)
        return [as_outcome(sample_of(env, a, q.instance), q.position, q.instance.instance_id)
                for q, a in zip(questions, actions)]


@dataclass
class SelfConsistency(System):
    """`k` sampled CoT replies per question and a majority vote over their normalised answers
    (`vote_key`); tokens are the sum over the samples.

    k (int, defaults to 8): samples per question (the paper's n=8).
    temperature (float, defaults to 0.7): the sampling temperature (the paper samples at 0.7).
    """

    k: int = 8
    temperature: float = 0.7

    name = "sc"
    summary = "k sampled chain-of-thought replies, majority vote; tokens summed"

    def __post_init__(self) -> None:
        check_positive(self.name, k=self.k)
        check_temperature(self.name, self.temperature)

    def run(self, context: SystemContext) -> list[Outcome]:
        env = context.env()
        policy = context.policy_with(temperature=self.temperature)
        questions = context.questions
        fmt = env.task.answer_format
        requests = [solo_request(q, fmt, derive_seed(q.seed, sample)) for q in questions for sample in range(self.k)]
        actions = policy.act(requests)
        outcomes = []
        for i, q in enumerate(questions):
            samples = [sample_of(env, a, q.instance) for a in actions[i * self.k:(i + 1) * self.k]]
            outcomes.append(majority(samples, q.position, q.instance.instance_id))
        return outcomes


@dataclass
class NoTalk(System):
    """The no-talk ceiling: every seat whose role gives answers (the listener in a game, each
    agent in information-asymmetric QA) answers once, alone, from its own share of the evidence,
    with CoT's prompt; a question's score is the best seat's (chosen after scoring, so it bounds
    what a pair that never communicates can reach from above). Tokens are every seat's reply.
    Each seat's answer is kept as one sample, in seat order. A seat's answer is scored with the
    task's `solo_metric` when it has one (a game whose metric reads an answer as seat 0's).

    temperature (float, defaults to 0.0): greedy, as `cot`.
    """

    temperature: float = 0.0

    name = "solo"
    summary = "the no-talk ceiling: each agent answers from its own evidence alone, the best one counts"

    def __post_init__(self) -> None:
        check_temperature(self.name, self.temperature)

    def run(self, context: SystemContext) -> list[Outcome]:
        env = context.env()
        policy = context.policy_with(temperature=self.temperature)
        roles = env.task.prompts.roles(len(env.possible_agents))
        seats = [i for i, role in enumerate(roles) if role.gives_answer]
        fmt = env.task.answer_format
        questions = context.questions
        requests = [solo_request(q, fmt, derive_seed(q.seed, 0, seat), q.evidence[seat])
                    for q in questions for seat in seats]
        actions = policy.act(requests)
        outcomes = []
        for i, q in enumerate(questions):
            samples = [seat_sample(env, a, q.instance, seat)
                       for seat, a in zip(seats, actions[i * len(seats):(i + 1) * len(seats)])]
            outcomes.append(best_of(samples, q.position, q.instance.instance_id))
        return outcomes


def seat_sample(env: Any, action: Any, instance: TaskInstance, seat: int) -> Sample:
    """One seat's lone answer, scored by the task's `solo_metric` for that seat (else `metric`)."""
    solo_metric = env.task.solo_metric
    if solo_metric is None:
        return sample_of(env, action, instance)
    return sample_of(env, action, instance, metric=lambda answer, inst: solo_metric(answer, inst, seat))
