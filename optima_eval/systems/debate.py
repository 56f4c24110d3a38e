"""Multi-agent debate (`mad`, Du et al. 2023, "Improving Factuality and Reasoning in Language
Models through Multiagent Debate"): N agents answer, then for R rounds each reads the others'
latest answers and gives an updated one; the final answers are put to a majority vote.

Choices where the paper leaves a detail open, each a setting:
- `agents=3, rounds=2`: Du et al.'s main configuration.
- `temperature=0.7`: agents that start from the same prompt must sample, or they would all say
  the same thing and there would be nothing to debate.
- Information-asymmetric tasks: each agent keeps only its own share of the evidence (the env's
  deal for N agents), so the debate is the only way facts travel; debate tasks have no evidence.
- Every agent sees every other agent's latest reply in full (Du et al.'s fully connected
  debate); an agent whose backend failed drops out, and the question is an infra failure only
  when every agent failed.
- Tokens are every reply of every agent in every round.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from optima_agents.policies.base import TurnRequest
from optima_agents.rollout.engine import derive_seed
from optima_eval.systems.base import (
    SOLO_INSTRUCTION,
    SOLO_SYSTEM,
    Outcome,
    Sample,
    System,
    SystemContext,
    answer_prompt,
    check_positive,
    check_temperature,
    majority,
    reply_tokens,
    sample_of,
    solo_observation,
)

__all__ = ["MultiAgentDebate", "UPDATE_PROMPT"]

#: Du et al.'s update request, followed by the task's answer instruction.
UPDATE_PROMPT = ("These are the answers to the question from other agents:\n\n{others}\n\nUsing the reasoning from "
                 "other agents as additional advice, can you give an updated answer? Examine your solution and that "
                 "of the other agents step by step.")


@dataclass
class MultiAgentDebate(System):
    """`agents` agents answer, then debate for `rounds` rounds; majority over the final answers.

    agents (int, defaults to 3): debaters.
    rounds (int, defaults to 2): update rounds after the first answers.
    temperature (float, defaults to 0.7): sampling temperature of every reply.
    """

    agents: int = 3
    rounds: int = 2
    temperature: float = 0.7

    name = "mad"
    summary = "N agents answer, read each other's answers for R rounds, majority vote; tokens summed"

    def __post_init__(self) -> None:
        check_positive(self.name, agents=self.agents)
        check_positive(self.name, minimum=0, rounds=self.rounds)
        check_temperature(self.name, self.temperature)

    def env_overrides(self) -> dict[str, Any]:
        return {"num_agents": max(2, self.agents)}

    def run(self, context: SystemContext) -> list[Outcome]:
        env = context.env(**self.env_overrides())
        policy = context.policy_with(temperature=self.temperature)
        fmt = env.task.answer_format
        names = [f"agent{i + 1}" for i in range(self.agents)]
        # Per question and agent: the transcript so far, tokens spent, and the latest reply.
        transcripts, spent, latest = {}, {}, {}
        seeds = {q.position: q.seed for q in context.questions}
        for q in context.questions:
            env.reset(seed=q.seed, options={"index": q.index})
            for a, name in enumerate(names):
                evidence = env.state.evidence[a] if a < len(env.state.evidence) else ()
                transcripts[q.position, a] = [("user", answer_prompt(q.instance, evidence, fmt))]
                spent[q.position, a] = 0
        alive = {(q.position, a) for q in context.questions for a in range(self.agents)}
        for round_ in range(self.rounds + 1):
            if round_ > 0:
                for q in context.questions:
                    for a in range(self.agents):
                        if (q.position, a) not in alive:
                            continue
                        others = "\n\n".join(f"One agent: {latest[q.position, b].text}" for b in range(self.agents)
                                             if b != a and (q.position, b) in alive)
                        update = UPDATE_PROMPT.format(others=others or "(no other answer)")
                        transcripts[q.position, a].append(("user", update + " " + SOLO_INSTRUCTION.format(
                            answer_format=fmt)))
            keys = sorted(alive)
            requests = [TurnRequest(names[a], solo_observation(names[a], SOLO_SYSTEM, transcripts[p, a]),
                                    seed=derive_seed(seeds[p], a, round_)) for p, a in keys]
            for (p, a), action in zip(keys, policy.act(requests)):
                spent[p, a] += reply_tokens(action)
                latest[p, a] = action
                if action.failed:
                    alive.discard((p, a))
                else:
                    transcripts[p, a].append((names[a], action.text))
        outcomes = []
        for q in context.questions:
            samples = []
            for a in range(self.agents):
                action = latest[q.position, a]
                sample = sample_of(env, action, q.instance)
                samples.append(Sample(sample.answer, sample.score, sample.score_ok, spent[q.position, a],
                                      infra_failure=sample.infra_failure, score_error=sample.score_error,
                                      error=sample.error))
            outcomes.append(majority(samples, q.position, q.instance.instance_id))
        return outcomes
