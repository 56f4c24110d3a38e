"""DPO rows from searched trees: pairs with their prompts, TRL's preference dataset, Parquet files.

The prompt of a pair at node N is the chosen/rejected speaker's view of the dialogue up to N
(`optima_agents.chat.chat_messages` of the observation stored at N, the same messages the
policy was prompted with when it sampled those replies); chosen and rejected are the two
replies as one assistant message each (TRL's conversational preference format), so DPO
re-renders exactly the chat template the policy generates with, and TRL masks the prompt.

`pairs.parquet` (in a search step's folder) holds one row per qualifying pair (tree_id and node
ids, prompt, texts, values, token counts, `kept`); any pair traces back to its tree through
(tree_id, node_id, chosen_id, rejected_id) in the step's `trees.parquet` (`optima_train.search_trees`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from optima_agents.chat import DEFAULT_CHAT_FORMAT, ChatFormat, chat_messages
from optima_agents.mcts import PairExtraction, Tree
from optima_envs.atomic_files import atomic_write_parquet

__all__ = ["PAIR_COLUMNS", "pair_rows", "read_pairs", "to_dpo_dataset", "write_pairs"]

PAIR_COLUMNS = (
    "pair_id", "iteration", "tree_id", "node_id", "chosen_id", "rejected_id", "speaker", "depth", "prompt",
    "chosen", "rejected", "chosen_value", "rejected_value", "gap", "chosen_tokens", "rejected_tokens",
    "num_children", "kept",
)


def pair_rows(trees: Iterable[Tree], extraction: PairExtraction, *, iteration: int = 0,
              chat_format: ChatFormat = DEFAULT_CHAT_FORMAT) -> list[dict[str, Any]]:
    """One row per qualifying pair (kept or not), in extraction order.

    Raises:
        KeyError: a pair names a tree that is not in `trees`.
    """
    by_id = {t.tree_id: t for t in trees}
    kept = set(extraction.kept)
    rows = []
    for k, pair in enumerate(extraction.qualifying):
        tree = by_id[pair.tree_id]
        node, chosen, rejected = tree.node(pair.node_id), tree.node(pair.chosen_id), tree.node(pair.rejected_id)
        rows.append({
            "pair_id": f"{iteration:03d}-{k:05d}", "iteration": iteration, "tree_id": pair.tree_id,
            "node_id": pair.node_id, "chosen_id": pair.chosen_id, "rejected_id": pair.rejected_id,
            "speaker": pair.speaker, "depth": node.depth,
            "prompt": chat_messages(node.observation, chat_format),
            "chosen": chosen.text, "rejected": rejected.text,
            "chosen_value": pair.chosen_value, "rejected_value": pair.rejected_value, "gap": pair.gap,
            "chosen_tokens": chosen.num_tokens, "rejected_tokens": rejected.num_tokens,
            "num_children": pair.num_children, "kept": pair in kept,
        })
    return rows


def to_dpo_dataset(rows: Sequence[Mapping[str, Any]], *, only_kept: bool = True):
    """A `datasets.Dataset` in TRL's conversational preference format (prompt, chosen, rejected),
    with `pair_id` kept for tracing."""
    from datasets import Dataset

    chosen_rows = [r for r in rows if r["kept"] or not only_kept]
    return Dataset.from_list([
        {"pair_id": r["pair_id"], "prompt": [dict(m) for m in r["prompt"]],
         "chosen": [{"role": "assistant", "content": r["chosen"]}],
         "rejected": [{"role": "assistant", "content": r["rejected"]}]}
        for r in chosen_rows
    ])


def write_pairs(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """The pairs as one Parquet table, written atomically (`atomic_write_parquet`)."""
    return atomic_write_parquet(path, rows, _pair_schema())


def read_pairs(path: str | Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def _pair_schema():
    import pyarrow as pa

    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    return pa.schema([
        ("pair_id", pa.string()), ("iteration", pa.int64()), ("tree_id", pa.string()), ("node_id", pa.int64()),
        ("chosen_id", pa.int64()), ("rejected_id", pa.int64()), ("speaker", pa.string()), ("depth", pa.int64()),
        ("prompt", pa.list_(message)), ("chosen", pa.string()), ("rejected", pa.string()),
        ("chosen_value", pa.float64()), ("rejected_value", pa.float64()), ("gap", pa.float64()),
        ("chosen_tokens", pa.int64()), ("rejected_tokens", pa.int64()), ("num_children", pa.int64()),
        ("kept", pa.bool_()),
    ])
