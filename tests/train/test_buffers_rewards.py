"""The rewards side table: written beside a buffer, keyed by episode, attached on read."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from optima_agents.policies import ScriptedPolicy
from optima_agents.rollout import rollout
from optima_train.buffers import (
    BufferCorruptError,
    EpisodeRewards,
    attach_rewards,
    read_episodes,
    read_rewards,
    write_episodes,
    write_rewards,
)


@pytest.fixture(scope="module")
def records():
    return rollout("synth-hop-ia", ScriptedPolicy(lambda o: "<A>x</A>"), 3, env_kwargs={"max_turns": 2},
                   progress=False)


def test_rows_round_trip_and_attach_to_their_episodes(records, tmp_path):
    write_episodes(tmp_path / "episodes", records)
    rows = [EpisodeRewards.of(k, r, {"reward": None if k == 1 else k / 2, "advantage": 1}) for k, r in enumerate(records)]
    write_rewards(tmp_path / "rewards.parquet", rows)
    assert read_rewards(tmp_path / "rewards.parquet") == rows
    scored = attach_rewards(read_episodes(tmp_path / "episodes"), read_rewards(tmp_path / "rewards.parquet"))
    assert [r.reward_components["reward"] for r in scored] == [0.0, None, 1.0]
    assert all(r.reward_components["advantage"] == 1.0 and "tokens" in r.reward_components for r in scored)
    assert [replace_components(r) for r in scored] == [replace_components(r) for r in records]


def replace_components(record):
    from dataclasses import replace

    return replace(record, reward_components={})


def test_a_table_of_another_buffer_is_refused(records):
    other = EpisodeRewards(1, "another-question", records[1].seed, {"reward": 1.0})
    with pytest.raises(BufferCorruptError, match=re.escape("episode 1 is instance 'another-question'")):
        attach_rewards(records, [other])
    with pytest.raises(BufferCorruptError, match=re.escape("names episode 3, but the buffer holds 3 episodes")):
        attach_rewards(records, [EpisodeRewards.of(3, records[0], {})])


def test_a_file_without_the_columns_is_refused(tmp_path):
    pq.write_table(pa.table({"episode": [0]}), tmp_path / "rewards.parquet")
    with pytest.raises(BufferCorruptError, match=re.escape("column(s) ['instance_id', 'seed', 'components'] are missing")):
        read_rewards(tmp_path / "rewards.parquet")
