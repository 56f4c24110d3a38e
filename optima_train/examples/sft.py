"""SFT rows from selected dialogues: one per agent, loss only on that agent's own turns.

For agent `a` of a kept dialogue: its system prompt *without* the format-pool instruction
(iteration 0 samples with one, and the model is trained on the plain prompt so that it
internalises the format; `optima_train.examples.views.plain_prompts`), then the whole dialogue
from `a`'s point of view (`agent_view`), masked by `assistant_mask`: each reply and its
end-of-turn marker carry loss.

The dataset is pre-tokenised (`input_ids`, `assistant_masks`): TRL's `SFTTrainer` turns
`assistant_masks` into labels (-100 elsewhere), which is its assistant-only loss without needing
`{% generation %}` markers in the template. The `messages` column is kept too, for inspection
and for use with other trainers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from optima_agents.chat import DEFAULT_CHAT_FORMAT, ChatFormat
from optima_envs.atomic_files import atomic_write_parquet
from optima_train.examples.masks import assistant_mask
from optima_train.examples.views import agent_view, speaking_agents

__all__ = ["SFTExample", "build_sft_examples", "keep_start", "write_sft_dataset"]


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


def build_sft_examples(episode: Any, prompts: Sequence[str], tokenizer: Any, *, episode_id: str,
                       fmt: ChatFormat = DEFAULT_CHAT_FORMAT) -> list[SFTExample]:
    """One example per agent that spoke in `episode` (an `EpisodeRecord` or anything with
    `agents`, `turns`, `instance_id`), with `prompts` (aligned with `episode.agents`; for iSFT
    the plain prompts) as the system prompts.

    Raises:
        ValueError: `prompts` is not aligned with `episode.agents`.
        TemplateMaskError: the chat template is not prefix-preserving.
    """
    examples = []
    for agent, prompt in speaking_agents(episode, prompts):
        messages = agent_view(agent, prompt, episode.turns, fmt, agents=episode.agents)
        ids, mask = assistant_mask(tokenizer, messages)
        examples.append(SFTExample(ids, mask, messages, agent, episode_id, episode.instance_id))
    return examples


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
