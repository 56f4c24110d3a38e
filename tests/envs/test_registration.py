import re

import pytest

import optima_envs
from optima_envs.errors import ConfigError, DeprecatedEnvError, RegistrationError, UnknownEnvError
from optima_envs.registration import EnvSpec, get_env_id, parse_env_id, register, registry


@pytest.fixture
def scratch_registry():
    saved = dict(registry)
    yield registry
    registry.clear()
    registry.update(saved)


class TestParseEnvId:
    @pytest.mark.parametrize("env_id, parsed", [
        ("hotpotqa-ia", ("hotpotqa-ia", None)),
        ("hotpotqa-ia-v2", ("hotpotqa-ia", 2)),
        ("2wikimqa-ia-v10", ("2wikimqa-ia", 10)),
    ])
    def test_roundtrip(self, env_id, parsed):
        assert parse_env_id(env_id) == parsed
        assert get_env_id(*parsed) == env_id

    def test_malformed(self):
        with pytest.raises(UnknownEnvError, match=re.escape("malformed env id 'Hotpot QA'")):
            parse_env_id("Hotpot QA")


class TestMake:
    def test_make_returns_ready_env_with_version(self):
        env = optima_envs.make("synth-hop-ia")
        assert isinstance(env, optima_envs.DialogueEnv)
        assert env.metadata["version"] == 2
        assert env.metadata["name"] == "synth-hop-ia"
        env.reset(seed=0)
        assert env.agents == ["alice", "bob"]

    def test_versioned_id(self):
        assert optima_envs.make("synth-hop-ia-v2").metadata["version"] == 2

    def test_every_env_is_at_version_2_after_the_scoring_change(self):
        for name in optima_envs.list_envs():
            if optima_envs.spec(name).family == "game":  # released after the change, at version 1
                continue
            assert optima_envs.spec(name).version == 2 and "last non-empty answer" in optima_envs.spec(name).changes[2]
        with pytest.raises(DeprecatedEnvError, match=re.escape("use 'hotpotqa-ia-v2' instead")):
            optima_envs.make("hotpotqa-ia-v1")

    def test_unknown_id_suggests_close_matches(self):
        with pytest.raises(UnknownEnvError, match=re.escape("no env named 'synth-hop'. Did you mean 'synth-hop-ia'")):
            optima_envs.make("synth-hop")

    def test_unknown_version(self):
        with pytest.raises(UnknownEnvError, match=re.escape("env 'synth-hop-ia' has no version 9; registered versions: [2]")):
            optima_envs.make("synth-hop-ia-v9")

    def test_old_version_names_replacement(self, scratch_registry):
        register(EnvSpec(name="demo-task", version=2, entry_point="optima_envs.tasks.synth_hop:make_task",
                         description="d", family="ia"))
        with pytest.raises(DeprecatedEnvError, match=re.escape("env 'demo-task-v1' is no longer available; use 'demo-task-v2' instead.")):
            optima_envs.make("demo-task-v1")

    def test_unknown_option_lists_accepted(self):
        with pytest.raises(ConfigError, match=re.escape("synth-hop-ia-v2: unknown option(s) ['hopz']")):
            optima_envs.make("synth-hop-ia", hopz=3)

    def test_env_and_task_options_are_routed(self):
        env = optima_envs.make("synth-hop-ia", hops=3, num_agents=3, max_turns=4)
        env.reset(seed=1, options={"index": 0})
        assert env.possible_agents == ["alice", "bob", "carol"]
        assert env.max_turns == 4
        assert env.state.instance.meta["hops"] in (2, 3)

    def test_duplicate_registration(self, scratch_registry):
        with pytest.raises(RegistrationError, match=re.escape("env 'synth-hop-ia-v2' is already registered")):
            register(EnvSpec(name="synth-hop-ia", version=2, entry_point="x:y", description="", family="ia"))


class TestListEnvs:
    def test_lists_ids_with_descriptions(self):
        envs = optima_envs.list_envs()
        assert "synth-hop-ia" in envs and "synth-arith-debate" in envs
        assert all(isinstance(d, str) and d for d in envs.values())

    def test_pprint_returns_text(self):
        text = optima_envs.pprint_registry(print_output=False)
        assert "synth-hop-ia-v2" in text
