"""`IDPOTrainer`: iterative DPO with MCTS over dialogue turns (DESIGN.md section 2), resumable by step.

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
   (`optima_train.evaluation`, the same held-out set as iSFT for the same task section).

Each step writes its `DONE.json` last; a restarted run skips finished steps.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Mapping

from optima_train.idpo.idpo_config import IDPOConfig
from optima_train.loop import IterativeTrainer
from optima_train.run_dir import atomic_write_json, read_json

__all__ = ["IDPO_STEPS", "IDPOTrainer", "train_dpo"]

IDPO_STEPS = ("search", "training", "evaluation")


class IDPOTrainer(IterativeTrainer):
    """Runs (or resumes) an iDPO run described by an `IDPOConfig` (arguments: `IterativeTrainer`)."""

    config: IDPOConfig
    NAME = "idpo"
    STEPS = ("search", "training")
    SAMPLER = "search"
    SCALARS = ("heldout_score", "heldout_tokens", "kept_pairs", "mean_gap", "mean_root_value", "train_loss",
               "reward_accuracy")
    NEEDS_SNAPSHOT = True

    def _first_train_index(self) -> int:
        return self.config.train_indices(0).start

    # ------------------------------------------------------------------ the loop
    def _iteration(self, it: int) -> dict[str, Any]:
        info: dict[str, dict[str, Any]] = {}
        info["search"] = self._step(it, "search", lambda f: self._search(f, it))
        info["training"] = self._step(it, "training", lambda f: self._training(f, it))
        if self._evaluates(it):
            info["evaluation"] = self._step(it, "evaluation", lambda f: self._evaluation(f, self.model_after(it)))
        summary = self._summary(it, info)
        atomic_write_json(self.run_dir.stage_dir(it) / "metrics.json", {"iteration": it, "summary": summary, "steps": info})
        self._write_run_summary(it, summary)
        self.console.print(_summary_line(summary))
        return summary

    # ------------------------------------------------------------------ models
    def model_after(self, it: int) -> str:
        """The checkpoint iteration `it` produced (its training step's record)."""
        return str(self.run_dir.done_info(it, "training")["checkpoint"])

    # ------------------------------------------------------------------ steps
    def _search(self, folder: Path, it: int) -> dict[str, Any]:
        import optima_envs
        from optima_agents.mcts import MCTSPlanner, OptimaTreeReward, TreeTask, extract_pairs
        from optima_agents.policies import SamplingParams
        from optima_agents.rollout import derive_seed
        from optima_train.dpo_data import pair_rows, pair_statistics, write_pairs, write_trees

        cfg, m, r = self.config, self.config.mcts, self.config.reward
        mcts = dataclasses.replace(m, seed=derive_seed(cfg.run.seed, m.seed, it))
        sampling = SamplingParams(temperature=m.temperature, top_p=m.top_p, max_new_tokens=m.max_new_tokens,
                                  seed=cfg.run.seed)
        model = self.model_before(it)
        policy = self._policy_for(model, sampling)
        reward = OptimaTreeReward(r.weights(), self._reference() if r.lambda_loss > 0 else None,
                                  token_percentile=r.token_percentile, repeat_ratio=r.repeat_ratio,
                                  repeat_min_chars=r.repeat_min_chars)
        env = optima_envs.make(cfg.task.env_id, **self._env_kwargs(cfg.task.train_kwargs()))
        tasks = [TreeTask(f"i{it:03d}-q{q:06d}", seed=derive_seed(cfg.run.seed, it, q), options={"index": q})
                 for q in cfg.train_indices(it)]
        planner = MCTSPlanner(policy, reward, mcts)
        if (why := planner.sampling_mismatch()) is not None:
            self.console.print(f"[yellow]search policy sampling differs from mcts settings: {why}[/]")
        result = planner.search(env, tasks)
        for tree in result.trees:
            tree.check_invariants()
        extraction = extract_pairs(result.trees, cfg.pairs)
        rows = pair_rows(result.trees, extraction, iteration=it, chat_format=getattr(policy, "chat_format", None)
                         or _default_chat_format())
        write_trees(result.trees, folder)
        write_pairs(rows, folder / "pairs.parquet")
        stats = pair_statistics(rows, result.trees)
        search_stats = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in result.stats.items()}
        atomic_write_json(folder / "search.json", {"model": model, "mcts": mcts.to_dict(), "search": search_stats,
                                                   "pairs": stats, "max_tokens": reward.max_tokens,
                                                   "trees": [t.stats() for t in result.trees]})
        return {"model": model, "trees": len(result.trees), "qualifying_pairs": stats["qualifying_pairs"],
                "kept_pairs": stats["kept_pairs"], "mean_gap": stats["gap"]["mean"],
                "mean_chosen_tokens": stats["chosen_tokens"]["mean"],
                "mean_rejected_tokens": stats["rejected_tokens"]["mean"],
                "mean_root_value": stats["root_value"]["mean"], "max_tokens": reward.max_tokens,
                "search": search_stats}

    def _training(self, folder: Path, it: int) -> dict[str, Any]:
        cfg = self.config
        init = self.model_before(it) if cfg.train.init == "previous" else self.base_model
        kept = read_json(self.run_dir.step_dir(it, "search") / "DONE.json").get("kept_pairs", 0)
        if kept < cfg.train.min_pairs:
            self.console.print(f"[yellow]iter {it}: {kept} pair(s) kept, fewer than train.min_pairs="
                               f"{cfg.train.min_pairs}; the model is unchanged[/]")
            return {"skipped": f"{kept} kept pairs < train.min_pairs", "checkpoint": init, "pairs": kept,
                    "train_loss": None}
        self.close()  # free the search model's memory for training
        return train_dpo(cfg, self.run_dir.step_dir(it, "search") / "pairs.parquet", init, folder,
                         seed=cfg.run.seed + it)

    def _evaluation(self, folder: Path, model: str) -> dict[str, Any]:
        from optima_agents.policies import SamplingParams
        from optima_train.buffers import write_episodes
        from optima_train.evaluation import evaluate

        cfg = self.config
        sampling = SamplingParams(temperature=0.0, max_new_tokens=cfg.eval.max_new_tokens or cfg.mcts.max_new_tokens,
                                  seed=None)
        policy = self._policy_for(model, sampling)
        result, records = evaluate(policy, cfg.task.env_id, env_kwargs=self._env_kwargs(cfg.task.eval_kwargs()),
                                   episodes=cfg.eval.episodes, first_index=cfg.task.eval_first_index,
                                   seed=cfg.run.seed + 1_000_000, progress=cfg.run.progress, model_name=model)
        write_episodes(folder / "episodes", records, metadata={"writer": "idpo"})
        atomic_write_json(folder / "metrics.json", result.to_dict())
        return result.to_dict()

    # ------------------------------------------------------------------ summaries
    def _summary(self, it: int, info: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        ev, search, training = info.get("evaluation"), info["search"], info["training"]
        return {
            "iteration": it,
            "heldout_score": ev["score"]["mean"] if ev else None,
            "heldout_score_ci": [ev["score"]["low"], ev["score"]["high"]] if ev else None,
            "heldout_tokens": ev["tokens"]["mean"] if ev else None,
            "heldout_tokens_ci": [ev["tokens"]["low"], ev["tokens"]["high"]] if ev else None,
            "trees": search.get("trees"),
            "kept_pairs": search.get("kept_pairs"),
            "qualifying_pairs": search.get("qualifying_pairs"),
            "mean_gap": search.get("mean_gap"),
            "mean_root_value": search.get("mean_root_value"),
            "train_loss": training.get("train_loss"),
            "reward_accuracy": training.get("reward_accuracy"),
            "checkpoint": training.get("checkpoint"),
            "seconds": {k: v.get("seconds") for k, v in info.items()},
        }

def train_dpo(cfg: Any, pairs: Path, init: str, folder: Path, *, seed: int) -> dict[str, Any]:
    """One DPO round on the kept pairs of `pairs` (a pairs.parquet): LoRA (merged) or full
    fine-tuning of `init`; saves `folder/checkpoint`, `folder/logs` (TensorBoard), `train.json`.

    `cfg` is any config with `train` (a `DPOTrainSection`), `lora` and `run` sections.
    """
    from torch.utils.tensorboard import SummaryWriter
    from transformers.integrations import TensorBoardCallback
    from trl import DPOConfig, DPOTrainer

    from optima_train.dpo_data import read_pairs, to_dpo_dataset
    from optima_train.trl_glue import finish_training, load_for_training, lora_config, training_args

    t = cfg.train
    dataset = to_dpo_dataset(read_pairs(pairs)).remove_columns(["pair_id"])
    tokenizer, model = load_for_training(init)
    peft_config = lora_config(cfg)
    losses = {"loss_type": ["sigmoid", "sft"], "loss_weights": [1.0, t.rpo_alpha]} if t.rpo_alpha > 0 else \
        {"loss_type": ["sigmoid"]}
    args = DPOConfig(beta=t.beta, **losses, **training_args(cfg, folder, seed=seed))
    writer = SummaryWriter(log_dir=str(folder / "logs"))
    # ref_model=None with a peft_config: the reference log-probs come from the same model with
    # the adapter disabled (TRL's `use_adapter(..., None)`), so no second copy is held in memory.
    trainer = DPOTrainer(model=model, ref_model=None, args=args, train_dataset=dataset, processing_class=tokenizer,
                         peft_config=peft_config, callbacks=[TensorBoardCallback(writer)])
    trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    output = trainer.train()
    writer.close()
    history = finish_training(trainer, output, tokenizer, folder)
    logged = [h for h in history if "loss" in h]
    last = logged[-1] if logged else {}
    return {"checkpoint": str(folder / "checkpoint"), "init": init, "pairs": len(dataset),
            "steps": output.global_step, "train_loss": output.training_loss,
            "reward_accuracy": last.get("rewards/accuracies"), "reward_margin": last.get("rewards/margins"),
            "trainable_parameters": trainable, "lora": cfg.lora.enabled, "beta": t.beta, "rpo_alpha": t.rpo_alpha,
            "reference": "adapter-disabled" if peft_config is not None else "copy of init"}


def _default_chat_format() -> Any:
    from optima_agents.chat import DEFAULT_CHAT_FORMAT

    return DEFAULT_CHAT_FORMAT


def _summary_line(s: Mapping[str, Any]) -> str:
    def fmt(x: Any, spec: str = ".3f") -> str:
        return "n/a" if x is None else format(x, spec)

    secs = " ".join(f"{k[:6]} {v:.0f}s" for k, v in s["seconds"].items() if v is not None)
    return (f"[bold green]iter {s['iteration']}[/] held-out score {fmt(s['heldout_score'])} | "
            f"tokens {fmt(s['heldout_tokens'], '.1f')} | {s['kept_pairs']} pairs from {s['trees']} trees | "
            f"gap {fmt(s['mean_gap'])} | train loss {fmt(s['train_loss'], '.4f')} | {secs}")
