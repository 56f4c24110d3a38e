"""`--backend auto`: the choice rule on given probe results, the decision cache with scripted
probes (no model loads), the `auto` factory, and once on the embedded model with a tiny probe."""

from __future__ import annotations

import importlib.util
import json
import logging
import re
from pathlib import Path

import pytest

from optima_agents.policies import BackendSpec, SamplingParams, make_policy, register_backend
from optima_agents.policies import auto, auto_cache
from optima_agents.policies.auto_choice import (BackendChoice, Candidate, NoBackendPassedError, ProbeResult,
                                                choose_fastest)
from optima_agents.policies.auto_probe import ProbeSettings, installed_candidates
from optima_agents.policies.registry import BACKENDS
from optima_envs.errors import ConfigError

HF = Candidate("hf", "float32")
VLLM = Candidate("vllm", "float32")
Q8 = Candidate("llamacpp", "q8_0", weights="q8_0")
F16 = Candidate("llamacpp", "f16", weights="f16")


def ok(candidate, speed, gap=0.1):
    return ProbeResult(candidate, tokens_per_s=speed, largest_gap=gap, load_s=1.0)


def out(candidate, why):
    return ProbeResult(candidate, failure=why)


class TestChooseFastest:
    def test_the_fastest_passing_candidate_wins(self):
        assert choose_fastest([ok(HF, 100.0), ok(Q8, 400.0), ok(F16, 250.0)]).candidate == Q8

    def test_a_failed_candidate_is_excluded_however_fast(self):
        parity = ProbeResult(Q8, tokens_per_s=900.0, failure="parity failed: prompt 3: ...")
        assert choose_fastest([ok(HF, 100.0), parity, out(VLLM, "RuntimeError: no device")]).candidate == HF

    def test_a_result_without_a_speed_did_not_pass(self):
        assert not ProbeResult(HF).passed and choose_fastest([ProbeResult(HF), ok(F16, 1.0)]).candidate == F16

    def test_all_failing_names_every_candidate_and_its_failure(self):
        results = [out(HF, "parity failed: prompt 0: prompt lengths differ"), out(Q8, "RuntimeError: boom")]
        message = ("backend 'auto': none of the 2 candidate(s) passed on this machine:\n"
                   "  hf float32: out (parity failed: prompt 0: prompt lengths differ)\n"
                   "  llamacpp q8_0: out (RuntimeError: boom)\n"
                   "Fix the failure of the backend you want, or name a backend with --backend")
        with pytest.raises(NoBackendPassedError, match=re.escape(message)):
            choose_fastest(results)

    def test_no_candidate_at_all(self):
        with pytest.raises(NoBackendPassedError, match=re.escape("backend 'auto' found no local backend to try")):
            choose_fastest([])

    def test_ties_go_to_the_less_lossy_precision_in_any_order(self):
        tied = [ok(Q8, 300.0), ok(F16, 300.0), ok(Candidate("llamacpp", "q4_1", "q4_1"), 300.0)]
        assert choose_fastest(tied).candidate == F16 and choose_fastest(tied[::-1]).candidate == F16
        backends = [ok(VLLM, 50.0), ok(HF, 50.0)]
        assert choose_fastest(backends).candidate == HF and choose_fastest(backends[::-1]).candidate == HF

    def test_a_choice_round_trips_and_names_what_runs(self):
        choice = BackendChoice(ok(Q8, 400.0), (ok(HF, 100.0), ok(Q8, 400.0)), "probed", "k", "2025-01-01T00:00:00")
        again = BackendChoice.from_dict(json.loads(json.dumps(choice.to_dict())))
        assert (again.backend, again.runs_in, again.backend_kwargs) == ("llamacpp", "q8_0", {"weights": "q8_0"})
        assert again.source == "cached" and again.probes == choice.probes and again.chosen == choice.chosen
        assert choice.describe().startswith("llamacpp q8_0: 400.0 tokens/s, largest parity gap 0.100 nats")


@pytest.fixture
def model_folder(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"weights")
    return folder


class ScriptedProbe:
    """Answers every candidate from `speeds` (label -> tokens/s; missing: out), counting calls."""

    def __init__(self, speeds):
        self.speeds, self.calls = speeds, []

    def __call__(self, candidates, model_path, settings, options):
        self.calls.append(([c.label for c in candidates], options))
        return [ok(c, self.speeds[c.label]) if c.label in self.speeds else out(c, "not here") for c in candidates]


