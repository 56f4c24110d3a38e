"""`IDPOTrainer`: iterative DPO with MCTS over dialogue turns (docs/design.md section 2), resumable by step.

Per iteration `i` (the run-dir layout of `optima_train.run_dir`, steps `search`, `training`,
`evaluation`):

1. **search**: one MCTS tree per training question with model `M_i` (`M_0` is the starting
   model, e.g. an iSFT iteration-0 checkpoint) at the search temperature; rollouts are scored
   with the Optima reward (`OptimaTreeReward`: score, token cost at a scale frozen from the
   first round, readability under the frozen reference model, format rules). Writes
   `trees.parquet`, `rollouts.parquet`, and `pairs.parquet` (every qualifying best/worst
   sibling pair with its prompt, the kept ones flagged) plus `search.json` (statistics).
2. **training**: TRL `DPOTrainer` on the kept pairs, DPO + NLL on the chosen reply
   (`loss_type=["sigmoid", "sft"]`, weights `[1, rpo_alpha]`), LoRA by default with the
   reference being the same model with the adapter disabled (`ref_model=None`: no second copy
   in memory); the adapter is merged and saved as a plain HF folder, `M_{i+1}`. Too few pairs:
   the step records that and `M_{i+1} = M_i`.
3. **evaluation**: greedy dialogues on the held-out questions with `M_{i+1}`
   (`optima_eval.evaluation`, the same held-out set as iSFT for the same task section).

Each step writes its `DONE.json` last; a restarted run skips finished steps. The search keeps each
finished round in `search.progress/` beside its folder, so a killed search resumes at its next
round with the same trees, seeds and token normaliser.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from optima_envs.atomic_files import atomic_write_json
from optima_train.idpo.idpo_config import IDPOConfig
from optima_train.loop import IterativeTrainer
from optima_train.run_dir import read_json

__all__ = ["IDPO_STEPS", "IDPOTrainer", "train_dpo"]

IDPO_STEPS = ("search", "training", "evaluation")


class SearchRounds(NamedTuple):
    """A search done in rounds: the result of all its trees, their pair extraction, the rounds
    searched, and how many of those an earlier attempt had finished (read back, not searched)."""

    result: Any
    extraction: Any
    rounds: int
    read_back: int


class IDPOTrainer(IterativeTrainer[IDPOConfig]):
    """Runs (or resumes) an iDPO run described by an `IDPOConfig` (arguments: `IterativeTrainer`)."""

    NAME = "idpo"
    STEPS = ("search", "training")
    SCALARS = ("heldout_score", "heldout_tokens", "kept_pairs", "mean_gap", "mean_root_value", "train_loss",
               "reward_accuracy")
    NEEDS_SNAPSHOT = True

    def _first_train_index(self) -> int:
        return self.config.train_indices(0).start

    # ------------------------------------------------------------------ models
    def model_after(self, it: int) -> str:
        """The checkpoint iteration `it` produced (its training step's record)."""
        return str(self.run_dir.done_info(it, "training")["checkpoint"])

    def _eval_sampling(self) -> Any:
        from optima_agents.policies import SamplingParams

        cfg = self.config
        return SamplingParams(temperature=0.0, max_new_tokens=cfg.eval.max_new_tokens or cfg.mcts.max_new_tokens,
                              seed=None)

    # ------------------------------------------------------------------ steps
    def _search(self, folder: Path, it: int) -> dict[str, Any]:
        import optima_envs
        from optima_agents.chat import DEFAULT_CHAT_FORMAT
        from optima_agents.mcts import MCTSPlanner, OptimaTreeReward, TreeTask
        from optima_agents.policies import SamplingParams, capabilities_of
        from optima_agents.rollout import derive_seed
        from optima_train.examples.dpo import pair_rows, write_pairs
        from optima_train.search_trees import pair_statistics, write_trees

        cfg, m, r = self.config, self.config.mcts, self.config.reward
        mcts = dataclasses.replace(m, seed=derive_seed(cfg.run.seed, m.seed, it))
        sampling = SamplingParams(temperature=m.temperature, top_p=m.top_p, max_new_tokens=m.max_new_tokens,
                                  seed=cfg.run.seed)
        model = self.model_before(it)
        policy = self._policy_for(model, sampling)
        reward = OptimaTreeReward(r.weights(), self._reference() if r.lambda_loss > 0 else None,
                                  token_percentile=r.token_percentile, grounded_only=r.grounded_only,
                                  repeat_ratio=r.repeat_ratio,
                                  repeat_min_chars=r.repeat_min_chars)
        env = optima_envs.make(cfg.task.env_id, **self._env_kwargs(cfg.task.train_kwargs()))
        tasks = [TreeTask(f"i{it:03d}-q{q:06d}", seed=derive_seed(cfg.run.seed, it, q), options={"index": q})
                 for q in cfg.train_indices(it)]
        if (why := MCTSPlanner(policy, reward, mcts).sampling_mismatch()) is not None:
            self.console.print(f"[yellow]search policy sampling differs from mcts settings: {why}[/]")
        result, extraction, rounds, read_back = self._search_rounds(
            lambda c: MCTSPlanner(policy, reward, c), env, tasks, mcts,
            progress=self.run_dir.progress_dir(it, "search"), reward=reward)
        chat_format = policy.chat_format if capabilities_of(policy).chat_format else DEFAULT_CHAT_FORMAT
        rows = pair_rows(result.trees, extraction, iteration=it, chat_format=chat_format)
        write_trees(result.trees, folder)
        write_pairs(rows, folder / "pairs.parquet")
        stats = pair_statistics(rows, result.trees)
        search_stats = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in result.stats.items()}
        atomic_write_json(folder / "search.json", {"model": model, "mcts": mcts.to_dict(), "search": search_stats,
                                                   "pairs": stats, "max_tokens": reward.max_tokens,
                                                   "trees": [t.stats() for t in result.trees]})
        return {"model": model, "trees": len(result.trees), "tree_budget": len(tasks), "rounds": rounds,
                "rounds_read_back": read_back,
                "qualifying_pairs": stats["qualifying_pairs"],
                "kept_pairs": stats["kept_pairs"], "mean_gap": stats["gap"]["mean"],
                "mean_chosen_tokens": stats["chosen_tokens"]["mean"],
                "mean_rejected_tokens": stats["rejected_tokens"]["mean"],
                "mean_root_value": stats["root_value"]["mean"], "max_tokens": reward.max_tokens,
                "search": search_stats}

    def _search_rounds(self, planner_for: Callable[[Any], Any], env: Any, tasks: Sequence[Any], mcts: Any, *,
                       progress: Path | None = None, reward: Any = None) -> SearchRounds:
        """Search `tasks` in order, all at once, or with `search.min_kept_pairs` set, a round of
        `search.round_trees` at a time until the kept pairs reach it (or the tasks run out).

        Round r searches with the MCTS seed derived from (seed, r), round 0 with the seed itself, so
        a search that fits in one round is the all-at-once search. With `progress` (a folder that
        outlives a killed attempt), each finished round is saved there and a rerun reads it back
        instead of searching it again; `reward.max_tokens`, frozen in round 0, is restored with it,
        so a resumed search is the uninterrupted one."""
        from optima_agents.mcts import SearchResult, extract_pairs
        from optima_agents.rollout import derive_seed

        s = self.config.search
        size = len(tasks) if s.min_kept_pairs is None else s.round_trees
        trees: list[Any] = []
        stats: dict[str, Any] = {}
        rounds = read_back = 0
        for start in range(0, len(tasks), size):
            chunk = tasks[start:start + size]
            tree_ids = [t.tree_id for t in chunk]
            saved = _load_round(progress, rounds, tree_ids) if progress else None
            if saved is not None:
                result = SearchResult(trees=saved["trees"], stats=saved["stats"])
                if reward is not None and reward.max_tokens is None:
                    reward.max_tokens = saved["max_tokens"]
                read_back += 1
                self.console.print(f"search round {rounds + 1}: read back from {progress}")
            else:
                config = mcts if rounds == 0 else dataclasses.replace(mcts, seed=derive_seed(mcts.seed, rounds))
                result = planner_for(config).search(env, chunk)
                for tree in result.trees:
                    tree.check_invariants()
                if progress is not None:
                    _save_round(progress, rounds, tree_ids, result, getattr(reward, "max_tokens", None))
            rounds += 1
            trees += result.trees
            for key, value in result.stats.items():
                stats[key] = stats.get(key, 0) + value
            extraction = extract_pairs(trees, self.config.pairs)
            if s.min_kept_pairs is not None:
                self.console.print(f"search round {rounds}: {len(trees)} trees, {len(extraction.kept)} kept pairs "
                                   f"(target {s.min_kept_pairs}, budget {len(tasks)} trees)")
                if len(extraction.kept) >= s.min_kept_pairs:
                    break
        return SearchRounds(SearchResult(trees=trees, stats=stats), extraction, rounds, read_back)

    def _training(self, folder: Path, it: int) -> dict[str, Any]:
        cfg = self.config
        init = self._training_init(it)
        kept = read_json(self.run_dir.step_dir(it, "search") / "DONE.json").get("kept_pairs", 0)
        if kept < cfg.train.min_pairs:
            self._unchanged(it, f"{kept} pair(s) kept, fewer than train.min_pairs={cfg.train.min_pairs}")
            return {"skipped": f"{kept} kept pairs < train.min_pairs", "checkpoint": init, "pairs": kept,
                    "train_loss": None}
        self.release_for_training()
        return train_dpo(cfg, self.run_dir.step_dir(it, "search") / "pairs.parquet", init, folder,
                         seed=cfg.run.seed + it)

    # ------------------------------------------------------------------ summaries
    def _summary(self, it: int, info: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        search, training = info["search"], info["training"]
        return {
            "trees": search.get("trees"),
            "kept_pairs": search.get("kept_pairs"),
            "qualifying_pairs": search.get("qualifying_pairs"),
            "mean_gap": search.get("mean_gap"),
            "mean_root_value": search.get("mean_root_value"),
            "train_loss": training.get("train_loss"),
            "reward_accuracy": training.get("reward_accuracy"),
        }

    def _summary_detail(self, s: Mapping[str, Any]) -> str:
        return f"{s['kept_pairs']} pairs from {s['trees']} trees | gap {self._fmt(s['mean_gap'])}"


def train_dpo(cfg: Any, pairs: Path, init: str, folder: Path, *, seed: int) -> dict[str, Any]:
    """One DPO round on the kept pairs of `pairs` (a pairs.parquet): LoRA (merged) or full
    fine-tuning of `init`; saves `folder/checkpoint`, `folder/logs` (TensorBoard), `train.json`.

    `cfg` is any config with `train` (a `DPOTrainSection`), `lora` and `run` sections.
    """
    from trl import DPOConfig, DPOTrainer

    from optima_train.examples.dpo import read_pairs, to_dpo_dataset
    from optima_train.trl_glue import quiet_progress, train_with

    t = cfg.train
    quiet_progress(cfg)
    dataset = to_dpo_dataset(read_pairs(pairs)).remove_columns(["pair_id"])
    losses = {"loss_type": ["sigmoid", "sft"], "loss_weights": [1.0, t.rpo_alpha]} if t.rpo_alpha > 0 else \
        {"loss_type": ["sigmoid"]}
    # ref_model=None with a peft_config: the reference log-probs come from the same model with
    # the adapter disabled (TRL's `use_adapter(..., None)`), so no second copy is held in memory.
    run = train_with(DPOTrainer, DPOConfig, cfg, init, folder, dataset, seed=seed,
                     method_args={"beta": t.beta, **losses}, ref_model=None)
    logged = [h for h in run.history if "loss" in h]
    last = logged[-1] if logged else {}
    return {"checkpoint": str(folder / "checkpoint"), "init": init, "pairs": len(dataset),
            "steps": run.output.global_step, "train_loss": run.output.training_loss,
            "reward_accuracy": last.get("rewards/accuracies"), "reward_margin": last.get("rewards/margins"),
            "trainable_parameters": run.trainable_parameters, "lora": cfg.lora.enabled, "beta": t.beta,
            "rpo_alpha": t.rpo_alpha, "reference": "adapter-disabled" if run.lora else "copy of init"}


# ---------------------------------------------------------------------- search progress
def _round_path(progress: Path, index: int) -> Path:
    return progress / f"round_{index:03d}.pkl"


def _save_round(progress: Path, index: int, tree_ids: Sequence[str], result: Any, max_tokens: float | None) -> None:
    """Keep one finished search round (the trees of tasks `tree_ids`) for a rerun. Its trees drop
    their env snapshots first: only a search restores them, and the rest (pairs, tables) reads
    texts and observations."""
    import pickle

    from optima_envs.atomic_files import atomic_write_bytes

    for tree in result.trees:
        for node in tree.nodes:
            node.snapshot = None
    record = {"tree_ids": list(tree_ids), "trees": result.trees, "stats": dict(result.stats),
              "max_tokens": max_tokens}
    atomic_write_bytes(_round_path(progress, index), pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL))


def _load_round(progress: Path, index: int, tree_ids: Sequence[str]) -> dict[str, Any] | None:
    """Round `index` as an earlier attempt saved it, or None when it was not saved or holds other
    trees than `tree_ids` (a file this run did not write for this round is never trusted).

    The file is a pickle the same run wrote into its own run directory."""
    import pickle

    path = _round_path(progress, index)
    if not path.is_file():
        return None
    try:
        record = pickle.loads(path.read_bytes())
    except (pickle.UnpicklingError, EOFError, AttributeError, ImportError) as err:
        logging.getLogger(__name__).warning("search round %d is searched again: %s is unreadable (%s)",
                                            index + 1, path, err)
        return None
    if not isinstance(record, dict) or record.get("tree_ids") != list(tree_ids):
        logging.getLogger(__name__).warning("search round %d is searched again: %s holds other trees",
                                            index + 1, path)
        return None
    return record
