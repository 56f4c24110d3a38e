"""The iDPO / iSFT-DPO experiment: SmolLM2-135M on synth-hop-ia, one full iteration of each.

What it runs (each method in its own run directory, resumable):
  idpo      one iDPO iteration from `--start-model` (default: the iSFT experiment's iteration-0
            checkpoint when it exists, else the base model): MCTS on the training questions, pair
            extraction, DPO + NLL (LoRA, merged), held-out evaluation (plus the starting model's).
  isft-dpo  one iSFT-DPO cycle from the same starting model (the paper's initialisation): an
            iSFT iteration, then an iDPO iteration from its checkpoint, each evaluated on the
            held-out set.

The held-out set is the iSFT experiment's: task, split, first index, episode count, seeds, turn
limit and token limit are read from `configs/isft/synth_hop_experiment.yaml`, so the figures are
comparable with `benchmarks/results/isft_synth_hop.md`.

Reported per method (benchmarks/results/idpo_synth_hop.json): pair statistics (pairs per tree,
chosen-rejected value gap, tokens of chosen vs rejected), the time of MCTS, training and
evaluation, held-out score and tokens (with 95% CIs) before and after, and, for `--preset smoke`,
a calibrated policy call (64 rows at the full token limit) and the projected wall time of the
full preset on this machine (see `projection`).

    python benchmarks/idpo_experiment.py --preset smoke        # a few minutes, end to end
    python benchmarks/idpo_experiment.py                       # the experiment (~1 h per method)
    python benchmarks/idpo_experiment.py --methods idpo --start-model runs/isft/synth_hop_experiment/iter_000/training/checkpoint
    python benchmarks/idpo_experiment.py --backend vllm --set mcts.iterations=6   # vLLM generation, overrides
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import write_report, write_result  # noqa: E402

NAME = "idpo_synth_hop"
ISFT_CONFIG = ROOT / "configs" / "isft" / "synth_hop_experiment.yaml"
IDPO_CONFIG = ROOT / "configs" / "idpo" / "synth_hop.yaml"
ISFT_DPO_CONFIG = ROOT / "configs" / "isft_dpo" / "synth_hop.yaml"
ISFT_CHECKPOINT = ROOT / "runs" / "isft" / "synth_hop_experiment" / "iter_000" / "training" / "checkpoint"
UNLOADED_TOKENS_PER_S = 338.0  # docs/design.md section 4: SmolLM2-135M, transformers bf16, batch 32

# Sizes. "full" is sized to about an hour per method on this 2-core CPU (see the projection a
# smoke run writes); "smoke" runs every step end to end in minutes.
# The smoke preset also relaxes the data thresholds (any sibling pair with a gap, any selected
# dialogue), so that every step, DPO and SFT training included, runs even when the base model
# answers nothing right in a handful of questions; its figures check the pipeline, not the method.
PRESETS: dict[str, dict[str, Any]] = {
    "full": {"trees": 32, "mcts_iterations": 8, "rollouts": 3, "isft_questions": 32, "isft_samples": 10,
             "eval_episodes": None, "max_new_tokens": None, "max_turns": None, "dpo_epochs": 1, "sft_epochs": 1,
             "relaxed": []},
    "smoke": {"trees": 4, "mcts_iterations": 3, "rollouts": 2, "isft_questions": 4, "isft_samples": 4,
              "eval_episodes": 8, "max_new_tokens": 48, "max_turns": 4, "dpo_epochs": 1, "sft_epochs": 1,
              "relaxed": ["pairs.min_chosen_value=-10", "selection.min_score=null", "train.logging_steps=1",
                          "dpo.logging_steps=1", "sft.logging_steps=1"]},
}


def heldout(overrides: dict[str, Any]) -> dict[str, Any]:
    """The iSFT experiment's held-out settings (task, evaluation, seeds, limits)."""
    from optima_train.config.io import load_config
    from optima_train.isft import ISFTConfig

    isft = load_config(ISFTConfig, ISFT_CONFIG)
    return {
        "env_id": isft.task.env_id, "env_kwargs": isft.task.env_kwargs, "eval_env_kwargs": isft.task.eval_env_kwargs,
        "train_env_kwargs": isft.task.train_env_kwargs, "eval_first_index": isft.task.eval_first_index,
        "episodes": overrides["eval_episodes"] or isft.eval.episodes, "seed": isft.run.seed,
        "max_turns": overrides["max_turns"] or isft.generation.max_turns,
        "max_new_tokens": overrides["max_new_tokens"] or isft.eval.max_new_tokens or isft.generation.max_new_tokens,
    }


