"""`ISFTTrainer`: the iterative SFT loop of Optima (docs/design.md section 2), resumable by step.

Per iteration `i` (folders in `optima_train.run_dir`):

1. **generation**: N dialogues per training question with model `M_i` (`M_0` is the starting
   model) at the configured temperature. Every sample is its own seeded episode (seed derived
   from run seed, iteration, question and sample), so the N samples of a question differ in
   sampling and in the evidence deal; iteration 0 adds a format-pool instruction drawn per
   episode (`format_instruction="sample"`).
2. **scoring**: every reward component of every dialogue (`optima_train.rewards`), stored in a
   side table keyed by episode (`rewards.parquet`, `optima_train.buffers.rewards`) beside the
   generation buffer, which stays as sampled; scoring and infra failures are excluded and counted.
3. **selection**: best dialogue per question, top `keep_fraction` of questions, thresholds;
   one SFT example per agent with the system prompt the env wrote without the format
   instruction when it sampled the dialogue (`optima_train.examples.sft`).
4. **training**: TRL `SFTTrainer` with a LoRA adapter (or full fine-tuning) from `M_i` (or the
   base model, `train.init="base"`); the adapter is merged and saved as a plain HF folder,
   `M_{i+1}`. No selected example: the step records that and `M_{i+1} = M_i`.
5. **evaluation**: greedy dialogues on the held-out questions with `M_{i+1}`.

Each step writes a `DONE.json` last; a restarted run skips finished steps (`run_dir`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from optima_envs.atomic_files import atomic_write_json
from optima_train.isft.isft_config import ISFTConfig, SelectionSection
from optima_train.loop import PolicyFactory, StepHook
from optima_train.sampled_dialogues import SampledDialogues, component_means, mean

__all__ = ["ISFTTrainer", "PolicyFactory", "StepHook"]

class ISFTTrainer(SampledDialogues[ISFTConfig]):
    """Runs (or resumes) an iSFT run described by an `ISFTConfig` (arguments: `IterativeTrainer`)."""

    NAME = "isft"
    STEPS = ("generation", "scoring", "selection", "training")
    SCALARS = ("heldout_score", "heldout_tokens", "sample_mean_score", "sample_mean_tokens", "mean_reward",
               "kept_examples", "train_loss")

    # ------------------------------------------------------------------ models
    def _sampling(self) -> Any:
        from optima_agents.policies import SamplingParams

        g = self.config.generation
        return SamplingParams(temperature=g.temperature, top_p=g.top_p, max_new_tokens=g.max_new_tokens,
                              seed=self.config.run.seed)

    def _train_indices(self, it: int) -> range:
        return self.config.train_indices(it)  # generation.new_questions_each_iteration

    # ------------------------------------------------------------------ steps
    def _generation(self, folder: Path, it: int) -> dict[str, Any]:
        g = self.config.generation
        options = {"format_instruction": "sample"} if it == 0 and g.format_pool_first_iteration else {}
        expand = self._answer_variants(it) if g.enumerate_answers else None
        _, info = self._sample_dialogues(folder, it, per_question=g.samples_per_question, sampling=self._sampling(),
                                         options=options, expand=expand)
        return info

    def _answer_variants(self, it: int) -> Any:
        """`generation.enumerate_answers`: each sampled dialogue once per answer move, the moves
        tokenised by the sampling model's tokenizer."""
        from transformers import AutoTokenizer

        from optima_train.answer_variants import enumerate_answers

        tokenizer = AutoTokenizer.from_pretrained(self.model_before(it))
        return lambda records, env: enumerate_answers(
            records, env, lambda text: tokenizer.encode(text, add_special_tokens=False))

    def _scoring(self, folder: Path, it: int) -> dict[str, Any]:
        records, batch, loss_fn = self._rewarded(it)
        self._save_rewards(folder, records, [res.components for res in batch.results])
        rewards = [res.reward for res in batch.results if res.reward is not None]
        means = component_means(batch.results, ("score", "tokens", "token_cost", "readability", "format_rate",
                                                "max_turn_lm_loss"))
        return {"episodes": len(records), "ranked": len(rewards), "excluded": batch.excluded,
                "mean_reward": mean(rewards), "component_means": means,
                "readability_texts": batch.readability_texts,
                "readability_computed": getattr(loss_fn, "computed", None)}

    def _selection(self, folder: Path, it: int) -> dict[str, Any]:
        from transformers import AutoTokenizer

        import optima_envs
        from optima_envs.core.places import PLACES
        from optima_train.examples import build_sft_examples, plain_prompts, write_sft_dataset
        from optima_train.selection import select_best

        cfg, s = self.config, self.config.selection
        records = self._scored_records(it)
        agents = set(records[0].agents) if records else set()
        if s.train_agents is not None and not set(s.train_agents) <= agents:
            from optima_envs.errors import ConfigError

            raise ConfigError(f"selection.train_agents names {sorted(set(s.train_agents) - agents)}, not agents of "
                              f"{cfg.task.env_id} ({sorted(agents)})")
        # The env is rebuilt only to check the partners' information or the answer's place, or for
        # records from before episodes kept their plain prompts (`plain_prompts` then resets it).
        by_place = s.group_by == "question_and_place"
        needs_env = (s.informative_only or s.grounded_only or by_place
                     or any(r.plain_system_prompts is None and r.format_instruction for r in records))
        env = optima_envs.make(cfg.task.env_id, **self._env_kwargs(cfg.task.train_kwargs())) if needs_env else None
        result = select_best(selection_candidates(records, env, s), keep_fraction=s.keep_fraction,
                             reward_threshold=s.reward_threshold, min_score=s.min_score,
                             informative_only=s.informative_only, grounded_only=s.grounded_only)
        tokenizer = AutoTokenizer.from_pretrained(self.model_before(it))
        rows, chosen = [], []
        for c in result.selected:
            rec = records[c.key]
            for ex in build_sft_examples(rec, plain_prompts(rec, env), tokenizer, episode_id=f"{it}:{c.key}"):
                if s.train_agents is None or ex.agent in s.train_agents:
                    rows.append(ex.to_row())
            chosen.append({"episode": c.key, "instance_id": rec.instance_id, "reward": c.reward, "score": c.score,
                           "tokens": c.tokens, "format_instruction": rec.format_instruction,
                           **({"place": c.group[1]} if by_place else {})})
        write_sft_dataset(folder / "sft.parquet", rows)
        atomic_write_json(folder / "selection.json", {"stats": result.stats, "selected": chosen})
        places = {f"selected_{p}": sum(1 for c in chosen if c["place"] == p) for p in PLACES} if by_place else {}
        return {**result.stats, **places, "examples": len(rows),
                "loss_tokens": sum(sum(r["assistant_masks"]) for r in rows),
                "mean_selected_tokens": mean([c["tokens"] for c in chosen]),
                "mean_selected_score": mean([c["score"] for c in chosen])}

    def _training(self, folder: Path, it: int) -> dict[str, Any]:
        cfg = self.config
        if self.run_dir.done_info(it, "selection").get("examples", 0) == 0:
            self._unchanged(it, "no dialogue was selected")
            return {"skipped": "no selected examples", "checkpoint": None, "examples": 0, "train_loss": None}
        init = self._training_init(it)
        self.release_for_training()
        return train_sft(cfg, self.run_dir.step_dir(it, "selection") / "sft.parquet", init, folder,
                         seed=cfg.run.seed + it)

    # ------------------------------------------------------------------ summaries
    def _summary(self, it: int, info: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        return {
            "sample_mean_score": info["generation"].get("mean_score"),
            "sample_mean_tokens": info["generation"].get("mean_tokens"),
            "mean_reward": info["scoring"].get("mean_reward"),
            "kept_dialogues": info["selection"].get("selected"),
            "kept_examples": info["selection"].get("examples"),
            "train_loss": info["training"].get("train_loss"),
        }

    def _summary_detail(self, s: Mapping[str, Any]) -> str:
        return f"kept {s['kept_examples']} examples ({s['kept_dialogues']} dialogues)"


def selection_candidates(records: Sequence[Any], env: Any, selection: SelectionSection) -> list[Any]:
    """Selection's candidates for one iteration's scored records: keyed by position, numbered
    within their question, with the partners' information (`informative_only`) and the answers'
    grounding (`grounded_only`) checked and the answer's place read (`group_by:
    question_and_place`) on `env`, the task they were sampled from."""
    from optima_train.informative import record_grounded, record_informed, record_place
    from optima_train.selection import candidate

    by_place = selection.group_by == "question_and_place"
    return [candidate(pos, rec, sample_index=sample,
                      informative=record_informed(env, rec) if selection.informative_only and rec.scored else None,
                      grounded=record_grounded(env, rec) if selection.grounded_only and rec.scored else None,
                      place=record_place(env, rec) if by_place else None)
            for pos, (rec, sample) in enumerate(zip(records, sample_positions(records)))]


def sample_positions(records: Sequence[Any]) -> list[int]:
    """Each record's position among its question's records (0, 1, ... in buffer order), the
    tie-break of selection; a question's count varies when answers were enumerated."""
    seen: dict[str, int] = {}
    positions = []
    for rec in records:
        positions.append(seen.get(rec.instance_id, 0))
        seen[rec.instance_id] = positions[-1] + 1
    return positions


def train_sft(cfg: ISFTConfig, data: Path, init: str, folder: Path, *, seed: int) -> dict[str, Any]:
    """One SFT round: LoRA (merged) or full fine-tuning of `init` on `data`; saves the checkpoint."""
    import datasets
    from trl import SFTConfig, SFTTrainer

    from optima_train.examples import keep_start
    from optima_train.trl_glue import quiet_progress, train_with

    quiet_progress(cfg)
    dataset = datasets.Dataset.from_parquet(str(data)).select_columns(["input_ids", "assistant_masks"])
    method_args: dict[str, Any] = {}
    if cfg.train.padding_free:  # TRL cuts padded batches to max_length itself, padding-free ones not
        dataset = dataset.map(keep_start, fn_kwargs={"max_length": cfg.train.max_length})
        dataset = dataset.filter(lambda row: any(row["assistant_masks"]))  # as TRL drops rows cut to no loss
        method_args = {"padding_free": True, "max_length": None}
    run = train_with(SFTTrainer, SFTConfig, cfg, init, folder, dataset, seed=seed, method_args=method_args)
    losses = [h["loss"] for h in run.history if "loss" in h]
    return {"checkpoint": str(folder / "checkpoint"), "init": init, "examples": len(dataset),
            "steps": run.output.global_step, "train_loss": run.output.training_loss,
            "last_logged_loss": losses[-1] if losses else None, "trainable_parameters": run.trainable_parameters,
            "lora": cfg.lora.enabled}
