"""`FastDropout` drops at its rounded probability, independently per element, reproducibly under a
seed, and `use_fast_dropout` swaps it into exactly the LoRA dropouts (the CPU SFT step uses it)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from optima_train.config.io import load_config
from optima_train.fast_dropout import FastDropout, rounded_probability, use_fast_dropout
from tests.train.test_sft_step import FAST
from tests.train.tiny_model import write_tiny_sft_data


def test_the_probability_is_rounded_to_a_65536th():
    assert rounded_probability(0.05) == 3277 / 65536
    assert abs(rounded_probability(0.05) - 0.05) < 1 / 131072
    assert rounded_probability(0.0) == 0.0


@pytest.mark.parametrize("p", [0.05, 0.1, 0.5])
def test_each_element_is_dropped_at_the_rounded_probability_and_kept_ones_are_rescaled(p):
    x = torch.randn(1000, 1003, generator=torch.Generator().manual_seed(0))  # an element count that is not a multiple of four
    out = FastDropout(p, seed=0).train()(x)
    dropped = out == 0
    q = rounded_probability(p)
    n = x.numel()
    assert abs(dropped.float().mean().item() - q) < 5 * math.sqrt(q * (1 - q) / n)
    # each of the four 16-bit slices of a random word drops at the same rate: no slice is biased
    for k in range(4):
        flat = dropped.flatten()[k::4]
        assert abs(flat.float().mean().item() - q) < 5 * math.sqrt(q * (1 - q) / flat.numel())
    torch.testing.assert_close(out[~dropped], x[~dropped] / (1 - q))
    assert out.shape == x.shape and out.dtype == x.dtype


def test_neighbouring_elements_are_dropped_independently():
    dropped = (FastDropout(0.5, seed=1).train()(torch.ones(1 << 20)) == 0).float()
    both = (dropped[:-1] * dropped[1:]).mean().item()
    assert abs(both - 0.25) < 5 * math.sqrt(0.25 * 0.75 / dropped.numel())


def test_the_mask_follows_torchs_seed_at_construction_and_eval_mode_is_the_identity():
    x = torch.randn(64, 48, dtype=torch.bfloat16)
    torch.manual_seed(7)
    layer = FastDropout(0.2).train()
    first = layer(x)
    assert not torch.equal(layer(x), first)  # the next draw differs
    torch.manual_seed(7)
    assert torch.equal(FastDropout(0.2).train()(x), first)
    assert torch.equal(FastDropout(0.2, seed=3).train()(x), FastDropout(0.2, seed=3).train()(x))
    assert first.dtype == torch.bfloat16
    assert layer.eval()(x) is x
    assert FastDropout(0.0).train()(x) is x


def test_gradients_pass_through_the_kept_elements_only():
    x = torch.randn(32, 40, generator=torch.Generator().manual_seed(3), requires_grad=True)
    out = FastDropout(0.3, seed=3).train()(x)
    out.sum().backward()
    kept = out.detach() != 0
    torch.testing.assert_close(x.grad[kept], torch.full_like(x.grad[kept], 1 / (1 - rounded_probability(0.3))))
    assert (x.grad[~kept] == 0).all()


def test_a_probability_outside_the_unit_interval_is_refused():
    with pytest.raises(ValueError, match=r"dropout probability must be in \[0, 1\), got 1.0"):
        FastDropout(1.0)
    with pytest.raises(ValueError, match=r"dropout probability 0.999999 rounds to 1 on FastDropout's 1/65536 grid"):
        FastDropout(0.999999)
    assert FastDropout(1 - 1 / 65536).train()(torch.ones(8)).shape == (8,)


def _peft_model(tiny, dropout: float):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny)
    return get_peft_model(model, LoraConfig(r=2, lora_alpha=2, lora_dropout=dropout, target_modules="all-linear"))


def test_every_lora_dropout_is_replaced_and_nothing_else(tiny):
    model = _peft_model(tiny, 0.1)
    lora_layers = [m for m in model.modules() if hasattr(m, "lora_A")]
    others_before = [m for name, m in model.named_modules() if isinstance(m, nn.Dropout) and "lora_dropout" not in name]
    assert use_fast_dropout(model) == len(lora_layers) == 7  # q, k, v, o, gate, up, down of the one layer
    assert all(isinstance(m.lora_dropout["default"], FastDropout) and m.lora_dropout["default"].p == 0.1
               for m in lora_layers)
    assert [m for name, m in model.named_modules() if isinstance(m, nn.Dropout)] == others_before
    model.train()
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    model(input_ids=ids, labels=ids).loss.backward()  # trains through the swapped modules
    assert use_fast_dropout(model) == 0  # nothing left to swap
    assert use_fast_dropout(_peft_model(tiny, 0.0)) == 0  # PEFT uses nn.Identity for dropout 0


def test_the_cpu_sft_step_trains_with_fast_dropout(tiny, tmp_path, monkeypatch):
    import optima_train.fast_dropout as fast_dropout
    from optima_train.isft import ISFTConfig
    from optima_train.isft.isft_trainer import train_sft

    swapped = []

    def spy(model):
        swapped.append(use_fast_dropout(model))
        return swapped[-1]

    monkeypatch.setattr(fast_dropout, "use_fast_dropout", spy)
    data = write_tiny_sft_data(tiny, tmp_path / "sft.parquet", count=3)
    overrides = [o for o in FAST if not o.startswith("lora.")] + ["lora.enabled=true", "lora.dropout=0.1",
                                                                  "train.max_steps=1"]
    info = train_sft(load_config(ISFTConfig, None, overrides), data, str(tiny), tmp_path / "out", seed=0)
    assert swapped == [7] and info["steps"] == 1
    losses = [h["loss"] for h in json.loads((tmp_path / "out" / "train.json").read_text())["log_history"] if "loss" in h]
    assert len(losses) == 1 and math.isfinite(losses[0])