def _common(p: dict[str, Any], h: dict[str, Any], threads: int | None) -> list[str]:
    return [
        f"task.env_id={h['env_id']}", f"task.env_kwargs={json.dumps(h['env_kwargs'])}",
        f"task.train_env_kwargs={json.dumps(h['train_env_kwargs'])}",
        f"task.eval_env_kwargs={json.dumps(h['eval_env_kwargs'])}", f"task.eval_first_index={h['eval_first_index']}",
        f"eval.episodes={h['episodes']}", f"eval.max_new_tokens={h['max_new_tokens']}", f"run.seed={h['seed']}",
        f"search.max_turns={h['max_turns']}", f"mcts.iterations={p['mcts_iterations']}",
        f"mcts.rollouts_per_expansion={p['rollouts']}", f"mcts.max_new_tokens={h['max_new_tokens']}",
        f"run.num_threads={threads if threads else 'null'}", "run.progress=false",
    ]


def _sections(method: str) -> tuple[str, ...]:
    """The `section.` prefixes `method`'s config has (an override for another section is skipped)."""
    import dataclasses

    from optima_train.idpo import IDPOConfig
    from optima_train.isft_dpo import ISFTDPOConfig

    cls = {"idpo": IDPOConfig, "isft-dpo": ISFTDPOConfig}[method]
    return tuple(f"{f.name}." for f in dataclasses.fields(cls))


def _relaxed(p: dict[str, Any], method: str) -> list[str]:
    return [o for o in p["relaxed"] if o.startswith(_sections(method))]


def idpo_config(p: dict[str, Any], h: dict[str, Any], start: str, out: Path, threads: int | None,
                extra: list[str] = ()) -> Any:
    from optima_train.config.io import load_config
    from optima_train.idpo import IDPOConfig

    return load_config(IDPOConfig, IDPO_CONFIG, [
        *_common(p, h, threads), f"model.name={start}", f"task.train_questions={p['trees']}",
        f"train.num_train_epochs={p['dpo_epochs']}", "run.iterations=1", f"run.output_dir={out}",
        "eval.baseline=true", *_relaxed(p, "idpo"), *extra,
    ])


def isft_dpo_config(p: dict[str, Any], h: dict[str, Any], start: str, out: Path, threads: int | None,
                    extra: list[str] = ()) -> Any:
    from optima_train.config.io import load_config
    from optima_train.isft_dpo import ISFTDPOConfig

    # From a trained start the format pool has done its job (it is iSFT's first-iteration device).
    pool = "true" if start == "smollm2-135m" else "false"
    return load_config(ISFTDPOConfig, ISFT_DPO_CONFIG, [
        *_common(p, h, threads), f"model.name={start}", f"task.train_questions={p['isft_questions']}",
        f"generation.samples_per_question={p['isft_samples']}", f"generation.max_turns={h['max_turns']}",
        f"generation.max_new_tokens={h['max_new_tokens']}", f"generation.format_pool_first_iteration={pool}",
        f"search.questions={p['trees']}", f"sft.num_train_epochs={p['sft_epochs']}",
        f"dpo.num_train_epochs={p['dpo_epochs']}", "cycles.count=1", f"run.output_dir={out}", "eval.baseline=true",
        *_relaxed(p, "isft-dpo"), *extra,
    ])


# ---------------------------------------------------------------------- reading a finished run
def _done(folder: Path) -> dict[str, Any]:
    path = folder / "DONE.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def _eval(folder: Path) -> dict[str, Any] | None:
    d = _done(folder)
    if not d:
        return None
    return {"score": d["score"], "tokens": d["tokens"], "episodes": d["episodes"], "excluded": d["excluded"],
            "end_reasons": d["end_reasons"], "mean_turns": d["mean_turns"], "model": d["model"]}


