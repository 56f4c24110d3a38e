"""Multi-agent GRPO: group advantages, the clipped loss, the config and CLI, and one real
iteration that resumes (its training sequences are tested in `tests.train.examples.test_policy`)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
import yaml

from optima_envs.errors import ConfigError
from optima_train.config.io import load_config
from optima_train.grpo import GRPOConfig, GRPOTrainer
from optima_train.grpo.grpo_trainer import clipped_policy_loss, group_advantages
from optima_train.run_dir import RunDir, read_json

ROOT = Path(__file__).resolve().parents[2]
EPS = 1e-4


# ---------------------------------------------------------------------------------- advantages
class TestGroupAdvantages:
    def test_normalised_within_each_group(self):
        result = group_advantages([1.0, 0.0, 2.0, 3.0, 4.0], ["a", "b", "a", "a", "b"], eps=EPS)
        # group a: mean 2, sample std 1; group b: mean 2, sample std sqrt(8)
        s = math.sqrt(8)
        expected = [-1 / (1 + EPS), -2 / (s + EPS), 0.0, 1 / (1 + EPS), 2 / (s + EPS)]
        assert result.advantages == pytest.approx(expected)
        assert (result.groups, result.zero_variance_groups, result.learning_groups) == (2, 0, 2)

    def test_zero_variance_and_one_element_groups_contribute_nothing(self):
        result = group_advantages([0.5, 0.5, 0.5, 0.7, 1.0, 2.0], ["flat"] * 3 + ["single"] + ["x", "x"])
        assert result.advantages[:4] == [0.0, 0.0, 0.0, 0.0]
        assert result.advantages[4] < 0 < result.advantages[5]
        assert (result.groups, result.zero_variance_groups, result.learning_groups) == (3, 2, 1)

    def test_samples_without_reward_are_left_out(self):
        result = group_advantages([1.0, None, 3.0, float("nan"), None], ["a", "a", "a", "b", "b"], eps=0.0)
        assert result.advantages[1] is None and result.advantages[3] is None and result.advantages[4] is None
        assert result.advantages[0] == pytest.approx(-1 / math.sqrt(2))  # mean 2, std sqrt(2) over the two present
        assert (result.empty_groups, result.learning_groups) == (1, 1)

    def test_bad_input(self):
        with pytest.raises(ValueError, match=re.escape("3 rewards for 2 group keys")):
            group_advantages([1.0, 2.0, 3.0], ["a", "b"])
        with pytest.raises(ValueError, match=re.escape("eps must be >= 0, got -1")):
            group_advantages([1.0], ["a"], eps=-1)


# ---------------------------------------------------------------------------------- the loss
def _loss(logp, old, adv, mask, **kw):
    t = lambda x: torch.tensor(x, dtype=torch.float32)  # noqa: E731
    return clipped_policy_loss(t(logp), t(old), t(adv), t(mask), **kw)


class TestClippedLoss:
    def test_matches_a_hand_computation(self):
        logp = [[-1.0, -0.5, -2.0], [-0.3, -1.2, -9.0]]
        old = [[-1.1, -0.5, -1.0], [-0.4, -1.0, 0.0]]
        adv, mask = [1.5, -0.5], [[1, 1, 1], [1, 1, 0]]
        loss, stats = _loss(logp, old, adv, mask, epsilon_low=0.2, epsilon_high=0.2)
        terms, ratios = [], []
        for b in range(2):
            for t in range(3):
                if mask[b][t]:
                    r = math.exp(logp[b][t] - old[b][t])
                    c = min(max(r, 0.8), 1.2)
                    terms.append(-min(r * adv[b], c * adv[b]))
                    ratios.append(r)
        assert loss.item() == pytest.approx(sum(terms) / 5, rel=1e-5)
        assert stats["ratio"] == pytest.approx(sum(ratios) / 5, rel=1e-5)
        assert stats["tokens"] == 5 and stats["kl"] is None
        assert stats["advantage"] == pytest.approx((3 * 1.5 - 2 * 0.5) / 5)

    def test_clipping_on_both_sides_removes_the_gradient(self):
        # ratio 1.5 with A > 0 (clipped high), 0.5 with A < 0 (clipped low), 0.5 with A > 0 (not clipped)
        old = torch.zeros(3, 1)
        logp = torch.tensor([[math.log(1.5)], [math.log(0.5)], [math.log(0.5)]], requires_grad=True)
        adv, mask = torch.tensor([1.0, -1.0, 1.0]), torch.ones(3, 1)
        loss, stats = clipped_policy_loss(logp, old, adv, mask, epsilon_low=0.2, epsilon_high=0.2)
        assert loss.item() == pytest.approx((-1.2 + 0.8 - 0.5) / 3, rel=1e-5)
        loss.backward()
        assert logp.grad[0, 0] == 0 and logp.grad[1, 0] == 0 and logp.grad[2, 0] != 0
        assert stats["clip_high"] == pytest.approx(1 / 3) and stats["clip_low"] == pytest.approx(1 / 3)
        assert stats["clip_fraction"] == pytest.approx(2 / 3)
        # the other sides are not clipped: ratio 1.5 with A < 0 keeps its gradient
        logp2 = torch.tensor([[math.log(1.5)]], requires_grad=True)
        loss2, stats2 = clipped_policy_loss(logp2, torch.zeros(1, 1), torch.tensor([-1.0]), torch.ones(1, 1))
        loss2.backward()
        assert loss2.item() == pytest.approx(1.5) and logp2.grad[0, 0] != 0 and stats2["clip_fraction"] == 0

    def test_masked_positions_do_not_count_whatever_they_hold(self):
        mask = torch.tensor([[1.0, 0.0, 1.0]])
        logp = torch.tensor([[-1.0, float("-inf"), -2.0]], requires_grad=True)
        old = torch.tensor([[-1.0, float("nan"), -2.5]])
        loss, stats = clipped_policy_loss(logp, old, torch.tensor([2.0]), mask)
        r = math.exp(0.5)
        assert loss.item() == pytest.approx((-2.0 - min(r, 1.2) * 2) / 2, rel=1e-5)
        loss.backward()
        assert torch.isfinite(logp.grad).all() and logp.grad[0, 1] == 0
        assert stats["tokens"] == 2

    def test_kl_term_on_and_off(self):
        logp, old = [[-1.0, -2.0]], [[-1.0, -2.0]]
        ref = torch.tensor([[-1.5, -1.0]])
        kl = [math.exp(d) - d - 1 for d in (-0.5, 1.0)]
        off, off_stats = _loss(logp, old, [1.0], [[1, 1]], ref_logprobs=ref)
        plain, _ = _loss(logp, old, [1.0], [[1, 1]])
        on, on_stats = _loss(logp, old, [1.0], [[1, 1]], ref_logprobs=ref, beta=0.1)
        assert off.item() == pytest.approx(plain.item()) == pytest.approx(-1.0)
        assert off_stats["kl"] == pytest.approx(on_stats["kl"]) == pytest.approx(sum(kl) / 2, rel=1e-5)
        assert on.item() == pytest.approx(-1.0 + 0.1 * sum(kl) / 2, rel=1e-5)
        with pytest.raises(ValueError, match=re.escape("beta > 0 needs ref_logprobs")):
            _loss(logp, old, [1.0], [[1, 1]], beta=0.1)


# ---------------------------------------------------------------------------------- config and CLI
class TestConfig:
    @pytest.mark.parametrize("name", ["base", "synth_hop", "synth_hop_smoke"])
    def test_shipped_configs_parse(self, name):
        load_config(GRPOConfig, ROOT / "configs" / "grpo" / f"{name}.yaml")

    def test_synth_hop_samples_as_much_as_the_isft_experiment(self):
        from optima_train.isft import ISFTConfig

        grpo = load_config(GRPOConfig, ROOT / "configs/grpo/synth_hop.yaml")
        isft = load_config(ISFTConfig, ROOT / "configs/isft/synth_hop_experiment.yaml")
        assert grpo.dialogues_per_iteration == isft.task.train_questions * isft.generation.samples_per_question == 512
        assert grpo.task.train_kwargs() == isft.task.train_kwargs()
        assert grpo.task.env_kwargs == {"hops": 2, "distractors": 0, "comparison_rate": 0.5}
        assert (grpo.generation.backend, grpo.generation.max_turns, grpo.generation.max_new_tokens) == \
            (isft.generation.backend, isft.generation.max_turns, isft.generation.max_new_tokens)

    @pytest.mark.parametrize("override, message", [
        ("generation.group_size=1", "generation.group_size must be >= 2, got 1"),
        ("generation.temperature=0", "generation.temperature must be > 0 for GRPO, got 0.0"),
        ("generation.backend=openai", "generation.backend='openai' cannot drive GRPO"),
        ("train.init=base", "train.init='base' cannot drive GRPO"),
        ("train.beta=-0.1", "train.beta must be >= 0 (0 turns the KL penalty off), got -0.1"),
        ("train.epsilon_low=1", "train.epsilon_low must be in [0, 1), got 1.0"),
        ("train.old_logprobs=vllm", "'vllm' is not one of ['backend', 'recompute']"),
        ("train.extra={nope: 1}", "train.extra has keys that are not transformers.TrainingArguments fields: ['nope']"),
        ("train.extra={temperature: 1.0}", "train.extra sets ['temperature'], which the GRPO config owns"),
    ])
    def test_bad_values_fail_at_parse_time(self, override, message):
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_config(GRPOConfig, None, [override])

    def test_training_and_held_out_questions_must_not_overlap(self):
        with pytest.raises(ConfigError, match=re.escape("training questions 0..9 (over all iterations) and held-out")):
            load_config(GRPOConfig, None, ["task.train_env_kwargs={split: validation}",
                                           "task.train_questions=10", "task.eval_first_index=5"])

    def test_extra_training_arguments_pass(self):
        assert load_config(GRPOConfig, None, ["train.extra={max_grad_norm: 0.5}"]).train.extra == {"max_grad_norm": 0.5}


class TestCli:
    def test_help_and_print_config(self):
        from typer.testing import CliRunner

        from optima_train.cli import app

        runner = CliRunner()
        result = runner.invoke(app, ["train", "grpo", "--help-config"])
        assert result.exit_code == 0, result.output
        assert "generation.group_size: int = 8" in result.output and "train.beta: float = 0.0" in result.output
        result = runner.invoke(app, ["train", "grpo", "-c", str(ROOT / "configs/grpo/synth_hop.yaml"),
                                     "--iterations", "5", "--print-config"])
        assert result.exit_code == 0, result.output
        printed = yaml.safe_load(result.output)
        assert printed["run"]["iterations"] == 5 and printed["generation"]["group_size"] == 8

    def test_bad_override_exits_2(self):
        from typer.testing import CliRunner

        from optima_train.cli import app

        result = CliRunner().invoke(app, ["train", "grpo", "--set", "generation.group_siz=4"])
        assert result.exit_code == 2 and "did you mean 'generation.group_size'?" in result.output


# ---------------------------------------------------------------------------------- real model
class Stop(Exception):
    pass


@pytest.mark.model
class TestTinyIteration:
    def test_one_iteration_trains_the_adapter_and_resumes(self, tmp_path, embedded_model_dir):
        from safetensors.torch import load_file

        from optima_train.buffers import attach_rewards, read_episodes, read_rewards

        out = tmp_path / "run"
        cfg = load_config(GRPOConfig, None, [
            f"run.output_dir={out}", "run.iterations=1", "run.progress=false", "run.num_threads=1",
            "task.train_questions=2", "generation.group_size=2", "generation.max_new_tokens=12",
            "generation.max_turns=2", "train.max_steps=2", "train.per_device_train_batch_size=2",
            "train.learning_rate=1e-3", "train.max_length=384", "train.beta=0.05", "eval.episodes=2",
            "eval.baseline=false"])

        def stop_after_scoring(stage, step, info):
            if (stage, step) == (0, "scoring"):
                raise Stop

        first = GRPOTrainer(cfg, on_step_done=stop_after_scoring)
        with pytest.raises(Stop):
            first.train()
        assert first.steps_run == [(0, "generation"), (0, "scoring")]

        second = GRPOTrainer(cfg)
        summary = second.train()[0]
        assert second.steps_run == [(0, "training"), (0, "evaluation")]  # nothing finished is redone
        third = GRPOTrainer(cfg)
        third.train()
        assert third.steps_run == []

        run = RunDir(out)
        it = run.stage_dir(0)
        episodes = read_episodes(it / "generation" / "episodes")
        assert len(episodes) == 4 and any(t.logprobs is not None for e in episodes for t in e.turns)
        assert not (it / "scoring" / "episodes").exists()  # the buffer is written once; rewards sit beside it
        scored = attach_rewards(episodes, read_rewards(it / "scoring" / "rewards.parquet"))
        for q in {e.instance_id for e in scored}:
            group = [e.reward_components["advantage"] for e in scored if e.instance_id == q]
            assert len(group) == 2 and sum(group) == pytest.approx(0, abs=1e-6)
        training = read_json(it / "training" / "DONE.json")
        assert training["sequences"] >= 2 and training["steps"] == 2
        assert training["backend_logprob_tokens"] > 0 and training["old_logprob_gap"] < 0.5
        assert 0 <= training["clip_fraction"] <= 1 and training["kl"] >= 0 and training["mean_ratio"] > 0
        ckpt = Path(summary["checkpoint"])
        assert not (ckpt / "adapter_config.json").exists()
        new, old = load_file(ckpt / "model.safetensors"), load_file(Path(embedded_model_dir) / "model.safetensors")
        name = next(k for k in new if "q_proj" in k)
        assert not torch.equal(new[name].float(), old[name].float())
        metrics = read_json(it / "metrics.json")["summary"]
        assert {"reward_mean", "reward_std", "zero_variance_groups", "mean_ratio", "clip_fraction", "kl",
                "mean_advantage", "train_loss"} <= set(metrics)
        assert read_json(it / "evaluation" / "metrics.json")["model"] == str(ckpt)


def test_grpo_accepts_the_accelerate_launcher():
    from optima_train.config.io import load_config
    from optima_train.grpo import GRPOConfig

    cfg = load_config(GRPOConfig, None, ["train.launcher=accelerate", "train.launch_args=[--num_processes, '2']"])
    assert cfg.train.launcher == "accelerate"
