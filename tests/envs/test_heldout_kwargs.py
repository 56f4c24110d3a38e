"""Every env names the questions it is judged on, and they are the ones its shipped training
configs hold out (so a leaderboard and a training run's evaluation agree)."""

from __future__ import annotations

from pathlib import Path

import pytest

import optima_envs
from optima_train.config.io import load_yaml

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*/*.yaml"))
ENV_IDS = sorted({s.name for s in optima_envs.registry.values()})


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_every_env_names_a_heldout_split(env_id):
    assert optima_envs.spec(env_id).heldout_kwargs.get("split") in {"validation", "test"}


@pytest.mark.parametrize("env_id", [e for e in ENV_IDS if optima_envs.spec(e).family == "game" or e.startswith("synth")])
def test_generated_envs_make_their_heldout_split(env_id):
    env = optima_envs.make(env_id, **optima_envs.spec(env_id).heldout_kwargs)
    env.reset(seed=0, options={"index": 0})
    assert env.state.instance is not None


@pytest.mark.parametrize("path", [p for p in CONFIGS if p.name != "base.yaml"], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shipped_configs_hold_out_the_registered_split(path):
    task = load_yaml(path).get("task", {})
    if "eval_env_kwargs" not in task:
        pytest.skip(f"{path} holds out through another section")
    held = {k: v for k, v in task["eval_env_kwargs"].items() if k in ("split", "subset")}
    assert held == dict(optima_envs.spec(task["env_id"]).heldout_kwargs)