def idpo_report(run: Path) -> dict[str, Any]:
    it = run / "iter_000"
    search = json.loads((it / "search" / "search.json").read_text())
    s_done, t_done, e_done = _done(it / "search"), _done(it / "training"), _done(it / "evaluation")
    s = search["search"]
    return {
        "start_model": search["model"],
        "pairs": search["pairs"],
        "search": {k: s[k] for k in ("iterations", "policy_calls", "turn_requests", "rollouts", "dropped_rollouts",
                                     "merges", "generate_s", "reward_s")},
        "max_tokens": search["max_tokens"],
        "training": {k: t_done.get(k) for k in ("pairs", "steps", "train_loss", "reward_accuracy", "reward_margin",
                                                "trainable_parameters", "reference", "skipped")},
        "seconds": {"mcts": s_done.get("seconds"), "training": t_done.get("seconds"),
                    "evaluation": e_done.get("seconds"), "baseline_evaluation": _done(run / "baseline" / "evaluation").get("seconds")},
        "heldout_before": _eval(run / "baseline" / "evaluation"),
        "heldout_after": _eval(it / "evaluation"),
    }


def isft_dpo_report(run: Path) -> dict[str, Any]:
    from optima_train.isft_dpo import stage_dir

    isft = Path(stage_dir(str(run), 0, "isft"))
    it = isft / "iter_000"
    steps = {s: _done(it / s) for s in ("generation", "scoring", "selection", "training", "evaluation")}
    return {
        "isft": {
            "dialogues": steps["generation"].get("episodes"),
            "selected": steps["selection"].get("selected"), "examples": steps["selection"].get("examples"),
            "train_loss": steps["training"].get("train_loss"),
            "seconds": {k: v.get("seconds") for k, v in steps.items()},
            "heldout_after": _eval(it / "evaluation"),
        },
        "idpo": idpo_report(Path(stage_dir(str(run), 0, "idpo"))),
        "heldout_before": _eval(isft / "baseline" / "evaluation"),
    }


# ---------------------------------------------------------------------- projection
def calibrate(h: dict[str, Any], rows: int, threads: int | None) -> dict[str, Any]:
    """Time one sampled policy call of `rows` first turns at the full token limit: the unit of
    almost all generation cost (search, evaluation and iSFT sampling are all such calls)."""
    import torch

    import optima_envs
    from optima_agents.policies import HFPolicy, SamplingParams, TurnRequest

    if threads:
        torch.set_num_threads(threads)
    env = optima_envs.make(h["env_id"], **{**h["env_kwargs"], **h["train_env_kwargs"]}, max_turns=h["max_turns"])
    requests = []
    for i in range(rows):
        obs, _ = env.reset(seed=i, options={"index": i})
        requests.append(TurnRequest("alice", obs["alice"], seed=i))
    policy = HFPolicy("smollm2-135m", sampling=SamplingParams(temperature=0.7, max_new_tokens=h["max_new_tokens"]),
                      batch_size=64)
    t0 = time.perf_counter()
    actions = policy.act(requests)
    seconds = time.perf_counter() - t0
    generated = sum(a.meta.get("generated_tokens", len(a.token_ids)) for a in actions)
    return {"rows": rows, "max_new_tokens": h["max_new_tokens"], "seconds": round(seconds, 2),
            "generated_tokens": generated, "tokens_per_s": round(generated / seconds, 1)}


