import json

import pytest

import optima_envs
from optima_agents.chat import KICKOFF_MESSAGE, chat_messages
from optima_agents.mcts import MCTSConfig, MCTSPlanner, PairConfig, TreeTask, extract_pairs
from optima_train.examples.dpo import pair_rows, read_pairs, to_dpo_dataset, write_pairs
from optima_train.search_trees import pair_statistics, write_trees
from optima_agents.testing import TurnScript, first_utterance_reward

GOOD, BAD1, BAD2 = "I say <A>good</A>", "I say <A>bad one</A> and more words here", "I say <A>bad two</A>"


def search_two_trees():
    """Two scripted searches on synth-hop-ia whose pairs are known (GOOD over BAD1 at the root)."""
    policy = TurnScript({0: [GOOD, BAD1, BAD2], 1: ["<A>good</A>", "hmm", "<A>bad two</A>"],
                         2: ["<A>good</A>", "<A>bad one</A>", "<A>x</A>"]})
    first = first_utterance_reward({GOOD: 1.0, BAD1: 0.0, BAD2: 0.3})

    def reward(dialogues):  # + 0.1 when Bob's reply is "<A>good</A>", so deeper siblings differ too
        return [(r + 0.1 * (len(d.utterances) > 1 and d.utterances[1][1] == "<A>good</A>"), c)
                for d, (r, c) in zip(dialogues, first(dialogues))]

    planner = MCTSPlanner(policy, reward, MCTSConfig(iterations=3, selection_temperature=1e-3))
    trees = planner.search(optima_envs.make("synth-hop-ia"), [TreeTask("q0", seed=0), TreeTask("q1", seed=1)]).trees
    return trees, extract_pairs(trees, PairConfig())


@pytest.fixture(scope="module")
def searched():
    return search_two_trees()


class TestPairRows:
    def test_prompt_is_the_speakers_view_up_to_the_node(self, searched):
        trees, extraction = searched
        rows = pair_rows(trees, extraction, iteration=2)
        assert len(rows) == len(extraction.qualifying) == 2 and sum(r["kept"] for r in rows) == 1
        row = rows[0]
        assert (row["tree_id"], row["node_id"], row["speaker"], row["depth"]) == ("q0", 0, "alice", 0)
        assert row["pair_id"] == "002-00000"
        tree = trees[0]
        assert row["prompt"][0] == {"role": "system", "content": tree.root.observation["system_prompt"]}
        assert row["prompt"][1] == {"role": "user", "content": KICKOFF_MESSAGE}
        assert (row["chosen"], row["rejected"]) == (GOOD, BAD1)
        assert row["gap"] == pytest.approx(row["chosen_value"]) and row["rejected_value"] == 0.0
        assert row["chosen_tokens"] < row["rejected_tokens"]

    def test_deeper_pairs_show_the_transcript(self, searched):
        trees, _ = searched
        extraction = extract_pairs(trees, PairConfig(min_chosen_value=-1, min_gap=0.0))
        deep = [r for r in pair_rows(trees, extraction) if r["depth"] >= 1]
        assert deep
        by_id = {t.tree_id: t for t in trees}
        for row in deep:
            tree = by_id[row["tree_id"]]
            assert row["prompt"] == chat_messages(tree.node(row["node_id"]).observation)
            assert row["prompt"][-1]["role"] == "user"  # the other agent spoke last
            assert tree.node(row["node_id"]).text in row["prompt"][-1]["content"]

    def test_dataset_in_trl_preference_format(self, searched):
        trees, extraction = searched
        ds = to_dpo_dataset(pair_rows(trees, extraction))
        assert ds.column_names == ["pair_id", "prompt", "chosen", "rejected"] and len(ds) == 1
        assert ds[0]["chosen"] == [{"role": "assistant", "content": GOOD}]
        assert len(to_dpo_dataset(pair_rows(trees, extraction), only_kept=False)) == 2


class TestFiles:
    def test_pairs_round_trip_and_trace_to_trees(self, searched, tmp_path):
        trees, extraction = searched
        rows = pair_rows(trees, extraction)
        write_pairs(rows, tmp_path / "pairs.parquet")
        assert read_pairs(tmp_path / "pairs.parquet") == rows
        paths = write_trees(trees, tmp_path)
        import pyarrow.parquet as pq

        nodes = pq.read_table(paths["trees"]).to_pylist()
        assert len(nodes) == sum(len(t) for t in trees)
        by_key = {(n["tree_id"], n["node_id"]): n for n in nodes}
        for r in rows:
            assert by_key[(r["tree_id"], r["chosen_id"])]["text"] == r["chosen"]
            assert by_key[(r["tree_id"], r["chosen_id"])]["parent_id"] == r["node_id"]
            assert by_key[(r["tree_id"], r["rejected_id"])]["value"] == pytest.approx(r["rejected_value"])
        rollouts = pq.read_table(paths["rollouts"]).to_pylist()
        assert len(rollouts) == sum(len(t.rollouts) for t in trees)
        assert json.loads(rollouts[0]["components"])["score"] in (0.0, 0.3, 1.0)

    def test_empty_pairs_write(self, tmp_path):
        write_pairs([], tmp_path / "pairs.parquet")
        assert read_pairs(tmp_path / "pairs.parquet") == []


def test_statistics(searched):
    trees, extraction = searched
    stats = pair_statistics(pair_rows(trees, extraction), trees)
    assert stats["kept_pairs"] == 1 and stats["qualifying_pairs"] == 2
    assert stats["pairs_per_tree"]["n"] == 2 and stats["pairs_per_tree"]["mean"] == 0.5
    assert stats["chosen_shorter_share"] == 1.0
    assert stats["gap"]["mean"] > 1.0
