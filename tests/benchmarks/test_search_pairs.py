"""What a search's kept pairs prefer, counted from its pair and rollout rows."""

from __future__ import annotations

import json

from benchmarks.search_pairs import KINDS, pair_kind, search_counts


def test_the_side_that_answers_names_the_pair():
    assert pair_kind("<A>Krelo</A>", "Bami was born in Krelo.") == KINDS[0]
    assert pair_kind("Bami was born in Krelo.", "<A>Krelo</A>") == KINDS[1]
    assert pair_kind("<A>Krelo</A>", "<A>Vibri</A>") == KINDS[2]
    assert pair_kind("Bami was born in Krelo.", "ok") == KINDS[3]


def test_kept_pairs_root_pairs_and_grounded_rollouts_are_counted():
    pairs = [{"kept": True, "node_id": 0, "chosen": "Bami was born in Krelo.", "rejected": "<A>Krelo</A>"},
             {"kept": True, "node_id": 3, "chosen": "<A>Krelo</A>", "rejected": "ok"},
             {"kept": False, "node_id": 0, "chosen": "<A>Krelo</A>", "rejected": "ok"}]
    rollouts = [{"components": json.dumps({"score": 1.0, "grounded": 1.0})},
                {"components": json.dumps({"score": 0.0, "grounded": 0.0})}]
    counts = search_counts(pairs, rollouts)
    assert counts["kept pairs"] == 2 and counts[KINDS[0]] == 1 and counts[KINDS[1]] == 1
    assert counts["root pairs"] == 1 and counts["root pairs, chosen answers"] == 0
    assert counts["rollouts"] == 2 and counts["rollouts scored > 0"] == 1 and counts["grounded rollouts"] == 1
    plain = search_counts(pairs, [{"components": json.dumps({"score": 1.0})}])
    assert "grounded rollouts" not in plain
