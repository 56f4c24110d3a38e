"""One training step on every rank of an `accelerate launch` (see `optima_train.trl_glue`).

    accelerate launch --config_file configs/gpu/accelerate/1x8_zero3.yaml \\
        -m optima_train.distributed_step runs/x/iter_000/training/launch/spec.json

`trl_glue.launch_training` writes the spec and runs this; the same command reruns a step by hand
(e.g. with `--machine_rank 1` on the second node of a multi-node DDP launch). Every rank builds the
trainer from the spec and trains; `Trainer.save_model` (collective: it gathers ZeRO-3 shards) writes
the trained weights, or the LoRA adapter, which rank 0 then merges into the starting weights. Rank 0
writes `checkpoint/`, `train.json` and `launch/result.json`, in that order, so a result file means a
complete checkpoint.
"""

from __future__ import annotations

import importlib
import json
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Mapping

from optima_envs.atomic_files import atomic_dir, atomic_write_json
from optima_train.lm_head import labelled_positions_only
from optima_train.trl_glue import count_trainable, load_for_training, lora_config, merged_adapter

__all__ = ["main", "run_step"]


def _resolve(target: str) -> Any:
    module, _, attr = target.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def run_step(spec: Mapping[str, Any]) -> None:
    """Train as one rank of the launch described by `spec` (the JSON `launch_training` writes)."""
    import datasets
    from transformers import set_seed

    from optima_train.fast_dropout import use_fast_dropout

    folder = Path(spec["folder"])
    # The arguments first: under DeepSpeed ZeRO-3 they switch on zero.Init, so the weights load
    # already partitioned instead of whole on every rank.
    args = _resolve(spec["args_class"])(**spec["args"])
    set_seed(int(spec["seed"]))
    tokenizer, model = load_for_training(spec["init"], spec.get("base_dtype", "float32"))
    lora = spec["lora"]
    peft_config = lora_config(SimpleNamespace(lora=SimpleNamespace(**lora))) if lora else None
    dataset = datasets.load_from_disk(str(folder / "launch" / "dataset"))
    main = args.process_index == 0
    callbacks, writer = [], None
    if main:
        from torch.utils.tensorboard import SummaryWriter
        from transformers.integrations import TensorBoardCallback

        writer = SummaryWriter(log_dir=str(folder / "logs"))
        callbacks.append(TensorBoardCallback(writer))
    try:
        trainer = _resolve(spec["trainer"])(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                                            peft_config=peft_config, callbacks=callbacks, **spec["trainer_kwargs"])
        if args.use_cpu and lora and lora.get("fast_dropout", True):
            use_fast_dropout(trainer.model)  # torch draws CPU dropout masks one element at a time
        trainable = count_trainable(trainer.model)
        with labelled_positions_only():  # the LM head skips prompt rows on a CPU
            output = trainer.train()
    finally:
        if writer is not None:
            writer.close()
    saved = folder / ".trained.partial"
    trainer.save_model(str(saved))  # every rank: ZeRO-3 gathers the shards here
    trainer.accelerator.wait_for_everyone()
    if main:
        _finish(saved, folder, spec["init"], tokenizer, bool(lora))
        history = trainer.state.log_history
        atomic_write_json(folder / "train.json", {"log_history": history, "metrics": output.metrics})
        atomic_write_json(folder / "launch" / "result.json", {
            "global_step": output.global_step, "training_loss": output.training_loss, "metrics": output.metrics,
            "trainable_parameters": trainable, "lora": bool(lora), "world_size": args.world_size})
    trainer.accelerator.wait_for_everyone()


def _finish(saved: Path, folder: Path, init: str, tokenizer: Any, lora: bool) -> None:
    """Turn what `save_model` wrote into `folder/checkpoint`, a plain HF model folder: the LoRA
    adapter merged into the starting weights (and kept in `checkpoint/adapter`), or the full
    weights as saved."""
    with atomic_dir(folder / "checkpoint") as tmp:
        if lora:
            from optima_train.adapter_stack import ADAPTER_DIR

            shutil.copytree(saved, tmp / ADAPTER_DIR)
            merged_adapter(init, saved).save_pretrained(tmp)
        else:
            for item in saved.iterdir():
                shutil.move(str(item), tmp / item.name)
        tokenizer.save_pretrained(tmp)
    shutil.rmtree(saved, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        sys.exit("usage: accelerate launch [options] -m optima_train.distributed_step <step>/launch/spec.json")
    run_step(json.loads(Path(argv[0]).read_text(encoding="utf-8")))


if __name__ == "__main__":
    main()
