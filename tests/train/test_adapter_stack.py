"""Stacked LoRA adapters: a chain of LoRA steps (each trained on the previous merge) equals one
adapter on the starting weights, so a running engine can serve a checkpoint without a restart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from optima_train.adapter_stack import (
    ADAPTER_DIR,
    adapter_chain,
    adapter_scaling,
    engine_lora_options,
    stack_adapters,
    stack_lora_tensors,
)
from optima_train.config.io import load_config
from tests.train.tiny_model import build_tiny_model, write_tiny_sft_data

KEY = "base_model.model.model.layers.0.self_attn.q_proj"


def _random_adapter(rank: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {f"{KEY}.lora_A.weight": torch.randn(rank, 6, generator=g),
            f"{KEY}.lora_B.weight": torch.randn(5, rank, generator=g)}


class TestStackTensors:
    def test_the_stack_is_the_sum_of_the_scaled_deltas(self):
        one, two = _random_adapter(2, 0), _random_adapter(3, 1)
        stacked = stack_lora_tensors([(one, 0.5), (two, 4.0)])
        a, b = stacked[f"{KEY}.lora_A.weight"], stacked[f"{KEY}.lora_B.weight"]
        assert a.shape == (5, 6) and b.shape == (5, 5)
        expected = 0.5 * one[f"{KEY}.lora_B.weight"] @ one[f"{KEY}.lora_A.weight"] + \
            4.0 * two[f"{KEY}.lora_B.weight"] @ two[f"{KEY}.lora_A.weight"]
        torch.testing.assert_close(b @ a, expected)

    def test_adapters_of_different_modules_are_refused(self):
        other = {k.replace("q_proj", "k_proj"): v for k, v in _random_adapter(2, 1).items()}
        with pytest.raises(ValueError, match="adapt different modules"):
            stack_lora_tensors([(_random_adapter(2, 0), 1.0), (other, 1.0)])

    def test_a_tensor_that_is_not_lora_is_refused(self):
        with pytest.raises(ValueError, match="neither a LoRA A nor a LoRA B"):
            stack_lora_tensors([({"base_model.model.lm_head.weight": torch.zeros(2, 2)}, 1.0)])

    def test_scaling_follows_peft(self):
        assert adapter_scaling({"r": 16, "lora_alpha": 32}) == 2.0
        assert adapter_scaling({"r": 16, "lora_alpha": 32, "use_rslora": True}) == 8.0


def _fake_checkpoint(folder: Path, trained_on: Path | None) -> Path:
    folder.mkdir(parents=True)
    if trained_on is not None:
        (folder / ADAPTER_DIR).mkdir()
        (folder / ADAPTER_DIR / "adapter_config.json").write_text(
            json.dumps({"base_model_name_or_path": str(trained_on), "r": 2, "lora_alpha": 4}))
    return folder


class TestChain:
    def test_walks_back_to_the_engines_weights(self, tmp_path):
        base = _fake_checkpoint(tmp_path / "base", None)
        one = _fake_checkpoint(tmp_path / "it0", base)
        two = _fake_checkpoint(tmp_path / "it1", one)
        assert adapter_chain(two, base) == [one / ADAPTER_DIR, two / ADAPTER_DIR]
        assert adapter_chain(two, one) == [two / ADAPTER_DIR]
        assert adapter_chain(str(base), str(base)) == []

    def test_a_link_without_an_adapter_gives_the_reason(self, tmp_path):
        base = _fake_checkpoint(tmp_path / "base", None)
        full = _fake_checkpoint(tmp_path / "full", None)  # full fine-tuning: no adapter
        two = _fake_checkpoint(tmp_path / "it1", full)
        reason = adapter_chain(two, base)
        assert isinstance(reason, str) and str(full) in reason and "no LoRA adapter" in reason

    def test_an_adapter_that_does_not_name_its_base_gives_the_reason(self, tmp_path):
        base = _fake_checkpoint(tmp_path / "base", None)
        one = _fake_checkpoint(tmp_path / "it0", base)
        (one / ADAPTER_DIR / "adapter_config.json").write_text("{}")
        assert "base_model_name_or_path" in adapter_chain(one, base)


class TestEngineOptions:
    def test_adapters_on_a_gpu_with_room_for_every_step(self):
        options, why = engine_lora_options("auto", backend="vllm", lora_rank=16, training_steps=3, device="cuda")
        assert options == {"enable_lora": True, "max_lora_rank": 64, "max_loras": 1, "enable_sleep_mode": True}
        assert "no restarts" in why

    @pytest.mark.parametrize("setting, backend, rank, steps, device, said", [
        ("restart", "vllm", 16, 2, "cuda", "weight_swap=restart"),
        ("auto", "hf", 16, 2, "cuda", "hf backend"),
        ("adapter", "vllm", None, 2, "cuda", "full fine-tuning"),
        ("auto", "vllm", 16, 2, "cpu", "on a CPU"),
        ("adapter", "vllm", 256, 3, "cuda", "exceeds"),
    ])
    def test_otherwise_a_new_engine_and_why(self, setting, backend, rank, steps, device, said):
        options, why = engine_lora_options(setting, backend=backend, lora_rank=rank, training_steps=steps,
                                           device=device)
        assert options == {} and said in why

    def test_adapter_is_honoured_on_a_cpu_without_sleep_mode(self):
        options, _ = engine_lora_options("adapter", backend="vllm", lora_rank=8, training_steps=2, device="cpu")
        assert options == {"enable_lora": True, "max_lora_rank": 16, "max_loras": 1}

    def test_an_unknown_setting_is_refused(self):
        with pytest.raises(ValueError, match="weight_swap"):
            engine_lora_options("hot", backend="vllm", lora_rank=8, training_steps=1, device="cpu")


FAST = ["model.device=cpu", "lora.r=2", "lora.alpha=8", "lora.dropout=0.0", "train.max_steps=2",
        "train.per_device_train_batch_size=2", "train.gradient_accumulation_steps=1", "train.bf16=false",
        "train.learning_rate=5e-2", "train.lr_scheduler_type=constant", "train.warmup_steps=0",
        "train.max_length=64", "run.progress=false"]


def test_two_lora_steps_served_as_one_stack_match_the_merged_checkpoint(tmp_path):
    """The real training path (TRL SFT with LoRA, merged): the saved adapters, walked back and
    stacked on the starting weights, give the second checkpoint's logits."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from optima_train.isft import ISFTConfig
    from optima_train.isft.isft_trainer import train_sft

    base = build_tiny_model(tmp_path / "base")
    tok = AutoTokenizer.from_pretrained(base)
    write_tiny_sft_data(base, tmp_path / "sft.parquet")
    cfg = load_config(ISFTConfig, None, FAST)
    train_sft(cfg, tmp_path / "sft.parquet", str(base), tmp_path / "it0", seed=0)
    train_sft(cfg, tmp_path / "sft.parquet", str(tmp_path / "it0" / "checkpoint"), tmp_path / "it1", seed=1)
    second = tmp_path / "it1" / "checkpoint"

    chain = adapter_chain(second, base)
    assert chain == [tmp_path / "it0" / "checkpoint" / ADAPTER_DIR, second / ADAPTER_DIR]
    assert stack_adapters(chain, tmp_path / "stacked", base=base) == 4

    ids = torch.tensor([tok("<|user|> what is 3 plus 3 ? <eos> <|assistant|>")["input_ids"]])
    merged = AutoModelForCausalLM.from_pretrained(second, dtype=torch.float32).eval()
    start = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
    served = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
                                       str(tmp_path / "stacked")).eval()
    with torch.no_grad():
        want, got, before = merged(ids).logits, served(ids).logits, start(ids).logits
    assert (want - before).abs().max() > 1e-2  # the two steps changed the model
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)


