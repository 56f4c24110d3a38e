"""SFT training speed on this machine, one setting at a time, against the path Optima trains with.

The iSFT step trains LoRA adapters with TRL's `SFTTrainer` on pre-tokenised examples
(`input_ids`, `assistant_masks`, as `optima_train.sft_data` writes them). The settings that
decide its speed on a CPU, each a word in a variant's name:
- **padding-free** (`SFTConfig(padding_free=True)`): the collator concatenates a batch into one
  row with restarting `position_ids`, and transformers builds a block-diagonal attention mask
  from them, so no compute goes to pad tokens (`padded` pads every row to the longest);
- **labelled-only** (`optima_train.lm_head.labelled_positions_only`): TRL's fused LM head
  projects every position on a CPU, prompt tokens included, though only the labelled ones carry
  loss; the variant projects only those;
- **segmented** (`optima_train.segmented_attention`): attention per packed sequence instead of
  over the whole packed row under a block-diagonal mask;
- **bf16** / **bf16-weights** / **float32**: `bf16` loads the weights in float32 and trains
  under bf16 autocast, which casts every frozen weight to bf16 again in every forward and
  backward pass; `bf16-weights` loads the frozen base in bf16 once (PEFT keeps the LoRA adapters
  in float32, and autocast runs their products in bf16), which only a LoRA run can do. bf16 is
  fast where the CPU has bf16 instructions (AMX, AVX512-BF16) and emulated and slow elsewhere;
- **fast-dropout** (`optima_train.fast_dropout`): LoRA dropout 0.05 with its masks drawn four
  elements per random integer; torch's `nn.Dropout` draws one per element on a CPU (its
  vectorised generator is used on Intel processors only), which makes the masks a fifth of the step;
- **dropout 0**: LoRA dropout off (the default is 0.05), the bound a faster mask could reach;
- **checkpointing**: gradient checkpointing on. TRL's `SFTConfig` turns it on by default;
  Optima's `train.gradient_checkpointing` is off unless a config asks (its GPU configs do), so
  every variant without the word sets it off, as Optima's training does.

Each variant trains the same examples (real SFT rows when `--data` names a run's
`sft.parquet`, else rows built from the embedded tokenizer with the length spread of the
synth-hop experiment's examples) for `--steps` optimizer steps after one warm-up step, `--repeats`
times, interleaved; tokens/s counts only real (non-pad) tokens, so the variants are comparable.
The loss of the first step is recorded too: every variant must agree within bf16 rounding.

    python benchmarks/training_throughput.py                  # the default variants, 3 repeats
    python benchmarks/training_throughput.py --variants "float32 padded,bf16-weights padding-free labelled-only segmented"
    python benchmarks/training_throughput.py --quick          # 1 repeat, few steps
    python benchmarks/training_throughput.py --dtypes float32 # a CPU without native bf16

Where a `benchmarks/results/machine_ceiling*.json` was measured on this CPU kind, every variant is
also set against the most tokens/s the machine's matmul rates allow for LoRA training on these
rows (`training_ceiling`). `--render` rewrites a report from its saved record.

Writes `benchmarks/results/training_throughput.json` and `.md`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import RESULTS, invocation, write_report, write_result  # noqa: E402

DTYPES = ("float32", "bf16", "bf16-weights")
LAYOUTS = ("padded", "padding-free")
FLAGS = ("labelled-only", "segmented", "fast-dropout", "dropout 0", "checkpointing")
LORA_RANK = 16
SYNTHETIC_SOURCE = "synthetic rows (synth-hop experiment lengths)"


@dataclass(frozen=True)
class Variant:
    """One training setting; `name` is how the table prints it and `--variants` reads it."""

    dtype: str
    padding_free: bool
    labelled_only: bool = False
    segmented: bool = False
    dropout: float = 0.05
    checkpointing: bool = False
    fast_dropout: bool = False

    @property
    def name(self) -> str:
        words = [self.dtype, LAYOUTS[self.padding_free], "labelled-only" * self.labelled_only,
                 "segmented" * self.segmented, "fast-dropout" * self.fast_dropout, "dropout 0" * (self.dropout == 0),
                 "checkpointing" * self.checkpointing]
        return " ".join(w for w in words if w)

    @classmethod
    def parse(cls, name: str) -> "Variant":
        """The variant a name describes: a dtype, a layout, then any of `FLAGS` in that order."""
        rest = name.strip()
        dtype = next((d for d in sorted(DTYPES, key=len, reverse=True) if rest.startswith(d + " ")), None)
        layout = rest[len(dtype) + 1:].split(" ", 1)[0] if dtype else None
        if dtype is None or layout not in LAYOUTS:
            raise ValueError(f"variant {name!r}: start with a dtype {list(DTYPES)} and a layout {list(LAYOUTS)}")
        flags = rest[len(dtype) + 1 + len(layout):].strip()
        found = {}
        for flag in FLAGS:
            if flags.startswith(flag):
                found[flag] = True
                flags = flags[len(flag):].strip()
        if flags:
            raise ValueError(f"variant {name!r}: {flags!r} is not one of {list(FLAGS)} (in that order)")
        variant = cls(dtype, layout == "padding-free", "labelled-only" in found, "segmented" in found,
                      0.0 if "dropout 0" in found else 0.05, "checkpointing" in found, "fast-dropout" in found)
        if variant.segmented and not variant.padding_free:
            raise ValueError(f"variant {name!r}: segmented attention needs padding-free rows")
        if variant.fast_dropout and variant.dropout == 0:
            raise ValueError(f"variant {name!r}: fast-dropout and dropout 0 exclude each other")
        return variant


# What `optima train` runs on a CPU with native bf16 (LoRA, `train.bf16: auto`, the default
# `train.frozen_base_dtype` and `train.padding_free`, LoRA dropout 0.05 with its masks drawn by
# `FastDropout`), and what it ran before the labelled-only head, per-sequence attention, bf16 base
# weights and the faster masks.
OPTIMA_PATH = "bf16-weights padding-free labelled-only segmented fast-dropout"
EARLIER_PATH = "bf16 padding-free"
DEFAULT_VARIANTS = ("float32 padded", "bf16 padded", "bf16 padding-free checkpointing", "bf16 padding-free",
                    "bf16 padding-free labelled-only", "bf16 padding-free labelled-only segmented",
                    "bf16-weights padding-free labelled-only segmented",
                    "bf16-weights padding-free labelled-only segmented fast-dropout",
                    "bf16-weights padding-free labelled-only segmented dropout 0")


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


def benchmark_rows(tokenizer: Any, data: str | None, count: int, seed: int) -> list[dict[str, list[int]]]:
    """The rows every variant trains on: `count` rows of the `data` sft.parquet drawn with `seed`
    (all of them when it has fewer), or `synthetic_rows` without `data`."""
    if data is None:
        return synthetic_rows(tokenizer, count, seed)
    import datasets

    table = datasets.Dataset.from_parquet(data).select_columns(["input_ids", "assistant_masks"])
    return [table[i] for i in random.Random(seed).sample(range(len(table)), min(count, len(table)))]


def run_variant(model_path: Path, rows: list[dict[str, list[int]]], variant: Variant, *, steps: int, batch_size: int,
                seed: int) -> dict[str, Any]:
    """Train `steps + 1` steps; returns seconds for the last `steps`, real tokens in them, and the
    first and last steps' losses."""
    import datasets
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from optima_train.fast_dropout import use_fast_dropout
    from optima_train.lm_head import labelled_positions_only
    from optima_train.segmented_attention import use_segmented_attention
    from optima_train.trl_glue import keep_residual_float32

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    weights = torch.bfloat16 if variant.dtype == "bf16-weights" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=weights)
    if variant.dtype == "bf16-weights":  # as `optima_train.trl_glue.load_for_training` does
        keep_residual_float32(model)
    if variant.segmented:
        use_segmented_attention(model)
    marks: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            marks.append(time.perf_counter())

    args = SFTConfig(output_dir=str(Path("/tmp") / "optima_training_throughput"), report_to="none", save_strategy="no",
                     max_steps=steps + 1, per_device_train_batch_size=batch_size, gradient_accumulation_steps=1,
                     learning_rate=2e-5, lr_scheduler_type="constant", logging_steps=1, bf16=variant.dtype.startswith("bf16"),
                     gradient_checkpointing=variant.checkpointing, padding_free=variant.padding_free,
                     max_length=None if variant.padding_free else 1024, use_cpu=True, disable_tqdm=True, seed=seed,
                     dataloader_drop_last=True)
    # TRL enforces no max_length on padding-free batches without packing: the rows must fit already
    assert all(len(r["input_ids"]) <= 1024 for r in rows), "rows longer than 1024 tokens"
    dataset = datasets.Dataset.from_list(rows)
    lora = LoraConfig(r=LORA_RANK, lora_alpha=2 * LORA_RANK, lora_dropout=variant.dropout, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer, peft_config=lora,
                         callbacks=[StepClock()])
    if variant.fast_dropout:
        assert use_fast_dropout(trainer.model) > 0, "no LoRA dropout to replace"
    with labelled_positions_only() if variant.labelled_only else contextlib.nullcontext():
        trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    # TRL's cumulative `num_tokens` counts real tokens (attention mask, or the packed row's length).
    tokens = logs[-1]["num_tokens"] - logs[0]["num_tokens"]
    seconds = marks[-1] - marks[0]
    return {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds, "first_loss": logs[0]["loss"],
            "last_loss": logs[-1]["loss"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--data", default=None, help="An sft.parquet of a run (default: synthetic rows).")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="1 repeat of 3 steps.")
    parser.add_argument("--dtypes", default=",".join(DTYPES),
                        help="comma-separated; drop bf16 where the CPU emulates it (it is several times slower)")
    parser.add_argument("--variants", default=None,
                        help="comma-separated variant names as the table prints them (default: those of "
                             "DEFAULT_VARIANTS whose dtype is in --dtypes)")
    parser.add_argument("--reference", default=EARLIER_PATH,
                        help="a second variant every row is compared with (default: the iSFT path before the "
                             "labelled-only head, per-sequence attention and bf16 base weights)")
    parser.add_argument("--name", default="training_throughput")
    parser.add_argument("--render", action="store_true",
                        help="only rewrite the .md of --name from its saved .json (adding the ceiling of its rows)")
    args = parser.parse_args()
    if args.render:
        render(args.name, args.model)
        return
    if args.quick:
        args.repeats, args.steps = 1, 3

    import torch
    from transformers import AutoTokenizer

    from optima_agents.models import resolve_model

    model_path = resolve_model(args.model)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    rows = benchmark_rows(tokenizer, args.data, args.batch_size * (args.steps + 1), args.seed)
    source = args.data or SYNTHETIC_SOURCE

    try:
        names = [n.strip() for n in args.variants.split(",")] if args.variants else DEFAULT_VARIANTS
        chosen = [Variant.parse(name) for name in names]
    except ValueError as err:
        parser.error(str(err))
    if not args.variants:
        chosen = [v for v in chosen if v.dtype in args.dtypes.split(",")]
    results: dict[str, Any] = {}
    for rep in range(args.repeats):
        for variant in chosen:  # interleaved: drift hits all
            key = variant.name
            out = run_variant(model_path, rows, variant, steps=args.steps, batch_size=args.batch_size, seed=args.seed)
            results.setdefault(key, []).append(out)
            print(f"repeat {rep}: {key}: {out['tokens_per_s']:.0f} tokens/s, first loss {out['first_loss']:.4f}, "
                  f"last loss {out['last_loss']:.4f}", flush=True)

    summary = {key: {"tokens_per_s_median": statistics.median(r["tokens_per_s"] for r in runs),
                     "tokens_per_s": [r["tokens_per_s"] for r in runs],
                     "first_loss": runs[0]["first_loss"], "last_loss": runs[0]["last_loss"]}
               for key, runs in results.items()}
    reference = args.reference if args.reference in summary and args.reference != next(iter(summary)) else None
    payload = {"command": invocation("training_throughput.py"), "model": args.model, "source": source,
               "steps": args.steps, "batch_size": args.batch_size, "repeats": args.repeats, "seed": args.seed,
               "cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch_threads": torch.get_num_threads(),
               "optima_path": OPTIMA_PATH, "reference": reference, "variants": summary,
               "ceiling": training_ceiling(rows, model_path)}
    publish(args.name, payload)


def training_ceiling(rows: list[dict[str, list[int]]], model_path: Path, lora_rank: int = LORA_RANK) -> dict[str, Any] | None:
    """The most tokens/s this machine's measured matmul rates allow for LoRA training on `rows`
    (`machine_ceiling.training_flops` per token at their labelled share, at the fastest measured
    dtype's 1,024-row rate), or None without a `machine_ceiling*.json` of this CPU kind."""
    from benchmarks.machine_ceiling import ModelShapes, ceiling_rates, same_cpu_ceiling, training_flops

    ceiling = same_cpu_ceiling()
    if ceiling is None:
        return None
    shapes = ModelShapes.from_folder(model_path)
    tokens = sum(len(r["input_ids"]) for r in rows)
    labelled = sum(sum(r["assistant_masks"]) for r in rows)
    _, rate, dtype = ceiling_rates(ceiling, "fastest")
    per_token = training_flops(shapes, tokens, labelled, lora_rank) / tokens
    return {"tokens_per_s": rate * 1e9 / per_token, "dtype": dtype, "cpu_kind": ceiling["cpu_kind"], "file": ceiling["file"],
            "labelled_share": labelled / tokens, "lora_rank": lora_rank}


def markdown(payload: dict[str, Any]) -> str:
    """The variants' table (each against the first variant, the reference one and the ceiling) from
    the written record."""
    summary, reference, ceiling = payload["variants"], payload.get("reference"), payload.get("ceiling")
    base_key = next(iter(summary))
    base = summary[base_key]["tokens_per_s_median"]
    ref_rate = summary[reference]["tokens_per_s_median"] if reference else None
    lines = ["# SFT training throughput (LoRA r=16, all-linear)", "",
             f"Made by: `{payload['command']}`. Model {payload['model']}; {payload['source']}; batch "
             f"{payload['batch_size']}, {payload['steps']} timed steps after a warm-up step, median of "
             f"{payload['repeats']}; CPU capability `{payload['cpu_capability']}`, {payload['torch_threads']} torch "
             f"threads. `{payload['optima_path']}` is what `optima train` runs on a CPU with native bf16; "
             f"`{EARLIER_PATH}` what it ran before the labelled-only head, per-sequence attention, bf16 base weights "
             "and the faster dropout masks.", "",
             f"| variant | tokens/s (median) | vs {base_key} |" + (f" vs {reference} |" if reference else "")
             + (" share of ceiling |" if ceiling else "") + " first-step loss | last-step loss |",
             "|---|---|---|" + ("---|" if reference else "") + ("---|" if ceiling else "") + "---|---|"]
    for key, s in summary.items():
        median = s["tokens_per_s_median"]
        name = f"**{key}** (Optima)" if key == payload["optima_path"] else key
        lines.append(f"| {name} | {median:.0f} | {median / base:.2f}x |"
                     + (f" {median / ref_rate:.2f}x |" if reference else "")
                     + (f" {median / ceiling['tokens_per_s']:.0%} |" if ceiling else "")
                     + f" {s['first_loss']:.4f} | {s['last_loss']:.4f} |")
    if ceiling:
        lines += ["", f"Share of ceiling: tokens/s over the most this machine's measured matmul rates allow "
                  f"({ceiling['tokens_per_s']:.0f} tokens/s: {ceiling['dtype']} at the 1,024-row rate, "
                  f"{ceiling['cpu_kind']}, `{ceiling.get('file', 'machine_ceiling.json')}`) for LoRA r={ceiling['lora_rank']} training on these "
                  f"rows ({ceiling['labelled_share']:.0%} of their tokens labelled): a forward and an input-gradient "
                  "product per frozen linear layer, the adapters' three products, the LM head only at labelled "
                  "positions; attention over the context left out."]
    return "\n".join(lines) + "\n"


def publish(name: str, payload: dict[str, Any]) -> None:
    write_report(RESULTS / f"{name}.md", markdown(payload))
    write_result(name, payload)
    print((RESULTS / f"{name}.md").read_text())


def render(name: str, model: str) -> None:
    """Rewrite `name`'s report from its record, adding the ceiling of the rows it trained on (the
    same rows drawn with the same seed) when the record has none. The record keeps the date and
    machine it was measured on."""
    from transformers import AutoTokenizer

    from optima_agents.models import resolve_model

    payload = json.loads((RESULTS / f"{name}.json").read_text())  # keeps its own date and machine
    if payload.get("reference") == next(iter(payload["variants"])):
        payload["reference"] = None
    if payload.get("ceiling") is None:
        model_path = resolve_model(payload.get("model", model))
        data = None if payload["source"] == SYNTHETIC_SOURCE else payload["source"]
        count = payload["batch_size"] * (payload["steps"] + 1)
        rows = benchmark_rows(AutoTokenizer.from_pretrained(model_path), data, count, payload.setdefault("seed", 0))
        payload["ceiling"] = training_ceiling(rows, model_path)
    publish(name, payload)


if __name__ == "__main__":
    main()
