import json
import re
from pathlib import Path

import pytest
import yaml

from optima_envs.errors import ConfigError
from optima_train.config.io import from_dict, load_config
from optima_train.idpo import IDPOConfig, IDPOTrainer

ROOT = Path(__file__).resolve().parents[2]


class TestIDPOConfig:
    def test_paper_defaults(self):
        c = IDPOConfig()
        assert (c.mcts.iterations, c.mcts.rollouts_per_expansion, c.mcts.temperature) == (8, 3, 0.7)
        assert (c.pairs.min_gap, c.pairs.keep_fraction) == (0.2, 0.5)
        assert (c.train.beta, c.train.rpo_alpha, c.reward.token_percentile) == (0.1, 1.0, 85.0)
        assert c.run.output_dir == "runs/idpo" and c.lora.enabled

    def test_nested_sections_keep_their_defaults_when_partly_set(self):
        c = from_dict(IDPOConfig, {"run": {"iterations": 3}, "reward": {"lambda_token": 0.4}})
        assert c.run.output_dir == "runs/idpo" and c.reward.token_percentile == 85.0

    def test_questions_per_iteration_move_on(self):
        c = from_dict(IDPOConfig, {"task": {"train_questions": 5, "train_first_index": 10}, "run": {"iterations": 2}})
        assert [list(c.train_indices(i)) for i in (0, 1)] == [[10, 11, 12, 13, 14], [15, 16, 17, 18, 19]]
        c = from_dict(IDPOConfig, {"search": {"questions": 2, "new_questions_each_iteration": False}})
        assert list(c.train_indices(3)) == [0, 1]

    def test_overlap_with_held_out_questions_over_all_iterations(self):
        same = {"train_env_kwargs": {"split": "validation"}, "train_questions": 10, "eval_first_index": 15}
        with pytest.raises(ConfigError, match=re.escape("training questions 0..19 (over all iterations) and held-out "
                                                        "questions 15..214")):
            from_dict(IDPOConfig, {"task": same, "run": {"iterations": 2}})
        from_dict(IDPOConfig, {"task": same, "run": {"iterations": 1}})

    @pytest.mark.parametrize("override,message", [
        ("train.beta=0", "train.beta must be > 0, got 0.0"),
        ("train.rpo_alpha=-1", "train.rpo_alpha must be >= 0 (0 is plain DPO), got -1.0"),
        ("mcts.skip_similarity=2", "MCTS setting skip_similarity must be an edit-distance ratio in [0, 1], got 2.0"),
        ("pairs.keep_scope=all", "'all' is not one of ['batch', 'tree']"),
        ("train.extra={loss_type: ipo}", "train.extra sets ['loss_type'], which the iDPO config owns"),
        ("search.min_kept_pairs=0", "search.min_kept_pairs must be >= 1 or null, got 0"),
        ("search.round_trees=0", "search.round_trees must be >= 1, got 0"),
    ])
    def test_bad_values_fail_at_parse_time(self, override, message):
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_config(IDPOConfig, None, [override])

    def test_max_depth_beyond_turn_limit(self):
        with pytest.raises(ConfigError, match=re.escape("mcts.max_depth (6) exceeds search.max_turns (4)")):
            load_config(IDPOConfig, None, ["mcts.max_depth=6", "search.max_turns=4"])


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "idpo").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_idpo_configs_parse(path):
    load_config(IDPOConfig, path)


def _tiny(tmp_path: Path, model: Path) -> IDPOConfig:
    return from_dict(IDPOConfig, {
        "task": {"env_id": "synth-hop-ia", "train_questions": 2},
        "model": {"name": str(model)},
        "search": {"max_turns": 3, "batch_size": 16},
        "mcts": {"iterations": 2, "rollouts_per_expansion": 2, "max_new_tokens": 16, "temperature": 1.0},
        "pairs": {"min_chosen_value": -10.0, "min_gap": 0.0, "keep_fraction": 1.0},
        "reward": {"lambda_loss": 0.0},
        "lora": {"r": 4, "alpha": 8},
        "train": {"max_steps": 2, "per_device_train_batch_size": 1, "gradient_accumulation_steps": 1,
                  "max_length": 512, "logging_steps": 1, "learning_rate": 1e-4},
        "eval": {"episodes": 2, "baseline": False, "max_new_tokens": 16},
        "run": {"output_dir": str(tmp_path / "run"), "iterations": 1, "progress": False, "num_threads": 1},
    })


