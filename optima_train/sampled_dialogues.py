"""The steps that sample-then-train loops share (iSFT, GRPO): sample dialogues per training
question into an episode buffer, and give each one the Optima reward, stored beside the buffer in
a side table keyed by episode (`optima_train.buffers.rewards`); later steps read the buffer with
the table attached (`scored_records`).

`SampledDialogues` is the `IterativeTrainer` of loops whose config samples whole dialogues: its
`sampler` is a `RolloutSamplerSection` (`SampledConfig`). A loop subclasses it with its config
(`class GRPOTrainer(SampledDialogues[GRPOConfig])`), keeps its own step methods and calls these
for the shared part.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence, TypeVar

from optima_train.config.sampler import RolloutSamplerSection, constrains
from optima_train.config.sections import TrainingConfig
from optima_train.loop import IterativeTrainer

__all__ = ["EPISODES", "SampledConfig", "SampledDialogues", "component_means", "load_records", "mean", "per_agent",
           "save_records", "scored_records"]

EPISODES = "episodes"  # an episode buffer directory (optima_train.buffers)


def save_records(path: Path, records: list[Any], *, writer: str) -> None:
    from optima_train.buffers import write_episodes

    write_episodes(path, records, metadata={"writer": writer})


def scored_records(run_dir: Any, it: int) -> list[Any]:
    """Iteration `it`'s sampled records of a run (`RunDir`) with the scoring step's reward
    components attached.

    A scoring step that finished before rewards had a side table stored a second, scored copy
    of the buffer in its folder instead; a run resumed across that change reads the copy."""
    from optima_train.buffers import REWARDS_FILE, attach_rewards, read_rewards

    scoring = run_dir.step_dir(it, "scoring")
    if not (scoring / REWARDS_FILE).exists() and (scoring / EPISODES).is_dir():
        return load_records(scoring / EPISODES)
    records = load_records(run_dir.step_dir(it, "generation") / EPISODES)
    return attach_rewards(records, read_rewards(scoring / REWARDS_FILE))


def load_records(path: Path) -> list[Any]:
    from optima_train.buffers import read_episodes

    return read_episodes(path)


def mean(values: Any) -> float | None:
    """The mean of the present, non-NaN values (None when there are none), rounded for summaries."""
    present = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    return round(sum(present) / len(present), 6) if present else None


class SampledConfig(TrainingConfig, Protocol):
    """A `TrainingConfig` whose sampler samples whole dialogues through the rollout engine."""

    @property
    def sampler(self) -> RolloutSamplerSection: ...


S = TypeVar("S", bound=SampledConfig)


class SampledDialogues(IterativeTrainer[S]):
    """Shared models, evaluation settings, sampling and reward of the sample-then-train loops."""

    def model_after(self, it: int) -> str:
        """The model iteration `it` produced: its checkpoint, or `model_before(it)` when it did not
        train (found from the run folder, so a moved run directory still resumes)."""
        if self.run_dir.done_info(it, "training").get("skipped"):
            return self.model_before(it)
        return str(self.run_dir.checkpoint(it))

    def _eval_sampling(self) -> Any:
        from optima_agents.policies import SamplingParams

        g, e = self.config.sampler, self.config.eval
        return SamplingParams(temperature=0.0, max_new_tokens=e.max_new_tokens or g.max_new_tokens, seed=None)

    def _eval_max_live(self) -> int | None:
        return self.config.sampler.max_live

    def _train_indices(self, it: int) -> range:
        """The training questions iteration `it` samples: the same every iteration (a loop whose
        config can give each iteration fresh ones overrides this)."""
        t = self.config.task
        return range(t.train_first_index, t.train_first_index + t.train_questions)

    def _sample_dialogues(self, folder: Path, it: int, *, per_question: int, sampling: Any,
                          options: Mapping[str, Any] | None = None,
                          expand: Callable[[list[Any], Any], list[Any]] | None = None
                          ) -> tuple[list[Any], dict[str, Any]]:
        """`per_question` seeded dialogues for every training question with `model_before(it)`,
        saved to `folder` (answers constrained where the sampler's `constrained_answers` says so for
        iteration `it`); returns the records and the step's info. `expand(records, env)`, when
        given, turns the sampled records into the ones saved (e.g. `answer_variants.enumerate_answers`)."""
        import optima_envs
        from optima_agents.rollout import EpisodeSpec, RolloutEngine, derive_seed

        cfg, t, g = self.config, self.config.task, self.config.sampler
        constrained = constrains(g.constrained_answers, it)
        specs = [EpisodeSpec(seed=derive_seed(cfg.run.seed, it, q, j), index=q, options=dict(options or {}),
                             constrain_answers=constrained)
                 for q in self._train_indices(it)
                 for j in range(per_question)]
        env = optima_envs.make(t.env_id, **self._env_kwargs(t.train_kwargs()))
        policy = per_agent(self._policy_for(self.model_before(it), sampling), sampling,
                           g.temperatures_by_agent(), env.possible_agents)
        engine = RolloutEngine(env, policy, max_live=g.max_live, progress=cfg.run.progress, scheduling=g.scheduling,
                               max_inflight=g.max_inflight)
        sampled = engine.run(specs)
        records = sampled if expand is None else expand(sampled, env)
        save_records(folder / EPISODES, records, writer=self.NAME)
        stats = engine.last_stats
        ran = [r for r in sampled if not r.infra_failure]
        return records, {"model": self.model_before(it), "episodes": len(records), "sampled": len(sampled),
                         "constrained_answers": constrained,
                         "infra_failures": stats.infra_failures, "generated_tokens": stats.generated_tokens,
                         "tokens_per_s": round(stats.tokens_per_s, 2),
                         "mean_tokens": mean([r.total_tokens for r in ran]),
                         "mean_score": mean([r.score for r in ran if r.scored])}

    def _rewarded(self, it: int) -> tuple[list[Any], Any, Any]:
        """Iteration `it`'s sampled records (as sampled), their reward batch (aligned with them),
        and the readability scorer (None when `lambda_loss` is 0)."""
        from optima_train.rewards import compute_rewards, dialogue_sample

        r = self.config.reward
        records = load_records(self.run_dir.step_dir(it, "generation") / EPISODES)
        samples = [dialogue_sample(rec, group=rec.instance_id) for rec in records]
        loss_fn = self._reference() if r.lambda_loss > 0 else None
        batch = compute_rewards(samples, weights=r.weights(), turn_loss=loss_fn,
                                token_normalization=r.token_normalization, token_percentile=r.token_percentile,
                                repeat_ratio=r.repeat_ratio, repeat_min_chars=r.repeat_min_chars)
        return records, batch, loss_fn

    @staticmethod
    def _save_rewards(folder: Path, records: Sequence[Any], components: Sequence[Mapping[str, Any]]) -> None:
        """The scoring step's side table: `components[k]` for the episode at position `k` of the
        generation buffer (`optima_train.buffers.rewards`)."""
        from optima_train.buffers import REWARDS_FILE, EpisodeRewards, write_rewards

        write_rewards(folder / REWARDS_FILE, [EpisodeRewards.of(pos, rec, values)
                                              for pos, (rec, values) in enumerate(zip(records, components))])

    def _scored_records(self, it: int) -> list[Any]:
        return scored_records(self.run_dir, it)


def per_agent(policy: Any, sampling: Any, temperatures: Mapping[str, float], agents: Sequence[str]) -> Any:
    """`policy`, or one policy per agent when some agents sample at their own temperature (each
    shares the loaded model through `with_sampling`)."""
    if not temperatures:
        return policy
    strangers = sorted(set(temperatures) - set(agents))
    if strangers:
        from optima_envs.errors import ConfigError

        raise ConfigError(f"generation.agent_temperatures names {strangers}, not agents of this env {list(agents)}")
    return {a: policy.with_sampling(replace(sampling, temperature=float(temperatures[a]))) if a in temperatures
            else policy for a in agents}


def component_means(results: Sequence[Any], keys: Sequence[str]) -> dict[str, float | None]:
    """The mean of each reward component over the dialogues that got a reward."""
    return {key: mean([res.components.get(key) for res in results if res.reward is not None]) for key in keys}
