"""The iSFT experiment: SmolLM2-135M on `synth-hop-ia`.

Reports held-out score and mean tokens per dialogue (95% bootstrap intervals, the same 200
questions and evidence deals for every system) for:

- the untrained two-agent system with the plain prompts;
- the untrained system told to be concise (`CONCISE_INSTRUCTION` as the format instruction);
- the model after each iSFT iteration;

and the wall time of each iteration split into generation, scoring, selection, training and
evaluation. The run is an ordinary resumable iSFT run (`optima train isft`), so an interrupted
experiment continues where it stopped.

    python benchmarks/isft_experiment.py            # configs/isft/synth_hop_experiment.yaml (~1 h)
    python benchmarks/isft_experiment.py --smoke    # configs/isft/synth_hop_smoke.yaml (minutes)
    python benchmarks/isft_experiment.py --set run.num_threads=1   # a CPU shared with busy jobs

Writes `benchmarks/results/isft_synth_hop.json` and `.md` (`isft_synth_hop_smoke.*` with --smoke).
The smoke run also projects the full run's time from its measured unit costs.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any, Mapping

try:
    from benchmarks._results import RESULTS, write_report, write_result
except ImportError:  # run as a script from the benchmarks folder
    from _results import RESULTS, write_report, write_result

ROOT = Path(__file__).resolve().parents[1]
FULL = ROOT / "configs" / "isft" / "synth_hop_experiment.yaml"
SMOKE = ROOT / "configs" / "isft" / "synth_hop_smoke.yaml"
STEPS = ("generation", "scoring", "selection", "training", "evaluation")


def _row(name: str, ev: Mapping[str, Any]) -> dict[str, Any]:
    return {"system": name, "score": ev["score"]["mean"], "score_ci": [ev["score"]["low"], ev["score"]["high"]],
            "tokens": ev["tokens"]["mean"], "tokens_ci": [ev["tokens"]["low"], ev["tokens"]["high"]],
            "episodes": ev["episodes"], "excluded": ev["excluded"], "mean_turns": ev["mean_turns"],
            "end_reasons": ev["end_reasons"]}


def _unit_costs(trainer: Any, cfg: Any, iterations: int) -> dict[str, float]:
    """Seconds per generated dialogue, per scored dialogue, per SFT example and per held-out dialogue."""
    run = trainer.run_dir
    gen = sum(run.done_info(i, "generation")["seconds"] for i in range(iterations))
    dialogues = sum(run.done_info(i, "generation")["episodes"] for i in range(iterations))
    score = sum(run.done_info(i, "scoring")["seconds"] for i in range(iterations))
    trained = [run.done_info(i, "training") for i in range(iterations)]
    examples = sum(t.get("examples", 0) * cfg.train.num_train_epochs for t in trained if t.get("steps"))
    train_s = sum(t["seconds"] for t in trained if t.get("steps"))
    evals = [run.done_info(i, "evaluation") for i in range(iterations) if run.is_done(i, "evaluation")]
    evals += [run.done_info(s, "evaluation") for s in ("baseline", "concise") if run.is_done(s, "evaluation")]
    return {
        "generation_s_per_dialogue": gen / max(dialogues, 1),
        "scoring_s_per_dialogue": score / max(dialogues, 1),
        "training_s_per_example_epoch": train_s / examples if examples else float("nan"),
        "evaluation_s_per_dialogue": sum(e["seconds"] for e in evals) / max(sum(e["episodes"] for e in evals), 1),
        "kept_examples_per_question": (sum(run.done_info(i, "selection")["examples"] for i in range(iterations))
                                       / max(iterations * cfg.task.train_questions, 1)),
    }


def _project(units: Mapping[str, float], full: Any) -> dict[str, float]:
    """The full config's time from the smoke run's unit costs (linear: larger batches only help)."""
    dialogues = full.task.train_questions * full.generation.samples_per_question
    examples = units["kept_examples_per_question"] * full.task.train_questions * full.train.num_train_epochs
    per_iter = {
        "generation": units["generation_s_per_dialogue"] * dialogues,
        "scoring": units["scoring_s_per_dialogue"] * dialogues,
        "training": units["training_s_per_example_epoch"] * examples,
        "evaluation": units["evaluation_s_per_dialogue"] * full.eval.episodes,
    }
    total = full.run.iterations * sum(per_iter.values()) + 2 * per_iter["evaluation"]  # + baseline, concise
    return {**{f"{k}_s_per_iteration": round(v, 1) for k, v in per_iter.items()}, "total_s": round(total, 1)}


def _markdown(payload: Mapping[str, Any]) -> str:
    lines = [f"# iSFT on synth-hop-ia with SmolLM2-135M{' (smoke run)' if payload['smoke'] else ''}", "",
             f"Config `{payload['config']}`; {payload['workload']['eval_episodes']} held-out dialogues (greedy), "
             f"{payload['workload']['train_questions']} training questions x {payload['workload']['samples']} samples "
             f"per iteration. Intervals: 95% bootstrap.", "",
             "| system | held-out score | tokens / dialogue | turns |", "|---|---|---|---|"]
    for r in payload["systems"]:
        lines.append(f"| {r['system']} | {r['score']:.3f} [{r['score_ci'][0]:.3f}, {r['score_ci'][1]:.3f}] | "
                     f"{r['tokens']:.1f} [{r['tokens_ci'][0]:.1f}, {r['tokens_ci'][1]:.1f}] | {r['mean_turns']:.2f} |")
    lines += ["", "Time per iteration (seconds):", "", "| iteration | " + " | ".join(STEPS) + " | kept examples | train loss |",
              "|---" * (len(STEPS) + 3) + "|"]
    for it in payload["iterations"]:
        secs = " | ".join(f"{it['seconds'].get(s) or 0:.0f}" for s in STEPS)
        loss = "n/a" if it["train_loss"] is None else f"{it['train_loss']:.3f}"
        lines.append(f"| {it['iteration']} | {secs} | {it['kept_examples']} | {loss} |")
    if payload.get("projection"):
        p = payload["projection"]
        lines += ["", f"Projected full run (`{FULL.relative_to(ROOT)}`) from these unit costs: "
                  f"{p['total_s'] / 60:.0f} min (per iteration: generation {p['generation_s_per_iteration']:.0f} s, "
                  f"scoring {p['scoring_s_per_iteration']:.0f} s, training {p['training_s_per_iteration']:.0f} s, "
                  f"evaluation {p['evaluation_s_per_iteration']:.0f} s)."]
    cpus, load = payload["machine"]["cpus"], payload["load_average"]["before"][1]
    lines += ["", f"Machine: {cpus} CPUs, torch threads {payload['torch_threads']}, 5-minute load average at start "
              f"{load:.1f}, wall time {payload['wall_s'] / 60:.1f} min."]
    if cpus and load > cpus:
        speed = payload.get("gen_tokens_per_s")
        lines.append(f"The CPU was shared with other jobs (load {load:.1f} on {cpus} cores), so every time above is "
                     "inflated" + (f": generation ran at {speed:.0f} tokens/s, against about 300 on the same cores "
                                   "when idle (docs/design.md section 4)." if speed else "."))
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="the few-minute version")
    parser.add_argument("--config", type=Path, help="override the config file")
    parser.add_argument("--set", action="append", default=[], dest="overrides", help="section.field=value")
    parser.add_argument("--render", action="store_true", help="only rewrite the .md from the saved .json")
    args = parser.parse_args()
    name = "isft_synth_hop_smoke" if args.smoke else "isft_synth_hop"
    if args.render:
        import json

        payload = json.loads((RESULTS / f"{name}.json").read_text())
        write_report(RESULTS / f"{name}.md", _markdown(payload))
        print((RESULTS / f"{name}.md").read_text())
        return

    from optima_envs.prompts.format_pool import CONCISE_INSTRUCTION
    from optima_train.config.io import load_config
    from optima_train.isft import ISFTConfig, ISFTTrainer

    path = args.config or (SMOKE if args.smoke else FULL)
    cfg = load_config(ISFTConfig, path, args.overrides)
    load_before = list(os.getloadavg())
    start = time.perf_counter()
    trainer = ISFTTrainer(cfg)
    summaries = trainer.train()
    concise = trainer.evaluate_model(trainer.base_model, "concise",
                                     options={"format_instruction": CONCISE_INSTRUCTION})
    trainer.close()
    run = trainer.run_dir
    systems = [_row("untrained, plain prompts", run.done_info("baseline", "evaluation")),
               _row("untrained, 'be concise' prompt", concise)]
    systems += [_row(f"iSFT iteration {s['iteration']}", run.done_info(s["iteration"], "evaluation"))
                for s in summaries if run.is_done(s["iteration"], "evaluation")]
    import torch

    payload: dict[str, Any] = {
        "smoke": args.smoke, "config": str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path),
        "overrides": args.overrides, "run_dir": str(run.root),
        "workload": {"env_id": cfg.task.env_id, "model": cfg.model.name, "backend": cfg.generation.backend,
                     "train_questions": cfg.task.train_questions, "samples": cfg.generation.samples_per_question,
                     "temperature": cfg.generation.temperature, "max_new_tokens": cfg.generation.max_new_tokens,
                     "max_turns": cfg.generation.max_turns, "eval_episodes": cfg.eval.episodes,
                     "iterations": cfg.run.iterations, "lora": cfg.lora.enabled},
        "systems": systems, "iterations": summaries,
        "gen_tokens_per_s": run.done_info(0, "generation").get("tokens_per_s"),
        "unit_costs": _unit_costs(trainer, cfg, len(summaries)),
        "torch_threads": torch.get_num_threads(),
        "load_average": {"before": load_before, "after": list(os.getloadavg())},
        "wall_s": round(time.perf_counter() - start, 1),
    }
    if args.smoke:
        payload["projection"] = _project(payload["unit_costs"], load_config(ISFTConfig, FULL, args.overrides))
    out = write_result(name, payload)
    md = RESULTS / f"{name}.md"
    write_report(md, _markdown({**payload, "machine": {"cpus": os.cpu_count()}}))
    print(md.read_text())
    print(f"wrote {out} and {md}")


if __name__ == "__main__":
    main()
