"""What an iDPO search taught: do its kept pairs prefer answering, or telling a fact?

On an information-asymmetric task a DPO pair whose chosen reply answers (`<A>`) while the rejected
one does not teaches the speaker to answer at that turn; the reverse teaches it to say something
else first (on `synth-hop-ia`: a fact). For each run named, this counts its first iteration's
kept pairs by which side answers, the pairs at the root (the first speaker's turn 0), and, where
the search scored with `reward.grounded_only`, its grounded rollouts (there a right guess scores 0).

    python benchmarks/search_pairs.py LABEL=RUN_DIR [LABEL=RUN_DIR ...] --out search_pairs_synth_hop_distractors

Writes `benchmarks/results/<out>.json` and `.md`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import invocation, publish_table  # noqa: E402

KINDS = ("chosen answers, rejected does not", "rejected answers, chosen does not", "both answer", "neither answers")


def pair_kind(chosen: str, rejected: str, tag: str = "<A>") -> str:
    """Which side of a pair gives an answer (`KINDS`)."""
    c, r = tag in chosen, tag in rejected
    return KINDS[0] if c and not r else KINDS[1] if r and not c else KINDS[2] if c else KINDS[3]


def search_counts(pairs: Sequence[Mapping[str, Any]], rollouts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts over one search's pair rows and rollout rows (their `components` as JSON text)."""
    kept = [p for p in pairs if str(p["kept"]) == "True"]
    counts: Counter[str] = Counter(pair_kind(p["chosen"], p["rejected"]) for p in kept)
    root = [p for p in kept if p["node_id"] == 0]
    components = [json.loads(r["components"]) for r in rollouts]
    out: dict[str, Any] = {
        "kept pairs": len(kept), **{k: counts.get(k, 0) for k in KINDS},
        "root pairs": len(root), "root pairs, chosen answers": sum(pair_kind(p["chosen"], p["rejected"]) == KINDS[0]
                                                                  for p in root),
        "rollouts": len(components), "rollouts scored > 0": sum(c.get("score", 0.0) > 0 for c in components),
    }
    if components and all("grounded" in c for c in components):
        out["grounded rollouts"] = sum(c["grounded"] == 1.0 for c in components)
    return out


def run_counts(run: Path, iteration: int = 0) -> dict[str, Any]:
    """`search_counts` of one run directory's search step."""
    import pyarrow.parquet as pq

    folder = run / f"iter_{iteration:03d}" / "search"
    if not (folder / "pairs.parquet").is_file():
        raise SystemExit(f"{folder} holds no pairs.parquet: is {run} an iDPO run whose search finished?")
    return search_counts(pq.read_table(folder / "pairs.parquet").to_pylist(),
                         pq.read_table(folder / "rollouts.parquet").to_pylist())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", metavar="LABEL=RUN_DIR")
    parser.add_argument("--iteration", type=int, default=0)
    parser.add_argument("--out", default="search_pairs")
    args = parser.parse_args()
    rows = []
    for spec in args.runs:
        label, sep, run = spec.partition("=")
        if not sep:
            raise SystemExit(f"expected LABEL=RUN_DIR, got {spec!r}")
        rows.append({"label": label, **run_counts(Path(run), args.iteration)})
    columns = [c for c in rows[0] if c != "label"]
    columns += sorted({c for r in rows for c in r} - {"label", *columns})
    command = invocation("search_pairs.py")
    publish_table(args.out, "What the search's kept pairs prefer: answering or telling",
                  f"Made by: `{command}`. Iteration {args.iteration}'s search; a pair's side answers when its "
                  "reply holds `<A>`; root pairs are the first speaker's turn 0.",
                  ["run", *columns], [[r["label"], *(r.get(c, "") for c in columns)] for r in rows],
                  {"command": command, "iteration": args.iteration, "runs": rows})


if __name__ == "__main__":
    main()