def projection(method: str, report: dict[str, Any], smoke: dict[str, Any], full: dict[str, Any],
               h_smoke: dict[str, Any], h_full: dict[str, Any], call: dict[str, Any]) -> dict[str, Any]:
    """Full-preset wall time on this machine, from the smoke run and one calibrated policy call.

    Generation (MCTS, evaluation, iSFT sampling) = policy calls x the calibrated time of a call
    of 64 rows at the full token limit (`call`), scaled by rows / 64 once rows exceed 64 (the
    backend chunks by 64). MCTS makes about `max_turns` calls per search iteration (the smoke
    run's calls per iteration, scaled by the turn limits); evaluation and iSFT sampling
    `max_turns` calls per chunk. DPO and SFT scale from the smoke run's seconds per pair /
    example. An upper bound: late calls of a round carry fewer rows (rollouts end early).
    """
    per_call = call["seconds"]

    def gen(rows: int, calls: float) -> float:
        return calls * per_call * max(1.0, rows / 64)

    r = report["idpo"] if method == "isft-dpo" else report
    turns = h_full["max_turns"] / h_smoke["max_turns"]
    calls_per_iteration = r["search"]["policy_calls"] / max(1, r["search"]["iterations"]) * turns
    mcts = gen(full["trees"] * full["rollouts"], full["mcts_iterations"] * calls_per_iteration)
    pairs_per_tree = (r["pairs"]["kept_pairs"] or 0) / smoke["trees"] * (
        full["mcts_iterations"] * full["rollouts"] / (smoke["mcts_iterations"] * smoke["rollouts"]))
    per_pair = (r["seconds"]["training"] or 0) / max(1, r["training"]["pairs"] or 0)
    out = {
        "mcts_s": mcts,
        "reward_s": (r["search"]["reward_s"] or 0) * full["trees"] * full["mcts_iterations"] * full["rollouts"]
        / (smoke["trees"] * smoke["mcts_iterations"] * smoke["rollouts"]),
        "dpo_training_s": per_pair * pairs_per_tree * full["trees"] * (h_full["max_new_tokens"] / h_smoke["max_new_tokens"]),
        "evaluation_s": gen(h_full["episodes"], h_full["max_turns"]),
        "baseline_evaluation_s": gen(h_full["episodes"], h_full["max_turns"]),
    }
    if method == "isft-dpo":
        i = report["isft"]
        per_example = (i["seconds"]["training"] or 0) / max(1, i["examples"] or 0)
        dialogues = full["isft_questions"] * full["isft_samples"]
        out["isft_sampling_s"] = gen(dialogues, h_full["max_turns"])
        out["isft_scoring_s"] = (i["seconds"]["scoring"] or 0) * dialogues / (smoke["isft_questions"] * smoke["isft_samples"])
        out["isft_training_s"] = per_example * 2 * full["isft_questions"] * 0.7
        out["isft_evaluation_s"] = gen(h_full["episodes"], h_full["max_turns"])
    out = {k: round(v, 1) for k, v in out.items()}
    out["total_s"] = round(sum(out.values()), 1)
    out["total_h"] = round(out["total_s"] / 3600, 2)
    # The same work at the unloaded rate measured for docs/design.md section 4 (transformers bf16,
    # batch 32: 338 tokens/s), for when the 2 cores are not shared with other jobs.
    slowdown = UNLOADED_TOKENS_PER_S / max(call["tokens_per_s"], 1e-9)
    out["total_h_unloaded"] = round(out["total_s"] / slowdown / 3600, 2)
    out["assumed"] = {"measured_tokens_per_s": call["tokens_per_s"], "unloaded_tokens_per_s": UNLOADED_TOKENS_PER_S,
                      "seconds_per_64_row_call": per_call, "mcts_calls_per_iteration": round(calls_per_iteration, 2),
                      "kept_pairs_per_tree": round(pairs_per_tree, 2), "dpo_seconds_per_pair": round(per_pair, 2)}
    return out


def reproject() -> None:
    from optima_envs.atomic_files import atomic_write_json
    from optima_eval.portable_paths import portable_json

    path = Path(__file__).resolve().parent / "results" / f"{NAME}.json"
    data = json.loads(path.read_text())
    smoke = data["runs"]["smoke"]
    h_full = heldout(PRESETS["full"])
    for method, report in smoke["methods"].items():
        report["projected_full"] = projection(method, report, smoke["preset"], PRESETS["full"], smoke["heldout"],
                                              h_full, smoke["calibration"])
    atomic_write_json(path, portable_json(data))
    print(json.dumps({m: r["projected_full"] for m, r in smoke["methods"].items()}, indent=2))


def _stat(d: dict[str, Any] | None, spec: str = ".3f") -> str:
    if not d or not d.get("n"):
        return "n/a"
    return f"{d['mean']:{spec}} (median {d['median']:{spec}}, {d['min']:{spec}}-{d['max']:{spec}})"


def _heldout(ev: dict[str, Any] | None) -> str:
    if not ev:
        return "n/a | n/a"
    s, t = ev["score"], ev["tokens"]
    return f"{s['mean']:.3f} [{s['low']:.3f}, {s['high']:.3f}] | {t['mean']:.1f} [{t['low']:.1f}, {t['high']:.1f}]"


