"""A trained checkpoint as one LoRA adapter over its base: exact when the update's rank fits,
the best low-rank approximation otherwise, refused when an adapter cannot carry the change; and a
shipped adapter registered as a model, merged into its base on pull."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from optima_envs.errors import ConfigError
from optima_train.adapter_export import export_adapter, low_rank_factors
from tests.train.tiny_model import build_tiny_model


def test_low_rank_factors_are_exact_up_to_the_rank_and_best_below_it():
    g = torch.Generator().manual_seed(0)
    delta = torch.randn(12, 3, generator=g, dtype=torch.float64) @ torch.randn(3, 20, generator=g, dtype=torch.float64)
    a, b, kept = low_rank_factors(delta, 3)
    assert a.shape == (3, 20) and b.shape == (12, 3) and kept == pytest.approx(1.0)
    assert torch.allclose((b @ a).double(), delta, atol=1e-5)
    a1, b1, kept1 = low_rank_factors(delta, 1)
    s = torch.linalg.svdvals(delta)
    assert kept1 == pytest.approx(float(s[0] ** 2 / (s ** 2).sum()))
    assert float((delta - (b1 @ a1).double()).norm()) == pytest.approx(float(s[1:].norm()), rel=1e-5)
    with pytest.raises(ConfigError, match="rank must be >= 1"):
        low_rank_factors(delta, 0)


def _trained_copy(base, folder, rank=2, scale=0.05, touch=None):
    """`base` with a rank-`rank` update added to every attention/MLP projection (and `touch` changed)."""
    shutil.copytree(base, folder)
    path = folder / "model.safetensors"
    state = load_file(str(path))
    g = torch.Generator().manual_seed(1)
    for key, value in state.items():
        if key.endswith(("q_proj.weight", "v_proj.weight", "down_proj.weight")):
            out, inp = value.shape
            state[key] = value + scale * torch.randn(out, rank, generator=g) @ torch.randn(rank, inp, generator=g)
    if touch:
        state[touch] = state[touch] + 1.0
    save_file(state, str(path), metadata={"format": "pt"})
    return folder


def test_an_exported_adapter_merges_back_into_the_trained_weights(tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = build_tiny_model(tmp_path / "base")
    trained = _trained_copy(base, tmp_path / "trained")
    report = export_adapter(trained, base, tmp_path / "adapter", rank=2, dtype="float32", base_name="tiny")
    assert report.modules == 7 and report.kept_energy_min == pytest.approx(1.0) and report.relative_error_max < 1e-4
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["r"] == config["lora_alpha"] == 2 and config["base_model_name_or_path"] == "tiny"
    merged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base),
                                       str(tmp_path / "adapter")).merge_and_unload().state_dict()
    want = load_file(str(trained / "model.safetensors"))
    assert all(torch.allclose(merged[k], want[k], atol=1e-5) for k in want)
    low = export_adapter(trained, base, tmp_path / "low", rank=1)
    assert 0 < low.kept_energy_min < 1 and low.bytes < report.bytes


def test_a_change_an_adapter_cannot_carry_is_refused(tmp_path):
    base = build_tiny_model(tmp_path / "base")
    trained = _trained_copy(base, tmp_path / "trained", touch="model.embed_tokens.weight")
    with pytest.raises(ConfigError, match="model.embed_tokens.weight differs .* not an adapted linear layer"):
        export_adapter(trained, base, tmp_path / "adapter")
    with pytest.raises(ConfigError, match="dtype must be one of"):
        export_adapter(base, base, tmp_path / "adapter", dtype="int8")


def test_a_registered_adapter_model_is_merged_on_pull_and_pinned(tmp_path, monkeypatch):
    from optima_agents.models import pull_model, registry, resolve_model
    from optima_agents.models.cache import list_models, read_manifest
    from optima_agents.models.errors import ChecksumMismatchError
    from optima_agents.models.registry import AdapterSpec

    base = build_tiny_model(tmp_path / "base")
    adapter = tmp_path / "shipped"
    export_adapter(_trained_copy(base, tmp_path / "trained"), base, adapter, rank=2, dtype="float32")
    (adapter / "provenance.json").write_text(json.dumps({"seed": 0, "heldout": {"score": 0.4}}))
    digest = hashlib.sha256((adapter / "adapter_model.safetensors").read_bytes()).hexdigest()
    spec = AdapterSpec("tiny-trained", base=str(base), description="a test adapter", adapter_dir=adapter,
                       adapter_sha256=digest)
    monkeypatch.setitem(registry._REGISTRY, spec.name, spec)
    home = tmp_path / "home"
    folder = pull_model("tiny-trained", home=home, progress=False)
    manifest = read_manifest(folder)
    assert manifest["source"] == {"base": str(base), "adapter_sha256": digest}
    assert json.loads((folder / "provenance.json").read_text())["heldout"]["score"] == 0.4
    assert resolve_model("tiny-trained", home=home) == str(folder)
    assert [(m.name, m.verified) for m in list_models(home)] == [("tiny-trained", True)]
    monkeypatch.setitem(registry._REGISTRY, spec.name, AdapterSpec(
        spec.name, spec.base, spec.description, adapter, adapter_sha256="0" * 64))
    with pytest.raises(ChecksumMismatchError, match="the registry pins 0000"):
        pull_model("tiny-trained", home=home, progress=False)
