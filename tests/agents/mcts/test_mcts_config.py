import re

import pytest

from optima_agents.mcts import MCTSConfig, MCTSConfigError, PairConfig


class TestMCTSConfig:
    def test_paper_defaults(self):
        c = MCTSConfig()
        assert (c.iterations, c.rollouts_per_expansion, c.top_k) == (8, 3, 10)
        assert (c.skip_similarity, c.merge_similarity, c.temperature) == (0.25, 0.1, 0.7)
        p = PairConfig()
        assert (p.min_chosen_value, p.min_gap, p.keep_fraction, p.keep_scope) == (0.4, 0.2, 0.5, "batch")

    @pytest.mark.parametrize("field,value,rule", [
        ("iterations", 0, "must be >= 1"),
        ("top_k", 0, "must be >= 1"),
        ("skip_similarity", 1.5, "must be an edit-distance ratio in [0, 1]"),
        ("temperature", -0.1, "must be >= 0 (0 is greedy)"),
        ("max_depth", 0, "must be >= 1 or None (the env's max_turns)"),
    ])
    def test_rejects_out_of_range(self, field, value, rule):
        with pytest.raises(MCTSConfigError, match=re.escape(f"MCTS setting {field} {rule}, got {value!r}")):
            MCTSConfig(**{field: value})

    def test_from_dict_names_unknown_fields(self):
        with pytest.raises(MCTSConfigError, match=re.escape("unknown MCTSConfig fields ['iters']")):
            MCTSConfig.from_dict({"iters": 3})
        assert MCTSConfig.from_dict({"iterations": 3}).iterations == 3
        assert MCTSConfig.from_dict(MCTSConfig(seed=5).to_dict()) == MCTSConfig(seed=5)


class TestPairConfig:
    def test_rejects_bad_scope_and_fraction(self):
        with pytest.raises(MCTSConfigError, match=re.escape("keep_scope must be 'batch' or 'tree', got 'all'")):
            PairConfig(keep_scope="all")
        with pytest.raises(MCTSConfigError, match=re.escape("keep_fraction must be in (0, 1], got 0.0")):
            PairConfig(keep_fraction=0.0)
