"""Helpers for the dataset fixtures (`optima_envs.test.FIXTURES`, tiny files in the datasets'
ORIGINAL release formats and the hub's, shipped with the package; see its README): readers, and
writers of variants of them into temporary folders. The content is invented; only the formats are real."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from optima_envs.test import FIXTURES


def read_json_file(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def read_jsonl_file(path: Path) -> list[Any]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


#: The 2WikiMultiHopQA dev rows (original layout): `FIXTURES / "2wikimqa" / "dev.json"`.
TWOWIKI_ROWS: list[dict[str, Any]] = read_json_file(FIXTURES / "2wikimqa" / "dev.json")


def multihop_to_hub(row: dict[str, Any], *, content_key: str = "sentences", id_key: str = "id") -> dict[str, Any]:
    """An original HotpotQA/2Wiki row in the hub's column layout."""
    out = {id_key: row["_id"], "question": row["question"], "answer": row["answer"], "type": row.get("type")}
    out["supporting_facts"] = {"title": [t for t, _ in row["supporting_facts"]],
                               "sent_id": [s for _, s in row["supporting_facts"]]}
    out["context"] = {"title": [t for t, _ in row["context"]], content_key: [s for _, s in row["context"]]}
    if "evidences" in row:
        out["evidences"] = {"fact": [e[0] for e in row["evidences"]], "relation": [e[1] for e in row["evidences"]],
                            "entity": [e[2] for e in row["evidences"]]}
    return out


def write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path
