"""Any Optima env as a verifiers (0.4) multi-agent environment, scored by the Optima rubric.

    import verifiers.v1 as vf
    from optima_train.integrations.verifiers import optima_env
    env = optima_env("synth-hop-ia", count=32, env_kwargs={"max_turns": 4})
    ctx = vf.ModelContext(model="my-model", client=vf.EvalClientConfig(base_url=..., api_key_var=...))
    async with env.serving():
        episode = await env.run_episode(next(iter(env.taskset)), ctx)

**Pieces.** `OptimaTaskset` yields one task per question (env id, reset seed, instance index);
`OptimaEnv` (verifiers' multi-agent `Env`) seats one verifiers agent per Optima agent (`alice`,
`bob` on `OptimaEnvConfig`; subclass it to add `carol: vf.AgentConfig = ...`) and relays the
dialogue: the Optima env decides whose turn it is and when it ends, each agent's interaction gets
its Optima system prompt and, each turn, the user message its Optima view ends with
(`optima_agents.chat`: the partner's message, or the kickoff when it speaks first), so every agent
sees exactly the conversation Optima's own policies see. `OptimaChatHarness` is a tool-less chat
loop run in-process (one model call per turn, through verifiers' interception, so traces, usage
and limits are verifiers' own); a seat may pin `harness={"id": "null"}` instead where `uv` exists.

**Rubric.** After the dialogue every agent's trace gets the Optima reward terms of the whole
dialogue (the agents cooperate): `score` (weight `score_weight`), `token_cost` (tokens /
`max_tokens`, weight `-lambda_token`) and `format_penalty` (weight `-lambda_format`), as
verifiers rewards, so `trace.reward` is the Optima reward without readability; `tokens`,
`agent_tokens`, `turns` and (with `readability_model`) `readability` are weight-0 metrics. The
token cost is normalised by a fixed `max_tokens`, since verifiers scores each episode alone. Token
counts are the Optima env's (its word counter, or `tokenizer`'s exact count). A dialogue whose
answer could not be scored fails its episode (Optima never scores it 0).

**Plug-in id.** verifiers resolves tasksets and harnesses by top-level module name; importing this
module registers it as `optima_verifiers`, so `taskset={"id": "optima_verifiers", ...}` resolves in
this process.
"""

from __future__ import annotations

import asyncio
import sys
from contextlib import AsyncExitStack
from typing import Any, Iterable

import httpx
import verifiers.v1 as vf
from pydantic import Field
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.errors import MODEL_TRANSPORT_ERROR_EXIT_CODE
from verifiers.v1.runtimes import ProgramResult, SubprocessConfig

from optima_agents.chat import chat_messages
from optima_envs.errors import ConfigError, ScoringError
from optima_envs.rewards import DialogueSample, RewardWeights, Turn, compute_rewards, default_rubric
from optima_train.integrations.reward_terms import REWARD_COLUMNS

__all__ = ["PLUGIN_ID", "OptimaChatHarness", "OptimaChatHarnessConfig", "OptimaEnv", "OptimaEnvConfig",
           "OptimaTask", "OptimaTaskData", "OptimaTaskset", "OptimaTasksetConfig", "optima_env"]

#: The verifiers plug-in id (taskset and default harness) this module answers to.
PLUGIN_ID = "optima_verifiers"


# ---------------------------------------------------------------------------------- tasks
class OptimaTasksetConfig(vf.TasksetConfig):
    """Which questions of which Optima env: `count` episodes with reset seeds `seed, seed+1, ...`
    and instance indices `first_index, first_index+1, ...`."""

    env_id: str = "synth-hop-ia"
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Options for `optima_envs.make` (e.g. `max_turns`, `split`)."""
    tokenizer: str | None = None
    """A model name or folder whose tokenizer counts the env's tokens (None: the word counter)."""
    count: int = Field(16, ge=1)
    seed: int = Field(0, ge=0)
    first_index: int = Field(0, ge=0)


class OptimaTaskData(vf.TaskData):
    env_id: str
    seed: int
    index: int


class OptimaTask(vf.Task[OptimaTaskData, vf.State, vf.TaskConfig]):
    """One question of an Optima env; scored by `OptimaEnv.finalize`, not by task hooks."""

    @property
    def key(self) -> str:
        return f"{self.data.env_id}:{self.data.seed}:{self.data.index}"


