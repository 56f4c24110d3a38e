"""Policy-gradient rows: each agent's view of a sampled dialogue, with the backend's log-probs.

One row per agent that spoke: its view of the whole dialogue (`agent_view`, with the system
prompts it was sampled with, so the ratio compares the policy on the prompt it drew from), the
loss on its own reply tokens only. Under causal attention that is each of its turns as an
example with the dialogue before it as prompt.

The loss spans are found inside the chat template's assistant spans (`assistant_spans`): the
text of each own turn (consecutive own turns are one assistant message, so each is located in
it), plus the end-of-turn marker only where the model emitted it (finish "stop"), never after a
reply cut at `max_new_tokens` or by the env. `token_mask` turns the spans into the mask.

Old log-probs: the backend's, where a turn has them and its stored ids are exactly the tokens the
row holds for that reply; NaN elsewhere (the trainer recomputes those before the update).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from optima_agents.chat import DEFAULT_CHAT_FORMAT, ChatFormat
from optima_envs.atomic_files import atomic_write_parquet
from optima_train.answer_variants import ENUMERATED
from optima_train.examples.masks import Span, TemplateMaskError, assistant_spans, span_index, token_mask
from optima_train.examples.views import agent_view, speaking_agents

COMPLETE_TURNS = ("stop", ENUMERATED)
"""Finish reasons of a turn that ended on purpose, so its end marker is trained: a sampled turn
that stopped, or a final answer written by enumeration (a whole move)."""

__all__ = ["PolicyExample", "policy_examples", "write_policy_rows"]


@dataclass(frozen=True)
class PolicyExample:
    """One agent's view of one dialogue as a training sequence.

    `old_logprobs[k]` is the backend's log-prob of token `k` (NaN: none, recomputed before the
    update); `loss_mask[k]` is 1 on the agent's own reply tokens."""

    input_ids: list[int]
    loss_mask: list[int]
    old_logprobs: list[float]
    advantage: float
    agent: str
    episode: int
    cut: bool = False

    def to_row(self) -> dict[str, Any]:
        return {"input_ids": self.input_ids, "loss_mask": self.loss_mask, "old_logprobs": self.old_logprobs,
                "advantage": self.advantage, "agent": self.agent, "episode": self.episode, "cut": self.cut}


def _own_runs(turns: Sequence[Any], agent: str) -> list[list[Any]]:
    """`agent`'s runs of consecutive own turns: `chat_messages` merges each into one assistant message."""
    runs: list[list[Any]] = []
    for k, turn in enumerate(turns):
        if turn.speaker != agent:
            continue
        if runs and k > 0 and turns[k - 1].speaker == agent:
            runs[-1].append(turn)
        else:
            runs.append([turn])
    return runs


def _reply_spans(full: str, spans: Sequence[Span], runs: Sequence[Sequence[Any]],
                 agent: str) -> tuple[list[tuple[Span, Any]], list[Span]]:
    """Each own turn's text span (with the turn), and the end-marker spans the model emitted.

    Raises:
        TemplateMaskError: a turn's text is not inside its assistant span.
    """
    if len(spans) != len(runs):
        raise TemplateMaskError(f"agent {agent!r}: {len(runs)} runs of own turns but {len(spans)} assistant spans")
    content: list[tuple[Span, Any]] = []
    markers: list[Span] = []
    for run, (start, end) in zip(runs, spans):
        cursor = start
        for turn in run:
            pos = full.find(turn.text, cursor, end)
            if pos < 0:
                raise TemplateMaskError(f"agent {agent!r}, turn {turn.turn}: its text is not inside its span")
            content.append(((pos, pos + len(turn.text)), turn))
            cursor = pos + len(turn.text)
        last = run[-1]
        if last.finish_reason in COMPLETE_TURNS and not last.truncated:
            markers.append((cursor, end))
    return content, markers


def _old_logprobs(ids: Sequence[int], offsets: Sequence[Span], mask: Sequence[int],
                  content: Sequence[tuple[Span, Any]]) -> list[float]:
    """The backend's log-prob of each loss token of a turn whose stored ids are the row's tokens."""
    spans = [span for span, _ in content]
    by_turn: dict[int, list[int]] = defaultdict(list)
    for k, (start, _) in enumerate(offsets):
        hit = span_index(start, spans) if mask[k] else None
        if hit is not None:
            by_turn[hit].append(k)
    old = [math.nan] * len(ids)
    for hit, (_, turn) in enumerate(content):
        positions = by_turn.get(hit, [])
        if turn.logprobs is not None and len(positions) <= len(turn.token_ids) \
                and [ids[k] for k in positions] == list(turn.token_ids[:len(positions)]):
            for k, value in zip(positions, turn.logprobs):
                old[k] = float(value)
    return old


def policy_examples(record: Any, advantage: float, tokenizer: Any, *, episode: int, max_length: int,
                    fmt: ChatFormat | None = None) -> list[PolicyExample]:
    """One `PolicyExample` per agent that spoke in `record` (an `EpisodeRecord`), with the system
    prompts it was sampled with; sequences longer than `max_length` keep their start (`cut`).

    Raises:
        TemplateMaskError: the chat template is not prefix-preserving, or a reply is not where
            the template put its span.
    """
    fmt = fmt or DEFAULT_CHAT_FORMAT
    examples = []
    for agent, prompt in speaking_agents(record, record.system_prompts):
        full, spans = assistant_spans(tokenizer, agent_view(agent, prompt, record.turns, fmt, agents=record.agents))
        content, markers = _reply_spans(full, spans, _own_runs(record.turns, agent), agent)
        tokens = token_mask(tokenizer, full, [span for span, _ in content] + markers)
        old = _old_logprobs(tokens.input_ids, tokens.offsets, tokens.mask, content)
        cut = len(tokens.input_ids) > max_length
        ids, mask, old = tokens.input_ids[:max_length], tokens.mask[:max_length], old[:max_length]
        if sum(mask):
            examples.append(PolicyExample(ids, mask, old, float(advantage), agent, episode, cut))
    return examples


def write_policy_rows(path: str | Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """`PolicyExample.to_row()` rows as one Parquet file (for inspection), written atomically."""
    import pyarrow as pa

    schema = pa.schema([("input_ids", pa.list_(pa.int32())), ("loss_mask", pa.list_(pa.int8())),
                        ("old_logprobs", pa.list_(pa.float32())), ("advantage", pa.float64()),
                        ("agent", pa.string()), ("episode", pa.int64()), ("cut", pa.bool_())])
    atomic_write_parquet(path, rows, schema)