class _Killed(Exception):
    pass


@pytest.mark.model
def test_tiny_idpo_iteration_writes_everything_and_resumes_after_a_kill(tmp_path, embedded_model_dir):
    import pyarrow.parquet as pq
    import torch
    from safetensors.torch import load_file

    cfg = _tiny(tmp_path, embedded_model_dir)

    def kill_after_search(stage, step, info):
        if (stage, step) == (0, "search"):
            raise _Killed

    first = IDPOTrainer(cfg, on_step_done=kill_after_search)
    with pytest.raises(_Killed):
        first.train()
    assert first.steps_run == [(0, "search")]
    second = IDPOTrainer(cfg)
    summaries = second.train()
    assert second.steps_run == [(0, "training"), (0, "evaluation")]  # the search was not redone

    run = tmp_path / "run"
    search = run / "iter_000" / "search"
    for name in ("trees.parquet", "rollouts.parquet", "pairs.parquet", "search.json", "DONE.json"):
        assert (search / name).is_file(), name
    pairs = pq.read_table(search / "pairs.parquet").to_pylist()
    nodes = {(n["tree_id"], n["node_id"]): n for n in pq.read_table(search / "trees.parquet").to_pylist()}
    assert pairs and any(p["kept"] for p in pairs)
    for p in pairs:
        assert nodes[(p["tree_id"], p["chosen_id"])]["text"] == p["chosen"]
        assert nodes[(p["tree_id"], p["rejected_id"])]["parent_id"] == p["node_id"]
        assert p["prompt"][0]["role"] == "system"
    training = run / "iter_000" / "training"
    assert (training / "checkpoint" / "config.json").is_file() and (training / "train.json").is_file()
    assert list((training / "logs").glob("events.out.tfevents.*"))
    assert (run / "iter_000" / "evaluation" / "metrics.json").is_file()
    assert (run / "summary.json").is_file() and (run / "iter_000" / "metrics.json").is_file()
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    done = second.run_dir.done_info(0, "training")
    assert done["steps"] == 2 and done["reference"] == "adapter-disabled" and done["pairs"] >= 1
    # the LoRA adapter was merged: the checkpoint's weights moved away from the starting model's
    before = load_file(str(embedded_model_dir / "model.safetensors"))
    after = load_file(str(training / "checkpoint" / "model.safetensors"))
    name = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.allclose(before[name].float(), after[name].float())
    s = summaries[0]
    assert s["kept_pairs"] >= 1 and s["heldout_score"] is not None and s["checkpoint"] == done["checkpoint"]


# ---------------------------------------------------------------------- iSFT-DPO orchestration
OPTIONS = ["I know <A>Griru</A>", "Facts: the founder was born in a city far away. <A>Losto</A>", "<A>Griru</A>",
           "Let me think about this for a while, there are many facts to share. <A>Zemadail</A>", "ok"]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A randomly initialised one-layer Llama with the embedded model's tokenizer: trains in moments."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from optima_agents.models.testing import ensure_test_model

    source = ensure_test_model()
    tokenizer = AutoTokenizer.from_pretrained(source)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    folder = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _seeded_policy(model, sampling):
    from optima_agents.testing import SeededChoice

    return SeededChoice(OPTIONS)


