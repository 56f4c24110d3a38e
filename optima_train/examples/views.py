"""What a training row shows one agent of a sampled dialogue: its chat messages, and the system
prompts the row is built with.

An agent's view of a whole dialogue is built by `optima_agents.chat.chat_messages`, exactly the
messages the policy sees at inference time (own turns `assistant`, others `user` (named when
there are more than two agents), merged, a kickoff message when the agent speaks first), ending
with its last own turn: trailing `user` messages carry no loss and are dropped.
"""

from __future__ import annotations

from typing import Any, Iterator, Mapping, Sequence

from optima_agents.chat import DEFAULT_CHAT_FORMAT, ChatFormat, chat_messages

__all__ = ["agent_view", "plain_prompts", "rebuild_plain_prompts", "reset_as", "speaking_agents"]


def agent_view(agent: str, system_prompt: str, turns: Sequence[Mapping[str, str] | Any],
               fmt: ChatFormat = DEFAULT_CHAT_FORMAT, agents: Sequence[str] | None = None) -> list[dict[str, str]]:
    """`agent`'s chat messages for a whole dialogue, ending with its last own turn.

    `agents` (every agent of the dialogue) lets the chat format know how many agents there are,
    as the env's observations do."""
    transcript = tuple({"speaker": t["speaker"], "text": t["text"]} if isinstance(t, Mapping)
                       else {"speaker": t.speaker, "text": t.text} for t in turns)
    observation: dict[str, Any] = {"agent": agent, "system_prompt": system_prompt, "transcript": transcript}
    if agents:
        observation["agents"] = tuple(agents)
    messages = chat_messages(observation, fmt)
    while messages and messages[-1]["role"] == "user":
        messages.pop()
    return messages


def speaking_agents(record: Any, prompts: Sequence[str]) -> Iterator[tuple[str, str]]:
    """`(agent, system prompt)` for every agent of `record` that spoke, in `record.agents` order.

    Raises:
        ValueError: `prompts` is not aligned with `record.agents`.
    """
    if len(prompts) != len(record.agents):
        raise ValueError(f"{len(prompts)} system prompts for {len(record.agents)} agents")
    for agent, prompt in zip(record.agents, prompts):
        if any(t.speaker == agent for t in record.turns):
            yield agent, prompt


def plain_prompts(record: Any, env: Any = None) -> tuple[str, ...]:
    """`record`'s system prompts without the format instruction, what SFT shows the model (it is
    trained on the plain prompt, so that it internalises the format).

    An `EpisodeRecord` carries them from sampling (`plain_system_prompts`). Records read from
    buffers written before episodes recorded them have None there: those sampled without a
    format instruction keep their prompts, and the others are rebuilt by resetting `env`
    (`rebuild_plain_prompts`), the only case in which an env is needed.

    Raises:
        ValueError: an old record sampled with a format instruction and no `env`, or an env that
            rebuilds another instance.
    """
    if record.plain_system_prompts is not None:
        return tuple(record.plain_system_prompts)
    if not record.format_instruction:
        return tuple(record.system_prompts)
    if env is None:
        raise ValueError(f"episode {record.instance_id!r} (seed {record.seed}) was sampled with a format instruction "
                         "and its record predates plain_system_prompts; pass the env it was sampled from to rebuild them")
    return rebuild_plain_prompts(env, record)


def rebuild_plain_prompts(env: Any, record: Any) -> tuple[str, ...]:
    """Reset `env` as `record` was, without its format instruction, and return the prompts (the
    env deals evidence before it draws an instruction, so the evidence split is identical).

    Raises:
        ValueError: the rebuilt instance is not the record's (the env is not the one it came from).
    """
    observations = reset_as(env, record, "rebuilding the prompts of")
    return tuple(observations[a]["system_prompt"] for a in record.agents)


def reset_as(env: Any, record: Any, doing: str) -> dict[str, Any]:
    """Reset `env` with `record`'s seed, index and reset options (less the format instruction)
    and return the observations: the instance and the evidence deal it was sampled with.

    Raises:
        ValueError: the env rebuilds another instance; the message starts with `doing`.
    """
    options = {k: v for k, v in dict(record.options or {}).items() if k != "format_instruction"}
    if record.index is not None:
        options["index"] = record.index
    observations, infos = env.reset(seed=record.seed, options=options)
    instance_id = next(iter(infos.values()))["instance_id"]
    if instance_id != record.instance_id:
        raise ValueError(f"{doing} {record.instance_id!r}: the env rebuilt instance {instance_id!r}; "
                         "pass the env (same id and kwargs) the episode was sampled from")
    return observations
