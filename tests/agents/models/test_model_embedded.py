"""The real embedded model: the pulled folder is complete, loads, and answers.

Uses the shared copy (`$OPTIMA_HOME` or the user cache), so only the very first session on a
machine pays for the pull (~30 s); later sessions spend about 2 s here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from optima_agents.models import DEFAULT_MODEL, list_models, pull_model, resolve_model
from optima_agents.models.cache import verify_folder

pytestmark = pytest.mark.model


class TestEmbeddedModel:
    def test_folder_is_complete_and_verified(self, embedded_model_dir: Path) -> None:
        names = {p.name for p in embedded_model_dir.iterdir()}
        assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"} <= names
        manifest = verify_folder(embedded_model_dir)
        assert manifest is not None and "Paris" in manifest["test"]["output"]
        assert "quantization_config" not in (embedded_model_dir / "config.json").read_text()

    def test_second_pull_rebuilds_nothing(self, embedded_model_dir: Path, monkeypatch) -> None:
        def no_build(*args, **kwargs):
            raise AssertionError("a verified folder was built again")

        monkeypatch.setattr("optima_agents.models.pull._build", no_build)
        before = {p.name: p.stat().st_mtime_ns for p in embedded_model_dir.iterdir()}
        assert pull_model(DEFAULT_MODEL, progress=False) == embedded_model_dir
        assert {p.name: p.stat().st_mtime_ns for p in embedded_model_dir.iterdir()} == before
        assert resolve_model(DEFAULT_MODEL) == str(embedded_model_dir)
        assert DEFAULT_MODEL in {m.name for m in list_models() if m.verified}

    def test_loads_and_answers_with_chat_template(self, embedded_model_dir: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir)
        model = AutoModelForCausalLM.from_pretrained(embedded_model_dir, dtype=torch.bfloat16)
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True, tokenize=False
        )
        assert prompt.endswith("<|im_start|>assistant\n")  # ChatML
        inputs = tokenizer(prompt, return_tensors="pt")
        with torch.inference_mode():
            out = model.generate(**inputs, max_new_tokens=12, do_sample=False)
        answer = tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
        assert "Paris" in answer