def _idpo_lines(r: dict[str, Any], title: str, before: dict[str, Any] | None = None) -> list[str]:
    """`before`: the start model's held-out figures when this run did not evaluate it (`--no-baseline`)."""
    p, sec, tr = r["pairs"], r["seconds"], r["training"]
    before = r.get("heldout_before") or before
    return [
        f"## {title}", "",
        f"Start model: `{r['start_model']}`.", "",
        f"- Search: {p['trees']} trees, {r['search']['iterations']} MCTS iterations, {r['search']['rollouts']} "
        f"rollouts ({r['search']['dropped_rollouts']} dropped), {r['search']['merges']} merged children, "
        f"{r['search']['policy_calls']} batched policy calls for {r['search']['turn_requests']} turns; "
        f"token scale frozen at {r['max_tokens']:.1f}.",
        f"- Pairs: {p['qualifying_pairs']} qualifying, {p['kept_pairs']} kept; trees with a pair "
        f"{p['trees_with_pairs']} of {p['trees']}; kept pairs per tree {_stat(p['pairs_per_tree'], '.2f')}.",
        f"- Chosen-rejected value gap {_stat(p['gap'])}; chosen value {_stat(p['chosen_value'])}.",
        f"- Tokens of the chosen reply {_stat(p['chosen_tokens'], '.1f')}, rejected {_stat(p['rejected_tokens'], '.1f')}; "
        f"chosen shorter in {100 * (p.get('chosen_shorter_share') or 0):.0f}% of pairs.",
        f"- DPO + NLL: {tr['pairs']} pairs, {tr['steps']} steps, loss {tr['train_loss']}, reference {tr['reference']}"
        + (f"; skipped: {tr['skipped']}" if tr.get("skipped") else "") + ".",
        f"- Seconds: MCTS {sec['mcts']} (generation {r['search']['generate_s']}, reward {r['search']['reward_s']}), "
        f"training {sec['training']}, evaluation {sec['evaluation']}.", "",
        "| model | held-out score | tokens / dialogue |", "|---|---|---|",
        f"| before (start model) | {_heldout(before)} |",
        f"| after | {_heldout(r.get('heldout_after'))} |", "",
    ]


def markdown(run: dict[str, Any], preset_name: str) -> str:
    """The report of one preset's runs (`benchmarks/results/idpo_synth_hop.md`)."""
    h = run["heldout"]
    lines = [f"# iDPO and iSFT-DPO on synth-hop-ia with SmolLM2-135M ({preset_name})", "",
             f"Held-out set: {h['episodes']} `{h['env_id']}` dialogues, {h['env_kwargs']} {h['eval_env_kwargs']}, "
             f"at most {h['max_turns']} turns of {h['max_new_tokens']} new tokens, greedy"
             + ("; the same episodes as `isft_synth_hop.md`." if run.get("preset_name", preset_name) == "full" else "."), "",
             f"Preset: {run['preset']}. Overrides: {run.get('overrides') or 'none'}. Backend: {run.get('backend', 'hf')}.", ""]
    methods = run["methods"]
    isft_iter0 = _eval(ISFT_CHECKPOINT.parents[1] / "evaluation")
    if "idpo" in methods:
        start_is_isft = methods["idpo"]["start_model"] == str(ISFT_CHECKPOINT)
        lines += _idpo_lines(methods["idpo"], "iDPO: one iteration", isft_iter0 if start_is_isft else None)
        lines += [f"Wall time {methods['idpo']['wall_s'] / 60:.1f} min.", ""]
    if "isft-dpo" in methods:
        m = methods["isft-dpo"]
        i = m["isft"]
        lines += ["## iSFT-DPO: one cycle (an iSFT iteration, then an iDPO iteration)", "",
                  f"- iSFT stage: {i['dialogues']} dialogues, {i['selected']} selected, {i['examples']} examples, "
                  f"train loss {i['train_loss']}; seconds {i['seconds']}.",
                  f"- iSFT stage held-out: {_heldout(i.get('heldout_after')).replace(' | ', ' score, ')} tokens.", ""]
        lines += _idpo_lines(m["idpo"], "iSFT-DPO: the iDPO stage", i.get("heldout_after"))
        lines += [f"Wall time {m['wall_s'] / 60:.1f} min.", ""]
    load = run.get("load_average", {})
    lines.append(f"Machine: 2 CPUs, torch threads {run.get('torch_threads')}, load average before/after "
                 f"{load.get('before')} / {load.get('after')}.")
    return "\n".join(lines) + "\n"


