"""The training-algorithm registry and the `optima train <name>` commands made from it, the shared
config base, and the trainer base's use of the capabilities policies declare."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint

import pytest
import yaml
from typer.testing import CliRunner

import optima_envs.plugins as plugins
from optima_agents.policies import BackendSpec, PolicyCapabilities, SamplingParams, ScriptedPolicy, register_backend
from optima_agents.policies.registry import BACKENDS
from optima_envs.errors import ConfigError
from optima_train.algorithms import ALGORITHMS, AlgorithmSpec, algorithm, algorithm_names, register_algorithm
from optima_train.cli.train import build_app
from optima_train.config.train import TRLTrainSection
from optima_train.config.io import load_config
from optima_train.idpo import IDPOConfig
from optima_train.idpo.idpo_config import DPOTrainSection
from optima_train.isft import ISFTConfig, ISFTTrainer
from optima_train.isft.isft_config import TrainSection


# ---------------------------------------------------------------------- a toy algorithm
@dataclass
class ToyRun:
    output_dir: str = "runs/toy"
    rounds: int = 1


@dataclass
class ToyConfig:
    run: ToyRun = field(default_factory=ToyRun)
    greeting: str = field(default="hi", metadata={"help": "What each round says."})


class ToyTrainer:
    def __init__(self, config: ToyConfig):
        self.config = config

    def check_data(self) -> None:
        if self.config.greeting == "missing":
            raise ConfigError("greeting 'missing' names no data")

    def check_resources(self) -> None:
        self.check_data()

    def train(self) -> list[dict]:
        return [{"round": i, "said": self.config.greeting} for i in range(self.config.run.rounds)]


class NoResources:
    def __init__(self, config):
        self.config = config

    def train(self):
        return []


@pytest.fixture
def toy():
    spec = register_algorithm(AlgorithmSpec("toy", ToyConfig, ToyTrainer, summary="Says hi, some rounds.",
                                            count_option=("--rounds", "run.rounds")))
    yield spec
    ALGORITHMS.unregister("toy")


def invoke(*args: str):
    return CliRunner().invoke(build_app(), list(args))


class TestAlgorithmRegistry:
    def test_builtins(self):
        assert algorithm_names()[:4] == ["isft", "idpo", "isft-dpo", "grpo"]
        config_cls, trainer_cls = algorithm("isft").load()
        assert (config_cls, trainer_cls) == (ISFTConfig, ISFTTrainer)
        assert algorithm("isft-dpo").count_option == ("--cycles", "cycles.count")

    def test_unknown_name(self):
        with pytest.raises(ConfigError, match=re.escape(
                "unknown training algorithm 'isfd'; choose one of ['isft', 'idpo', 'isft-dpo', 'grpo']; did you mean")):
            algorithm("isfd")

    @pytest.mark.parametrize("kwargs, message", [
        ({"config": "nocolon", "trainer": ToyTrainer}, "config 'nocolon' must be 'module:attr' or a class"),
        ({"config": ToyConfig, "trainer": ToyTrainer, "count_option": ("rounds", "run.rounds")},
         "count_option ('rounds', 'run.rounds') must be ('--flag', 'section.field')"),
    ])
    def test_bad_specs(self, kwargs, message):
        with pytest.raises(ConfigError, match=re.escape(message)):
            AlgorithmSpec("bad", **kwargs)

    def test_a_trainer_without_the_protocol_is_refused_on_load(self):
        with pytest.raises(ConfigError, match=re.escape("its trainer must be a class with check_data(), "
                                                        "check_resources() and train()")):
            AlgorithmSpec("bad", ToyConfig, NoResources).load()


class TestGeneratedCommands:
    def test_a_registered_algorithm_gets_the_full_command(self, toy):
        result = invoke("toy", "--help")
        assert result.exit_code == 0 and "Says hi, some rounds." in result.output
        for option in ("--config", "--set", "--output-dir", "--rounds", "--print-config", "--help-config"):
            assert option in result.output
        assert "greeting: str = 'hi'" in invoke("toy", "--help-config").output

    def test_options_reach_the_config_and_the_trainer(self, toy, tmp_path):
        printed = invoke("toy", "--rounds", "3", "--set", "greeting=yo", "--output-dir", str(tmp_path), "--print-config")
        assert printed.exit_code == 0, printed.output
        assert yaml.safe_load(printed.output) == {"run": {"output_dir": str(tmp_path), "rounds": 3}, "greeting": "yo"}
        ran = invoke("toy", "--rounds", "2")
        assert ran.exit_code == 0 and "done: 2 iteration(s) in runs/toy" in ran.output

    def test_config_and_resource_problems_exit_2(self, toy):
        bad = invoke("toy", "--set", "greting=yo")
        assert bad.exit_code == 2 and "did you mean 'greeting'?" in bad.output
        missing = invoke("toy", "--set", "greeting=missing")
        assert missing.exit_code == 2 and "greeting 'missing' names no data" in missing.output

    def test_a_broken_installed_algorithm_does_not_break_the_others(self, monkeypatch):
        real = plugins.entry_points
        broken = EntryPoint("broken", "no_such_module_anywhere:SPEC", "optima.algorithms")
        monkeypatch.setattr(plugins, "entry_points",
                            lambda *, group: [broken] if group == "optima.algorithms" else real(group=group))
        result = invoke("broken", "--print-config")
        assert result.exit_code == 2 and "training algorithm 'broken'" in result.output
        assert "no_such_module_anywhere" in result.output
        assert invoke("isft", "--help-config").exit_code == 0


# ---------------------------------------------------------------------- the shared config base
class TestConfigBase:
    def test_dpo_adds_its_fields_and_changes_only_its_defaults(self):
        shared = [f for f in TRLTrainSection.__dataclass_fields__]
        dpo = list(DPOTrainSection.__dataclass_fields__)
        assert dpo[: len(shared)] == shared and dpo[len(shared):] == ["beta", "rpo_alpha", "min_pairs"]
        d, s = DPOTrainSection(), TrainSection()
        assert (d.learning_rate, d.per_device_train_batch_size, d.gradient_accumulation_steps, d.warmup_steps) == \
            (5e-6, 2, 4, 0.1)
        assert (s.learning_rate, s.per_device_train_batch_size, s.gradient_accumulation_steps, s.warmup_steps) == \
            (2e-4, 4, 1, 0.0)
        assert DPOTrainSection.__dataclass_fields__["gradient_accumulation_steps"].metadata["help"] == \
            TRLTrainSection.__dataclass_fields__["gradient_accumulation_steps"].metadata["help"]

    @pytest.mark.parametrize("cls, override, message", [
        (ISFTConfig, "train.extra={beta: 0.1}", "train.extra has keys that are not trl.SFTConfig fields: ['beta']"),
        (IDPOConfig, "train.extra={seed: 1}", "train.extra sets ['seed'], which the iDPO config owns"),
        (IDPOConfig, "train.min_pairs=0", "train.min_pairs must be >= 1, got 0"),
        (ISFTConfig, "train.max_length=0", "train.max_length must be >= 1, got 0"),
    ])
    def test_shared_checks(self, cls, override, message):
        with pytest.raises(ConfigError, match=re.escape(message)):
            load_config(cls, None, [override])

    def test_backend_fields_take_any_registered_backend(self, extra_backends):
        with pytest.raises(ConfigError, match=re.escape("search.backend: unknown backend 'tgi'; choose one of")):
            load_config(IDPOConfig, None, ["search.backend=tgi"])
        assert load_config(ISFTConfig, None, ["generation.backend=local"]).generation.backend == "local"
        with pytest.raises(ConfigError, match=re.escape("generation.backend='served' cannot drive iSFT")):
            load_config(ISFTConfig, None, ["generation.backend=served"])
        with pytest.raises(ConfigError, match=re.escape("search.backend='served' needs search.backend_kwargs.base_urls")):
            load_config(IDPOConfig, None, ["search.backend=served"])
        cfg = load_config(IDPOConfig, None, ["search.backend=served", "search.backend_kwargs={base_urls: [u]}"])
        assert cfg.search.backend == "served"


@pytest.fixture
def extra_backends():
    """A backend that loads weights and one that serves its own (a server client), registered for one test."""
    register_backend(BackendSpec("served", ScriptedPolicy, options=frozenset({"base_urls"}), loads_weights=False))
    register_backend(BackendSpec("local", ScriptedPolicy))
    yield
    BACKENDS.unregister("served")
    BACKENDS.unregister("local")


# ---------------------------------------------------------------------- the trainer base and capabilities
class Closable:
    capabilities = PolicyCapabilities(close=True)

    def __init__(self):
        self.sampling, self.closed = SamplingParams(), False

    def close(self):
        self.closed = True


class Undeclared:
    sampling = SamplingParams()

    def with_sampling(self, sampling):
        raise AssertionError("never called: not declared")

    def close(self):
        raise AssertionError("never called: not declared")


def test_the_loop_uses_only_declared_capabilities(tmp_path, monkeypatch):
    import optima_eval.evaluation as evaluation

    built: list = []
    monkeypatch.setattr(evaluation, "build_policy", lambda backend, model, sampling, **kw: built.append(model) or
                        ScriptedPolicy(lambda o: "hi"))
    trainer = ISFTTrainer(load_config(ISFTConfig, None, [f"run.output_dir={tmp_path / 'run'}", "model.device=cpu"]))
    closable = Closable()
    trainer._policy = ("m", closable)
    trainer.close()
    assert closable.closed and trainer._policy is None
    trainer._policy = ("m", Undeclared())
    trainer.close()  # dropped, not closed
    trainer._policy = ("m", Undeclared())
    first = trainer._policy_for("m", SamplingParams(temperature=0.5))  # no with_sampling declared: rebuilt
    again = trainer._policy_for("m", SamplingParams(temperature=0.9))  # declared: shares the loaded one
    assert built == ["m"] and isinstance(first, ScriptedPolicy) and again.sampling.temperature == 0.9


def test_a_step_without_its_method_is_a_clear_error(tmp_path):
    from optima_train.loop import IterativeTrainer

    class Half(IterativeTrainer):
        STEPS = ("work",)

    trainer = Half(load_config(ISFTConfig, None, [f"run.output_dir={tmp_path / 'run'}"]))
    with pytest.raises(TypeError, match=re.escape("Half lists step 'work' in STEPS but has no method _work")):
        trainer._step_fn("work", 0)
