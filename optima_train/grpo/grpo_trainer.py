"""`GRPOTrainer`: multi-agent GRPO on the Optima reward, resumable by step.

Per iteration `i` (the run-dir layout of `optima_train.run_dir`):

1. **generation**: `G = generation.group_size` dialogues for each of the `Q = task.train_questions`
   training questions with `M_i` (`M_0` is the starting model) at `generation.temperature`; every
   dialogue is its own seeded episode (seed from run seed, iteration, question, sample) and, with
   `train.old_logprobs: backend`, carries the backend's per-token log-probs. Episodes go to the buffer.
2. **scoring**: the Optima reward of every dialogue (the reward section, as iSFT computes it), then
   group advantages `(r - mean) / (std + eps)` over each question's `G` dialogues
   (`group_advantages`; a group without spread gives 0 and is counted). Stored per episode, with
   every reward component, in the step's side table (`rewards.parquet`, `optima_train.buffers.rewards`)
   as `reward` and `advantage`; the generation buffer stays as sampled.
3. **training**: every agent of every dialogue with a non-zero advantage is one sequence: its view
   of the whole dialogue (its system prompt as sampled, its own turns `assistant`), the loss on its
   own reply tokens only (`optima_train.examples.policy`).
   Under causal attention that is each of its turns as an example with the dialogue before it as
   prompt. The clipped objective (`clipped_policy_loss`) is optimised for `train.num_train_epochs`
   passes over the batch on a LoRA adapter from `M_i` (`ClippedPolicyTrainer`, a
   `transformers.Trainer`), merged and saved as `M_{i+1}` (`trl_glue`). No non-zero advantage:
   the step records that and `M_{i+1} = M_i`.
4. **evaluation**: greedy held-out dialogues with `M_{i+1}`, as every loop does.

**Old log-probs** (the ratio's denominator, the policy that sampled). The backend's, where a turn
has them and its stored ids are exactly the tokens the training sequence holds for that reply
(the reply's end-of-turn token, re-encoded replies and turns without log-probs have none); every
other loss token's is recomputed with the training model before the first update, which at that
point is `M_i` itself (a fresh LoRA adapter adds zero). Both are `log_softmax(logits / T)` of the
sampled token; the backend's differ from the training model's by numerics (bf16 generation,
another kernel), which `old_logprob_gap` reports. `train.old_logprobs: recompute` uses the
training model's everywhere (the ratio is then exactly 1 at the first step). The end-of-turn
token carries loss only when the model emitted it (finish "stop"), never after a reply cut at
`max_new_tokens` or by the env.

**Reference and KL.** The reference is `M_i` with the adapter disabled (`trl`'s `use_adapter`, as
TRL's DPO and GRPO do with a PEFT model): its log-probs are taken in the same pass, before the
update. The k3 estimator `exp(ref - logp) - (ref - logp) - 1` is logged always and added with
weight `train.beta` (0: off). Dropout is disabled (`trl`'s `disable_dropout_in_model`): the ratio
must compare one deterministic function at two parameter values.

**Why not TRL's `GRPOTrainer`** (TRL 1.16). It drives generation itself, inside `train()`, from a
prompt dataset, and its unit is one (prompt, completion) row: its sampler repeats each dataset
prompt `num_generations` times, `rollout_func(prompts, trainer)` returns one completion per row,
each row gets one reward, and the advantage groups are `num_generations` consecutive rows. Here one dialogue is
one reward but several sequences (one per agent that spoke, each with its own system prompt and
its own view: its turns `assistant`, the others' `user`), a variable number of them (an agent may
never speak), and the G dialogues of a group have different prompts (each episode deals the
evidence anew). Its completion mask can cover several spans of one sequence (`env_mask`), which
fits one agent's turns, but not the grouping. It also ignores the sampler's log-probs as the old
policy unless it runs its own vLLM (`use_vllm` with importance-sampling correction), and sampling
inside `train()` would break this loop's steps (episodes in the buffer and resumable before any
training, one backend in memory at a time). So the objective is computed here, on top of
`transformers.Trainer` (optimiser, schedule, epochs, accumulation, bf16, logging), PEFT LoRA, TRL's
`selective_log_softmax`, `pad`, `use_adapter` and `disable_dropout_in_model`, and `trl_glue` for
loading, merging and saving.

**Loss normalisation**: the mean over the micro-batch's loss tokens (TRL's `bnpo`), divided over
gradient accumulation by the `Trainer`. Dialogues with advantage 0 are left out of the batch: their
policy-gradient term is zero.
"""

