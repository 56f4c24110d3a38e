"""The iSFT training step with each LoRA dropout: same losses, and how long the step takes.

`lora.fast_dropout` (on by default on a CPU) draws LoRA dropout masks from numpy's PCG64 four
elements per random number instead of torch's one-at-a-time CPU generator. The masks are other
random draws of the same distribution (the probability rounded to 1/65536), so the training
losses should differ from torch's dropout only as much as two mask streams do. This script
trains one config's SFT step on one `sft.parquet` at the same seed (same batches, same LoRA
initialisation) three ways: torch's `nn.Dropout`, `FastDropout`, and no dropout (how far the
dropout itself moves the losses), logging the loss at every step, and times each step.

    python benchmarks/dropout_losses.py --data runs/<run>/iter_000/selection/sft.parquet

Writes `benchmarks/results/dropout_losses.json` and `.md`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import RESULTS, invocation, machine, markdown_table, write_report, write_result  # noqa: E402

SETTINGS = {"torch dropout": ["lora.fast_dropout=false"], "fast dropout": ["lora.fast_dropout=true"],
            "no dropout": ["lora.dropout=0"]}


def train_once(config: str, data: Path, overrides: list[str], seed: int) -> dict[str, Any]:
    """One SFT step of `config` on `data`; the logged loss of every step and the step's seconds."""
    from optima_agents.models import resolve_model
    from optima_train.config.io import load_config
    from optima_train.isft import ISFTConfig
    from optima_train.isft.isft_trainer import train_sft

    cfg = load_config(ISFTConfig, ROOT / config, ["train.logging_steps=1", "run.progress=false", *overrides])
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        info = train_sft(cfg, data, str(resolve_model(cfg.model.name)), Path(folder), seed=seed)
        seconds = time.perf_counter() - start
        history = json.loads((Path(folder) / "train.json").read_text())["log_history"]
    return {"seconds": seconds, "steps": info["steps"], "examples": info["examples"],
            "train_loss": info["train_loss"], "losses": [h["loss"] for h in history if "loss" in h]}


def compare(runs: dict[str, dict[str, Any]], reference: str = "torch dropout") -> dict[str, dict[str, float]]:
    """Per setting: the largest and mean absolute per-step loss difference from `reference`."""
    base = runs[reference]["losses"]
    out = {}
    for name, run in runs.items():
        gaps = [abs(a - b) for a, b in zip(run["losses"], base)]
        out[name] = {"max_abs_gap": max(gaps), "mean_abs_gap": statistics.fmean(gaps),
                     "train_loss_gap": run["train_loss"] - runs[reference]["train_loss"]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="An sft.parquet that a run's selection step wrote.")
    parser.add_argument("--config", default="configs/isft/synth_hop_experiment.yaml")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="A config override, repeatable.")
    parser.add_argument("--name", default="dropout_losses")
    args = parser.parse_args()

    runs = {}
    for name, overrides in SETTINGS.items():
        runs[name] = train_once(args.config, Path(args.data), [*args.overrides, *overrides], args.seed)
        print(f"{name}: {runs[name]['seconds']:.1f} s, train loss {runs[name]['train_loss']:.4f}", flush=True)
    gaps = compare(runs)
    command = invocation("dropout_losses.py")
    torch_s = runs["torch dropout"]["seconds"]
    rows = [[name, f"{run['seconds']:.1f}", f"{torch_s / run['seconds']:.2f}x", f"{run['train_loss']:.4f}",
             f"{gaps[name]['train_loss_gap']:+.4f}", f"{gaps[name]['max_abs_gap']:.4f}", f"{gaps[name]['mean_abs_gap']:.4f}"]
            for name, run in runs.items()]
    steps = runs["torch dropout"]["steps"]
    lines = ["# The iSFT training step with each LoRA dropout", "",
             f"Made by: `{command}`. Config `{args.config}`, seed {args.seed}: {runs['torch dropout']['examples']} "
             f"examples, {steps} steps, the loss logged at every step; one run per setting, one after the other, "
             f"on {machine()['cpu_kind']}.", "",
             *markdown_table(["dropout", "step seconds", "speed vs torch dropout", "train loss", "vs torch dropout",
                              "largest per-step loss gap", "mean per-step loss gap"], rows), "",
             "Per-step losses:", "",
             *markdown_table(["step", *runs], [[i + 1, *(f"{run['losses'][i]:.4f}" for run in runs.values())]
                                               for i in range(len(runs["torch dropout"]["losses"]))])]
    text = "\n".join(lines) + "\n"
    write_report(RESULTS / f"{args.name}.md", text)
    write_result(args.name, {"command": command, "config": args.config, "seed": args.seed, "runs": runs, "gaps": gaps})
    print(text)


if __name__ == "__main__":
    main()
