"""The backend registry behind `make_policy`, the configs' `backend` fields and `--backend`, and
the capabilities policies declare."""

from __future__ import annotations

import importlib
import re
from importlib.metadata import EntryPoint

import pytest

import optima_envs.plugins as plugins
from optima_agents.policies import (
    Action,
    BackendSpec,
    PolicyCapabilities,
    SamplingParams,
    ScriptedPolicy,
    backend_names,
    backend_spec,
    capabilities_of,
    make_policy,
    register_backend,
)
from optima_agents.policies.registry import BACKENDS
from optima_envs.errors import ConfigError, PluginError


class Recorder:
    """A backend that records how it was built."""

    capabilities = PolicyCapabilities(close=True)

    def __init__(self, model, *, sampling=SamplingParams(), **options):
        self.model, self.sampling, self.options = model, sampling, options
        self.closed = False

    def act(self, requests):
        return [Action(text="<A>x</A>") for _ in requests]

    def identity(self):
        return {"backend": "recorder", "model": self.model}

    def close(self):
        self.closed = True


class Undeclared:
    """Declares nothing, though it has a close method."""

    def __init__(self, model="m", *, sampling=SamplingParams()):
        self.model, self.sampling = model, sampling

    def act(self, requests):
        return []

    def identity(self):
        return {}

    def close(self):
        raise AssertionError("never called: not declared")


@pytest.fixture
def recorder_backend():
    spec = register_backend(BackendSpec("recorder", Recorder, summary="records its options",
                                        options=frozenset({"dtype", "device"})))
    yield spec
    BACKENDS.unregister("recorder")


@pytest.fixture
def entry_points(monkeypatch):
    """Installed entry points of the backend group, replaced by the ones a test lists."""
    points: list[EntryPoint] = []
    real = plugins.entry_points

    def fake(*, group):
        return [p for p in points if p.group == group] if group == "optima.backends" else real(group=group)

    monkeypatch.setattr(plugins, "entry_points", fake)
    before = set(BACKENDS.registered())
    yield points
    for name in set(BACKENDS.registered()) - before:  # loaded from the fake entry points; built-ins stay
        BACKENDS.unregister(name)


class TestMakePolicy:
    def test_unknown_backend_lists_the_registered_ones_and_how_to_add_one(self):
        with pytest.raises(ConfigError, match=re.escape(
                "unknown backend 'tgi'; choose one of ['hf', 'vllm', 'openai', 'llamacpp', 'auto'] (a new backend registers with "
                "optima_agents.policies.register_backend(), or from another package through the entry-point group "
                "'optima.backends')")):
            make_policy("tgi", "m")

    def test_a_close_name_is_suggested(self):
        with pytest.raises(ConfigError, match=re.escape("did you mean 'vllm'?")):
            make_policy("vlm", "m")

    def test_only_the_declared_common_options_reach_the_factory(self, recorder_backend):
        policy = make_policy("recorder", "m", dtype="float32", batch_size=8, device="cpu", seed_bank=3)
        assert isinstance(policy, Recorder)
        assert policy.options == {"dtype": "float32", "device": "cpu", "seed_bank": 3}

    def test_base_urls_only_for_backends_that_take_them(self, recorder_backend):
        with pytest.raises(ConfigError, match=re.escape("--base-url is only for backend 'openai', not 'recorder'")):
            make_policy("recorder", "m", base_urls=["http://127.0.0.1:1/v1"])
        with pytest.raises(ConfigError, match=re.escape("backend 'openai' needs at least one --base-url")):
            make_policy("openai", "m")

    def test_a_missing_module_says_what_to_install(self, monkeypatch):
        from optima_agents.policies import BackendUnavailableError

        monkeypatch.setitem(importlib.sys.modules, "optima_agents.policies.vllm", None)
        with pytest.raises(BackendUnavailableError, match="backend 'vllm'"):
            make_policy("vllm", "m")


class TestRegistry:
    def test_builtins_first_then_registered_in_order(self, recorder_backend):
        assert backend_names()[:6] == ["hf", "vllm", "openai", "llamacpp", "auto", "recorder"]
        assert not backend_spec("openai").loads_weights and backend_spec("hf").loads_weights

    def test_a_name_is_registered_once(self, recorder_backend):
        with pytest.raises(ConfigError, match="a backend named 'recorder' is already registered"):
            register_backend(BackendSpec("recorder", Recorder))
        assert register_backend(BackendSpec("recorder", Recorder), replace=True).options == frozenset()

    @pytest.mark.parametrize("kwargs, message", [
        ({"factory": "no_colon"}, "factory 'no_colon' must be 'module:attr' or a callable"),
        ({"factory": Recorder, "options": {"tokenizer"}}, "options ['tokenizer'] are not common options"),
        ({"factory": 3}, "factory must be callable"),
    ])
    def test_bad_specs(self, kwargs, message):
        with pytest.raises(ConfigError, match=re.escape(message)):
            BackendSpec("bad", **kwargs)

    def test_an_entry_point_is_listed_without_import_and_loaded_on_use(self, entry_points):
        entry_points.append(EntryPoint("undeclared", f"{__name__}:Undeclared", "optima.backends"))
        entry_points.append(EntryPoint("broken", "no_such_module_anywhere:Policy", "optima.backends"))
        assert backend_names() == ["hf", "vllm", "openai", "llamacpp", "auto", "broken", "undeclared"]  # nothing imported yet
        spec = backend_spec("undeclared")
        assert spec.factory is Undeclared and spec.summary == "Declares nothing, though it has a close method."
        assert isinstance(make_policy("undeclared", "m"), Undeclared)
        with pytest.raises(PluginError, match=re.escape(
                "backend 'broken' (entry point broken = 'no_such_module_anywhere:Policy' in group 'optima.backends'")):
            make_policy("broken", "m")

    def test_an_entry_point_of_the_wrong_kind_is_a_plugin_error(self, entry_points):
        entry_points.append(EntryPoint("number", "math:pi", "optima.backends"))
        with pytest.raises(PluginError, match="a backend is a Policy class, a factory or a BackendSpec"):
            backend_spec("number")

    def test_a_builtin_name_wins_over_an_entry_point(self, entry_points):
        entry_points.append(EntryPoint("hf", f"{__name__}:Undeclared", "optima.backends"))
        assert backend_names().count("hf") == 1 and backend_spec("hf").factory == "optima_agents.policies.hf:HFPolicy"


class TestCapabilities:
    def test_declared_and_undeclared(self):
        assert capabilities_of(Recorder("m")) == PolicyCapabilities(close=True)
        assert capabilities_of(Undeclared()) == PolicyCapabilities()
        assert capabilities_of(ScriptedPolicy(lambda o: "hi")).with_sampling

    def test_a_wrong_declaration_is_refused(self):
        class Wrong(Undeclared):
            capabilities = {"close"}

        with pytest.raises(TypeError, match="Wrong.capabilities must be a PolicyCapabilities"):
            capabilities_of(Wrong())

    @pytest.mark.parametrize("module, name", [("hf", "HFPolicy"), ("vllm", "VLLMPolicy"),
                                              ("openai_compat", "OpenAIPolicy"), ("scripted", "ScriptedPolicy")])
    def test_builtin_declarations_match_their_methods(self, module, name):
        cls = getattr(importlib.import_module(f"optima_agents.policies.{module}"), name)
        declared = cls.capabilities
        assert declared.with_sampling == callable(getattr(cls, "with_sampling", None))
        assert declared.close == callable(getattr(cls, "close", None))