from __future__ import annotations

import contextlib
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Hashable, Mapping, Sequence

import torch
import transformers

from optima_train.examples.policy import policy_examples, write_policy_rows
from optima_train.grpo.grpo_config import GRPOConfig
from optima_train.sampled_dialogues import SampledDialogues, component_means, mean

__all__ = ["ClippedPolicyTrainer", "GRPOArguments", "GRPOTrainer", "GroupAdvantages", "clipped_policy_loss",
           "group_advantages", "token_logprobs", "train_grpo"]



# ---------------------------------------------------------------------------------- pure parts
@dataclass(frozen=True)
class GroupAdvantages:
    """Per-sample advantages (None: the sample had no reward) and counts of the groups."""

    advantages: list[float | None]
    groups: int
    zero_variance_groups: int
    empty_groups: int

    @property
    def learning_groups(self) -> int:
        """Groups whose samples get non-zero advantages."""
        return self.groups - self.zero_variance_groups - self.empty_groups


def group_advantages(rewards: Sequence[float | None], groups: Sequence[Hashable], *,
                     eps: float = 1e-4) -> GroupAdvantages:
    """`(r - mean) / (std + eps)` within each group, std the sample std (Bessel), as TRL's GRPO.

    A group whose rewards have no spread (all equal, or one reward) gives 0 to each sample and is
    counted in `zero_variance_groups`; a sample without a reward (None or NaN: an infra or scoring
    failure) gets None and is left out of its group's statistics.

    Raises:
        ValueError: `rewards` and `groups` differ in length, or `eps` < 0.
    """
    if len(rewards) != len(groups):
        raise ValueError(f"{len(rewards)} rewards for {len(groups)} group keys; give one key per reward")
    if eps < 0:
        raise ValueError(f"eps must be >= 0, got {eps}")
    members: dict[Hashable, list[int]] = defaultdict(list)
    for k, key in enumerate(groups):
        members[key].append(k)
    out: list[float | None] = [None] * len(rewards)
    zero = empty = 0
    for indices in members.values():
        present = [k for k in indices if rewards[k] is not None and not math.isnan(float(rewards[k]))]
        values = [float(rewards[k]) for k in present]
        if not values:
            empty += 1
            continue
        std = statistics.stdev(values) if len(values) > 1 else 0.0
        mean = statistics.fmean(values)
        if std <= 1e-12:
            zero += 1
        for k, value in zip(present, values):
            out[k] = 0.0 if std <= 1e-12 else (value - mean) / (std + eps)
    return GroupAdvantages(out, len(members), zero, empty)