@pytest.mark.model  # the tiny model borrows the embedded model's tokenizer
def test_isft_dpo_cycles_hand_over_models_and_resume(tmp_path, tiny_model):
    from optima_train.isft_dpo import ISFTDPOConfig, ISFTDPOTrainer

    cfg = from_dict(ISFTDPOConfig, {
        "task": {"env_id": "synth-hop-ia", "train_questions": 2},
        "model": {"name": str(tiny_model)},
        "generation": {"samples_per_question": 2, "max_turns": 4},
        "selection": {"min_score": None},
        "sft": {"max_steps": 1, "per_device_train_batch_size": 2, "max_length": 256, "bf16": False},
        "search": {"max_turns": 4, "questions": 1},
        "mcts": {"iterations": 2, "rollouts_per_expansion": 2},
        "pairs": {"min_chosen_value": -10.0, "min_gap": 0.0, "keep_fraction": 1.0},
        "dpo": {"max_steps": 1, "per_device_train_batch_size": 1, "gradient_accumulation_steps": 1,
                "max_length": 256, "bf16": False},
        "reward": {"lambda_loss": 0.5, "grounded_only": True},
        "lora": {"r": 2, "alpha": 4},
        "eval": {"episodes": 2, "baseline": True},
        "cycles": {"count": 2},
        "run": {"output_dir": str(tmp_path / "run"), "progress": False, "num_threads": 1},
    })

    def kill(stage, step, info):
        if (stage, step) == ("cycle_001/isft:0", "generation"):
            raise _Killed

    kwargs = {"policy_factory": _seeded_policy, "reference_loss": lambda texts: [2.0 for _ in texts]}
    first = ISFTDPOTrainer(cfg, on_step_done=kill, **kwargs)
    with pytest.raises(_Killed):
        first.train()
    second = ISFTDPOTrainer(cfg, **kwargs)
    rows = second.train()
    assert [(r["cycle"], r["stage"]) for r in rows] == [(0, "isft"), (0, "idpo"), (1, "isft"), (1, "idpo")]
    assert second.steps_run[0] == ("cycle_001/isft:0", "scoring")  # nothing before the kill was redone
    run = tmp_path / "run"
    # each stage starts from the previous stage's last checkpoint; the reference model stays the original
    idpo0 = load_config(IDPOConfig, run / "cycle_000" / "idpo" / "config.yaml")
    assert idpo0.model.name == rows[0]["checkpoint"] and idpo0.model.reference == str(tiny_model)
    isft1 = yaml_load(run / "cycle_001" / "isft" / "config.yaml")
    assert isft1["model"]["name"] == rows[1]["checkpoint"] and isft1["generation"]["format_pool_first_iteration"] is False
    assert (run / "cycle_000" / "isft" / "baseline" / "evaluation" / "DONE.json").is_file()
    assert not (run / "cycle_001" / "isft" / "baseline").exists()
    assert rows[1]["kept_pairs"] >= 1 and rows[3]["checkpoint"].startswith(str(run / "cycle_001" / "idpo"))
    summary = yaml_load(run / "summary.json")
    assert summary["baseline"] is not None and len(summary["stages"]) == 4
    # the search scored its rollouts with the grounded reward: a right answer without the facts is a guess
    import pyarrow.parquet as pq

    rollouts = pq.read_table(run / "cycle_000" / "idpo" / "iter_000" / "search" / "rollouts.parquet").to_pylist()
    components = [json.loads(r["components"]) for r in rollouts]
    assert components and all(c["grounded"] in (0.0, 1.0) for c in components)
    assert all(c["score"] == 0.0 for c in components if c["grounded"] == 0.0)


def yaml_load(path):
    return yaml.safe_load(Path(path).read_text())


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "isft_dpo").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_isft_dpo_configs_parse(path):
    from optima_train.isft_dpo import ISFTDPOConfig

    cfg = load_config(ISFTDPOConfig, path)
    subs = cfg.sub_configs(cfg.cycles.count - 1, start_model="m", base_model="m", output_dir="runs/x")
    subs["idpo"]("m2")  # both stages' configs are valid too


