"""Tiny dataset files in the datasets' ORIGINAL release formats (and the hub's), written by
tests into temporary folders. The content is invented; only the formats are real."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TWOWIKI_ROWS: list[dict[str, Any]] = [
    {
        "_id": "2w-0001", "type": "compositional",
        "question": "Who is the mother of the director of film Lantern Harbour?",
        "context": [
            ["Harbour Lights (1952 film)", ["Harbour Lights is a 1952 drama film.", " It was shot in Cornwall."]],
            ["Lantern Harbour", ["Lantern Harbour is a 1987 film.", " It was directed by Mira Tallis."]],
            ["Tallis Bay", ["Tallis Bay is a bay in the south of Orland."]],
            ["Mira Tallis", ["Mira Tallis (born 1950) is a film director.", " She is the daughter of Ona Tallis."]],
            ["Ona Vale", ["Ona Vale is a village in Orland."]],
        ],
        "supporting_facts": [["Lantern Harbour", 1], ["Mira Tallis", 1]],
        "evidences": [["Lantern Harbour", "director", "Mira Tallis"], ["Mira Tallis", "mother", "Ona Tallis"]],
        "answer": "Ona Tallis",
    },
    {
        "_id": "2w-0002", "type": "comparison",
        "question": "Which film came out first, Blue Orchard or The Quiet Ferry?",
        "context": [
            ["The Quiet Ferry", ["The Quiet Ferry is a 1961 comedy film."]],
            ["Orchard Road", ["Orchard Road is a street."]],
            ["Blue Orchard", ["Blue Orchard is a 1948 silent film.", " It is lost."]],
            ["Ferry Tales", ["Ferry Tales is a 2003 documentary."]],
        ],
        "supporting_facts": [["The Quiet Ferry", 0], ["Blue Orchard", 0]],
        "evidences": [["The Quiet Ferry", "publication date", "1961"], ["Blue Orchard", "publication date", "1948"]],
        "answer": "Blue Orchard",
    },
    {
        "_id": "2w-0003", "type": "bridge_comparison",
        "question": "Which film has the director born later, Night Lamp or Copper Sky?",
        "context": [
            ["Night Lamp", ["Night Lamp is a 1990 thriller directed by Aron Pell."]],
            ["Aron Pell", ["Aron Pell (born 1955) is a director."]],
            ["Copper Sky", ["Copper Sky is a 1999 western directed by Lise Varn."]],
            ["Lise Varn", ["Lise Varn (born 1962) is a director."]],
            ["Sky Copper Mine", ["The Sky Copper Mine closed in 1930."]],
            ["Lamp Island", ["Lamp Island has a lighthouse."]],
        ],
        "supporting_facts": [["Night Lamp", 0], ["Aron Pell", 0], ["Copper Sky", 0], ["Lise Varn", 0]],
        "evidences": [["Night Lamp", "director", "Aron Pell"], ["Copper Sky", "director", "Lise Varn"],
                      ["Aron Pell", "date of birth", "1955"], ["Lise Varn", "date of birth", "1962"]],
        "answer": "Copper Sky",
    },
    {
        "_id": "2w-0004", "type": "inference",
        "question": "Who is the paternal grandfather of Edda Morn?",
        "context": [
            ["Edda Morn", ["Edda Morn was a painter.", " Her father was Tobin Morn."]],
            ["Morn Castle", ["Morn Castle is a ruin."]],
            ["Tobin Morn", ["Tobin Morn was a sailor, the son of Halvard Morn."]],
        ],
        "supporting_facts": [["Edda Morn", 1], ["Tobin Morn", 0]],
        "evidences": [["Edda Morn", "father", "Tobin Morn"], ["Tobin Morn", "father", "Halvard Morn"]],
        "answer": "Halvard Morn",
    },
]


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


def write_2wiki_release(root: Path) -> Path:
    """`train.json`, `dev.json` and `test.json` as in the 2WikiMultiHopQA release."""
    write_json(root / "train.json", TWOWIKI_ROWS[2:])
    write_json(root / "dev.json", TWOWIKI_ROWS)
    write_json(root / "test.json", TWOWIKI_ROWS[:2])
    return root


def write_2wiki_hub(root: Path) -> Path:
    """The same rows as hub rows (`context.content`, as the hub copy has it), validation split."""
    return write_jsonl(root / "validation.jsonl", [multihop_to_hub(r, content_key="content", id_key="_id")
                                                   for r in TWOWIKI_ROWS])
