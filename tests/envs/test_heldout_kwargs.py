"""Every env names the questions it is judged on (training configs default their held-out
questions to them: `tests.train.test_config_heldout`)."""

from __future__ import annotations

import pytest

import optima_envs

ENV_IDS = sorted({s.name for s in optima_envs.registry.values()})


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_every_env_names_a_heldout_split(env_id):
    assert optima_envs.spec(env_id).heldout_kwargs.get("split") in {"validation", "test"}


@pytest.mark.parametrize("env_id", [e for e in ENV_IDS if optima_envs.spec(e).family == "game" or e.startswith("synth")])
def test_generated_envs_make_their_heldout_split(env_id):
    env = optima_envs.make(env_id, **optima_envs.spec(env_id).heldout_kwargs)
    env.reset(seed=0, options={"index": 0})
    assert env.state.instance is not None
