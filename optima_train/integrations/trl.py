"""Any Optima env as a rollout source for TRL's `GRPOTrainer` (TRL 1.16 `rollout_func`).

    source = OptimaRollout("synth-hop-ia", env_kwargs={"max_turns": 4})
    trainer = trl.GRPOTrainer(model, reward_funcs=source.reward_funcs, train_dataset=source.dataset(64),
                              args=trl.GRPOConfig(num_generations=8, ...), processing_class=tokenizer,
                              rollout_func=source)

**The unit.** TRL's unit is one (prompt, completion) row, repeated `num_generations` times per
dataset prompt; the group of a row is its copies. Here a dataset row is one question of the env
(its reset seed and index, so one deal of the evidence) and one seat (`alice`, `bob`, ...): its
prompt is that agent's system prompt. For each row `rollout_func` plays a whole multi-agent
dialogue through Optima's `RolloutEngine` (every agent on the trainer's model, self-play, each
copy of a row with its own sampling seed) and returns that agent's view of it as the completion:
its turns and its partners' turns in its chat template, with `env_mask` 1 on its own reply tokens
(and the end-of-turn token it emitted) and 0 on everything it did not generate. `logprobs` are the
sampler's, where the reply's stored ids are the sampled ones (NaN on trained tokens without one,
0 on masked ones). The sequence is built by `optima_train.examples.policy_examples`, exactly as
Optima's own GRPO builds it. A seat that never spoke gets a one-token completion with mask 0.

**The reward.** The Optima reward of each dialogue (`optima_envs.rewards.compute_rewards`, token
cost normalised within each row's group), returned as separate TRL reward columns: `optima_score`,
`optima_token_cost`, `optima_readability` and `optima_format`, each already weighted and signed
(`weight * term`), so their sum, with TRL's default reward weights of 1, is the Optima reward.
Leave `GRPOConfig.reward_weights` unset; change the weights through `RewardWeights`. A dialogue
that failed (infra failure, unscorable answer) gets None in every column, which TRL leaves out.

**Generation.** By default an `HFPolicy` on the trainer's own (unwrapped) model at the trainer's
`temperature`/`top_p`, with `max_new_tokens` per turn (default: `max_completion_length`). Pass
`policy=lambda trainer: ...` for another backend (e.g. an `OpenAIPolicy` on the vLLM server TRL
syncs weights to before each rollout).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from optima_agents.rollout import EpisodeRecord, EpisodeSpec, RolloutEngine, derive_seed
from optima_envs.errors import ConfigError
from optima_envs.rewards import RewardWeights, TurnLossFn, compute_rewards, default_rubric
from optima_envs.rewards.normalization import TokenNormalization
from optima_train.integrations.reward_terms import REWARD_COLUMNS, weighted_terms
from optima_train.rewards.episodes import dialogue_sample

__all__ = ["OptimaRollout", "RowSpec"]


@dataclass(frozen=True)
class RowSpec:
    """What one dataset row plays: the env's reset seed and instance index, and the seat trained."""

    seed: int
    index: int
    agent: str


