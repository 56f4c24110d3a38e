"""What every TRL training step shares: load the model and tokenizer, the LoRA config, the
`TrainingArguments` fields that come from our config sections, the run itself (TensorBoard logs,
trainable-parameter count) and the merge-save-log finish (`train_with` does all of it).

SFT and DPO (and any other TRL trainer a new algorithm uses) differ only in their dataset,
their own `*Config` fields and the trainer class; everything here is written once so the two
cannot drift (e.g. one honouring `model.device` and the other not).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from optima_train.run_dir import atomic_dir, atomic_write_json

__all__ = ["TrainRun", "finish_training", "load_for_training", "lora_config", "quiet_progress", "train_with",
           "training_args"]


@dataclass(frozen=True)
class TrainRun:
    """What one TRL training run left: TRL's `TrainOutput`, its log history, the number of trained
    parameters and whether a LoRA adapter was trained (and merged)."""

    output: Any
    history: list[dict[str, Any]]
    trainable_parameters: int
    lora: bool


def quiet_progress(cfg: Any) -> None:
    """Turn off the datasets and transformers progress bars when `run.progress` is false (TRL's own
    bar follows `disable_tqdm` in `training_args`)."""
    if cfg.run.progress:
        return
    import datasets
    import transformers

    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()


def train_with(trainer_cls: Any, args_cls: Any, cfg: Any, init: str, folder: Path, dataset: Any, *, seed: int,
               method_args: Mapping[str, Any] | None = None, **trainer_kwargs: Any) -> TrainRun:
    """One training run of any TRL trainer on `dataset`, from the weights in `init`.

    Builds `args_cls(**method_args, **training_args(cfg, folder, seed=seed))` and
    `trainer_cls(model, args, train_dataset, processing_class, peft_config, callbacks, **trainer_kwargs)`
    with LoRA from `cfg.lora` and TensorBoard logs in `folder/logs`, trains, then merges and saves
    `folder/checkpoint` and `folder/train.json` (`finish_training`).
    """
    from torch.utils.tensorboard import SummaryWriter
    from transformers.integrations import TensorBoardCallback

    tokenizer, model = load_for_training(init)
    peft_config = lora_config(cfg)
    args = args_cls(**dict(method_args or {}), **training_args(cfg, folder, seed=seed))
    writer = SummaryWriter(log_dir=str(folder / "logs"))
    try:
        trainer = trainer_cls(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                              peft_config=peft_config, callbacks=[TensorBoardCallback(writer)], **trainer_kwargs)
        trainable = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
        output = trainer.train()
    finally:
        writer.close()
    history = finish_training(trainer, output, tokenizer, folder)
    return TrainRun(output, history, trainable, peft_config is not None)


def load_for_training(init: str) -> tuple[Any, Any]:
    """(tokenizer, fp32 model) of the folder `init`; TRL casts to bf16 itself when asked."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoTokenizer.from_pretrained(init), AutoModelForCausalLM.from_pretrained(init, dtype=torch.float32)


def lora_config(cfg: Any) -> Any | None:
    """PEFT's `LoraConfig` from `cfg.lora` (None: full fine-tuning)."""
    if not cfg.lora.enabled:
        return None
    from peft import LoraConfig

    targets: Any = cfg.lora.target_modules
    targets = "all-linear" if list(targets) == ["all-linear"] else list(targets)
    return LoraConfig(r=cfg.lora.r, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
                      target_modules=targets, task_type="CAUSAL_LM")


def training_args(cfg: Any, folder: Path, *, seed: int) -> dict[str, Any]:
    """The `TrainingArguments` fields every method takes from `cfg.train`, `cfg.model` and
    `cfg.run`, plus `cfg.train.extra` (any other field of the method's TRL config).

    The device follows `model.device` for every method: `auto` trains on CUDA when there is one.
    """
    t = cfg.train
    return dict(
        output_dir=str(folder / "trainer"), report_to="none", save_strategy="no", seed=seed,
        learning_rate=t.learning_rate, num_train_epochs=t.num_train_epochs, max_steps=t.max_steps,
        per_device_train_batch_size=t.per_device_train_batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps, max_length=t.max_length,
        lr_scheduler_type=t.lr_scheduler_type, warmup_steps=t.warmup_steps, weight_decay=t.weight_decay,
        bf16=t.bf16, gradient_checkpointing=t.gradient_checkpointing, logging_steps=t.logging_steps,
        use_cpu=cfg.model.resolved_device() == "cpu", disable_tqdm=not cfg.run.progress, **t.extra,
    )


def finish_training(trainer: Any, output: Any, tokenizer: Any, folder: Path) -> list[dict[str, Any]]:
    """Merge the LoRA adapter (if any), save `folder/checkpoint` as a plain HF folder (atomically)
    and `folder/train.json`; returns TRL's log history."""
    from peft import PeftModel

    model = trainer.model
    trained = model.merge_and_unload() if isinstance(model, PeftModel) else model
    with atomic_dir(folder / "checkpoint") as tmp:
        trained.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    history = trainer.state.log_history
    atomic_write_json(folder / "train.json", {"log_history": history, "metrics": output.metrics})
    return history