def clipped_policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                        mask: torch.Tensor, *, epsilon_low: float = 0.2, epsilon_high: float = 0.2, beta: float = 0.0,
                        ref_logprobs: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped policy-gradient loss, averaged over the loss tokens of a batch.

    Per token `t` with ratio `r = exp(logp - old)` and its sequence's advantage `A`:
    `-min(r A, clip(r, 1 - epsilon_low, 1 + epsilon_high) A) + beta * kl`, with
    `kl = exp(ref - logp) - (ref - logp) - 1` (k3, >= 0).

    Args:
        logprobs, old_logprobs, mask: `(B, T)`; `mask` is 1 on loss tokens (other positions are
            ignored, whatever they hold).
        advantages: `(B,)`, one per sequence (or `(B, T)`).
        ref_logprobs: `(B, T)` reference log-probs; the KL is reported when given, and added when
            `beta` > 0.

    Returns:
        `(loss, stats)`: stats are masked token means of `ratio`, `clip_fraction` (the tokens
        whose gradient the clip removes: `clip_low` with A < 0 below 1 - epsilon_low, `clip_high`
        with A > 0 above 1 + epsilon_high), `kl` (None without `ref_logprobs`), `advantage`, and
        the token count `tokens`.

    Raises:
        ValueError: `beta` > 0 without `ref_logprobs`, or mismatched shapes.
    """
    if beta > 0 and ref_logprobs is None:
        raise ValueError("beta > 0 needs ref_logprobs (the reference model's log-probs)")
    if logprobs.shape != old_logprobs.shape or logprobs.shape != mask.shape:
        raise ValueError(f"logprobs {tuple(logprobs.shape)}, old_logprobs {tuple(old_logprobs.shape)} and mask "
                         f"{tuple(mask.shape)} must have one shape")
    keep = mask.bool()
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    adv = adv.to(logprobs.dtype).expand_as(logprobs)
    log_ratio = torch.where(keep, logprobs - old_logprobs, torch.zeros_like(logprobs))
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1 - epsilon_low, 1 + epsilon_high)
    per_token = -torch.min(ratio * adv, clipped * adv)
    kl = None
    if ref_logprobs is not None:
        delta = torch.where(keep, ref_logprobs - logprobs, torch.zeros_like(logprobs))
        kl = torch.exp(delta) - delta - 1
        if beta > 0:
            per_token = per_token + beta * kl
    weight = keep.to(logprobs.dtype)
    tokens = weight.sum()
    loss = (per_token * weight).sum() / tokens.clamp(min=1)

    def mean(x: torch.Tensor) -> float:
        return float((x.detach().to(logprobs.dtype) * weight).sum() / tokens.clamp(min=1))

    low = (ratio < 1 - epsilon_low) & (adv < 0)
    high = (ratio > 1 + epsilon_high) & (adv > 0)
    stats = {"ratio": mean(ratio), "clip_fraction": mean(low | high), "clip_low": mean(low), "clip_high": mean(high),
             "kl": None if kl is None else mean(kl), "advantage": mean(adv), "tokens": int(tokens.item())}
    return loss, stats


def token_logprobs(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, loss_mask: torch.Tensor,
                   temperature: float) -> torch.Tensor:
    """`log_softmax(logits / temperature)` of each token given the ones before it, `(B, T)`, on
    the positions of `loss_mask` (0 elsewhere; logits are taken in float32)."""
    from trl.trainer.utils import selective_log_softmax

    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1]
    targets = loss_mask[:, 1:].bool()
    picked = selective_log_softmax(logits[targets].float(), input_ids[:, 1:][targets], temperature)
    shifted = torch.zeros(targets.shape, dtype=torch.float32, device=input_ids.device)
    shifted[targets] = picked
    return torch.cat([torch.zeros_like(shifted[:, :1]), shifted], dim=1)


# ---------------------------------------------------------------------------------- the update
@dataclass
class GRPOArguments(transformers.TrainingArguments):
    """`TrainingArguments` plus the clipped objective's settings (set from `GRPOConfig.train`)."""

    max_length: int = field(default=1024, metadata={"help": "Tokens kept per sequence (cut when the batch is built)."})
    temperature: float = field(default=1.0, metadata={"help": "The sampling temperature the log-probs are taken at."})
    epsilon_low: float = field(default=0.2, metadata={"help": "Lower ratio clip."})
    epsilon_high: float = field(default=0.2, metadata={"help": "Upper ratio clip."})
    beta: float = field(default=0.0, metadata={"help": "KL penalty weight (0: off)."})


def _collate(rows: Sequence[Mapping[str, Any]], pad_id: int) -> dict[str, torch.Tensor]:
    from trl.trainer.utils import pad

    def stack(key: str, dtype: torch.dtype, value: float | int) -> torch.Tensor:
        return pad([torch.tensor(r[key], dtype=dtype) for r in rows], padding_value=value, padding_side="right")

    return {"input_ids": stack("input_ids", torch.long, pad_id),
            "attention_mask": pad([torch.ones(len(r["input_ids"]), dtype=torch.long) for r in rows], padding_value=0),
            "loss_mask": stack("loss_mask", torch.long, 0), "old_logprobs": stack("old_logprobs", torch.float32, 0.0),
            "ref_logprobs": stack("ref_logprobs", torch.float32, 0.0),
            "advantages": torch.tensor([r["advantage"] for r in rows], dtype=torch.float32)}


