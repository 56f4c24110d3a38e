"""What every TRL training step shares: load the model and tokenizer, the LoRA config, the
`TrainingArguments` fields that come from our config sections, the run itself (TensorBoard logs,
trainable-parameter count) and the merge-save-log finish (`train_with` does all of it).

SFT and DPO (and any other TRL trainer a new algorithm uses) differ only in their dataset,
their own `*Config` fields and the trainer class; everything here is written once so the two
cannot drift (e.g. one honouring `model.device` and the other not).

**Distributed steps (`train.launcher: accelerate`).** The loop stays one coordinating process; each
training step it reaches is launched as `accelerate launch [--config_file train.accelerate_config]
[train.launch_args] -m optima_train.distributed_step <folder>/launch/spec.json` in a subprocess,
after writing the step's dataset (`launch/dataset`) and everything the trainer is built from
(`launch/spec.json`: the trainer and config classes, the TRL arguments, the starting weights, LoRA)
into the step folder. Every rank builds the same trainer from that spec and trains (DDP or DeepSpeed,
from the accelerate config); the checkpoint is saved through `Trainer.save_model`, which gathers
sharded weights, and rank 0 merges LoRA and writes `checkpoint/`, `train.json` and `launch/result.json`,
which this process reads back. Why this, rather than running the whole loop inside the launch with
rank 0 generating: the generation engine (vLLM, itself tensor-parallel over the same GPUs) and the
trainer's processes then never hold GPU memory at the same time, the other ranks do not idle through
hours of generation holding their share of the model, the loop's resume logic (one process, one
lock, `DONE.json` per step) is unchanged, and a step can be rerun by hand from its saved spec (for
example on each node of a multi-node DDP launch). The cost is a model load per step, small next to
the step itself. `launch/launch.log` holds the subprocess's output.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from optima_envs.atomic_files import atomic_dir, atomic_write_json
from optima_envs.errors import ConfigError, OptimaError
from optima_train.config.train import report_targets
from optima_train.lm_head import labelled_positions_only
from optima_train.run_dir import read_json

__all__ = ["TrainRun", "TrainingLaunchError", "base_dtype", "count_trainable", "finish_training", "launch_training",
           "keep_residual_float32", "load_for_training", "lora_config", "merged_adapter", "quiet_progress", "train_with", "training_args"]


class TrainingLaunchError(OptimaError, RuntimeError):
    """Raised when a training step run under `accelerate launch` fails; the message ends with the
    last lines of its log."""


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

    Builds `args_cls` from `training_args(cfg, folder, seed=seed)` updated with `method_args` (the
    method's own fields, which win over the shared ones, e.g. `max_length=None` for padding-free
    SFT) and
    `trainer_cls(model, args, train_dataset, processing_class, peft_config, callbacks, **trainer_kwargs)`
    with LoRA from `cfg.lora` and TensorBoard logs in `folder/logs`, trains, then merges and saves
    `folder/checkpoint` and `folder/train.json` (`finish_training`). With `train.launcher: accelerate`
    the same run happens under `accelerate launch` (`launch_training`).
    """
    if cfg.train.launcher == "accelerate":
        return launch_training(trainer_cls, args_cls, cfg, init, folder, dataset, seed=seed, method_args=method_args,
                               **trainer_kwargs)
    from torch.utils.tensorboard import SummaryWriter
    from transformers import set_seed
    from transformers.integrations import TensorBoardCallback

    from optima_train.fast_dropout import use_fast_dropout

    set_seed(seed)  # the LoRA initialisation draws from torch's global RNG
    tokenizer, model = load_for_training(init, base_dtype(cfg))
    peft_config = lora_config(cfg)
    args = args_cls(**{**training_args(cfg, folder, seed=seed), **dict(method_args or {})})
    writer = SummaryWriter(log_dir=str(folder / "logs"))
    try:
        trainer = trainer_cls(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                              peft_config=peft_config, callbacks=[TensorBoardCallback(writer)], **trainer_kwargs)
        if args.use_cpu and cfg.lora.enabled and cfg.lora.fast_dropout:
            use_fast_dropout(trainer.model)  # torch draws CPU dropout masks one element at a time
        trainable = count_trainable(trainer.model)
        with labelled_positions_only():  # the LM head skips prompt rows on a CPU
            output = trainer.train()
    finally:
        writer.close()
    history = finish_training(trainer, output, tokenizer, folder, init)
    return TrainRun(output, history, trainable, peft_config is not None)


