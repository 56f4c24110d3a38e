"""A training step under `accelerate launch` with two processes (gloo on the CPU) trains the same as
one process: the same loss at every step and the same merged weights (SFT, DPO and GRPO's clipped
policy loss, LoRA, the embedded model; see `trl_glue` for how the loop launches a step).

Two CPU processes come from `accelerate launch --multi_gpu --num_processes 2` with `model.device: cpu`:
its `--multi_gpu` path starts the ranks with torchrun, and `use_cpu` makes each rank use the CPU and
gloo. (`--cpu --num_processes 2` starts a single process in accelerate 1.15 unless mpirun is used;
the plan reports that.) Equal-length examples, no LoRA dropout and a global batch of 4 either way
(4 in one process, 2 on each of two) make the two runs the same computation up to the order of
float sums, hence the tight tolerances.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from optima_train.config.io import load_config

pytestmark = pytest.mark.model

COMMON = ["model.device=cpu", "lora.r=4", "lora.alpha=8", "lora.dropout=0.0", "train.logging_steps=1",
          "train.bf16=false", "train.learning_rate=1e-3", "train.lr_scheduler_type=constant", "train.warmup_steps=0",
          "train.max_length=64", "train.gradient_accumulation_steps=1", "run.progress=false"]
ONE = ["train.per_device_train_batch_size=4"]
TWO = ["train.per_device_train_batch_size=2", "train.launcher=accelerate",
       "train.launch_args=[--multi_gpu, --num_processes, '2']"]
LOSS_RTOL = 1e-4      # measured: SFT and DPO losses agree to about 1e-6
WEIGHT_ATOL = 1e-5    # measured: merged weights agree to about 3e-7, while training moved them by about 1e-3


@pytest.fixture(autouse=True)
def one_thread_per_rank(monkeypatch):
    """Two ranks on a shared 2-core machine: one thread each."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def _losses(folder: Path) -> list[float]:
    history = json.loads((folder / "train.json").read_text())["log_history"]
    return [h["loss"] for h in history if "loss" in h]


def _compare(one: Path, two: Path, init: Path, steps: int, *, loss_falls: bool = True,
             weight_atol: float = WEIGHT_ATOL) -> None:
    from safetensors.torch import load_file

    assert json.loads((two / "launch" / "result.json").read_text())["world_size"] == 2
    a, b = _losses(one), _losses(two)
    assert len(a) == len(b) == steps
    assert b == pytest.approx(a, rel=LOSS_RTOL)
    # it trained (a clipped policy loss starts at 0 with zero-mean advantages, so GRPO shows it in the weights)
    assert a[-1] < a[0] or not loss_falls
    w1, w2 = load_file(str(one / "checkpoint" / "model.safetensors")), load_file(str(two / "checkpoint" / "model.safetensors"))
    base = load_file(str(init / "model.safetensors"))
    assert w1.keys() == w2.keys() == base.keys()
    assert all(w1[k].shape == w2[k].shape == base[k].shape for k in base)
    moved = max((w1[k] - base[k]).abs().max().item() for k in base)
    apart = max((w1[k] - w2[k]).abs().max().item() for k in base)
    assert moved > 20 * weight_atol and apart < weight_atol, (moved, apart)  # agreement far finer than the change


def test_sft_step_two_processes_match_one(embedded_model_dir, tmp_path):
    from transformers import AutoTokenizer

    from optima_train.isft import ISFTConfig
    from optima_train.isft.isft_trainer import train_sft
    from optima_train.examples import write_sft_dataset

    tok = AutoTokenizer.from_pretrained(embedded_model_dir)
    ids = [tok(f"Alice says the answer to question {i} is {i + 20}, and Bob agrees after checking the facts.")["input_ids"]
           for i in range(10, 18)]
    assert len({len(x) for x in ids}) == 1  # equal lengths: per-rank and global token means agree
    rows = [{"input_ids": x, "assistant_masks": [0] * 8 + [1] * (len(x) - 8), "messages": [], "agent": "alice",
             "episode_id": str(i), "instance_id": str(i)} for i, x in enumerate(ids)]
    write_sft_dataset(tmp_path / "sft.parquet", rows)
    for name, launch in (("one", ONE), ("two", TWO)):
        cfg = load_config(ISFTConfig, None, [*COMMON, "train.max_steps=3", *launch])
        info = train_sft(cfg, tmp_path / "sft.parquet", str(embedded_model_dir), tmp_path / name, seed=3)
        assert info["steps"] == 3 and info["lora"] is True
    _compare(tmp_path / "one", tmp_path / "two", embedded_model_dir, steps=3)


