"""iSFT: the typed config, the run directory, resume after an interruption, and a real iteration."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from optima_envs.atomic_files import atomic_write_bytes, atomic_write_json
from optima_envs.data.common import DATA_DIR_ENV
from optima_envs.errors import ConfigError
from optima_envs.test import FIXTURES
from optima_train.config.io import config_to_dict, dump_config, from_dict, load_config
from optima_train.isft import ISFTConfig, ISFTTrainer
from optima_train.run_dir import RunDir, RunLockedError, read_json

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted(p for p in (ROOT / "configs" / "isft").glob("*.yaml") if p.name != "base.yaml")
OFFLINE = {"synth_hop", "synth_arith", "hotpotqa", "arc", "mmlu"}


# ---------------------------------------------------------------------------------- config
class TestConfig:
    def test_yaml_include_and_overrides(self, tmp_path):
        (tmp_path / "base.yaml").write_text("train: {learning_rate: 3.0e-4, logging_steps: 2}\nrun: {iterations: 4}\n")
        (tmp_path / "x.yaml").write_text("include: base.yaml\ntrain: {logging_steps: 7}\n")
        cfg = load_config(ISFTConfig, tmp_path / "x.yaml", ["train.learning_rate=1e-4", "lora.enabled=false",
                                                            "lora.target_modules=q_proj", "selection.min_score=null"])
        assert cfg.train.learning_rate == 1e-4 and cfg.train.logging_steps == 7 and cfg.run.iterations == 4
        assert cfg.lora.enabled is False and cfg.lora.target_modules == ["q_proj"] and cfg.selection.min_score is None
        assert from_dict(ISFTConfig, yaml.safe_load(dump_config(cfg))) == cfg

    def test_unknown_key_says_did_you_mean(self):
        with pytest.raises(ConfigError, match=re.escape("unknown key 'train.learning_rat'; did you mean 'train.learning_rate'?")):
            load_config(ISFTConfig, None, ["train.learning_rat=1e-4"])
        with pytest.raises(ConfigError, match=re.escape("unknown key 'trian'; did you mean 'train'?")):
            load_config(ISFTConfig, None, ["trian.learning_rate=1"])

    def test_all_problems_in_one_message(self):
        with pytest.raises(ConfigError) as info:
            load_config(ISFTConfig, None, ["generation.temperature=hot", "reward.token_normalization=median",
                                           "selection.keep_fraction=1.5", "bogus=1"])
        text = str(info.value)
        assert text.startswith("invalid ISFTConfig (4 problems):")
        assert "generation.temperature: expected float, got 'hot'" in text
        assert "reward.token_normalization: 'median' is not one of ['group', 'percentile']" in text
        assert "selection: selection.keep_fraction must be in (0, 1], got 1.5" in text
        assert "unknown key 'bogus'" in text

    @pytest.mark.parametrize("override, message", [
        ("generation.temperature=0", "samples the same greedy dialogue N times"),
        ("generation.backend=openai", "cannot drive iSFT"),
        ("train.extra={foo: 1}", "train.extra has keys that are not trl.SFTConfig fields: ['foo']"),
        ("train.extra={learning_rate: 1}", "train.extra sets ['learning_rate']"),
        ("task.eval_env_kwargs={split: train}", "overlap; use different splits"),
        ("reward.lambda_token=-1", "reward.lambda_token must be >= 0"),
        ("run.iterations=0", "run.iterations must be >= 1, got 0"),
    ])
    def test_impossible_values(self, override, message):
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_config(ISFTConfig, None, [override])

    def test_fresh_questions_each_iteration(self):
        same = load_config(ISFTConfig, None, ["task.train_questions=8", "run.iterations=3"])
        fresh = load_config(ISFTConfig, None, ["task.train_questions=8", "run.iterations=3", "task.train_first_index=4",
                                               "generation.new_questions_each_iteration=true"])
        assert [same.train_indices(i) for i in (0, 2)] == [range(0, 8), range(0, 8)]
        assert [fresh.train_indices(i) for i in (0, 1, 2)] == [range(4, 12), range(12, 20), range(20, 28)]
        assert ISFTTrainer(fresh)._train_indices(1) == range(12, 20)
        # the iterations together must stay clear of the held-out questions of the same split
        overlap = ["task.eval_env_kwargs={split: train}", "task.eval_first_index=20", "eval.episodes=4",
                   "task.train_questions=8", "run.iterations=3"]
        load_config(ISFTConfig, None, overlap)
        with pytest.raises(ConfigError, match=re.escape("training questions 0..23 (over all iterations)")):
            load_config(ISFTConfig, None, [*overlap, "generation.new_questions_each_iteration=true"])

    def test_missing_file_and_bad_override(self, tmp_path):
        with pytest.raises(ConfigError, match="does not exist"):
            load_config(ISFTConfig, tmp_path / "nope.yaml")
        with pytest.raises(ConfigError, match=re.escape("takes key=value (e.g. train.learning_rate=1e-4)")):
            load_config(ISFTConfig, None, ["train.learning_rate"])

    @pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
    def test_shipped_configs_parse(self, path):
        cfg = load_config(ISFTConfig, path)
        assert cfg.task.env_id and cfg.run.output_dir.startswith("runs/isft/")

    def test_eight_paper_tasks_have_configs(self):
        envs = {load_config(ISFTConfig, p).task.env_id for p in CONFIGS}
        assert {"hotpotqa-ia", "2wikimqa-ia", "triviaqa-ia", "cbt-ia", "gsm8k-debate", "math-debate", "arc-debate",
                "mmlu-debate", "synth-hop-ia"} <= envs

    @pytest.mark.model
    @pytest.mark.parametrize("path", [p for p in CONFIGS if p.stem in OFFLINE], ids=lambda p: p.stem)
    def test_offline_configs_find_their_data_and_model(self, path, monkeypatch):
        monkeypatch.chdir(ROOT)
        monkeypatch.setenv(DATA_DIR_ENV, str(FIXTURES))  # the datasets' committed fixtures, in the release layout
        ISFTTrainer(load_config(ISFTConfig, path)).check_resources()

    def test_missing_data_or_model_fails_before_any_work(self, tmp_path):
        cfg = load_config(ISFTConfig, None, ["task.env_id=hotpotqa-ia", f"task.env_kwargs={{data_dir: {tmp_path}/none}}",
                                             f"run.output_dir={tmp_path}/run"])
        with pytest.raises(ConfigError, match=re.escape("task.env_id='hotpotqa-ia' with task.train_env_kwargs=")):
            ISFTTrainer(cfg).train()
        cfg = load_config(ISFTConfig, None, [f"model.name={tmp_path}/no-model", f"run.output_dir={tmp_path}/run"])
        with pytest.raises(ConfigError, match=re.escape(f"model.name='{tmp_path}/no-model'")):
            ISFTTrainer(cfg).train()
        with pytest.raises(ConfigError, match=re.escape("no env named 'nope-ia'")):
            ISFTTrainer(load_config(ISFTConfig, None, ["task.env_id=nope-ia"])).check_resources()
        assert not (tmp_path / "run").exists()


class TestCli:
    def test_bad_override_exits_2_with_one_message(self):
        from typer.testing import CliRunner

        from optima_train.cli import app

        result = CliRunner().invoke(app, ["train", "isft", "--set", "train.learning_rat=1"])
        assert result.exit_code == 2
        assert "did you mean 'train.learning_rate'?" in result.output

    def test_print_and_help_config(self):
        from typer.testing import CliRunner

        from optima_train.cli import app

        runner = CliRunner()
        result = runner.invoke(app, ["train", "isft", "-c", str(ROOT / "configs/isft/synth_hop.yaml"),
                                     "--iterations", "5", "--print-config"])
        assert result.exit_code == 0, result.output
        assert yaml.safe_load(result.output)["run"]["iterations"] == 5
        result = runner.invoke(app, ["train", "isft", "--help-config"])
        assert result.exit_code == 0 and "selection.keep_fraction: float = 0.7" in result.output


    @pytest.mark.parametrize("command", ["isft", "idpo", "isft-dpo"])
    @pytest.mark.parametrize("overrides, message", [
        (["task.env_id=nope-ia"], "no env named 'nope-ia'"),
        (["task.env_id=hotpotqa-ia", "task.data_dir=/nonexistent/hotpotqa"],
         "hotpotqa-ia: data_dir '/nonexistent/hotpotqa' is not a folder"),
    ])
    def test_print_config_checks_the_env_and_its_data_first(self, command, overrides, message):
        from typer.testing import CliRunner

        from optima_train.cli import app

        args = ["train", command, "--print-config"] + [x for o in overrides for x in ("--set", o)]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, result.output
        assert message in " ".join(result.output.split()) and "run:" not in result.output

    def test_eval_command_fails_when_no_episode_was_scored(self, tmp_path):
        from typer.testing import CliRunner

        from optima_agents.servers import free_port
        from optima_train.cli import app

        dead = f"http://127.0.0.1:{free_port()}/v1"
        result = CliRunner().invoke(app, ["eval", "--model", "stub", "--env", "synth-hop-ia", "--backend", "openai",
                                          "--base-url", dead, "--episodes", "2", "--max-turns", "2", "--no-progress",
                                          "-o", str(tmp_path / "eval.json")])
        assert result.exit_code == 1, result.output
        text = " ".join(result.output.split())
        assert "no episode was scored (2 of 2 were infra failures" in text and "ConnectError" in text
        assert read_json(tmp_path / "eval.json")["excluded"]["infra_failure"] == 2

    @pytest.mark.model
    def test_eval_command_writes_score_and_tokens_with_intervals(self, tmp_path, embedded_model_dir):
        from typer.testing import CliRunner

        from optima_train.buffers import read_episodes
        from optima_train.cli import app

        out = tmp_path / "eval.json"
        result = CliRunner().invoke(app, ["eval", "--model", str(embedded_model_dir), "--env", "synth-hop-ia",
                                          "--episodes", "2", "--max-new-tokens", "8", "--max-turns", "2",
                                          "--no-progress", "-o", str(out)])
        assert result.exit_code == 0, result.output
        data = read_json(out)
        assert data["episodes"] == 2 and data["env_kwargs"] == {"split": "validation", "max_turns": 2}
        assert data["score"]["low"] <= data["score"]["mean"] <= data["score"]["high"]
        assert data["tokens"]["n"] == 2 and data["sampling"]["temperature"] == 0.0
        assert len(read_episodes(tmp_path / "eval")) == 2

    def test_eval_command_rejects_a_bad_env(self, tmp_path):
        from typer.testing import CliRunner

        from optima_train.cli import app

        result = CliRunner().invoke(app, ["eval", "--model", "smollm2-135m", "--env", "nope-ia", "-o",
                                          str(tmp_path / "x.json")])
        assert result.exit_code == 2 and "no env named 'nope-ia'" in result.output


# ---------------------------------------------------------------------------------- run dir
class TestRunDir:
    def test_steps_markers_and_partial_attempts(self, tmp_path):
        run = RunDir(tmp_path)
        folder = run.begin_step(0, "generation")
        (folder / "junk.txt").write_text("partial")
        folder = run.begin_step(0, "generation")  # an unfinished attempt is wiped
        assert list(folder.iterdir()) == []
        run.mark_done(0, "generation", {"n": 1})
        assert run.is_done(0, "generation") and run.done_info(0, "generation") == {"n": 1}
        with pytest.raises(RuntimeError, match="already done"):
            run.begin_step(0, "generation")
        assert run.finished_iterations() == []

    def test_progress_outlives_an_attempt_until_the_step_is_done(self, tmp_path):
        run = RunDir(tmp_path)
        run.begin_step(0, "search")
        progress = run.progress_dir(0, "search")
        atomic_write_bytes(progress / "round_000.pkl", b"kept")
        run.begin_step(0, "search")  # the rerun wipes the step folder, not its progress
        assert (progress / "round_000.pkl").read_bytes() == b"kept"
        run.mark_done(0, "search", {})
        assert not progress.exists()

    def test_config_check(self, tmp_path):
        run = RunDir(tmp_path)
        cfg = config_to_dict(ISFTConfig())
        assert run.check_config(cfg, may_change=ISFTConfig.RESUMABLE) is False
        assert run.check_config(cfg, may_change=ISFTConfig.RESUMABLE) is True
        longer = config_to_dict(load_config(ISFTConfig, None, ["run.iterations=9"]))
        assert run.check_config(longer, may_change=ISFTConfig.RESUMABLE) is True
        other = config_to_dict(load_config(ISFTConfig, None, ["train.learning_rate=0.1"]))
        with pytest.raises(ConfigError, match=re.escape("train.learning_rate: 0.0002 -> 0.1")):
            run.check_config(other, may_change=ISFTConfig.RESUMABLE)

    def test_a_run_made_before_padding_free_batches_resumes(self, tmp_path):
        """Padding-free batches change how SFT batches are laid out, not the loss, so a run whose
        stored config predates `train.padding_free` resumes with it on."""
        run = RunDir(tmp_path)
        cfg = config_to_dict(ISFTConfig())
        older = {**cfg, "train": {k: v for k, v in cfg["train"].items() if k != "padding_free"}}
        assert run.check_config(older, may_change=ISFTConfig.RESUMABLE) is False
        assert run.check_config(cfg, may_change=ISFTConfig.RESUMABLE) is True

    def test_lock(self, tmp_path):
        run = RunDir(tmp_path)
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            import socket

            atomic_write_json(tmp_path / "run.lock", {"pid": sleeper.pid, "host": socket.gethostname()})
            with pytest.raises(RunLockedError, match=f"in use by process {sleeper.pid}"), run.lock():
                pass
        finally:
            sleeper.kill()
            sleeper.wait()
        with run.lock():  # the holder is dead: the stale lock is taken over
            assert read_json(tmp_path / "run.lock")["pid"] == os.getpid()
        assert not (tmp_path / "run.lock").exists()


# ---------------------------------------------------------------------------------- resume
class Stop(Exception):
    pass


def stop_after(stage, step):
    def hook(s, st, info):
        if (s, st) == (stage, step):
            raise Stop(f"{stage}/{step}")
    return hook


def script(observation):
    """Alice tells her facts; Bob answers with the last word of the question."""
    if observation["turn"] == 0:
        return "I know: " + " ".join(observation["evidence"])
    return "We agree. <A>" + observation["question"].split()[-1].strip("?") + "</A>"


def scripted_factory(calls):
    from optima_agents.policies import ScriptedPolicy

    def factory(model, sampling):
        calls.append((model, sampling.temperature))
        return ScriptedPolicy(script)
    return factory


def tiny_overrides(out: Path) -> list[str]:
    return [f"run.output_dir={out}", "run.iterations=1", "run.progress=false", "run.num_threads=1",
            "task.train_questions=2", "generation.samples_per_question=2", "generation.max_new_tokens=12",
            "generation.max_turns=2", "selection.min_score=null", "train.max_steps=1",
            "train.per_device_train_batch_size=4", "train.max_length=384", "eval.episodes=2"]


@pytest.mark.model  # selection reads the embedded model's tokenizer
class TestResumeScripted:
    def test_interrupted_run_resumes_without_redoing_finished_steps(self, tmp_path):
        cfg = load_config(ISFTConfig, None, [*tiny_overrides(tmp_path / "run"), "reward.lambda_loss=0",
                                             "eval.baseline=false"])
        calls: list = []
        first = ISFTTrainer(cfg, policy_factory=scripted_factory(calls), on_step_done=stop_after(0, "scoring"))
        with pytest.raises(Stop):
            first.train()
        assert first.steps_run == [(0, "generation"), (0, "scoring")] and len(calls) == 1
        run = RunDir(tmp_path / "run")
        marker = (run.step_dir(0, "generation") / "DONE.json").read_text()
        (run.step_dir(0, "selection")).mkdir()
        (run.step_dir(0, "selection") / "half-written.tmp").write_text("x")  # a killed attempt's leftovers

        second = ISFTTrainer(cfg, policy_factory=scripted_factory(calls), on_step_done=stop_after(0, "selection"))
        with pytest.raises(Stop):
            second.train()
        assert second.steps_run == [(0, "selection")] and len(calls) == 1  # no generation again
        assert (run.step_dir(0, "generation") / "DONE.json").read_text() == marker
        assert not (run.step_dir(0, "selection") / "half-written.tmp").exists()
        assert read_json(run.step_dir(0, "selection") / "DONE.json")["examples"] == 4

        changed = load_config(ISFTConfig, None, [*tiny_overrides(tmp_path / "run"), "reward.lambda_loss=0.5",
                                                 "eval.baseline=false"])
        with pytest.raises(ConfigError, match=re.escape("reward.lambda_loss: 0.0 -> 0.5")):
            ISFTTrainer(changed, policy_factory=scripted_factory(calls)).train()

    def test_held_out_deals_do_not_depend_on_the_run_seed(self, tmp_path):
        from optima_train.buffers import read_episodes

        def baseline_seeds(run_seed: int, *extra: str) -> list:
            out = tmp_path / f"seed{run_seed}{len(extra)}"
            cfg = load_config(ISFTConfig, None, [*tiny_overrides(out), f"run.seed={run_seed}", *extra])
            trainer = ISFTTrainer(cfg, policy_factory=scripted_factory([]),
                                  on_step_done=stop_after("baseline", "evaluation"))
            with pytest.raises(Stop):
                trainer.train()
            return [r.seed for r in read_episodes(RunDir(out).step_dir("baseline", "evaluation") / "episodes")]

        assert baseline_seeds(1) == baseline_seeds(2) == [1_000_000, 1_000_001]  # the leaderboard's default
        assert baseline_seeds(1, "eval.seed=7") == [7, 8]

    def test_killed_process_resumes(self, tmp_path):
        out = tmp_path / "run"
        child_script = tmp_path / "child.py"
        child_script.write_text(textwrap.dedent(f"""\
            import time
            from optima_agents.policies import ScriptedPolicy
            from optima_train.config.io import load_config
            from optima_train.isft import ISFTConfig, ISFTTrainer
            from tests.train.test_isft import script
            def hook(stage, step, info):
                if step == "generation":
                    time.sleep(120)  # the parent kills us here
            cfg = load_config(ISFTConfig, None, {tiny_overrides(out) + ['reward.lambda_loss=0', 'eval.baseline=false']!r})
            ISFTTrainer(cfg, policy_factory=lambda m, s: ScriptedPolicy(script), on_step_done=hook).train()
        """))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        child = subprocess.Popen([sys.executable, str(child_script)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE)
        done = out / "iter_000" / "generation" / "DONE.json"
        deadline = time.time() + 120
        while not done.exists() and child.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        child.send_signal(signal.SIGKILL)
        _, err = child.communicate()
        assert done.exists(), err.decode()[-2000:]
        assert (out / "run.lock").exists()  # left behind by the killed process
        marker = done.read_text()

        cfg = load_config(ISFTConfig, None, [*tiny_overrides(out), "reward.lambda_loss=0", "eval.baseline=false"])
        calls: list = []
        trainer = ISFTTrainer(cfg, policy_factory=scripted_factory(calls), on_step_done=stop_after(0, "selection"))
        with pytest.raises(Stop):
            trainer.train()
        assert trainer.steps_run == [(0, "scoring"), (0, "selection")] and calls == []
        assert done.read_text() == marker


def answer_own_city(observation):
    """The first speaker answers at once with a birthplace it holds, else tells its facts; its
    partner repeats an answer it was given, else answers with its own birthplace: the dialogue is
    shorter where the first holds one."""
    cities = [e.split(" was born in ")[1].rstrip(".") for e in observation["evidence"] if " was born in " in e]
    cities = [c for c in cities if not c.isdigit()]
    given = re.findall(r"<A>(.*?)</A>", " ".join(t["text"] for t in observation["transcript"]))
    if observation["turn"] == 0 and not cities:
        return "I know: " + " ".join(observation["evidence"])
    return f"<A>{given[-1] if given else cities[0] if cities else 'unknown'}</A>"


@pytest.mark.model  # selection reads the embedded model's tokenizer
class TestSelectionByPlace:
    def test_each_question_keeps_its_best_dialogue_of_each_place(self, tmp_path):
        import optima_envs
        from optima_agents.policies import ScriptedPolicy
        from optima_train.buffers.reader import read_episodes
        from optima_train.informative import record_place

        out = tmp_path / "run"
        cfg = load_config(ISFTConfig, None, [
            *tiny_overrides(out), "task.train_questions=4", "generation.samples_per_question=4",
            "task.env_kwargs={distractors: 2, comparison_rate: 0.0}", "selection.keep_fraction=1.0",
            "selection.group_by=question_and_place", "reward.lambda_loss=0", "eval.baseline=false"])
        trainer = ISFTTrainer(cfg, policy_factory=lambda m, s: ScriptedPolicy(answer_own_city),
                              on_step_done=stop_after(0, "selection"))
        with pytest.raises(Stop):
            trainer.train()
        run = RunDir(out)
        records = read_episodes(run.step_dir(0, "generation") / "episodes")
        env = optima_envs.make("synth-hop-ia", split="train", distractors=2, comparison_rate=0.0)
        groups = {(r.instance_id, record_place(env, r)) for r in records if r.scored}
        chosen = read_json(run.step_dir(0, "selection") / "selection.json")["selected"]
        assert {(c["instance_id"], c["place"]) for c in chosen} == groups
        assert len(groups) > len({q for q, _ in groups})  # some question was dealt both ways
        info = run.done_info(0, "selection")
        assert info["selected_alone"] + info["selected_partner"] + info["selected_named"] == info["selected"] == len(groups)


# ---------------------------------------------------------------------------------- real model
@pytest.mark.model
class TestTinyIteration:
    def test_full_iteration_with_the_real_model_writes_every_artifact_and_resumes(self, tmp_path, embedded_model_dir):
        import torch
        from safetensors.torch import load_file

        from optima_train.buffers import attach_rewards, read_episodes, read_rewards

        out = tmp_path / "run"
        cfg = load_config(ISFTConfig, None, tiny_overrides(out))
        first = ISFTTrainer(cfg, on_step_done=stop_after(0, "selection"))
        with pytest.raises(Stop):
            first.train()
        assert first.steps_run == [("baseline", "evaluation"), (0, "generation"), (0, "scoring"), (0, "selection")]

        second = ISFTTrainer(cfg)
        summary = second.train()[0]
        assert second.steps_run == [(0, "training"), (0, "evaluation")]  # nothing finished is redone
        run = RunDir(out)
        it = run.stage_dir(0)
        # generation: N samples per question, iteration 0 with format-pool instructions, sampled
        episodes = read_episodes(it / "generation" / "episodes")
        assert len(episodes) == 4 and all(e.format_instruction for e in episodes)
        assert {e.instance_id for e in episodes} == {"synth-hop-train-0", "synth-hop-train-1"}
        assert all(e.sampling["alice"]["temperature"] == 0.7 for e in episodes)
        # scoring: every component stored beside the buffer, keyed by episode; the buffer is written once
        assert not (it / "scoring" / "episodes").exists()
        scored = attach_rewards(episodes, read_rewards(it / "scoring" / "rewards.parquet"))
        for e in scored:
            assert {"reward", "score", "tokens", "token_cost", "readability", "format_rate",
                    "max_turn_lm_loss"} <= set(e.reward_components)
        assert (out / "readability_cache.jsonl").stat().st_size > 0
        # selection: one example per agent, loss only on own turns, plain prompts
        import pyarrow.parquet as pq

        sft = pq.read_table(it / "selection" / "sft.parquet").to_pylist()
        assert len(sft) == 4 and {r["agent"] for r in sft} == {"alice", "bob"}
        for row in sft:
            assert 0 < sum(row["assistant_masks"]) < len(row["input_ids"])
            assert all(e.format_instruction not in row["messages"][0]["content"] for e in episodes)
        assert read_json(it / "selection" / "selection.json")["stats"]["selected"] == 2
        # training: a merged plain checkpoint whose weights moved, TensorBoard logs, trainer history
        ckpt = Path(summary["checkpoint"])
        assert (ckpt / "config.json").exists() and (ckpt / "chat_template.jinja").exists()
        assert not (ckpt / "adapter_config.json").exists()
        new = load_file(ckpt / "model.safetensors")
        old = load_file(Path(embedded_model_dir) / "model.safetensors")
        name = next(k for k in new if "q_proj" in k)
        assert not torch.equal(new[name].float(), old[name].float())
        assert list((it / "training" / "logs").glob("events.out.tfevents.*"))
        assert read_json(it / "training" / "train.json")["log_history"]
        # evaluation and summaries
        metrics = read_json(it / "evaluation" / "metrics.json")
        assert metrics["episodes"] == 2 and metrics["model"] == str(ckpt) and "low" in metrics["score"]
        assert len(read_episodes(it / "evaluation" / "episodes")) == 2
        assert read_json(run.summary_path)["iterations"][0]["kept_examples"] == 4
        assert read_json(run.summary_path)["baseline"]["episodes"] == 2
        assert read_json(it / "metrics.json")["summary"]["train_loss"] > 0
        assert list((out / "tensorboard").glob("events.out.tfevents.*"))
        assert not (out / "run.lock").exists()
        assert summary["seconds"]["training"] is not None and json.dumps(summary)


# ---------------------------------------------------------------------------------- one record through training
class TestRecordsThroughSelection:
    """Scoring writes a side table beside the generation buffer, and selection reads the buffer
    with it attached and takes the plain prompts from the records: it builds no env."""

    def run_to_selection(self, tmp_path, monkeypatch) -> RunDir:
        import transformers

        import optima_envs
        from tests.train.examples.conftest import build_char_tokenizer

        monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: build_char_tokenizer())
        make = optima_envs.make

        def no_env_after_scoring(stage, step, info):
            if step == "scoring":
                monkeypatch.setattr(optima_envs, "make", lambda *a, **k: pytest.fail("selection built an env"))
            if step == "selection":
                monkeypatch.setattr(optima_envs, "make", make)
                raise Stop("selection")

        cfg = load_config(ISFTConfig, None, [*tiny_overrides(tmp_path / "run"), "reward.lambda_loss=0",
                                             "eval.baseline=false"])
        with pytest.raises(Stop):
            ISFTTrainer(cfg, policy_factory=scripted_factory([]), on_step_done=no_env_after_scoring).train()
        return RunDir(tmp_path / "run")

    def test_rewards_sit_beside_the_buffer_and_selection_uses_the_sampled_plain_prompts(self, tmp_path, monkeypatch):
        import pyarrow.parquet as pq

        from optima_train.buffers import attach_rewards, read_episodes, read_rewards

        run = self.run_to_selection(tmp_path, monkeypatch)
        episodes = read_episodes(run.step_dir(0, "generation") / "episodes")
        assert all(e.format_instruction and e.plain_system_prompts for e in episodes)
        assert not (run.step_dir(0, "scoring") / "episodes").exists()
        table = read_rewards(run.step_dir(0, "scoring") / "rewards.parquet")
        assert [(r.episode, r.instance_id, r.seed) for r in table] == \
            [(k, e.instance_id, e.seed) for k, e in enumerate(episodes)]
        scored = attach_rewards(episodes, table)
        assert all({"reward", "score", "tokens", "token_cost"} <= set(e.reward_components) for e in scored)
        rows = pq.read_table(run.step_dir(0, "selection") / "sft.parquet").to_pylist()
        assert len(rows) == 4
        by_agent = {(row["episode_id"], row["agent"]): row["messages"][0]["content"] for row in rows}
        for (episode_id, agent), prompt in by_agent.items():
            record = episodes[int(episode_id.split(":")[1])]
            assert prompt == record.plain_system_prompts[record.agents.index(agent)]
            assert record.format_instruction not in prompt

    def test_a_scoring_step_from_before_the_side_table_still_reads(self, tmp_path, monkeypatch):
        """A run whose scoring step stored a scored copy of the buffer resumes from it."""
        from dataclasses import replace

        from optima_train.buffers import read_episodes, write_episodes
        from optima_train.isft.isft_trainer import ISFTTrainer as Trainer

        run = self.run_to_selection(tmp_path, monkeypatch)
        episodes = read_episodes(run.step_dir(0, "generation") / "episodes")
        scored = [replace(e, reward_components={**e.reward_components, "reward": float(k)}, plain_system_prompts=None)
                  for k, e in enumerate(episodes)]
        (run.step_dir(0, "scoring") / "rewards.parquet").unlink()
        write_episodes(run.step_dir(0, "scoring") / "episodes", scored)
        cfg = load_config(ISFTConfig, None, [*tiny_overrides(tmp_path / "run"), "reward.lambda_loss=0",
                                             "eval.baseline=false"])
        assert Trainer(cfg)._scored_records(0) == scored
