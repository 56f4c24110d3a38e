"""Selection: best per question, top fraction, thresholds; failures excluded, never 0."""

from __future__ import annotations

import re

import pytest

from optima_envs.errors import ConfigError
from optima_train.selection import Candidate, select_best


def c(key, group, reward, score=1.0, tokens=10, sample=0, excluded=None):
    return Candidate(key=key, group=group, reward=reward, score=score, tokens=tokens, sample_index=sample,
                     excluded=excluded)


class TestSelectBest:
    def test_best_per_group_then_top_fraction(self):
        cands = [c(0, "a", 0.2), c(1, "a", 0.9), c(2, "b", 0.5), c(3, "b", 0.1), c(4, "c", 0.3), c(5, "d", -0.4)]
        res = select_best(cands, keep_fraction=0.5)
        assert [x.key for x in res.selected] == [1, 2]
        assert res.stats["groups"] == 4 and res.stats["after_fraction"] == 2 and res.stats["selected"] == 2

    def test_fraction_rounds_up(self):
        cands = [c(i, f"g{i}", float(i)) for i in range(3)]
        assert [x.key for x in select_best(cands, keep_fraction=0.7).selected] == [2, 1, 0]  # ceil(2.1) = 3
        assert [x.key for x in select_best(cands, keep_fraction=0.1).selected] == [2]

    def test_ties_prefer_fewer_tokens_then_lower_sample_index(self):
        cands = [c(0, "a", 0.5, tokens=30, sample=0), c(1, "a", 0.5, tokens=20, sample=1),
                 c(2, "a", 0.5, tokens=20, sample=2)]
        assert [x.key for x in select_best(cands, keep_fraction=1.0).selected] == [1]
        assert [x.key for x in select_best(list(reversed(cands)), keep_fraction=1.0).selected] == [1]

    def test_thresholds(self):
        cands = [c(0, "a", 0.9, score=0.2), c(1, "b", 0.6, score=1.0), c(2, "c", 0.1, score=1.0)]
        res = select_best(cands, keep_fraction=1.0, reward_threshold=0.5, min_score=0.5)
        assert [x.key for x in res.selected] == [1]
        assert res.stats["below_threshold"] == 1 and res.stats["below_min_score"] == 1

    def test_failures_are_excluded_and_counted_never_zero(self):
        cands = [c(0, "a", None, score=None, excluded="scoring_failure"), c(1, "a", -0.5, score=0.0),
                 c(2, "b", None, score=None, excluded="infra_failure"), c(3, "c", float("nan"))]
        res = select_best(cands, keep_fraction=1.0)
        # 'a' is ranked by its only real sample (-0.5), not by a failure taken as 0
        assert [x.key for x in res.selected] == [1]
        assert res.stats["excluded"] == 3 and res.stats["excluded_scoring_failure"] == 1
        assert res.stats["excluded_infra_failure"] == 1 and res.stats["excluded_no_reward"] == 1
        assert res.stats["groups"] == 3 and res.stats["groups_ranked"] == 1

    def test_empty(self):
        res = select_best([], keep_fraction=0.7)
        assert res.selected == [] and res.stats["selected"] == 0

    def test_bad_fraction(self):
        with pytest.raises(ConfigError, match=re.escape("selection.keep_fraction must be in (0, 1], got 0")):
            select_best([], keep_fraction=0)
