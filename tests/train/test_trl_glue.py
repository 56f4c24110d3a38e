"""The TRL glue every training step shares: the device and the common TrainingArguments fields
come from the config the same way for SFT and DPO."""

from __future__ import annotations

from pathlib import Path

import pytest

from optima_train.config.io import load_config
from optima_train.idpo import IDPOConfig
from optima_train.isft import ISFTConfig
from optima_train.trl_glue import training_args


class _Stop(Exception):
    """Raised by the patched TRL config: the arguments are captured, nothing trains."""


class _Anything:
    def __getattr__(self, name):
        return lambda *args, **kwargs: self

    def __iter__(self):  # a model with no modules to walk
        return iter(())


@pytest.fixture
def cuda_present(monkeypatch):
    """A machine where CUDA looks available, so `model.device` alone decides the device."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


@pytest.fixture
def no_model_loading(monkeypatch):
    import transformers

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: _Anything())
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: _Anything())


def _capture(monkeypatch, name: str) -> dict:
    import trl

    captured: dict = {}

    def fake_config(**kwargs):
        captured.update(kwargs)
        raise _Stop

    monkeypatch.setattr(trl, name, fake_config)
    return captured


@pytest.mark.parametrize("device, use_cpu", [("cpu", True), ("cuda", False), ("auto", False)])
@pytest.mark.parametrize("config_cls", [ISFTConfig, IDPOConfig])
def test_device_follows_model_device(cuda_present, config_cls, device, use_cpu, tmp_path):
    cfg = load_config(config_cls, None, [f"model.device={device}"])
    args = training_args(cfg, tmp_path, seed=3)
    assert args["use_cpu"] is use_cpu
    assert args["seed"] == 3 and args["output_dir"] == str(tmp_path / "trainer")
    assert args["learning_rate"] == cfg.train.learning_rate and args["max_length"] == cfg.train.max_length


def test_dpo_training_honours_model_device(cuda_present, no_model_loading, monkeypatch, tmp_path):
    import optima_train.examples.dpo as dpo_rows
    from optima_train.idpo.idpo_trainer import train_dpo

    monkeypatch.setattr(dpo_rows, "read_pairs", lambda path: [])
    monkeypatch.setattr(dpo_rows, "to_dpo_dataset", lambda pairs: _Anything())
    captured = _capture(monkeypatch, "DPOConfig")
    cfg = load_config(IDPOConfig, None, ["model.device=cpu", "train.beta=0.3"])
    with pytest.raises(_Stop):
        train_dpo(cfg, Path("pairs.parquet"), "init", tmp_path, seed=1)
    assert captured["use_cpu"] is True and captured["beta"] == 0.3


def test_sft_training_honours_model_device(cuda_present, no_model_loading, monkeypatch, tmp_path):
    import datasets

    from optima_train.isft.isft_trainer import train_sft

    monkeypatch.setattr(datasets.Dataset, "from_parquet", lambda *a, **k: _Anything())
    captured = _capture(monkeypatch, "SFTConfig")
    cfg = load_config(ISFTConfig, None, ["model.device=cpu"])
    with pytest.raises(_Stop):
        train_sft(cfg, Path("sft.parquet"), "init", tmp_path, seed=1)
    assert captured["use_cpu"] is True


@pytest.mark.parametrize("padding_free, expected", [("true", {"padding_free": True, "max_length": None}),
                                                     ("false", {"max_length": 1024})])
def test_sft_batches_are_padding_free_unless_turned_off(no_model_loading, monkeypatch, tmp_path, padding_free,
                                                          expected):
    import datasets

    from optima_train.isft.isft_trainer import train_sft

    monkeypatch.setattr(datasets.Dataset, "from_parquet", lambda *a, **k: _Anything())
    captured = _capture(monkeypatch, "SFTConfig")
    cfg = load_config(ISFTConfig, None, ["model.device=cpu", f"train.padding_free={padding_free}"])
    with pytest.raises(_Stop):
        train_sft(cfg, Path("sft.parquet"), "init", tmp_path, seed=1)
    assert {k: captured.get(k, False) for k in ("padding_free", "max_length")} == {"padding_free": False, **expected}


class _OneStepLoop:
    """An `IterativeTrainer` whose iteration only records torch's thread count."""

    @staticmethod
    def make(cfg):
        from optima_train.loop import IterativeTrainer

        class Loop(IterativeTrainer):
            STEPS = ("work",)

            def check_resources(self):
                pass

            def _iteration(self, it):
                import torch

                return self._step(it, "work", lambda folder: {"threads": torch.get_num_threads()})

        return Loop(cfg)


@pytest.mark.parametrize("fails", [False, True])
def test_train_restores_torch_threads(tmp_path, monkeypatch, fails):
    import torch

    cfg = load_config(ISFTConfig, None, ["run.num_threads=1", "run.iterations=1", "eval.baseline=false",
                                         f"run.output_dir={tmp_path / 'run'}"])
    loop = _OneStepLoop.make(cfg)
    if fails:
        monkeypatch.setattr(loop, "_iteration", lambda it: (_ for _ in ()).throw(RuntimeError("boom")))
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        if fails:
            with pytest.raises(RuntimeError, match="boom"):
                loop.train()
        else:
            assert loop.train() == [{"threads": 1, "seconds": pytest.approx(0, abs=5)}]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("config_cls", [ISFTConfig, IDPOConfig])
