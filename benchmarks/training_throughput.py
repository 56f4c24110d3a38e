"""SFT training speed on this machine: padded against padding-free batches, float32 against bf16.

The iSFT step trains LoRA adapters with TRL's `SFTTrainer` on pre-tokenised examples
(`input_ids`, `assistant_masks`, as `optima_train.sft_data` writes them). Two settings decide its
speed on a CPU:
- **padding-free** (`SFTConfig(padding_free=True)`): the collator concatenates a batch into one
  row with restarting `position_ids`, and transformers builds a block-diagonal attention mask
  from them, so no compute goes to pad tokens;
- **labelled rows only** (`optima_train.lm_head.labelled_positions_only`, on in every Optima
  training step): TRL's fused LM head projects every position on a CPU, prompt tokens included,
  though only the labelled ones carry loss; the variant projects only those;
- **bf16**: fast where the CPU has bf16 instructions (AMX, AVX512-BF16), emulated and slow
  where it has not. `bf16` loads the weights in float32 and trains under bf16 autocast, which
  casts every frozen weight to bf16 again in every forward and backward pass; `bf16-weights`
  loads the frozen base in bf16 once (PEFT keeps the LoRA adapters in float32, and autocast
  runs their products in bf16), which only a LoRA run can do: full fine-tuning needs float32
  master weights.

Each variant trains the same examples (real SFT rows when `--data` names a run's
`sft.parquet`, else rows built from the embedded tokenizer with the length spread of the
synth-hop experiment's examples) for `--steps` optimizer steps after one warm-up step, `--repeats`
times; tokens/s counts only real (non-pad) tokens, so the variants are comparable. The loss of the
first step is recorded too: padded and padding-free must agree.

    python benchmarks/training_throughput.py                  # 8 variants, 3 repeats
    python benchmarks/training_throughput.py --variants "float32 padded,bf16 padding-free labelled-only"
    python benchmarks/training_throughput.py --quick          # 1 repeat, few steps
    python benchmarks/training_throughput.py --dtypes float32 # a CPU without native bf16

Writes `benchmarks/results/training_throughput.json` and `.md`.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import RESULTS, invocation, write_report, write_result  # noqa: E402

# (dtype, padding-free, LM head on labelled rows only)
VARIANTS = (("float32", False, False), ("float32", True, False), ("bf16", False, False), ("bf16", True, False),
            ("bf16", True, True), ("bf16-weights", False, False), ("bf16-weights", True, False),
            ("bf16-weights", True, True))


def variant_key(dtype: str, padding_free: bool, labelled_only: bool) -> str:
    return f"{dtype} {'padding-free' if padding_free else 'padded'}{' labelled-only' if labelled_only else ''}"


def synthetic_rows(tokenizer: Any, count: int, seed: int) -> list[dict[str, list[int]]]:
    """SFT rows shaped like the synth-hop experiment's: a 150-450 token prompt, then 1-4 replies
    of 10-64 tokens with loss on the replies only (token ids drawn from real text)."""
    rng = random.Random(seed)
    text = ("Alice knows that the river Kabaix flows through the city of Orlem, and Bob knows that Orlem "
            "is the capital of the province of Dasta. Who governs the region the river crosses? ") * 40
    pool = tokenizer.encode(text, add_special_tokens=False)
    rows = []
    for _ in range(count):
        ids, mask = [], []
        prompt = rng.randint(150, 450)
        ids += pool[:prompt]
        mask += [0] * prompt
        for _ in range(rng.randint(1, 4)):
            reply = rng.randint(10, 64)
            start = rng.randrange(len(pool) - reply)
            ids += pool[start:start + reply]
            mask += [1] * reply
            if rng.random() < 0.7:
                other = rng.randint(10, 64)
                ids += pool[:other]
                mask += [0] * other
        rows.append({"input_ids": ids, "assistant_masks": mask})
    return rows


def run_variant(model_path: Path, rows: list[dict[str, list[int]]], *, dtype: str, padding_free: bool,
                labelled_only: bool, steps: int, batch_size: int, seed: int) -> dict[str, Any]:
    """Train `steps + 1` steps; returns seconds for the last `steps`, real tokens in them, and the
    first step's loss."""
    import datasets
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from optima_train.lm_head import labelled_positions_only

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    weights = torch.bfloat16 if dtype == "bf16-weights" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=weights)
    marks: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            marks.append(time.perf_counter())

    args = SFTConfig(output_dir=str(Path("/tmp") / "optima_training_throughput"), report_to="none", save_strategy="no",
                     max_steps=steps + 1, per_device_train_batch_size=batch_size, gradient_accumulation_steps=1,
                     learning_rate=2e-5, lr_scheduler_type="constant", logging_steps=1, bf16=dtype.startswith("bf16"),
                     padding_free=padding_free, max_length=None if padding_free else 1024, use_cpu=True, disable_tqdm=True, seed=seed,
                     dataloader_drop_last=True)
    # TRL enforces no max_length on padding-free batches without packing: the rows must fit already
    assert all(len(r["input_ids"]) <= 1024 for r in rows), "rows longer than 1024 tokens"
    dataset = datasets.Dataset.from_list(rows)
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer, peft_config=lora,
                         callbacks=[StepClock()])
    with labelled_positions_only() if labelled_only else contextlib.nullcontext():
        trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    # TRL's cumulative `num_tokens` counts real tokens (attention mask, or the packed row's length).
    tokens = logs[-1]["num_tokens"] - logs[0]["num_tokens"]
    seconds = marks[-1] - marks[0]
    return {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds, "first_loss": logs[0]["loss"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--data", default=None, help="An sft.parquet of a run (default: synthetic rows).")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="1 repeat of 3 steps.")
    parser.add_argument("--dtypes", default="float32,bf16,bf16-weights",
                        help="comma-separated; drop bf16 where the CPU emulates it (it is several times slower)")
    parser.add_argument("--variants", default=None,
                        help="comma-separated variant names as the table prints them (default: all of --dtypes)")
    parser.add_argument("--name", default="training_throughput")
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.steps = 1, 3

    import torch
    from transformers import AutoTokenizer

    from optima_agents.models import resolve_model

    model_path = resolve_model(args.model)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    count = args.batch_size * (args.steps + 1)
    if args.data:
        import datasets

        table = datasets.Dataset.from_parquet(args.data).select_columns(["input_ids", "assistant_masks"])
        rows = [table[i] for i in random.Random(args.seed).sample(range(len(table)), min(count, len(table)))]
        source = args.data
    else:
        rows = synthetic_rows(tokenizer, count, args.seed)
        source = "synthetic rows (synth-hop experiment lengths)"

    chosen = [v for v in VARIANTS if v[0] in args.dtypes.split(",")]
    if args.variants:
        wanted = [name.strip() for name in args.variants.split(",")]
        known = {variant_key(*v): v for v in VARIANTS}
        unknown = [name for name in wanted if name not in known]
        if unknown:
            parser.error(f"unknown variant(s) {unknown}; known: {sorted(known)}")
        chosen = [known[name] for name in wanted]
    results: dict[str, Any] = {}
    for rep in range(args.repeats):
        for dtype, padding_free, labelled_only in chosen:  # interleaved: drift hits all
            key = variant_key(dtype, padding_free, labelled_only)
            out = run_variant(model_path, rows, dtype=dtype, padding_free=padding_free, labelled_only=labelled_only,
                              steps=args.steps, batch_size=args.batch_size, seed=args.seed)
            results.setdefault(key, []).append(out)
            print(f"repeat {rep}: {key}: {out['tokens_per_s']:.0f} tokens/s, first loss {out['first_loss']:.4f}", flush=True)

    summary = {key: {"tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in runs),
                     "tokens_per_s": [r["tokens_per_s"] for r in runs],
                     "first_loss": runs[0]["first_loss"]} for key, runs in results.items()}
    base_key = next(iter(summary))
    base = summary[base_key]["tokens_per_s_median"]
    command = invocation("training_throughput.py")
    lines = ["# SFT training throughput (LoRA r=16, all-linear)", "",
             f"Made by: `{command}`. Model {args.model}; {source}; batch {args.batch_size}, {args.steps} timed steps "
             f"after a warm-up step, median of {args.repeats}; CPU capability `{torch.backends.cpu.get_cpu_capability()}`, "
             f"{torch.get_num_threads()} torch threads.", "",
             f"| variant | tokens/s (median) | vs {base_key} | first-step loss |", "|---|---|---|---|"]
    for key, s in summary.items():
        lines.append(f"| {key} | {s['tokens_per_s_median']:.0f} | {s['tokens_per_s_median'] / base:.2f}x | {s['first_loss']:.4f} |")
    text = "\n".join(lines) + "\n"
    write_report(RESULTS / f"{args.name}.md", text)
    write_result(args.name, {"command": command, "model": args.model, "source": source, "steps": args.steps,
                             "batch_size": args.batch_size, "repeats": args.repeats,
                             "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                             "torch_threads": torch.get_num_threads(), "variants": summary})
    print(text)


if __name__ == "__main__":
    main()