# ---------------------------------------------------------------------------------------------- the loop
class FakeEngine:
    """A generation policy that declares adapters, records what the loop does with it."""

    from optima_agents.policies import PolicyCapabilities
    capabilities = PolicyCapabilities(with_sampling=True, close=True, adapters=True)

    def __init__(self, max_rank: int, *, sleeps: bool = False):
        self.max_adapter_rank, self.sleeps = max_rank, sleeps
        self.adapter, self.log = None, []

    def with_sampling(self, sampling):
        return self

    def with_adapter(self, adapter):
        import copy

        other = copy.copy(self)
        other.adapter = adapter
        return other

    def sleep(self):
        self.log.append("sleep")
        return self.sleeps

    def wake_up(self):
        self.log.append("wake")

    def close(self):
        self.log.append("close")


def _adapter_checkpoint(folder: Path, trained_on: Path, seed: int) -> Path:
    from safetensors.torch import save_file

    (folder / ADAPTER_DIR).mkdir(parents=True)
    (folder / ADAPTER_DIR / "adapter_config.json").write_text(json.dumps(
        {"base_model_name_or_path": str(trained_on), "r": 2, "lora_alpha": 4, "target_modules": ["q_proj"]}))
    save_file(_random_adapter(2, seed), str(folder / ADAPTER_DIR / "adapter_model.safetensors"))
    return folder