@pytest.fixture
def machine(monkeypatch):
    """A fixed machine and fixed installed candidates (the real ones depend on the packages here)."""
    state = {"cpu": "Test CPU", "cpu_flags": ["avx2"], "cores": 2, "usable_cores": 2, "cuda": []}
    monkeypatch.setattr(auto, "machine_fingerprint", lambda: dict(state))
    monkeypatch.setattr(auto, "installed_candidates", lambda path, dtype: [Candidate("hf", dtype), Q8, F16])
    return state


class TestResolveBackend:
    def resolve(self, folder, home, probe, **kwargs):
        return auto.resolve_backend(str(folder), dtype="float32", home=str(home), probe=probe, **kwargs)

    def test_probed_once_then_read_from_the_cache(self, model_folder, tmp_path, machine, caplog):
        probe = ScriptedProbe({"hf float32": 100.0, "llamacpp q8_0": 400.0, "llamacpp f16": 200.0})
        with caplog.at_level(logging.INFO, logger="optima_agents.policies"):
            first = self.resolve(model_folder, tmp_path / "home", probe)
        assert (first.backend, first.runs_in, first.source) == ("llamacpp", "q8_0", "probed")
        assert probe.calls == [(["hf float32", "llamacpp q8_0", "llamacpp f16"], {"dtype": "float32"})]
        assert "backend auto probe: llamacpp q8_0: 400.0 tokens/s" in caplog.text
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="optima_agents.policies"):
            second = self.resolve(model_folder, tmp_path / "home", probe)
        assert len(probe.calls) == 1 and second.source == "cached" and "not probed again" in caplog.text
        assert (second.backend, second.runs_in) == ("llamacpp", "q8_0")
        assert (second.chosen, second.key) == (first.chosen, first.key)
        stored = json.loads((tmp_path / "home" / "backend_choice.json").read_text())
        assert list(stored["choices"]) == [first.key]
        assert stored["choices"][first.key]["identity"]["machine"]["cpu"] == "Test CPU"

    def test_another_machine_probes_again_and_keeps_both(self, model_folder, tmp_path, machine):
        probe = ScriptedProbe({"hf float32": 100.0, "llamacpp q8_0": 400.0})
        first = self.resolve(model_folder, tmp_path / "home", probe)
        machine["cpu_flags"] = ["avx2", "avx512_bf16"]
        probe.speeds = {"hf float32": 900.0, "llamacpp q8_0": 400.0}
        other = self.resolve(model_folder, tmp_path / "home", probe)
        assert len(probe.calls) == 2 and other.key != first.key and other.backend == "hf"
        stored = json.loads((tmp_path / "home" / "backend_choice.json").read_text())
        assert set(stored["choices"]) == {first.key, other.key}

    def test_new_weights_options_or_refresh_probe_again(self, model_folder, tmp_path, machine):
        probe = ScriptedProbe({"hf float32": 100.0})
        first = self.resolve(model_folder, tmp_path / "home", probe)
        (model_folder / "model.safetensors").write_bytes(b"retrained weights")
        assert self.resolve(model_folder, tmp_path / "home", probe).key != first.key
        self.resolve(model_folder, tmp_path / "home", probe, batch_size=4)
        self.resolve(model_folder, tmp_path / "home", probe, refresh=True)
        assert len(probe.calls) == 4 and probe.calls[2][1] == {"dtype": "float32", "batch_size": 4}

    def test_nothing_passes_nothing_is_cached(self, model_folder, tmp_path, machine):
        with pytest.raises(NoBackendPassedError, match=re.escape("  llamacpp f16: out (not here)")):
            self.resolve(model_folder, tmp_path / "home", ScriptedProbe({}))
        assert not (tmp_path / "home" / "backend_choice.json").exists()

    def test_an_unreadable_cache_is_probed_again(self, model_folder, tmp_path, machine, caplog):
        (tmp_path / "home").mkdir()
        (tmp_path / "home" / "backend_choice.json").write_text("{not json")
        probe = ScriptedProbe({"hf float32": 100.0})
        with caplog.at_level(logging.WARNING, logger="optima_agents.policies"):
            assert self.resolve(model_folder, tmp_path / "home", probe).source == "probed"
        assert "ignoring the unreadable choice cache" in caplog.text
        assert self.resolve(model_folder, tmp_path / "home", probe).source == "cached"