def launch_training(trainer_cls: Any, args_cls: Any, cfg: Any, init: str, folder: Path, dataset: Any, *, seed: int,
                    method_args: Mapping[str, Any] | None = None, **trainer_kwargs: Any) -> TrainRun:
    """`train_with` under `accelerate launch` in a subprocess (see the module doc): writes
    `folder/launch/{dataset,spec.json}`, runs the launch (its output in `folder/launch/launch.log`,
    and on stderr when `run.progress`), and reads back what rank 0 wrote.

    Raises:
        TrainingLaunchError: the launch exited with an error (the log's last lines are in the message).
    """
    t = cfg.train
    launch = folder / "launch"
    launch.mkdir(parents=True, exist_ok=True)
    dataset.save_to_disk(str(launch / "dataset"))
    spec = {"trainer": _qualname(trainer_cls), "args_class": _qualname(args_cls),
            "args": {**training_args(cfg, folder, seed=seed), **dict(method_args or {})},
            "init": str(init), "base_dtype": base_dtype(cfg), "folder": str(folder.resolve()), "seed": seed,
            "lora": dataclasses.asdict(cfg.lora) if cfg.lora.enabled else None, "trainer_kwargs": dict(trainer_kwargs)}
    atomic_write_json(launch / "spec.json", spec)
    command = [sys.executable, "-m", "accelerate.commands.launch",
               *(["--config_file", t.accelerate_config] if t.accelerate_config else []), *t.launch_args,
               "-m", "optima_train.distributed_step", str(launch / "spec.json")]
    log = launch / "launch.log"
    with log.open("w", encoding="utf-8") as out:
        out.write(" ".join(command) + "\n")
        out.flush()
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"}) as proc:
            for line in proc.stdout:  # type: ignore[union-attr]
                out.write(line)
                if cfg.run.progress:
                    sys.stderr.write(line)
        code = proc.returncode
    if code != 0 or not (launch / "result.json").is_file():
        tail = "".join(log.read_text(encoding="utf-8").splitlines(keepends=True)[-25:])
        raise TrainingLaunchError(f"the training step under `accelerate launch` failed (exit code {code}); "
                                  f"{log} ends with:\n{tail}")
    from transformers.trainer_utils import TrainOutput

    result = read_json(launch / "result.json")
    output = TrainOutput(result["global_step"], result["training_loss"], result["metrics"])
    return TrainRun(output, read_json(folder / "train.json")["log_history"], result["trainable_parameters"],
                    result["lora"])


def _qualname(cls: Any) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def count_trainable(model: Any) -> int:
    """Trainable parameters of `model`, also when DeepSpeed ZeRO-3 has partitioned them (a
    partitioned parameter's `numel()` is 0; its full size is `ds_numel`)."""
    return sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters() if p.requires_grad)


def load_for_training(init: str, dtype: str = "float32") -> tuple[Any, Any]:
    """(tokenizer, model) of the folder `init`, its weights in `dtype` ("float32", or "bfloat16"
    for the frozen base of a LoRA run: `base_dtype`), with attention per packed sequence
    (`optima_train.segmented_attention`); TRL's bf16 autocast does the rest."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from optima_train.segmented_attention import use_segmented_attention

    model = AutoModelForCausalLM.from_pretrained(init, dtype=getattr(torch, dtype))
    if dtype == "bfloat16":
        keep_residual_float32(model)
    use_segmented_attention(model)
    return AutoTokenizer.from_pretrained(init), model


def keep_residual_float32(model: Any) -> None:
    """Cast the input embedding and every parameter with fewer than two dimensions (the norms'
    weights, any biases) of a bf16-loaded model back to float32. The residual stream then starts
    in float32 and stays there, as it does under autocast with float32 weights (each bf16
    product is added to it in float32), while the big products keep their bf16 weights."""
    model.get_input_embeddings().float()
    for parameter in model.parameters():
        if parameter.dim() < 2:
            parameter.data = parameter.data.float()


def base_dtype(cfg: Any) -> str:
    """The dtype the starting weights load in for training (`train.frozen_base_dtype`).

    Raises:
        ConfigError: bfloat16 asked for a full fine-tune, whose weights are the trained ones.
    """
    asked = cfg.train.frozen_base_dtype
    if asked == "auto":
        return "bfloat16" if cfg.lora.enabled and use_bf16(cfg.train.bf16, cfg.model.resolved_device()) else "float32"
    if asked == "bfloat16" and not cfg.lora.enabled:
        raise ConfigError("train.frozen_base_dtype=bfloat16 needs LoRA (lora.enabled: true): a full fine-tune trains "
                          "the base weights, which need float32; set it to auto or float32")
    return asked


def merged_adapter(init: str, adapter: Path) -> Any:
    """The float32 weights of `init` with the LoRA adapter saved in `adapter` merged in. Merging
    into the float32 start, rather than into a model whose frozen base is bf16, keeps every
    update smaller than bf16's rounding step."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(init, dtype=torch.float32)
    return PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()