class TestCLI:
    def test_print_config_and_errors(self):
        from typer.testing import CliRunner

        from optima_train.cli import app

        runner = CliRunner()
        ok = runner.invoke(app, ["train", "idpo", "--config", str(ROOT / "configs/idpo/synth_hop.yaml"),
                                 "--set", "mcts.iterations=2", "--iterations", "3", "--print-config"])
        assert ok.exit_code == 0, ok.output
        printed = yaml.safe_load(ok.output)
        assert printed["mcts"]["iterations"] == 2 and printed["run"]["iterations"] == 3
        bad = runner.invoke(app, ["train", "isft-dpo", "--set", "pairs.min_gap=-1", "--cycles", "2"])
        assert bad.exit_code == 2 and "MCTS setting min_gap must be >= 0, got -1.0" in bad.output
        assert "cycles.count" in runner.invoke(app, ["train", "isft-dpo", "--help-config"]).output


# ---------------------------------------------------------------------- search rounds
class _FakeTree:
    nodes = ()

    def __init__(self, pairs: int):
        self.pairs = pairs

    def check_invariants(self) -> None:
        pass


class _FakePlanner:
    """Grows one fake tree per task, yielding as many kept pairs as the task's `options["pairs"]`."""

    def __init__(self, config, seen):
        self.config, self.seen = config, seen

    def search(self, env, tasks):
        from optima_agents.mcts import SearchResult

        self.seen.append((self.config.seed, [t.tree_id for t in tasks]))
        return SearchResult(trees=[_FakeTree(t.options["pairs"]) for t in tasks], stats={"rollouts": len(tasks)})


@pytest.mark.parametrize("target,rounds,trees", [(None, 1, 10), (3, 2, 8), (100, 3, 10)])
def test_search_rounds_stop_once_enough_pairs_are_kept(tmp_path, monkeypatch, target, rounds, trees):
    import optima_agents.mcts as mcts_pkg
    from optima_agents.mcts import MCTSConfig, TreeTask

    monkeypatch.setattr(mcts_pkg, "extract_pairs",
                        lambda ts, config: type("E", (), {"kept": [p for t in ts for p in range(t.pairs)]})())
    cfg = load_config(IDPOConfig, None, [f"run.output_dir={tmp_path}", "search.round_trees=4"]
                      + ([f"search.min_kept_pairs={target}"] if target else []))
    tasks = [TreeTask(f"q{i}", seed=i, options={"pairs": 1 if i in (2, 5, 6) else 0}) for i in range(10)]
    seen: list = []
    result, extraction, n, _ = IDPOTrainer(cfg)._search_rounds(lambda c: _FakePlanner(c, seen), None, tasks,
                                                           MCTSConfig(seed=7))
    assert n == rounds and len(result.trees) == trees and result.stats["rollouts"] == trees
    assert len(extraction.kept) == sum(t.pairs for t in result.trees)
    # Rounds take the tasks in order; the first round keeps the search's own seed, later ones derive theirs.
    assert [ids for _, ids in seen] == ([[f"q{i}" for i in range(10)]] if target is None else
                                        [[f"q{i}" for i in range(s, min(s + 4, 10))] for s in range(0, 4 * rounds, 4)])
    assert seen[0][0] == 7 and len({seed for seed, _ in seen}) == rounds


def _planner_maker(seen: list, reward, *, kill_before: int | None = None):
    """Fake planners that freeze `reward.max_tokens` in the first round (as `OptimaTreeReward`
    does) and, with `kill_before`, die before that round the way a killed process would."""
    def make(config):
        if kill_before is not None and len(seen) == kill_before:
            raise _Killed
        if reward.max_tokens is None:
            reward.max_tokens = 50.0 + config.seed
        return _FakePlanner(config, seen)
    return make


