"""Optima envs as verifiers environments, run by the real verifiers package (its env, agents,
interception server and eval client) against a scripted OpenAI-compatible server on localhost.
The same script played through Optima's own rollout engine must give the same dialogues, and the
verifiers rubric must equal the Optima reward of those dialogues."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator, Mapping

import pytest

vf = pytest.importorskip("verifiers.v1")

from optima_agents.chat import chat_messages  # noqa: E402
from optima_agents.policies import ScriptedPolicy  # noqa: E402
from optima_agents.rollout import EpisodeSpec, RolloutEngine  # noqa: E402
from optima_envs.rewards import RewardWeights, compute_rewards  # noqa: E402
from optima_train.rewards import dialogue_sample  # noqa: E402
from optima_train.integrations.verifiers import OptimaEnvConfig, optima_env  # noqa: E402

def script(messages: list[Mapping[str, str]]) -> str:
    """A deterministic player reading only its chat messages: it shares its facts, then answers
    (right on synth-hop-ia's first training question, wrong on the others)."""
    system = messages[0]["content"]
    facts = [line[2:] for line in system.splitlines() if line.startswith("- ")]
    if not any(m["role"] == "assistant" for m in messages):
        return "I know: " + " ".join(facts)
    question = next(line for line in system.splitlines() if line.startswith("Question:"))
    return "<A>Traivul</A>" if "Rilada" in question else "<A>Nowhere</A>"


class ScriptedServer(BaseHTTPRequestHandler):
    """POST /v1/chat/completions -> `script(messages)`; counts the calls."""

    calls = 0

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).calls += 1
        text = script(body["messages"])
        reply = {"id": f"c{self.calls}", "object": "chat.completion", "created": 0, "model": body.get("model", "m"),
                 "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                 "usage": {"prompt_tokens": 1, "completion_tokens": len(text.split()), "total_tokens": 1}}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), ScriptedServer)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def run_episodes(env: Any, url: str) -> list[Any]:
    ctx = vf.ModelContext(model="scripted", client=vf.EvalClientConfig(base_url=url, api_key_var="OPTIMA_TEST_KEY"))

    async def main() -> list[Any]:
        async with env.serving():
            return list(await asyncio.gather(*(env.run_episode(task, ctx) for task in env.taskset)))

    return asyncio.run(main())


def test_verifiers_rubric_equals_the_optima_reward_of_the_same_dialogues(server):
    env_kwargs = {"max_turns": 4}
    env = optima_env("synth-hop-ia", count=3, env_kwargs=env_kwargs, lambda_token=0.25, max_tokens=100.0)
    ScriptedServer.calls = 0
    episodes = run_episodes(env, server)

    optima = RolloutEngine("synth-hop-ia", ScriptedPolicy(lambda obs: script(chat_messages(obs))),
                           env_kwargs=env_kwargs, progress=False)
    records = optima.run([EpisodeSpec(seed=i, index=i) for i in range(3)])
    expected = compute_rewards([dialogue_sample(r, group=i) for i, r in enumerate(records)],
                               weights=RewardWeights(lambda_token=0.25, lambda_loss=0.0), max_tokens=100.0).results

    assert ScriptedServer.calls == sum(len(r.turns) for r in records)  # one model call per Optima turn
    assert [r.score for r in records] == [1.0, 0.0, 0.0]
    for episode, record, reward in zip(episodes, records, expected):
        assert episode.ok, episode.errors
        assert sorted(t.agent.name for t in episode.traces) == ["alice", "bob"]
        for trace in episode.traces:
            assert trace.info["optima"]["turns"] == [[t.speaker, t.text] for t in record.turns]
            assert trace.rewards["score"].score == record.score
            assert trace.rewards["token_cost"].weight == -0.25
            assert trace.rewards["token_cost"].score == pytest.approx(record.total_tokens / 100.0)
            assert trace.reward == pytest.approx(reward.reward)
            assert trace.metrics["tokens"] == record.total_tokens
            assert trace.metrics["agent_tokens"] == record.agent_tokens[trace.agent.name]
            assert trace.metrics["finished"] == 1.0
            assert trace.num_turns == sum(t.speaker == trace.agent.name for t in record.turns)


def test_readability_is_a_weight_zero_metric(server, tmp_path):
    from tests.train.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path / "reference")
    env = optima_env("synth-hop-ia", count=1, env_kwargs={"max_turns": 2}, readability_model=str(model))
    (episode,) = run_episodes(env, server)
    for trace in episode.traces:
        assert 0.0 < trace.metrics["readability"] <= 1.0
        assert "readability" not in trace.rewards


def test_an_env_agent_without_a_seat_fails_the_episode_clearly(server):
    env = optima_env("synth-hop-ia", count=1, env_kwargs={"num_agents": 3, "max_turns": 3})
    (episode,) = run_episodes(env, server)
    assert not episode.ok
    assert "carol" in episode.errors[0].message and "OptimaEnvConfig" in episode.errors[0].message


def test_the_config_narrows_to_the_optima_taskset():
    config = OptimaEnvConfig(taskset={"id": "optima_verifiers", "env_id": "negotiation-game", "count": 2})
    assert type(config.taskset).__name__ == "OptimaTasksetConfig" and config.taskset.env_id == "negotiation-game"
    assert type(config.agent_harnesses()["alice"]).__name__ == "OptimaChatHarnessConfig"
