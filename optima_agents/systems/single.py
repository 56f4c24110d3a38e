"""One agent answering alone: chain of thought (`cot`) and self-consistency (`sc`).

On information-asymmetric tasks the lone agent sees the evidence of every agent (the paper's
CoT and SC baselines are single-agent upper bounds on information, so Optima's dialogue has to
beat them while each agent holds half the facts). On debate tasks it sees the problem and its
options, as the solver does.
"""

from __future__ import annotations

from dataclasses import dataclass

from optima_agents.policies.base import TurnRequest
from optima_agents.rollout.engine import derive_seed
from optima_agents.systems.base import (
    SOLO_SYSTEM,
    Outcome,
    Question,
    System,
    SystemContext,
    answer_prompt,
    as_outcome,
    check_positive,
    check_temperature,
    majority,
    sample_of,
    solo_observation,
)

__all__ = ["ChainOfThought", "SelfConsistency", "solo_request"]

SOLVER = "solver"


def solo_request(question: Question, answer_format: str, seed: int) -> TurnRequest:
    """The one turn of an agent that holds all the question's evidence."""
    prompt = answer_prompt(question.instance, question.all_evidence, answer_format)
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