def test_a_killed_search_resumes_at_its_next_round(tmp_path, monkeypatch):
    import types

    import optima_agents.mcts as mcts_pkg
    from optima_agents.mcts import MCTSConfig, TreeTask

    monkeypatch.setattr(mcts_pkg, "extract_pairs",
                        lambda ts, config: type("E", (), {"kept": [p for t in ts for p in range(t.pairs)]})())
    trainer = IDPOTrainer(load_config(IDPOConfig, None, [f"run.output_dir={tmp_path / 'run'}", "search.round_trees=4",
                                                         "search.min_kept_pairs=100"]))
    tasks = [TreeTask(f"q{i}", seed=i, options={"pairs": i % 2}) for i in range(10)]
    whole_seen, whole_reward = [], types.SimpleNamespace(max_tokens=None)
    whole = trainer._search_rounds(_planner_maker(whole_seen, whole_reward), None, tasks, MCTSConfig(seed=7),
                                   progress=tmp_path / "whole", reward=whole_reward)

    progress = tmp_path / "killed"
    killed_seen, killed_reward = [], types.SimpleNamespace(max_tokens=None)
    with pytest.raises(_Killed):
        trainer._search_rounds(_planner_maker(killed_seen, killed_reward, kill_before=2), None, tasks,
                               MCTSConfig(seed=7), progress=progress, reward=killed_reward)
    assert sorted(p.name for p in progress.iterdir()) == ["round_000.pkl", "round_001.pkl"]

    again_seen, fresh_reward = [], types.SimpleNamespace(max_tokens=None)  # a new process: nothing frozen yet
    resumed = trainer._search_rounds(_planner_maker(again_seen, fresh_reward), None, tasks, MCTSConfig(seed=7),
                                     progress=progress, reward=fresh_reward)
    assert again_seen == whole_seen[2:]  # only the third round is searched again, with its own seed
    assert fresh_reward.max_tokens == whole_reward.max_tokens == 57.0  # round 0's normaliser, read back
    assert [t.pairs for t in resumed[0].trees] == [t.pairs for t in whole[0].trees]
    assert resumed[0].stats == whole[0].stats and resumed.rounds == whole.rounds == 3
    assert (resumed.read_back, whole.read_back) == (2, 0)
    assert len(resumed[1].kept) == len(whole[1].kept)


def test_saved_rounds_for_other_trees_are_searched_again(tmp_path, monkeypatch):
    import pickle

    import optima_agents.mcts as mcts_pkg
    from optima_agents.mcts import MCTSConfig, TreeTask

    monkeypatch.setattr(mcts_pkg, "extract_pairs", lambda ts, config: type("E", (), {"kept": []})())
    trainer = IDPOTrainer(load_config(IDPOConfig, None, [f"run.output_dir={tmp_path / 'run'}"]))
    progress = tmp_path / "progress"
    progress.mkdir()
    (progress / "round_000.pkl").write_bytes(pickle.dumps({"tree_ids": ["other"], "trees": [], "stats": {},
                                                           "max_tokens": 1.0}))
    seen: list = []
    tasks = [TreeTask("q0", seed=0, options={"pairs": 0})]
    result, _, _, _ = trainer._search_rounds(lambda c: _FakePlanner(c, seen), None, tasks, MCTSConfig(seed=7),
                                          progress=progress)
    assert [ids for _, ids in seen] == [["q0"]] and len(result.trees) == 1
    (progress / "round_000.pkl").write_bytes(b"not a pickle")
    trainer._search_rounds(lambda c: _FakePlanner(c, seen), None, tasks, MCTSConfig(seed=7), progress=progress)
    assert len(seen) == 2


def test_a_saved_round_of_real_trees_gives_the_same_pairs(tmp_path):
    from optima_agents.mcts import PairConfig, SearchResult, extract_pairs
    from optima_train.examples import pair_rows
    from optima_train.idpo.idpo_trainer import _load_round, _save_round
    from tests.train.examples.test_dpo import search_two_trees

    trees, _ = search_two_trees()
    config = PairConfig(min_chosen_value=-1, min_gap=0.0)
    before = pair_rows(trees, extract_pairs(trees, config))
    _save_round(tmp_path, 0, [t.tree_id for t in trees], SearchResult(trees=trees, stats={"rollouts": 3}), 12.0)
    saved = _load_round(tmp_path, 0, [t.tree_id for t in trees])
    assert saved["max_tokens"] == 12.0 and saved["stats"] == {"rollouts": 3}
    assert all(n.snapshot is None for t in saved["trees"] for n in t.nodes)
    for tree in saved["trees"]:
        tree.check_invariants()
    assert pair_rows(saved["trees"], extract_pairs(saved["trees"], config)) == before and before
