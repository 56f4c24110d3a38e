"""`lora.enabled: false` is full fine-tuning: every weight trains, no adapter is made or merged, and
the checkpoint is the whole model (SFT and DPO, through trl_glue, on a tiny model: fast)."""

from __future__ import annotations

from pathlib import Path

from optima_train.config.io import load_config
from tests.train.tiny_model import write_tiny_sft_data

FAST = ["model.device=cpu", "lora.enabled=false", "train.max_steps=2", "train.per_device_train_batch_size=2",
        "train.gradient_accumulation_steps=1", "train.bf16=false", "train.learning_rate=1e-2",
        "train.lr_scheduler_type=constant", "train.warmup_steps=0", "train.max_length=64", "run.progress=false"]


def _weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def _check_full_checkpoint(init: Path, out: Path, info: dict) -> None:
    before, after = _weights(init), _weights(out / "checkpoint")
    assert info["lora"] is False
    assert info["trainable_parameters"] == sum(t.numel() for t in before.values())
    assert not (out / "checkpoint" / "adapter_config.json").exists()
    assert after.keys() == before.keys() and all(after[k].shape == before[k].shape for k in before)
    changed = [k for k in before if not (after[k] == before[k]).all()]
    # every projection and norm of the layer trained, not just an adapter's targets
    assert {"model.layers.0.self_attn.q_proj.weight", "model.layers.0.mlp.down_proj.weight",
            "model.layers.0.input_layernorm.weight", "lm_head.weight"} <= set(changed)


def test_sft_full_fine_tuning(tiny, tmp_path):
    from optima_train.isft import ISFTConfig
    from optima_train.isft.isft_trainer import train_sft

    write_tiny_sft_data(tiny, tmp_path / "sft.parquet")
    cfg = load_config(ISFTConfig, None, FAST)
    info = train_sft(cfg, tmp_path / "sft.parquet", str(tiny), tmp_path / "out", seed=0)
    assert info["steps"] == 2 and info["train_loss"] > 0
    _check_full_checkpoint(tiny, tmp_path / "out", info)


def test_dpo_full_fine_tuning_keeps_a_frozen_reference_copy(tiny, tmp_path):
    from optima_train.examples import write_pairs
    from optima_train.idpo import IDPOConfig
    from optima_train.idpo.idpo_trainer import train_dpo

    rows = [{"pair_id": f"000-{i:05d}", "iteration": 0, "tree_id": f"t{i}", "node_id": 0, "chosen_id": 1,
             "rejected_id": 2, "speaker": "alice", "depth": 0,
             "prompt": [{"role": "user", "content": f"what is {i} plus {i} ?"}],
             "chosen": f"<A> {i} </A>", "rejected": "i think it is a b c", "chosen_value": 1.0, "rejected_value": 0.0,
             "gap": 1.0, "chosen_tokens": 3, "rejected_tokens": 7, "num_children": 2, "kept": True} for i in range(4)]
    write_pairs(rows, tmp_path / "pairs.parquet")
    cfg = load_config(IDPOConfig, None, FAST)
    info = train_dpo(cfg, tmp_path / "pairs.parquet", str(tiny), tmp_path / "out", seed=0)
    assert info["reference"] == "copy of init" and info["steps"] == 2
    _check_full_checkpoint(tiny, tmp_path / "out", info)
