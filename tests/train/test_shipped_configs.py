"""Every shipped training config loads with its algorithm's loader, names its sampler section,
and comes back the same from the `config.yaml` a run stores, so a stored run resumes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from optima_train.algorithms import ALGORITHMS, algorithm
from optima_train.config.io import config_to_dict, dump_config, from_dict, load_config
from optima_train.config.sampler import RolloutSamplerSection, SamplerSection
from optima_train.grpo.grpo_config import GRPOGenerationSection
from optima_train.idpo.idpo_config import SearchSection
from optima_train.isft.isft_config import GenerationSection
from optima_train.run_dir import RunDir

CONFIGS = Path(__file__).resolve().parents[2] / "configs"

#: The algorithm each folder of training configs is for: each built-in algorithm's `config_dir`, and
#: the GPU recipes (configs/gpu/accelerate holds accelerate's own configs).
FOLDERS = {**{str(Path(spec.config_dir).relative_to("configs")): name for name, spec in ALGORITHMS.registered().items()
              if spec.config_dir},
           "gpu/isft": "isft", "gpu/isft_3b": "isft", "gpu/idpo": "idpo", "gpu/isft_dpo": "isft-dpo"}


def _shipped() -> list:
    return [pytest.param(name, path, id=str(path.relative_to(CONFIGS)))
            for folder, name in FOLDERS.items() for path in sorted((CONFIGS / folder).glob("*.yaml"))]


def _samplers(cfg) -> list[SamplerSection]:
    """The config's sampler sections: its `sampler`, or both of iSFT-DPO's stages."""
    return [cfg.sampler] if hasattr(type(cfg), "sampler") else [cfg.generation, cfg.search]


def test_every_yaml_under_configs_is_a_training_config_of_a_known_algorithm():
    covered = {path for param in _shipped() for path in param.values[1:]}
    found = {path for path in CONFIGS.rglob("*.yaml") if "accelerate" not in path.relative_to(CONFIGS).parts}
    assert found == covered, sorted(str(p.relative_to(CONFIGS)) for p in found ^ covered)


@pytest.mark.parametrize("name, path", _shipped())
def test_a_shipped_config_loads_and_resumes_from_its_stored_copy(name, path, tmp_path):
    config_cls, _ = algorithm(name).load()
    cfg = load_config(config_cls, path)
    for sampler in _samplers(cfg):
        assert isinstance(sampler, SamplerSection) and getattr(cfg, sampler.SECTION) is sampler
    stored = yaml.safe_load(dump_config(cfg))
    assert from_dict(config_cls, stored) == cfg
    run = RunDir(tmp_path)
    assert run.check_config(config_to_dict(cfg), may_change=config_cls.RESUMABLE) is False  # stores it
    assert run.check_config(config_to_dict(cfg), may_change=config_cls.RESUMABLE) is True


def _reversed(data):
    return {k: _reversed(v) for k, v in reversed(data.items())} if isinstance(data, dict) else data


def test_a_stored_config_is_compared_by_key_not_by_order(tmp_path):
    """A stored config.yaml whose keys come in another order resumes (and is left as it is)."""
    config_cls, _ = algorithm("isft").load()
    cfg = load_config(config_cls, CONFIGS / "isft" / "referential_informative.yaml")
    text = yaml.safe_dump(_reversed(config_to_dict(cfg)), sort_keys=False)
    (tmp_path / "config.yaml").write_text(text)
    assert RunDir(tmp_path).check_config(config_to_dict(cfg), may_change=config_cls.RESUMABLE) is True
    assert (tmp_path / "config.yaml").read_text() == text
    assert from_dict(config_cls, yaml.safe_load(text)) == cfg


@pytest.mark.parametrize("path, expected", [
    ("isft/referential_informative.yaml", {"backend": "vllm", "temperature": 1.0, "max_turns": 4, "max_new_tokens": 48,
                                           "batch_size": 64, "max_live": 256, "samples_per_question": 8,
                                           "agent_temperatures": {"alice": 0.0, "bob": 1.0}}),
    ("gpu/isft/hotpotqa.yaml", {"backend": "vllm", "temperature": 0.7, "max_turns": 10, "max_new_tokens": 128,
                                "max_live": 4096, "samples_per_question": 10}),
    ("grpo/synth_hop.yaml", {"backend": "vllm", "temperature": 0.5, "max_turns": 4, "max_new_tokens": 64,
                             "max_live": 256, "group_size": 8, "backend_kwargs": {"kv_cache_gib": 4.0}}),
    ("idpo/synth_hop.yaml", {"backend": "hf", "max_turns": 6, "batch_size": 64, "backend_kwargs": {}}),
    ("gpu/idpo/hotpotqa.yaml", {"backend": "vllm", "max_turns": 10, "batch_size": 64}),
])
def test_shipped_sampler_values(path, expected):
    name = FOLDERS[str(Path(path).parent)]
    config_cls, _ = algorithm(name).load()
    sampler = load_config(config_cls, CONFIGS / path).sampler
    assert {key: getattr(sampler, key) for key in expected} == expected


def _keys(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_each_sampler_section_keeps_its_yaml_keys():
    shared = {"backend", "batch_size", "backend_kwargs", "max_turns"}
    rollout = shared | {"temperature", "max_new_tokens", "constrained_answers", "max_live", "scheduling", "max_inflight"}
    assert _keys(SamplerSection) == shared and _keys(RolloutSamplerSection) == rollout
    assert _keys(GenerationSection) == rollout | {"samples_per_question", "agent_temperatures", "top_p",
                                                  "format_pool_first_iteration", "enumerate_answers",
                                                  "new_questions_each_iteration"}
    assert _keys(GRPOGenerationSection) == rollout | {"group_size"}
    assert _keys(SearchSection) == shared | {"questions", "new_questions_each_iteration", "min_kept_pairs",
                                             "round_trees"}
    assert (GenerationSection.SECTION, GRPOGenerationSection.SECTION, SearchSection.SECTION) == \
        ("generation", "generation", "search")