class OptimaTaskset(vf.Taskset[OptimaTask, OptimaTasksetConfig]):
    def load(self) -> Iterable[OptimaTask]:
        c = self.config
        for i in range(c.count):
            data = OptimaTaskData(env_id=c.env_id, seed=c.seed + i, index=c.first_index + i,
                                  id=f"{c.env_id}:{c.seed + i}:{c.first_index + i}")
            yield OptimaTask(data, c.task)


# ---------------------------------------------------------------------------------- harness
class OptimaChatHarnessConfig(vf.HarnessConfig):
    pass


class OptimaChatHarness(vf.Harness[OptimaChatHarnessConfig]):
    """A tool-less chat loop in-process: each segment is one chat completion on the conversation
    so far, sent through the rollout's interception endpoint (so verifiers records it)."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx: vf.ModelContext, trace: Any, runtime: Any, endpoint: str, secret: str,
                     mcp_urls: dict[str, str], data: vf.TaskData, tool_interception_url: str | None = None) -> ProgramResult:
        system, prompt = self.resolve_prompt(data)
        messages = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt:
            messages += [message_to_wire(m) for m in prompt]
        try:
            async with httpx.AsyncClient(timeout=None) as client:
                reply = await client.post(endpoint.rstrip("/") + "/chat/completions",
                                          headers={"Authorization": f"Bearer {secret}"},
                                          json={"model": ctx.model, "messages": messages})
        except httpx.HTTPError as error:
            return ProgramResult(MODEL_TRANSPORT_ERROR_EXIT_CODE, "", f"{type(error).__name__}: {error}")
        if reply.status_code >= 400:
            return ProgramResult(1, "", f"chat completion failed ({reply.status_code}): {reply.text[:2000]}")
        return ProgramResult(0, "", "")


# ---------------------------------------------------------------------------------- env
class OptimaEnvConfig(vf.EnvConfig):
    """Two seats named as Optima's default agents (each on the local subprocess runtime: the chat
    harness runs no code), and the rubric's weights."""

    alice: vf.AgentConfig = vf.AgentConfig(runtime=SubprocessConfig())
    bob: vf.AgentConfig = vf.AgentConfig(runtime=SubprocessConfig())
    score_weight: float = 1.0
    lambda_token: float = Field(0.5, ge=0)
    lambda_format: float = Field(0.5, ge=0)
    max_tokens: float = Field(512.0, gt=0)
    """The token cost is `tokens / max_tokens`."""
    lm_loss_floor: float = Field(1.0, gt=0)
    readability_model: str | None = None
    """A model (name or folder) whose per-turn loss gives the `readability` metric; None: no metric."""