def lora_config(cfg: Any) -> Any | None:
    """PEFT's `LoraConfig` from `cfg.lora` (None: full fine-tuning)."""
    if not cfg.lora.enabled:
        return None
    from peft import LoraConfig

    targets: Any = cfg.lora.target_modules
    targets = "all-linear" if list(targets) == ["all-linear"] else list(targets)
    return LoraConfig(r=cfg.lora.r, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
                      target_modules=targets, task_type="CAUSAL_LM")


def use_bf16(setting: bool | str, device: str) -> bool:
    """`train.bf16` as TRL takes it: "auto" is on where `device` runs bf16 natively."""
    if setting != "auto":
        return bool(setting)
    from optima_agents.models.dtypes import resolve_dtype

    return resolve_dtype("auto", device) == "bfloat16"


def training_args(cfg: Any, folder: Path, *, seed: int) -> dict[str, Any]:
    """The `TrainingArguments` fields every method takes from `cfg.train`, `cfg.model` and
    `cfg.run`, plus `cfg.train.extra` (any other field of the method's TRL config).

    The device follows `model.device` for every method: `auto` trains on CUDA when there is one.
    """
    t = cfg.train
    return dict(
        output_dir=str(folder / "trainer"), report_to=report_targets(t.report_to) or "none", save_strategy="no",
        seed=seed,
        learning_rate=t.learning_rate, num_train_epochs=t.num_train_epochs, max_steps=t.max_steps,
        per_device_train_batch_size=t.per_device_train_batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps, max_length=t.max_length,
        lr_scheduler_type=t.lr_scheduler_type, warmup_steps=t.warmup_steps, weight_decay=t.weight_decay,
        bf16=use_bf16(t.bf16, cfg.model.resolved_device()), gradient_checkpointing=t.gradient_checkpointing, logging_steps=t.logging_steps,
        use_cpu=cfg.model.resolved_device() == "cpu", disable_tqdm=not cfg.run.progress, **t.extra,
    )


def finish_training(trainer: Any, output: Any, tokenizer: Any, folder: Path, init: str) -> list[dict[str, Any]]:
    """Merge the LoRA adapter (if any) into the float32 weights it trained on, or into a float32
    reload of `init` when the frozen base was bf16 (`merged_adapter`), save `folder/checkpoint`
    as a plain HF folder (atomically) and `folder/train.json`; returns TRL's log history. The
    adapter itself is kept in `checkpoint/adapter`, so a running vLLM engine can serve the
    checkpoint (`adapter_stack`)."""
    import torch
    from peft import PeftModel

    from optima_train.adapter_stack import ADAPTER_DIR

    model = trainer.model
    with atomic_dir(folder / "checkpoint") as tmp:
        if isinstance(model, PeftModel):
            model.save_pretrained(tmp / ADAPTER_DIR)
            frozen_float32 = all(p.dtype == torch.float32 for p in model.parameters() if not p.requires_grad)
            model = model.merge_and_unload() if frozen_float32 else merged_adapter(init, tmp / ADAPTER_DIR)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    history = trainer.state.log_history
    atomic_write_json(folder / "train.json", {"log_history": history, "metrics": output.metrics})
    return history