class TestFingerprints:
    def test_machine_names_cpu_flags_cores_and_devices(self, monkeypatch):
        monkeypatch.setattr(auto_cache, "_cuda_devices", lambda: [])
        found = auto_cache.machine_fingerprint()
        assert set(found) == {"cpu", "cpu_flags", "cores", "usable_cores", "cuda"}
        assert set(found["cpu_flags"]) <= set(auto_cache.CPU_FLAGS) and found["usable_cores"] >= 1

    def test_model_identity_follows_the_files_not_the_name(self, model_folder):
        first = auto_cache.model_identity("a name", model_folder)
        assert first == auto_cache.model_identity("another name", model_folder)
        (model_folder / "extra.json").write_text("{}")
        assert auto_cache.model_identity("a name", model_folder) != first
        assert auto_cache.model_identity("org/hub-model", model_folder / "missing") == {"model": "org/hub-model"}

    def test_package_versions_name_every_backend_module(self):
        versions = auto_cache.package_versions()
        assert set(versions) == set(auto_cache.VERSIONED_MODULES)
        assert versions["transformers"].startswith("transformers==")


class TestCandidates:
    def test_llamacpp_weight_types_follow_the_folder(self, model_folder):
        found = installed_candidates(model_folder, "bfloat16")
        assert found[0] == Candidate("hf", "bfloat16")
        if importlib.util.find_spec("llama_cpp") is not None:  # a folder that is no registry base: no shipped q4_1
            assert [c.label for c in found if c.backend == "llamacpp"] == ["llamacpp f32", "llamacpp f16",
                                                                            "llamacpp bf16", "llamacpp q8_0"]

    def test_probe_settings_are_checked(self):
        with pytest.raises(ValueError, match=re.escape("ProbeSettings.sequences must be a positive int, got 0")):
            ProbeSettings(sequences=0)


class Built:
    """A backend that records how `auto` built it."""

    def __init__(self, model, *, sampling=SamplingParams(), **options):
        self.model, self.sampling, self.options = model, sampling, options


@pytest.fixture
def chosen_backend(monkeypatch):
    register_backend(BackendSpec("chosen", Built, options=frozenset({"dtype", "batch_size"})))
    choice = BackendChoice(ok(Candidate("chosen", "q8_0", weights="q8_0"), 10.0))
    monkeypatch.setattr(auto, "resolve_backend", lambda model, **kwargs: choice)
    yield
    BACKENDS.unregister("chosen")


class TestAutoFactory:
    def test_builds_the_chosen_backend_with_its_weights(self, chosen_backend):
        policy = make_policy("auto", "m", dtype="float32", batch_size=4)
        assert isinstance(policy, Built) and policy.options == {"dtype": "float32", "batch_size": 4, "weights": "q8_0"}

    def test_backend_specific_options_are_refused(self, chosen_backend):
        with pytest.raises(ConfigError, match=re.escape("backend 'auto' takes no backend-specific options, got "
                                                        "['weights']")):
            make_policy("auto", "m", weights="f16")


@pytest.mark.model
def test_a_real_probe_on_the_embedded_model(embedded_model_dir):
    """transformers and llama.cpp's shipped Q4_1 where installed, with tiny sizes (not vLLM: minutes of
    start-up on a CPU; not every weight type: each is a model load)."""
    from optima_agents.policies.auto_probe import probe_candidates

    wanted = {"hf float32", "llamacpp q4_1"}
    candidates = [c for c in installed_candidates(embedded_model_dir, "float32") if c.label in wanted]
    settings = ProbeSettings(parity_prompts=2, parity_tokens=8, sequences=4, tokens=8, repeats=1)
    results = probe_candidates(candidates, str(embedded_model_dir), settings, {"dtype": "float32"})
    assert [r.candidate for r in results] == candidates
    assert all(r.passed for r in results), [r.summary() for r in results]
    assert choose_fastest(results).tokens_per_s == max(r.tokens_per_s for r in results)