class OptimaEnv(vf.Env[OptimaEnvConfig]):
    """An Optima dialogue played by verifiers agents, one per Optima agent (see the module doc)."""

    def __init__(self, config: OptimaEnvConfig) -> None:
        super().__init__(config)
        self._envs: dict[str, Any] = {}
        self._scorer: Any = None

    @property
    def weights(self) -> RewardWeights:
        c = self.config
        return RewardWeights(score=c.score_weight, lambda_token=c.lambda_token, lambda_loss=0.0,
                             lambda_format=c.lambda_format, lm_loss_floor=c.lm_loss_floor)

    def optima_env(self, env_id: str) -> Any:
        """The Optima env (one per id, shared by this env's episodes through snapshots)."""
        if env_id not in self._envs:
            import optima_envs

            taskset = self.taskset.config
            kwargs = dict(getattr(taskset, "env_kwargs", {}) or {})
            if getattr(taskset, "tokenizer", None):
                from transformers import AutoTokenizer

                from optima_agents.models import resolve_model

                kwargs["tokenizer"] = AutoTokenizer.from_pretrained(resolve_model(taskset.tokenizer))
            self._envs[env_id] = optima_envs.make(env_id, **kwargs)
        return self._envs[env_id]

    async def run(self, task: OptimaTask, agents: vf.Agents) -> None:
        env = self.optima_env(task.data.env_id)
        observations, _ = env.reset(seed=task.data.seed, options={"index": task.data.index})
        snapshot = env.snapshot()
        seats = {name: self._seat(agents, name) for name in env.possible_agents}
        async with AsyncExitStack() as stack:
            talks = {}
            for name, seat in seats.items():
                view = task.data.model_copy(update={"prompt": None, "system_prompt": observations[name]["system_prompt"]})
                talks[name] = await stack.enter_async_context(seat.interaction(OptimaTask(view, task.config)))
            while True:
                speaker = next(iter(observations.values()))["speaker"]
                if speaker is None:
                    break
                latest = chat_messages(observations[speaker])[-1]
                if latest["role"] != "user":
                    raise ConfigError(f"{speaker!r} would speak twice in a row; the relay needs alternating turns")
                segment = await talks[speaker].turn(latest["content"])
                if segment.terminated:
                    break  # the agent's run ended (a limit or an error): the dialogue is unfinished
                env.restore(snapshot)
                observations, *_ = env.step({speaker: segment.last_reply})
                snapshot = env.snapshot()
            env.restore(snapshot)
            dialogue = _dialogue_info(env)
            for talk in talks.values():
                talk.trace.info["optima"] = dialogue

    async def finalize(self, task: OptimaTask, episode: Any) -> None:
        dialogue = next((t.info["optima"] for t in episode.traces if "optima" in t.info), None)
        if dialogue is None or dialogue["end_reason"] is None:
            for trace in episode.traces:
                trace.record_metric("finished", 0.0)
            return
        if not dialogue["score_ok"]:
            raise ScoringError(f"{task.key}: the answer could not be scored ({dialogue['score_error']})")
        rubric = default_rubric(self.weights)
        sample = DialogueSample(group=task.key, agents=tuple(dialogue["agents"]),
                                utterances=tuple(Turn(speaker, text) for speaker, text in dialogue["turns"]),
                                tokens=dialogue["tokens"], score=dialogue["score"])
        (result,) = compute_rewards([sample], rubric=rubric, max_tokens=self.config.max_tokens).results
        readability = await self._readability([text for _, text in dialogue["turns"]])
        for trace in episode.traces:
            for term, weight in rubric.weights.items():
                value = float(result.components[term])
                if term in REWARD_COLUMNS and weight:
                    trace.record_reward(term, value, weight)
                else:
                    trace.record_metric(term, value)
            trace.record_metrics({"finished": 1.0, "turns": float(len(dialogue["turns"])),
                                  "agent_tokens": float(dialogue["agent_tokens"].get(trace.agent.name, 0))})
            if readability is not None:
                trace.record_metric("readability", readability)

    # ------------------------------------------------------------------ internals
    def _seat(self, agents: vf.Agents, name: str) -> Any:
        try:
            return getattr(agents, name)
        except AttributeError:
            raise ConfigError(f"the Optima env has agent {name!r} but {type(self.config).__name__} declares no such "
                              f"seat; subclass OptimaEnvConfig with `{name}: vf.AgentConfig = ...`") from None

    async def _readability(self, texts: list[str]) -> float | None:
        """`1 / max(max_turn_loss, lm_loss_floor)` under the readability model (None: not configured)."""
        if self.config.readability_model is None:
            return None
        if self._scorer is None:
            from optima_train.rewards import ReadabilityScorer

            self._scorer = ReadabilityScorer(self.config.readability_model)
        loss = await asyncio.to_thread(self._scorer.dialogue_loss, texts)
        return 0.0 if loss is None else 1.0 / max(loss, self.config.lm_loss_floor)


def optima_env(env_id: str, *, count: int = 16, seed: int = 0, first_index: int = 0,
               env_kwargs: dict[str, Any] | None = None, **config: Any) -> OptimaEnv:
    """An `OptimaEnv` on `count` questions of `env_id`; `config` sets `OptimaEnvConfig` fields
    (weights, `max_tokens`, seats)."""
    taskset = {"id": PLUGIN_ID, "env_id": env_id, "count": count, "seed": seed, "first_index": first_index,
               "env_kwargs": dict(env_kwargs or {})}
    return OptimaEnv(OptimaEnvConfig(taskset=taskset, **config))


def _dialogue_info(env: Any) -> dict[str, Any]:
    """What the rubric needs of the env's current (finished or cut) dialogue, as JSON data."""
    state = env.state
    outcome = state.outcome
    return {"agents": list(env.possible_agents), "turns": [[m.speaker, m.text] for m in state.messages],
            "tokens": int(state.total_tokens),
            "agent_tokens": {a: int(t) for a, t in zip(env.possible_agents, state.agent_tokens)},
            "end_reason": state.end_reason, "score": outcome.get("score"), "score_ok": bool(outcome.get("score_ok", True)),
            "score_error": outcome.get("score_error"), "answer": outcome.get("answer")}


sys.modules.setdefault(PLUGIN_ID, sys.modules[__name__])