@pytest.fixture
def trainer(tmp_path):
    from optima_train.isft import ISFTConfig
    from optima_train.isft.isft_trainer import ISFTTrainer

    cfg = load_config(ISFTConfig, None, [f"run.output_dir={tmp_path / 'run'}", "model.device=cpu",
                                          "generation.backend=vllm", "model.weight_swap=adapter", "run.iterations=3"])
    return ISFTTrainer(cfg)


@pytest.fixture
def lineage(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    one = _adapter_checkpoint(tmp_path / "it0", base, 0)
    return base, one, _adapter_checkpoint(tmp_path / "it1", one, 1)


class TestLoopServesAdapters:
    def test_a_checkpoint_reaches_the_running_engine_as_its_stack(self, trainer, lineage):
        base, _, two = lineage
        engine = FakeEngine(max_rank=8)
        trainer._policy = (str(base), engine)
        served = trainer._policy_for(str(two), sampling=None)
        assert served.adapter is not None and "close" not in engine.log and engine.log == ["wake"]
        stacked = json.loads((Path(served.adapter) / "adapter_config.json").read_text())
        assert stacked["r"] == 4 and stacked["base_model_name_or_path"] == str(base)
        assert trainer._policy == (str(base), engine)  # the engine still holds the starting weights

    def test_a_stack_too_big_for_the_engine_replaces_it(self, trainer, lineage, monkeypatch):
        import optima_eval.evaluation as evaluation

        base, _, two = lineage
        built = []
        monkeypatch.setattr(evaluation, "build_policy", lambda backend, model, sampling, **kw: built.append(
            (model, kw["backend_kwargs"])) or FakeEngine(max_rank=64))
        old = FakeEngine(max_rank=2)
        trainer._policy = (str(base), old)
        trainer._policy_for(str(two), sampling=None)
        assert "close" in old.log
        # room for the whole run: lora.r (16) x run.iterations (3) = 48, vLLM's next allowed rank is 64
        assert built == [(str(two), {"enable_lora": True, "max_lora_rank": 64, "max_loras": 1})]

    def test_an_engine_serving_adapters_waits_through_training(self, trainer):
        engine = FakeEngine(max_rank=8)
        trainer._policy = ("base", engine)
        trainer.release_for_training()
        assert engine.log == ["sleep"] and trainer._policy is not None
        plain = FakeEngine(max_rank=0)
        trainer._policy = ("base", plain)
        trainer.release_for_training()
        assert plain.log == ["close"] and trainer._policy is None