class OptimaRollout:
    """An Optima env as TRL's `rollout_func`, with its dataset and its reward functions.

    Args:
        env_id: a registered Optima env id.
        env_kwargs: options for `optima_envs.make` (e.g. `max_turns`, `split`).
        agents: the seats to train (default: every agent of the env).
        weights: the Optima reward's weights; `lambda_loss > 0` needs `turn_loss`.
        turn_loss: per-utterance loss for readability (`optima_train.rewards.ReadabilityScorer`
            on a frozen reference model, never the trained one).
        token_normalization: how the token cost is normalised ("group": by the longest dialogue
            among a row's copies; "percentile": over the whole batch).
        max_new_tokens: tokens per turn (None: the trainer's `max_completion_length`).
        max_length: the longest sequence returned (longer views keep their start).
        policy: builds the generation policy from the trainer (None: `HFPolicy` on its model).
        seed: mixed into every episode's sampling seed.

    Attributes:
        rows: each dataset prompt (the seat's system prompt) and the row it plays.
        last_records: the `EpisodeRecord`s of the last `rollout_func` call, one per row.
    """

    def __init__(self, env_id: str, *, env_kwargs: Mapping[str, Any] | None = None,
                 agents: Sequence[str] | None = None, weights: RewardWeights = RewardWeights(lambda_loss=0.0),
                 turn_loss: TurnLossFn | None = None, token_normalization: TokenNormalization = "group",
                 max_new_tokens: int | None = None, max_length: int = 4096,
                 policy: Callable[[Any], Any] | None = None, seed: int = 0):
        import optima_envs

        self.env = optima_envs.make(env_id, **dict(env_kwargs or {}))
        unknown = sorted(set(agents or ()) - set(self.env.possible_agents))
        if unknown:
            raise ConfigError(f"agents {unknown} are not seats of {env_id}: {self.env.possible_agents}")
        if weights.lambda_loss > 0 and turn_loss is None:
            raise ConfigError("weights.lambda_loss > 0 needs turn_loss (a ReadabilityScorer on a reference model); "
                              "pass one or set lambda_loss=0")
        self.agents = tuple(agents or self.env.possible_agents)
        self.weights, self.turn_loss, self.token_normalization = weights, turn_loss, token_normalization
        self.max_new_tokens, self.max_length, self.seed = max_new_tokens, max_length, seed
        self.make_policy = policy
        self.rows: dict[str, RowSpec] = {}
        self.calls = 0
        self.last_records: list[EpisodeRecord] = []
        self.reward_funcs = [_column_reader(name) for name in REWARD_COLUMNS.values()]

    # ------------------------------------------------------------------ the dataset
    def dataset(self, count: int, *, seed: int = 0, first_index: int = 0) -> Any:
        """`count` questions (reset seeds `seed, seed+1, ...`, indices from `first_index`) times the
        trained seats, one row each, with a conversational `prompt`: the seat's system prompt."""
        from datasets import Dataset

        prompts = []
        for i in range(count):
            row_seed, index = seed + i, first_index + i
            observations, _ = self.env.reset(seed=row_seed, options={"index": index})
            for agent in self.agents:
                text = observations[agent]["system_prompt"]
                if text in self.rows and self.rows[text] != RowSpec(row_seed, index, agent):
                    continue  # the same deal seen again: one row plays it
                self.rows[text] = RowSpec(row_seed, index, agent)
                prompts.append([{"role": "system", "content": text}])
        return Dataset.from_dict({"prompt": prompts})

    # ------------------------------------------------------------------ rollout_func
    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, list[Any]]:
        """TRL's `rollout_func`: one dialogue per prompt row, that row's agent's view as the completion."""
        self._check_weights(trainer)
        specs = [self._row(prompt) for prompt in prompts]
        tokenizer = trainer.processing_class
        policy = self.make_policy(trainer) if self.make_policy is not None else self._trainer_policy(trainer)
        self.calls += 1
        step = int(trainer.state.global_step)
        process = int(getattr(trainer.accelerator, "process_index", 0))
        episodes = [EpisodeSpec(seed=s.seed, index=s.index, sampling_seed=derive_seed(self.seed, step, process,
                                                                                      self.calls, i))
                    for i, s in enumerate(specs)]
        records = self.last_records = RolloutEngine(self.env, policy, progress=False, scheduling="lock-step").run(episodes)
        out: dict[str, list[Any]] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": []}
        for i, (spec, record) in enumerate(zip(specs, records)):
            prompt_ids, completion_ids, mask, logprobs = self._view(record, spec.agent, tokenizer, i)
            out["prompt_ids"].append(prompt_ids)
            out["completion_ids"].append(completion_ids)
            out["env_mask"].append(mask)
            out["logprobs"].append(logprobs)
        out.update(self._rewards(records, specs))
        out["optima_agent"] = [s.agent for s in specs]
        out["optima_tokens"] = [int(r.total_tokens) for r in records]
        out["optima_end_reason"] = [str(r.end_reason) for r in records]
        return out

    # ------------------------------------------------------------------ internals
    def _row(self, prompt: Any) -> RowSpec:
        text = prompt[0].get("content") if isinstance(prompt, list) and prompt and isinstance(prompt[0], Mapping) \
            else prompt
        spec = self.rows.get(text) if isinstance(text, str) else None
        if spec is None:
            raise ConfigError("rollout_func got a prompt that is not a row of this source's dataset; build "
                              "train_dataset with OptimaRollout.dataset(...) from the same object")
        return spec

    def _check_weights(self, trainer: Any) -> None:
        names = list(getattr(trainer, "reward_func_names", []))
        weights = getattr(trainer, "reward_weights", None)
        for name, weight in zip(names, weights.tolist() if weights is not None else []):
            if name in REWARD_COLUMNS.values() and weight != 1.0:
                raise ConfigError(f"GRPOConfig.reward_weights gives {name} weight {weight}; the Optima columns are "
                                  "already weighted (RewardWeights), so leave their reward_weights at 1")

    def _trainer_policy(self, trainer: Any) -> Any:
        from optima_agents.policies import HFPolicy, SamplingParams

        sampling = SamplingParams(temperature=float(trainer.temperature), top_p=float(trainer.top_p or 1.0),
                                  max_new_tokens=int(self.max_new_tokens or trainer.max_completion_length),
                                  seed=self.seed, logprobs=True)
        model = trainer.accelerator.unwrap_model(trainer.model)
        return HFPolicy(model, tokenizer=trainer.processing_class, sampling=sampling)

    def _view(self, record: EpisodeRecord, agent: str, tokenizer: Any,
              position: int) -> tuple[list[int], list[int], list[int], list[float]]:
        """`agent`'s view of `record` split where its first reply starts, cut after its last trained token."""
        from optima_train.examples.policy import policy_examples

        example = next((e for e in policy_examples(record, 0.0, tokenizer, episode=position,
                                                   max_length=self.max_length) if e.agent == agent), None)
        if example is None:
            return self._silent(record, agent, tokenizer)
        first = example.loss_mask.index(1)
        last = len(example.loss_mask) - example.loss_mask[::-1].index(1)
        ids, mask = example.input_ids[first:last], example.loss_mask[first:last]
        logprobs = [(0.0 if m == 0 else float(v)) for m, v in zip(mask, example.old_logprobs[first:last])]
        return example.input_ids[:first], ids, mask, logprobs

    @staticmethod
    def _silent(record: EpisodeRecord, agent: str, tokenizer: Any) -> tuple[list[int], list[int], list[int], list[float]]:
        """A seat that never spoke: its prompt and one end-of-sequence token that carries no loss."""
        prompt = record.system_prompts[record.agents.index(agent)]
        ids = tokenizer.apply_chat_template([{"role": "system", "content": prompt}], tokenize=True,
                                            add_generation_prompt=True)
        ids = list(ids["input_ids"] if isinstance(ids, Mapping) else ids)
        end = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.pad_token_id
        return ids, [int(end)], [0], [0.0]

    def _rewards(self, records: Sequence[EpisodeRecord], specs: Sequence[RowSpec]) -> dict[str, list[float | None]]:
        """The weighted Optima reward terms of each row's dialogue, one TRL column per term."""
        samples = [dialogue_sample(r, group=(s.seed, s.index, s.agent)) for r, s in zip(records, specs)]
        rubric = default_rubric(self.weights)
        batch = compute_rewards(samples, rubric=rubric, turn_loss=self.turn_loss,
                                token_normalization=self.token_normalization)
        columns: dict[str, list[float | None]] = {column: [] for column in REWARD_COLUMNS.values()}
        for result in batch.results:
            terms = weighted_terms(result, rubric) if result.reward is not None else {}
            for term, column in REWARD_COLUMNS.items():
                value = terms.get(term)
                columns[column].append(None if value is None or math.isnan(value) else value)
        return columns


def _column_reader(column: str) -> Callable[..., list[float | None]]:
    """A TRL reward function returning the rollout's `column` (named after it, so TRL logs it so)."""

    def reward(prompts: Any = None, completions: Any = None, **kwargs: Any) -> list[float | None]:
        if column not in kwargs:
            raise ConfigError(f"reward function {column} needs the {column!r} field that OptimaRollout returns; pass "
                              "rollout_func=<the OptimaRollout> to GRPOTrainer")
        return list(kwargs[column])

    reward.__name__ = reward.__qualname__ = column
    return reward