def test_report_to_reaches_trl_and_auto_is_tensorboard_where_installed(config_cls, tmp_path, monkeypatch):
    import importlib.util

    from optima_envs.errors import ConfigError

    have_tensorboard = importlib.util.find_spec("tensorboard") is not None
    args = training_args(load_config(config_cls, None, []), tmp_path, seed=0)
    assert args["report_to"] == (["tensorboard"] if have_tensorboard else "none")
    assert training_args(load_config(config_cls, None, ["train.report_to=[]"]), tmp_path, seed=0)["report_to"] == "none"
    assert training_args(load_config(config_cls, None, ["train.report_to=[none]"]), tmp_path, seed=0)["report_to"] == "none"
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "trackio" else real_find_spec(name, *a))
    with pytest.raises(ConfigError, match=r"'trackio', but it is not installed: pip install trackio"):
        load_config(config_cls, None, ["train.report_to=[trackio]"])
    with pytest.raises(ConfigError, match="not a tracker this config knows"):
        load_config(config_cls, None, ["train.report_to=[tensorbord]"])
    with pytest.raises(ConfigError, match="train.extra sets"):
        load_config(config_cls, None, ["train.extra={report_to: wandb}"])


@pytest.mark.parametrize("overrides, expected", [
    (["train.bf16=true"], "bfloat16"),
    (["train.bf16=false"], "float32"),
    (["train.bf16=true", "train.frozen_base_dtype=float32"], "float32"),
    (["train.bf16=false", "train.frozen_base_dtype=bfloat16"], "bfloat16"),
    (["train.bf16=true", "lora.enabled=false"], "float32"),
])
def test_frozen_base_dtype(overrides, expected):
    from optima_train.trl_glue import base_dtype

    assert base_dtype(load_config(ISFTConfig, None, ["model.device=cpu", *overrides])) == expected


def test_bf16_base_weights_need_lora():
    from optima_envs.errors import ConfigError
    from optima_train.trl_glue import base_dtype

    cfg = load_config(ISFTConfig, None, ["lora.enabled=false", "train.frozen_base_dtype=bfloat16"])
    with pytest.raises(ConfigError, match="needs LoRA"):
        base_dtype(cfg)
    with pytest.raises(ConfigError, match="frozen_base_dtype"):
        load_config(ISFTConfig, None, ["train.frozen_base_dtype=float16"])


def test_adapter_merges_into_the_float32_start_not_the_bf16_training_base(tmp_path):
    """A LoRA update far below bf16's rounding step survives the merge: it is added to the float32
    weights the run started from, not to the bf16 copy it trained on."""
    import torch
    from peft import LoraConfig, get_peft_model

    from optima_train.trl_glue import load_for_training, merged_adapter
    from tests.train.tiny_model import build_tiny_model

    init = build_tiny_model(tmp_path / "init")
    _, trained = load_for_training(str(init), "bfloat16")
    trained = get_peft_model(trained, LoraConfig(r=2, lora_alpha=2, target_modules=["q_proj"]))
    layer = trained.base_model.model.model.layers[0].self_attn.q_proj
    with torch.no_grad():
        layer.lora_B["default"].weight.fill_(1e-5)
    trained.save_pretrained(tmp_path / "adapter")
    assert layer.lora_A["default"].weight.dtype == torch.float32  # PEFT keeps adapters in float32
    delta = (layer.lora_B["default"].weight @ layer.lora_A["default"].weight).detach()
    start = load_for_training(str(init))[1].model.layers[0].self_attn.q_proj.weight.detach()

    merged = merged_adapter(str(init), tmp_path / "adapter").model.layers[0].self_attn.q_proj.weight
    assert merged.dtype == torch.float32
    assert torch.allclose(merged - start, delta, atol=1e-8) and delta.abs().max() > 1e-7
    # The check can fail: merged into the bf16 base, the update is lost to rounding.
    into_bf16 = trained.merge_and_unload().model.layers[0].self_attn.q_proj.weight.float()
    assert not torch.allclose(into_bf16 - start, delta, atol=1e-8)


def test_a_bf16_base_keeps_its_residual_stream_in_float32(tmp_path):
    """The big products run on bf16 weights; the embedding and the norms stay float32, so the
    hidden states are float32 between the layers, as under autocast with float32 weights."""
    import torch

    from optima_train.segmented_attention import SEGMENTED_SDPA
    from optima_train.trl_glue import load_for_training
    from tests.train.tiny_model import build_tiny_model

    _, model = load_for_training(str(build_tiny_model(tmp_path / "init")), "bfloat16")
    layer = model.model.layers[0]
    assert layer.self_attn.q_proj.weight.dtype == layer.mlp.down_proj.weight.dtype == torch.bfloat16
    assert model.get_input_embeddings().weight.dtype == torch.float32
    assert layer.input_layernorm.weight.dtype == model.model.norm.weight.dtype == torch.float32
    assert model.config._attn_implementation == SEGMENTED_SDPA
    with torch.autocast("cpu", dtype=torch.bfloat16):
        hidden = model(input_ids=torch.tensor([[6, 7, 8]]), output_hidden_states=True).hidden_states
    assert all(h.dtype == torch.float32 for h in hidden)
