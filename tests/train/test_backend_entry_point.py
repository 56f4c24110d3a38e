"""A third-party package adds a policy backend, a training algorithm and a leaderboard system through entry points,
with no change to this project: a tiny package is built and installed into a temporary folder
(never into the venv), and a fresh interpreter that sees that folder uses both by name, from a
config file and from the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "optima-echo-plugin"
version = "0.0.1"

[project.entry-points."optima.backends"]
echo = "optima_echo_plugin:EchoPolicy"

[project.entry-points."optima.algorithms"]
echo-isft = "optima_echo_plugin:ALGORITHM"

[project.entry-points."optima.systems"]
first-word = "optima_echo_plugin:FirstWord"

[tool.setuptools]
py-modules = ["optima_echo_plugin"]
"""

PLUGIN = '''\
"""A policy that answers every turn with one tagged answer, iSFT under another name, and a
leaderboard system that answers with the first word of each question."""

from dataclasses import dataclass

from optima_agents.policies import Action, PolicyCapabilities, SamplingParams
from optima_eval.systems import System
from optima_eval.systems.base import Outcome
from optima_train.algorithms import AlgorithmSpec


class EchoPolicy:
    """Answers every turn with <A>answer</A>."""

    capabilities = PolicyCapabilities(with_sampling=True)

    def __init__(self, model, *, sampling=SamplingParams(), answer="echo"):
        self.model, self.sampling, self.answer = model, sampling, answer

    def act(self, requests):
        return [Action(text=f"<A>{self.answer}</A>") for _ in requests]

    def with_sampling(self, sampling):
        return EchoPolicy(self.model, sampling=sampling, answer=self.answer)

    def identity(self):
        return {"backend": "echo", "model": self.model, "sampling": self.sampling.to_dict()}


@dataclass
class FirstWord(System):
    """Answers the first word of the question, without a model (a system needs no policy)."""

    name = "first-word"
    summary = "the question's first word"

    def run(self, context):
        metric = context.env().task.metric
        return [Outcome(position=q.position, instance_id=q.instance.instance_id, answer=q.instance.question.split()[0],
                        score=metric(q.instance.question.split()[0], q.instance), score_ok=True, tokens=0)
                for q in context.questions]


ALGORITHM = AlgorithmSpec("echo-isft", config="optima_train.isft:ISFTConfig", trainer="optima_train.isft:ISFTTrainer",
                          summary="iSFT, registered by a plug-in.")
'''

USE = '''\
import json, sys
from typer.testing import CliRunner

from optima_agents.policies import SamplingParams, backend_names, capabilities_of
from optima_agents.rollout import EpisodeSpec, RolloutEngine
from optima_envs.errors import ConfigError
from optima_eval.evaluation import build_policy
from optima_train.cli import app
from optima_train.config.io import load_config
from optima_train.isft import ISFTConfig

cfg = load_config(ISFTConfig, sys.argv[1])
g = cfg.generation
policy = build_policy(g.backend, cfg.model.name, SamplingParams(temperature=g.temperature, max_new_tokens=8),
                      dtype=cfg.model.dtype, batch_size=g.batch_size, device="cpu", backend_kwargs=g.backend_kwargs)
engine = RolloutEngine(cfg.task.env_id, policy, env_kwargs=cfg.task.train_kwargs(), progress=False)
records = engine.run([EpisodeSpec(seed=i, index=i) for i in range(2)])
try:
    load_config(ISFTConfig, None, ["generation.backend=ecko"])
    unknown = None
except ConfigError as error:
    unknown = str(error)
cli = CliRunner().invoke(app, ["train", "echo-isft", "--config", sys.argv[1], "--iterations", "4", "--print-config"])
from optima_eval.heldout import HeldOut
from optima_eval.systems import SystemContext, list_systems, make_system

questions = HeldOut(cfg.task.env_id, cfg.task.eval_kwargs(), count=2, seed=0).questions()
outcomes = make_system("first-word").run(SystemContext(cfg.task.env_id, cfg.task.eval_kwargs(), questions, policy))
print(json.dumps({
    "names": backend_names(), "type": type(policy).__name__, "with_sampling": capabilities_of(policy).with_sampling,
    "texts": [t.text for r in records for t in r.turns], "end_reasons": [r.end_reason for r in records],
    "identities": sorted({p["backend"] for r in records for p in r.policies.values()}),
    "unknown": unknown, "cli_exit": cli.exit_code, "cli_output": cli.output,
    "systems": sorted(list_systems()), "answers": [o.answer for o in outcomes],
    "first_words": [q.instance.question.split()[0] for q in questions],
}))
'''


def _run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(args, capture_output=True, text=True, timeout=300, **kwargs)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """The plug-in package installed (offline, no build isolation) into a folder of its own."""
    source = tmp_path_factory.mktemp("echo-plugin")
    (source / "pyproject.toml").write_text(PYPROJECT)
    (source / "optima_echo_plugin.py").write_text(PLUGIN)
    site = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    _run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
          "--target", str(site), str(source)], env=env, cwd=source)
    assert list(site.glob("optima_echo_plugin-0.0.1.dist-info/entry_points.txt"))
    return site


def test_an_installed_backend_and_algorithm_are_used_by_name(plugin_site, tmp_path):
    config = tmp_path / "echo.yaml"
    config.write_text(textwrap.dedent(f"""\
        include: {ROOT / "configs" / "isft" / "synth_hop.yaml"}
        generation:
          backend: echo
          backend_kwargs: {{answer: Griru}}
        run:
          output_dir: {tmp_path / "run"}
        """))
    script = tmp_path / "use_plugin.py"
    script.write_text(USE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin_site), str(ROOT)])}
    out = json.loads(_run([sys.executable, str(script), str(config)], env=env, cwd=ROOT).stdout.strip().splitlines()[-1])

    assert out["names"][:3] == ["hf", "vllm", "openai"] and "echo" in out["names"]
    assert out["type"] == "EchoPolicy" and out["with_sampling"] is True
    assert out["texts"] and set(out["texts"]) == {"<A>Griru</A>"}
    assert out["end_reasons"] == ["agreed", "agreed"] and out["identities"] == ["echo"]
    assert "unknown backend 'ecko'; choose one of ['hf', 'vllm', 'openai', 'llamacpp', 'auto', 'echo']; did you mean 'echo'?" \
        in out["unknown"] and "entry-point group 'optima.backends'" in out["unknown"]
    assert out["cli_exit"] == 0, out["cli_output"]
    assert "backend: echo" in out["cli_output"] and "iterations: 4" in out["cli_output"]
    assert "first-word" in out["systems"] and {"cot", "sc", "mas"} <= set(out["systems"])
    assert out["answers"] == out["first_words"] and len(out["answers"]) == 2


def test_the_venv_itself_has_no_plugin(plugin_site):
    from optima_agents.policies import backend_names
    from optima_train.algorithms import algorithm_names

    from optima_eval.systems import list_systems

    assert "echo" not in backend_names() and "echo-isft" not in algorithm_names()
    assert "first-word" not in list_systems()