def test_dpo_step_two_processes_match_one(embedded_model_dir, tmp_path):
    from optima_train.examples import write_pairs
    from optima_train.idpo import IDPOConfig
    from optima_train.idpo.idpo_trainer import train_dpo

    rows = [{"pair_id": f"000-{i:05d}", "iteration": 0, "tree_id": f"t{i}", "node_id": 0, "chosen_id": 1,
             "rejected_id": 2, "speaker": "alice", "depth": 0,
             "prompt": [{"role": "system", "content": f"You are Alice. Question {i}: what is {i} plus {i}?"}],
             "chosen": f"<A>{2 * i}</A>", "rejected": f"I think it is {2 * i + 1}.", "chosen_value": 1.0,
             "rejected_value": 0.0, "gap": 1.0, "chosen_tokens": 5, "rejected_tokens": 8, "num_children": 2,
             "kept": True} for i in range(10, 18)]  # two-digit numbers: equal lengths
    write_pairs(rows, tmp_path / "pairs.parquet")
    for name, launch in (("one", ONE), ("two", TWO)):
        cfg = load_config(IDPOConfig, None, [*COMMON, "train.max_steps=2", *launch])
        info = train_dpo(cfg, tmp_path / "pairs.parquet", str(embedded_model_dir), tmp_path / name, seed=3)
        assert info["steps"] == 2 and info["reference"] == "adapter-disabled"
    _compare(tmp_path / "one", tmp_path / "two", embedded_model_dir, steps=2)


def test_grpo_step_two_processes_match_one(embedded_model_dir, tmp_path):
    from transformers import AutoTokenizer

    from optima_train.grpo import GRPOConfig
    from optima_train.grpo.grpo_trainer import train_grpo

    tok = AutoTokenizer.from_pretrained(embedded_model_dir)
    ids = [tok(f"Alice says the answer to question {i} is {i + 20}, and Bob agrees after checking the facts.")["input_ids"]
           for i in range(10, 18)]
    assert len({len(x) for x in ids}) == 1  # equal lengths: per-rank and global token means agree
    # old log-probs NaN: recomputed by the training model before the first update, on every rank
    rows = [{"input_ids": x, "loss_mask": [0] * 8 + [1] * (len(x) - 8), "old_logprobs": [float("nan")] * len(x),
             "advantage": 1.0 if i % 2 else -1.0, "agent": "alice", "episode": i, "cut": False}
            for i, x in enumerate(ids)]
    for name, launch in (("one", ONE), ("two", TWO)):
        # clip bounds wide enough that no token clips: a clip decision is a step function of the ratio, so
        # float-order noise between one and two processes could flip a token at the boundary and move the
        # weights by far more than the noise itself (measured: 1.3e-5 apart with 16% of tokens clipped)
        cfg = load_config(GRPOConfig, None, [*COMMON, "train.max_steps=2", "train.epsilon_low=0.9",
                                             "train.epsilon_high=9.0", *launch])
        info = train_grpo(cfg, rows, str(embedded_model_dir), tmp_path / name, seed=3)
        assert info["steps"] == 2 and info["lora"] is True
    # measured without clipping: 3.3e-6 apart, 6.4e-4 moved (the ratio's exp amplifies float-order noise)
    _compare(tmp_path / "one", tmp_path / "two", embedded_model_dir, steps=2, loss_falls=False, weight_atol=2e-5)
    history = json.loads((tmp_path / "two" / "train.json").read_text())["log_history"]
    clipped = [h["clip_fraction"] for h in history if "clip_fraction" in h]
    assert clipped and not any(clipped)