def write_markdown(label: str) -> Path:
    path = Path(__file__).resolve().parent / "results" / f"{NAME}.json"
    run = json.loads(path.read_text())["runs"][label]
    out = path.with_suffix(".md") if label == "full" else path.with_name(f"{NAME}_{label}.md")
    write_report(out, markdown(run, label))
    return out


def _extra(method: str, args: argparse.Namespace) -> list[str]:
    """The command line's backend, baseline and `--set` overrides that apply to `method`'s config."""
    extra = [f"{sec}backend={args.backend}" for sec in ("search.", "generation.") if sec in _sections(method)]
    if args.no_baseline:
        extra.append("eval.baseline=false")
    return extra + [o for o in args.overrides if o.startswith(_sections(method))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="full")
    parser.add_argument("--methods", default="idpo,isft-dpo")
    parser.add_argument("--start-model", default=None, help="iDPO's starting model (default: see the module doc).")
    parser.add_argument("--runs", default=str(ROOT / "runs" / "bench"), help="Where the run directories go.")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a shared CPU).")
    parser.add_argument("--resume", action="store_true", help="Resume existing run directories instead of wiping.")
    parser.add_argument("--backend", choices=("hf", "vllm"), default="hf",
                        help="Generation backend of the search, iSFT sampling and evaluation.")
    parser.add_argument("--no-baseline", action="store_true",
                        help="Skip evaluating the starting model (when the iSFT experiment already did).")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="More config overrides for both methods (repeatable); a key a method lacks is skipped.")
    parser.add_argument("--label", default=None,
                        help="Name of this run in the results (default: the preset); other labels' results are kept.")
    parser.add_argument("--markdown", action="store_true",
                        help="Only rewrite the markdown report of --preset from the stored JSON (no runs).")
    parser.add_argument("--reproject", action="store_true",
                        help="Recompute the projections of the stored smoke results (no runs).")
    args = parser.parse_args()
    if args.reproject:
        return reproject()
    if args.markdown:
        print("wrote", write_markdown(args.label or args.preset))
        return

    from optima_train.idpo import IDPOTrainer
    from optima_train.isft_dpo import ISFTDPOTrainer

    preset = PRESETS[args.preset]
    label = args.label or args.preset
    h = heldout(preset)
    start = args.start_model or (str(ISFT_CHECKPOINT) if ISFT_CHECKPOINT.is_dir() else "smollm2-135m")
    load_before = os.getloadavg()
    results: dict[str, Any] = {}
    call = calibrate(heldout(PRESETS["full"]), 64, args.threads) if args.preset == "smoke" else None
    for method in [m.strip() for m in args.methods.split(",") if m.strip()]:
        out = Path(args.runs) / f"{method}_synth_hop_{label}"
        if out.exists() and not args.resume:
            shutil.rmtree(out)
        t0 = time.perf_counter()
        extra = _extra(method, args)
        if method == "idpo":
            cfg = idpo_config(preset, h, start, out, args.threads, extra)
            IDPOTrainer(cfg).train()
            report = idpo_report(out)
        elif method == "isft-dpo":
            cfg = isft_dpo_config(preset, h, start, out, args.threads, extra)
            ISFTDPOTrainer(cfg).train()
            report = isft_dpo_report(out)
        else:
            raise SystemExit(f"unknown method {method!r}; use idpo and/or isft-dpo")
        report["wall_s"] = round(time.perf_counter() - t0, 1)
        report["run_dir"] = str(out)
        if args.preset == "smoke":
            h_full = heldout(PRESETS["full"])
            report["projected_full"] = projection(method, report, preset, PRESETS["full"], h, h_full, call)
        results[method] = report
        print(json.dumps({method: report}, indent=2, default=str))
    path = Path(__file__).resolve().parent / "results" / f"{NAME}.json"
    previous = json.loads(path.read_text()) if path.is_file() else {}
    runs = dict(previous.get("runs", {}))
    runs[label] = {"preset_name": args.preset, "preset": preset, "heldout": h, "start_model": start, "methods": results, "calibration": call,
                         "load_average": {"before": load_before, "after": os.getloadavg()},
                         "torch_threads": args.threads, "backend": args.backend, "overrides": args.overrides}
    print("wrote", write_result(NAME, {"task": "synth-hop-ia", "model": "smollm2-135m", "runs": runs}))
    print("wrote", write_markdown(label))


if __name__ == "__main__":
    main()
