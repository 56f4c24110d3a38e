"""SFT examples from selected dialogues: one per agent, loss only on that agent's own turns.

**The example.** For agent `a` of a kept dialogue: its system prompt *without* the format-pool
instruction (iteration 0 samples with one, and the model is trained on the plain prompt so that
it internalises the format), then the whole dialogue from `a`'s point of view, built by
`optima_agents.chat.chat_messages`: exactly the messages the policy sees at inference time (own
turns `assistant`, others `user` (named when there are more than two agents), merged, a kickoff
message when `a` speaks first). Trailing `user` messages after `a`'s last turn carry no loss and are dropped.

**The loss mask** (`assistant_mask`) is built from the chat template, never from token ids:
render the conversation once; for each assistant message `i`, the text of its span runs from
the end of `render(messages[:i], add_generation_prompt=True)` to the end of
`render(messages[:i + 1])`, with trailing whitespace removed (the newline the template writes
*between* turns is not something the model generates). That span is the reply plus the
end-of-turn marker (ChatML: `text<|im_end|>`), which the model must learn to emit to stop. The
full text is tokenised once with offsets, and a token carries loss exactly when it *starts*
inside a span. A template that does not render prefixes of a conversation as prefixes of the
whole (not "prefix-preserving") raises `TemplateMaskError` instead of guessing.

The dataset is pre-tokenised (`input_ids`, `assistant_masks`): TRL's `SFTTrainer` turns
`assistant_masks` into labels (-100 elsewhere), which is its assistant-only loss without needing
`{% generation %}` markers in the template. The `messages` column is kept too, for inspection
and for use with other trainers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from optima_agents.chat import DEFAULT_CHAT_FORMAT, ChatFormat, chat_messages
from optima_envs.atomic_files import atomic_write_parquet
from optima_envs.errors import OptimaError

__all__ = ["SFTExample", "TemplateMaskError", "agent_view", "assistant_mask", "build_sft_examples",
           "keep_start", "plain_system_prompts", "write_sft_dataset"]


class TemplateMaskError(OptimaError, ValueError):
    """Raised when a chat template is not prefix-preserving, so assistant spans cannot be located."""


@dataclass(frozen=True)
class SFTExample:
    """One training example: token ids, the loss mask, and where it came from."""

    input_ids: list[int]
    assistant_masks: list[int]
    messages: list[dict[str, str]]
    agent: str
    episode_id: str
    instance_id: str

    def to_row(self) -> dict[str, Any]:
        return {"input_ids": self.input_ids, "assistant_masks": self.assistant_masks, "messages": self.messages,
                "agent": self.agent, "episode_id": self.episode_id, "instance_id": self.instance_id}


def _render(tokenizer: Any, messages: Sequence[Mapping[str, str]], generation_prompt: bool = False) -> str:
    return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=generation_prompt)


def assistant_spans(tokenizer: Any, messages: Sequence[Mapping[str, str]]) -> tuple[str, list[tuple[int, int]]]:
    """The rendered conversation and the character span of every assistant reply (see module doc)."""
    full = _render(tokenizer, messages)
    spans = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        before = _render(tokenizer, messages[:i], generation_prompt=True) if i else ""
        upto = _render(tokenizer, messages[: i + 1])
        if not full.startswith(upto) or not upto.startswith(before):
            raise TemplateMaskError(
                f"the chat template is not prefix-preserving at message {i} (role 'assistant'): rendering the "
                f"first {i + 1} messages is not a prefix of rendering all {len(messages)}; assistant-only loss "
                "cannot be located from it. Use a prefix-preserving template (e.g. ChatML)."
            )
        start, end = len(before), len(upto)
        while end > start and upto[end - 1].isspace():
            end -= 1
        if message["content"] and message["content"] not in full[start:end]:
            raise TemplateMaskError(f"assistant message {i} is not inside its located span {full[start:end]!r}")
        spans.append((start, end))
    return full, spans


def assistant_mask(tokenizer: Any, messages: Sequence[Mapping[str, str]]) -> tuple[list[int], list[int]]:
    """Token ids of the rendered conversation and a 0/1 mask, 1 on the assistant's reply tokens.

    Args:
        tokenizer: a fast Hugging Face tokenizer with a chat template.
        messages: chat messages (`role`, `content`).

    Returns:
        `(input_ids, mask)`, the ids of `apply_chat_template(messages)` encoded without added
        special tokens (the template writes them), and the loss mask.

    Raises:
        TemplateMaskError: the template is not prefix-preserving.
    """
    full, spans = assistant_spans(tokenizer, messages)
    encoded = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = list(encoded["input_ids"]), encoded["offset_mapping"]
    mask = [0] * len(ids)
    for k, (token_start, token_end) in enumerate(offsets):
        if token_end > token_start and any(start <= token_start < end for start, end in spans):
            mask[k] = 1
    return ids, mask


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


def build_sft_examples(episode: Any, plain_prompts: Sequence[str], tokenizer: Any, *, episode_id: str,
                       fmt: ChatFormat = DEFAULT_CHAT_FORMAT) -> list[SFTExample]:
    """One example per agent that spoke in `episode` (an `EpisodeRecord` or anything with
    `agents`, `turns`, `instance_id`), using `plain_prompts` (aligned with `episode.agents`)."""
    if len(plain_prompts) != len(episode.agents):
        raise ValueError(f"{len(plain_prompts)} system prompts for {len(episode.agents)} agents")
    examples = []
    for agent, prompt in zip(episode.agents, plain_prompts):
        if not any(t.speaker == agent for t in episode.turns):
            continue
        messages = agent_view(agent, prompt, episode.turns, fmt, agents=episode.agents)
        ids, mask = assistant_mask(tokenizer, messages)
        examples.append(SFTExample(ids, mask, messages, agent, episode_id, episode.instance_id))
    return examples


def plain_system_prompts(env: Any, episode: Any) -> tuple[str, ...]:
    """Rebuild an episode's system prompts with no format instruction.

    Episodes sampled with a format-pool instruction are re-reset with the same seed and index and
    `format_instruction=None` (the env deals evidence before it draws an instruction, so the
    evidence split is identical); episodes without one keep their prompts.

    Raises:
        ValueError: the rebuilt instance is not the episode's (the env is not the one it came from).
    """
    if not episode.format_instruction:
        return tuple(episode.system_prompts)
    options = {k: v for k, v in dict(episode.options or {}).items() if k != "format_instruction"}
    if episode.index is not None:
        options["index"] = episode.index
    observations, infos = env.reset(seed=episode.seed, options=options)
    instance_id = next(iter(infos.values()))["instance_id"]
    if instance_id != episode.instance_id:
        raise ValueError(f"rebuilding prompts for {episode.instance_id!r} produced instance {instance_id!r}: "
                         "pass the env (same id and kwargs) the episode was sampled from")
    return tuple(observations[a]["system_prompt"] for a in episode.agents)


def write_sft_dataset(path: str | Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """Write `SFTExample.to_row()` rows as one Parquet file, atomically (temp file + rename).

    `datasets.Dataset.from_parquet(path)` reads it back; an empty list writes an empty table."""
    import pyarrow as pa

    schema = pa.schema([("input_ids", pa.list_(pa.int32())), ("assistant_masks", pa.list_(pa.int8())),
                        ("messages", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
                        ("agent", pa.string()), ("episode_id", pa.string()), ("instance_id", pa.string())])
    atomic_write_parquet(path, rows, schema)


def keep_start(example: Mapping[str, Sequence[int]], max_length: int) -> dict[str, list[int]]:
    """The first `max_length` tokens of a pre-tokenised example, ids and loss mask alike.

    TRL truncates this way (`truncation_mode="keep_start"`) when it prepares padded batches, but
    leaves padding-free batches to the caller, so the SFT step applies this first for them."""
    if max_length < 1:
        raise ValueError(f"max_length must be >= 1, got {max_length}")
    return {"input_ids": list(example["input_ids"][:max_length]),
            "assistant_masks": list(example["assistant_masks"][:max_length])}
