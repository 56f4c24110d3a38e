"""DPO data from searched trees: pair rows with their prompts, Parquet files, TRL datasets, statistics.

The prompt of a pair at node N is the chosen/rejected speaker's view of the dialogue up to N
(`optima_agents.chat.chat_messages` of the observation stored at N, the same messages the
policy was prompted with when it sampled those replies); chosen and rejected are the two
replies as one assistant message each (TRL's conversational preference format), so DPO
re-renders exactly the chat template the policy generates with.

Files (in a search step's folder):
    trees.parquet     one row per node (tree_id, node_id, parent_id, speaker, text, value, ...)
    rollouts.parquet  one row per backed-up rollout (its node path, reward, components)
    pairs.parquet     one row per qualifying pair (tree_id and node ids, prompt, texts, values,
                      token counts, `kept`)
Any pair traces back to its tree through (tree_id, node_id, chosen_id, rejected_id).
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from optima_agents.chat import DEFAULT_CHAT_FORMAT, ChatFormat, chat_messages
from optima_agents.mcts import PairExtraction, Tree
from optima_envs.atomic_files import atomic_write_parquet

__all__ = ["pair_rows", "pair_statistics", "read_pairs", "to_dpo_dataset", "write_pairs", "write_trees"]

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


# ---------------------------------------------------------------------- files
def write_pairs(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """The pairs as one Parquet table, written atomically (`atomic_write_parquet`)."""
    return atomic_write_parquet(path, rows, _pair_schema())


def read_pairs(path: str | Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def write_trees(trees: Sequence[Tree], folder: str | Path) -> dict[str, Path]:
    """`trees.parquet` (nodes) and `rollouts.parquet` in `folder`; components as JSON text."""
    folder = Path(folder)
    nodes = [{**row, "components": json.dumps(row["components"], sort_keys=True)}
             for tree in trees for row in tree.node_rows()]
    rollouts = [{**row, "components": json.dumps(row["components"], sort_keys=True)}
                for tree in trees for row in tree.rollout_rows()]
    out = {"trees": folder / "trees.parquet", "rollouts": folder / "rollouts.parquet"}
    atomic_write_parquet(out["trees"], nodes, _node_schema())
    atomic_write_parquet(out["rollouts"], rollouts, _rollout_schema())
    return out


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


def _node_schema():
    import pyarrow as pa

    return pa.schema([
        ("tree_id", pa.string()), ("node_id", pa.int64()), ("parent_id", pa.int64()), ("depth", pa.int64()),
        ("speaker", pa.string()), ("text", pa.string()), ("token_ids", pa.list_(pa.int64())),
        ("num_tokens", pa.int64()), ("terminal", pa.bool_()), ("end_reason", pa.string()),
        ("children", pa.list_(pa.int64())), ("visits", pa.int64()), ("value", pa.float64()),
        ("components", pa.string()), ("created_iteration", pa.int64()), ("expanded_iteration", pa.int64()),
        ("skipped_by", pa.int64()), ("merges", pa.int64()),
    ])


def _rollout_schema():
    import pyarrow as pa

    return pa.schema([
        ("tree_id", pa.string()), ("rollout_id", pa.int64()), ("iteration", pa.int64()),
        ("expanded_id", pa.int64()), ("leaf_id", pa.int64()), ("path", pa.list_(pa.int64())),
        ("reward", pa.float64()), ("components", pa.string()),
    ])


# ---------------------------------------------------------------------- statistics
def pair_statistics(rows: Sequence[Mapping[str, Any]], trees: Sequence[Tree]) -> dict[str, Any]:
    """Pairs per tree, chosen-rejected value gap, and tokens of chosen vs rejected (kept pairs),
    plus tree sizes: the numbers the iDPO experiment reports."""
    kept = [r for r in rows if r["kept"]]
    per_tree = Counter(r["tree_id"] for r in kept)
    counts = [per_tree.get(t.tree_id, 0) for t in trees]
    return {
        "trees": len(trees),
        "qualifying_pairs": len(rows),
        "kept_pairs": len(kept),
        "pairs_per_tree": _summary(counts),
        "trees_with_pairs": sum(c > 0 for c in counts),
        "gap": _summary([r["gap"] for r in kept]),
        "chosen_value": _summary([r["chosen_value"] for r in kept]),
        "chosen_tokens": _summary([r["chosen_tokens"] for r in kept]),
        "rejected_tokens": _summary([r["rejected_tokens"] for r in kept]),
        "chosen_shorter_share": (sum(r["chosen_tokens"] < r["rejected_tokens"] for r in kept) / len(kept)) if kept else None,
        "nodes_per_tree": _summary([len(t) for t in trees]),
        "rollouts_per_tree": _summary([len(t.rollouts) for t in trees]),
        "root_value": _summary([t.root.value for t in trees]),
    }


def _summary(values: Sequence[float]) -> dict[str, float | int | None]:
    values = [float(v) for v in values]
    if not values:
        return {"n": 0, "mean": None, "median": None, "min": None, "max": None}
    return {"n": len(values), "mean": statistics.fmean(values), "median": statistics.median(values),
            "min": min(values), "max": max(values)}