class ClippedPolicyTrainer(transformers.Trainer):
    """A `transformers.Trainer` whose loss is `clipped_policy_loss` over rows of `PolicyExample`s.

    Before training it takes the reference log-probs (the model with its adapter disabled) of
    every loss token, and fills the old log-probs the rows lack with them (see the module doc).
    Logs `ratio`, `clip_fraction`, `kl` and `advantage` with the loss; `totals` holds their
    token-weighted means over the whole run, and `old_logprob_gap` the mean |backend - recomputed|.
    """

    loss_is_scaled_for_ga = False  # compute_loss returns a micro-batch mean; the Trainer divides it

    def __init__(self, model: Any = None, args: GRPOArguments | None = None, train_dataset: Any = None,
                 processing_class: Any = None, peft_config: Any = None, callbacks: Any = None):
        from functools import partial

        from peft import get_peft_model
        from trl.trainer.utils import disable_dropout_in_model

        args = args or GRPOArguments(output_dir="grpo_trainer", report_to="none")
        if peft_config is not None:
            transformers.set_seed(args.seed)  # the adapter's random init, before the Trainer seeds
            model = get_peft_model(model, peft_config)
            if args.gradient_checkpointing:
                model.enable_input_require_grads()
        disable_dropout_in_model(model)
        pad_id = processing_class.pad_token_id if processing_class.pad_token_id is not None else \
            processing_class.eos_token_id
        super().__init__(model=model, args=args, data_collator=partial(_collate, pad_id=pad_id),
                         train_dataset=train_dataset, processing_class=processing_class, callbacks=callbacks)
        self._window: dict[str, float] = defaultdict(float)
        self._sums: dict[str, float] = defaultdict(float)
        self.old_logprob_gap: float | None = None
        self.backend_tokens = 0

    # ------------------------------------------------------------------ reference pass
    def train(self, *args: Any, **kwargs: Any) -> Any:
        """Take the reference log-probs, train, then log the run's totals (`total_*`, the
        backend log-prob count and gap) as the history's last entry."""
        self._reference_pass()
        output = super().train(*args, **kwargs)
        final = {**{f"total_{k}": v for k, v in self.totals.items()}, "backend_logprob_tokens": self.backend_tokens,
                 "old_logprob_gap": self.old_logprob_gap}
        self.log({k: v for k, v in final.items() if v is not None})
        return output

    @torch.no_grad()
    def _reference_pass(self) -> None:
        import datasets
        from peft import PeftModel
        from trl.trainer.utils import use_adapter

        model, rows = self.model, list(self.train_dataset)
        size = self.args.per_device_train_batch_size
        gap, filled = 0.0, []
        model.eval()
        for first in range(0, len(rows), size):
            chunk = [{**r, "ref_logprobs": [0.0] * len(r["input_ids"])} for r in rows[first:first + size]]
            batch = {k: v.to(self.args.device) for k, v in self.data_collator(chunk).items()}
            adapter = use_adapter(model, None) if isinstance(model, PeftModel) else contextlib.nullcontext()
            with adapter, self.accelerator.autocast():
                ref = token_logprobs(model, batch["input_ids"], batch["attention_mask"], batch["loss_mask"],
                                     self.args.temperature).cpu()
            for i, row in enumerate(chunk):
                n = len(row["input_ids"])
                ref_i, old_i = ref[i, :n], torch.tensor(row["old_logprobs"], dtype=torch.float32)
                given = ~torch.isnan(old_i) & torch.tensor(row["loss_mask"], dtype=torch.bool)
                gap += float((old_i[given] - ref_i[given]).abs().sum())
                self.backend_tokens += int(given.sum())
                old_i = torch.where(torch.isnan(old_i), ref_i, old_i)
                filled.append({**row, "old_logprobs": old_i.tolist(), "ref_logprobs": ref_i.tolist()})
        model.train()
        self.train_dataset = datasets.Dataset.from_list(filled)
        self.old_logprob_gap = gap / self.backend_tokens if self.backend_tokens else None

    # ------------------------------------------------------------------ loss and logs
    def compute_loss(self, model: Any, inputs: Mapping[str, torch.Tensor], return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        a = self.args
        logps = token_logprobs(model, inputs["input_ids"], inputs["attention_mask"], inputs["loss_mask"],
                               a.temperature)
        loss, stats = clipped_policy_loss(logps, inputs["old_logprobs"], inputs["advantages"], inputs["loss_mask"],
                                          epsilon_low=a.epsilon_low, epsilon_high=a.epsilon_high, beta=a.beta,
                                          ref_logprobs=inputs["ref_logprobs"])
        n = stats["tokens"]
        for key in ("ratio", "clip_fraction", "clip_low", "clip_high", "kl", "advantage"):
            for store in (self._window, self._sums):
                store[key] += stats[key] * n
        for store in (self._window, self._sums):
            store["tokens"] += n
        return (loss, None) if return_outputs else loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs and self._window["tokens"]:
            n = self._window["tokens"]
            logs = {**logs, **{k: round(v / n, 6) for k, v in self._window.items() if k != "tokens"}}
            self._window.clear()
        super().log(logs, start_time)

    @property
    def totals(self) -> dict[str, float | None]:
        """Token-weighted means over every micro-batch trained so far."""
        n = self._sums["tokens"]
        keys = ("ratio", "clip_fraction", "clip_low", "clip_high", "kl", "advantage")
        return {k: (round(self._sums[k] / n, 6) if n else None) for k in keys}


def train_grpo(cfg: GRPOConfig, rows: list[dict[str, Any]], init: str, folder: Path, *, seed: int) -> dict[str, Any]:
    """One update on `rows` (`PolicyExample.to_row()`): LoRA (merged) or full fine-tuning of `init`;
    saves `folder/checkpoint`, `folder/logs` (TensorBoard), `train.json`."""
    import datasets

    from optima_train.trl_glue import quiet_progress, train_with

    t = cfg.train
    quiet_progress(cfg)
    method = {"temperature": cfg.generation.temperature, "epsilon_low": t.epsilon_low,
              "epsilon_high": t.epsilon_high, "beta": t.beta, "remove_unused_columns": False}
    run = train_with(ClippedPolicyTrainer, GRPOArguments, cfg, init, folder, datasets.Dataset.from_list(rows),
                     seed=seed, method_args=method)
    final = next((h for h in reversed(run.history) if "total_ratio" in h), {})
    return {"checkpoint": str(folder / "checkpoint"), "init": init, "sequences": len(rows),
            "dialogues": len({r["episode"] for r in rows}), "loss_tokens": sum(sum(r["loss_mask"]) for r in rows),
            "backend_logprob_tokens": final.get("backend_logprob_tokens", 0),
            "old_logprob_gap": final.get("old_logprob_gap"), "steps": run.output.global_step,
            "train_loss": run.output.training_loss, "mean_ratio": final.get("total_ratio"),
            "clip_fraction": final.get("total_clip_fraction"), "clip_low": final.get("total_clip_low"),
            "clip_high": final.get("total_clip_high"), "kl": final.get("total_kl"),
            "mean_advantage": final.get("total_advantage"), "trainable_parameters": run.trainable_parameters,
            "lora": cfg.lora.enabled, "beta": t.beta, "epsilon_low": t.epsilon_low, "epsilon_high": t.epsilon_high,
            "reference": "adapter-disabled" if run.lora else "the starting weights"}


# ---------------------------------------------------------------------------------- the loop
class GRPOTrainer(SampledDialogues[GRPOConfig]):
    """Runs (or resumes) a multi-agent GRPO run described by a `GRPOConfig` (arguments:
    `IterativeTrainer`)."""

    NAME = "grpo"
    STEPS = ("generation", "scoring", "training")
    SCALARS = ("heldout_score", "heldout_tokens", "sample_mean_score", "sample_mean_tokens", "reward_mean",
               "reward_std", "zero_variance_groups", "train_loss", "mean_ratio", "clip_fraction", "kl")

    # ------------------------------------------------------------------ models
    def _sampling(self) -> Any:
        from optima_agents.policies import SamplingParams

        g = self.config.generation
        return SamplingParams(temperature=g.temperature, top_p=1.0, max_new_tokens=g.max_new_tokens,
                              seed=self.config.run.seed, logprobs=self.config.train.old_logprobs == "backend")

    # ------------------------------------------------------------------ steps
    def _generation(self, folder: Path, it: int) -> dict[str, Any]:
        records, info = self._sample_dialogues(folder, it, per_question=self.config.generation.group_size,
                                               sampling=self._sampling())
        turns = [x for r in records if not r.infra_failure for x in r.turns]
        return {**info, "turns_with_logprobs": sum(x.logprobs is not None for x in turns), "turns": len(turns)}

    def _scoring(self, folder: Path, it: int) -> dict[str, Any]:
        records, batch, loss_fn = self._rewarded(it)
        rewards = [res.reward for res in batch.results]
        adv = group_advantages(rewards, [rec.instance_id for rec in records], eps=self.config.train.advantage_eps)
        self._save_rewards(folder, records, [{**res.components, "advantage": a}
                                             for res, a in zip(batch.results, adv.advantages)])
        present = [float(x) for x in rewards if x is not None]
        return {"episodes": len(records), "ranked": len(present), "excluded": batch.excluded,
                "reward_mean": mean(present), "reward_std": round(statistics.pstdev(present), 6) if present else None,
                "groups": adv.groups, "zero_variance_groups": adv.zero_variance_groups,
                "learning_groups": adv.learning_groups, "empty_groups": adv.empty_groups,
                "mean_abs_advantage": mean([abs(a) for a in adv.advantages if a is not None]),
                "component_means": component_means(batch.results, ("score", "tokens", "token_cost", "readability",
                                                                    "format_rate")),
                "readability_computed": getattr(loss_fn, "computed", None)}

    def _training(self, folder: Path, it: int) -> dict[str, Any]:
        from transformers import AutoTokenizer

        cfg = self.config
        records = self._scored_records(it)
        tokenizer = AutoTokenizer.from_pretrained(self.model_before(it))
        rows = [ex.to_row() for pos, rec in enumerate(records)
                if rec.reward_components.get("advantage") not in (None, 0.0)
                for ex in policy_examples(rec, rec.reward_components["advantage"], tokenizer, episode=pos,
                                          max_length=cfg.train.max_length)]
        write_policy_rows(folder / "examples.parquet", rows)
        if not rows:
            self._unchanged(it, "every group's rewards are equal (no non-zero advantage)")
            return {"skipped": "no non-zero advantage", "checkpoint": None, "sequences": 0, "train_loss": None}
        self.release_for_training()
        info = train_grpo(cfg, rows, self._training_init(it), folder, seed=cfg.run.seed + it)
        return {**info, "cut_sequences": sum(r["cut"] for r in rows)}

    # ------------------------------------------------------------------ summaries
    def _summary(self, it: int, info: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        gen, scoring, training = info["generation"], info["scoring"], info["training"]
        return {
            "sample_mean_score": gen.get("mean_score"),
            "sample_mean_tokens": gen.get("mean_tokens"),
            "reward_mean": scoring.get("reward_mean"),
            "reward_std": scoring.get("reward_std"),
            "groups": scoring.get("groups"),
            "zero_variance_groups": scoring.get("zero_variance_groups"),
            "sequences": training.get("sequences"),
            "train_loss": training.get("train_loss"),
            "mean_ratio": training.get("mean_ratio"),
            "clip_fraction": training.get("clip_fraction"),
            "kl": training.get("kl"),
            "mean_advantage": training.get("mean_advantage"),
        }

    def _summary_detail(self, s: Mapping[str, Any]) -> str:
        return (f"reward {self._fmt(s['reward_mean'])} ± {self._fmt(s['reward_std'])} | "
                f"{s['zero_variance_groups']}/{s['groups']} groups flat | ratio {self._fmt(s['mean_ratio'])} "
                f"clip {self._fmt(s['clip_fraction'])} kl {self._fmt(s['kl'], '.4f')}")
