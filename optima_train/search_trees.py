"""The search step's other files and the numbers it reports: trees, rollouts, pair statistics.

Files (in a search step's folder):
    trees.parquet     one row per node (tree_id, node_id, parent_id, speaker, text, value, ...)
    rollouts.parquet  one row per backed-up rollout (its node path, reward, components)
    pairs.parquet     the DPO rows (`optima_train.examples.dpo`)
Any pair traces back to its tree through (tree_id, node_id, chosen_id, rejected_id).
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Sequence

from optima_agents.mcts import Tree
from optima_envs.atomic_files import atomic_write_parquet

__all__ = ["pair_statistics", "write_trees"]


# ---------------------------------------------------------------------- files
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
