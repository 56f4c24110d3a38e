"""Probe (d): each training loop killed with SIGKILL at random points, resumed, and compared.

For each loop (iSFT, iDPO, iSFT-DPO) on `synth-hop-ia` with a tiny randomly initialised Llama
(the embedded model's tokenizer, one layer of width 16) and scripted policies (no generation
model), the probe first runs the loop once uninterrupted. Then, per trial, a fresh run starts in
a subprocess that is killed with SIGKILL, either after a random delay within the uninterrupted
run's duration (alternate trials; a run that finished first is started again and killed at a
step instead) or right after a random finished step, and the same loop call (the same command)
runs again in a new subprocess on the same folder until it finishes.

A trial holds when: the resumed run exits cleanly; every step finished before the kill is
untouched (its `DONE.json` byte for byte) and not run again; every step ran exactly once over
both processes; and everything the run produced equals the uninterrupted run's: each step's
record (timings aside), the summary, the selected SFT data, the DPO pairs and search trees,
every episode buffer (checked against its manifest), and the final model's weights.

Subprocesses are forked from a parent that has imported torch, transformers and TRL but run
nothing with them, so a trial pays for the loop's work, not for imports.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
import signal
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.reliability.tally import Tally

LOOPS = ("isft", "idpo", "isft-dpo")
_FORK = multiprocessing.get_context("fork")
OPTIONS = ["I know <A>Griru</A>", "Facts: the founder was born in a city far away. <A>Losto</A>", "<A>Griru</A>",
           "Let me think about this for a while, there are many facts to share. <A>Zemadail</A>", "ok"]


# ----------------------------------------------------------------------------- what runs in the subprocess

def _isft_script(observation: Any) -> str:
    """Alice tells her facts; Bob answers with the last word of the question."""
    if observation["turn"] == 0:
        return "I know: " + " ".join(observation["evidence"])
    return "We agree. <A>" + observation["question"].split()[-1].strip("?") + "</A>"


def _policy(loop: str) -> Any:
    from optima_agents.policies import ScriptedPolicy
    from optima_agents.testing import SeededChoice

    return (lambda m, s: ScriptedPolicy(_isft_script)) if loop == "isft" else (lambda m, s: SeededChoice(OPTIONS))


def _config(loop: str, model: str, out: Path) -> Any:
    from optima_train.config.io import from_dict

    run = {"output_dir": str(out), "progress": False, "num_threads": 1}
    lora = {"r": 2, "alpha": 4}
    sft = {"max_steps": 1, "per_device_train_batch_size": 2, "max_length": 256, "bf16": False}
    dpo = {"max_steps": 1, "per_device_train_batch_size": 1, "gradient_accumulation_steps": 1, "max_length": 256,
           "bf16": False}
    pairs = {"min_chosen_value": -10.0, "min_gap": 0.0, "keep_fraction": 1.0}
    task = {"env_id": "synth-hop-ia", "train_questions": 2}
    common = {"task": task, "model": {"name": model}, "reward": {"lambda_loss": 0.5}, "lora": lora,
              "eval": {"episodes": 2, "baseline": True}}
    if loop == "isft":
        from optima_train.isft import ISFTConfig

        return from_dict(ISFTConfig, {**common, "generation": {"samples_per_question": 2, "max_turns": 2},
                                      "selection": {"min_score": None}, "train": sft, "run": {**run, "iterations": 2}})
    search = {"max_turns": 3, "batch_size": 16}
    mcts = {"iterations": 2, "rollouts_per_expansion": 2, "max_new_tokens": 16}
    if loop == "idpo":
        from optima_train.idpo import IDPOConfig

        return from_dict(IDPOConfig, {**common, "search": search, "mcts": mcts, "pairs": pairs, "train": dpo,
                                      "run": {**run, "iterations": 2}})
    from optima_train.isft_dpo import ISFTDPOConfig

    return from_dict(ISFTDPOConfig, {**common, "generation": {"samples_per_question": 2, "max_turns": 3},
                                     "selection": {"min_score": None}, "sft": sft, "search": {**search, "questions": 1},
                                     "mcts": mcts, "pairs": pairs, "dpo": dpo, "cycles": {"count": 2}, "run": run})


def _trainer(loop: str, cfg: Any, hook: Any) -> Any:
    from rich.console import Console

    from optima_train.idpo import IDPOTrainer
    from optima_train.isft import ISFTTrainer
    from optima_train.isft_dpo import ISFTDPOTrainer

    cls = {"isft": ISFTTrainer, "idpo": IDPOTrainer, "isft-dpo": ISFTDPOTrainer}[loop]
    return cls(cfg, policy_factory=_policy(loop), reference_loss=lambda texts: [2.0 for _ in texts],
               on_step_done=hook, console=Console(file=open(os.devnull, "w")))


def _child(loop: str, model: str, out: str, log: str, kill_after: int | None) -> None:
    """Run the loop on `out`, appending each finished step to `log`; SIGKILL itself after
    `kill_after` finished steps when given. Exits 0 on success, 1 with the traceback in the log."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)  # the trainers' own progress lines would drown the benchmark's
    os.dup2(quiet, 2)
    done = 0

    def hook(stage: Any, step: str, info: Any) -> None:
        nonlocal done
        os.write(fd, (json.dumps([str(stage), step]) + "\n").encode())
        done += 1
        if kill_after is not None and done >= kill_after:
            os.kill(os.getpid(), signal.SIGKILL)

    try:
        import warnings

        warnings.simplefilter("ignore")
        _trainer(loop, _config(loop, model, Path(out)), hook).train()
    except BaseException:  # report anything the loop raised to the parent, then exit
        os.write(fd, ("ERROR " + traceback.format_exc().replace("\n", " | ") + "\n").encode())
        os._exit(1)
    os._exit(0)


def _make_tiny_model(folder: str) -> None:
    """A one-layer random Llama with the embedded model's tokenizer (built in a subprocess, so the
    parent never runs torch and forks stay safe)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from optima_agents.models.testing import ensure_test_model

    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)

    tokenizer = AutoTokenizer.from_pretrained(ensure_test_model())
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    os._exit(0)


# ----------------------------------------------------------------------------- the parent

def _spawn(target: Any, *args: Any) -> Any:
    process = _FORK.Process(target=target, args=args, daemon=False)
    process.start()
    return process


def _run(loop: str, model: str, out: Path, log: Path, *, kill_after: int | None = None,
         kill_at_s: float | None = None, timeout_s: float = 600) -> tuple[int | None, float]:
    """One subprocess run: (exit code, -9 when killed; seconds)."""
    start = time.perf_counter()
    process = _spawn(_child, loop, model, str(out), str(log), kill_after)
    process.join(kill_at_s if kill_at_s is not None else timeout_s)
    if process.is_alive():
        os.kill(process.pid, signal.SIGKILL)
        process.join()
    return process.exitcode, time.perf_counter() - start


def _log_lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def _done_markers(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("DONE.json"))}


def _clean(value: Any, root: str) -> Any:
    """`value` without wall-clock figures (`seconds`, `*_s`) and with the run folder as `<run>`."""
    if isinstance(value, dict):
        return {k: _clean(v, root) for k, v in value.items() if k != "seconds" and not k.endswith("_s")}
    if isinstance(value, list):
        return [_clean(v, root) for v in value]
    return value.replace(root, "<run>") if isinstance(value, str) else value


def fingerprint(out: Path) -> dict[str, Any]:
    """Everything a run produced that must not depend on kills: step records, summaries, selected
    data, pairs and trees, episode buffers (verified), and the weights of every checkpoint."""
    import pyarrow.parquet as pq

    from optima_train.buffers import read_episodes

    root, prints = str(out), {}
    for path in sorted(out.rglob("*")):
        key = str(path.relative_to(out))
        if path.name in ("DONE.json", "summary.json", "metrics.json", "selection.json", "search.json"):
            prints[key] = _clean(json.loads(path.read_text()), root)
        elif path.suffix == ".parquet" and not path.name.startswith("part-"):
            prints[key] = _clean(pq.read_table(path).to_pylist(), root)
        elif path.is_dir() and path.name == "episodes":
            prints[key] = _clean([r.to_dict() for r in read_episodes(path)], root)
        elif path.name == "model.safetensors":
            prints[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return prints


def _trial_verdict(out: Path, before: dict[str, bytes], logs: tuple[Path, Path], code: int | None,
                   reference: dict[str, Any], steps: int) -> str | None:
    """Why a killed-and-resumed run differs from the uninterrupted one (None: it does not)."""
    if code != 0:
        errors = [line for line in _log_lines(logs[1]) if line.startswith("ERROR")]
        return f"the resumed run exited with {code}: {errors[-1][:400] if errors else 'no error logged'}"
    after = _done_markers(out)
    redone = [k for k, v in before.items() if after.get(k) != v]
    if redone:
        return f"finished steps were run again or changed: {redone}"
    ran = len(before) + len([x for x in _log_lines(logs[1]) if not x.startswith("ERROR")])
    if ran != steps or len(after) != steps:
        return f"{steps} steps expected once each; {len(before)} before the kill + resumed = {ran}, {len(after)} done"
    mine = fingerprint(out)
    differ = sorted(k for k in set(mine) | set(reference) if mine.get(k) != reference.get(k))
    return f"differs from the uninterrupted run in {differ[:6]}" if differ else None


def probe_loop(loop: str, model: str, kills: int, rng: np.random.Generator, workdir: Path) -> Tally:
    """The uninterrupted reference run, then `kills` kill-and-resume trials of one loop."""
    row = Tally("d", f"kill and resume: {loop}")
    (workdir / loop).mkdir(parents=True, exist_ok=True)
    ref_out, ref_log = workdir / loop / "reference", workdir / loop / "reference.log"
    code, seconds = _run(loop, model, ref_out, ref_log)
    if code != 0:
        row.fail(f"the uninterrupted run failed: {_log_lines(ref_log)[-1:]}")
        return row
    reference, steps = fingerprint(ref_out), len(_done_markers(ref_out))
    points: Counter = Counter()
    for k in range(kills):
        out, logs = workdir / loop / f"trial-{k:02d}", (workdir / loop / f"trial-{k:02d}.log",
                                                        workdir / loop / f"trial-{k:02d}.resume.log")
        code = _kill(loop, model, out, logs[0], rng, seconds if k % 2 == 0 else None, steps)
        if code != -signal.SIGKILL:
            row.fail(f"trial {k}: the run to kill exited with {code} before it was killed: {_log_lines(logs[0])[-1:]}")
            continue
        before = _done_markers(out)
        points[len(before)] += 1
        code, _ = _run(loop, model, out, logs[1])
        why = _trial_verdict(out, before, logs, code, reference, steps)
        row.check(why is None, f"trial {k}: {why}")
    row.notes.update(uninterrupted_s=round(seconds, 1), steps=steps,
                     killed_after_steps={n: points[n] for n in sorted(points)})
    return row


def _kill(loop: str, model: str, out: Path, log: Path, rng: np.random.Generator, within_s: float | None,
          steps: int) -> int | None:
    """Start a run and SIGKILL it after a random delay within `within_s` or, when that is None or
    the run finished first, right after a random finished step; returns its exit code."""
    if within_s is not None:
        code, _ = _run(loop, model, out, log, kill_at_s=float(rng.uniform(0.2, within_s)))
        if code == -signal.SIGKILL:
            return code
        shutil.rmtree(out, ignore_errors=True)
        log.unlink(missing_ok=True)
    code, _ = _run(loop, model, out, log, kill_after=int(rng.integers(1, steps)))
    return code


def run(kills: int, seed: int, workdir: Path, loops: tuple[str, ...] = LOOPS) -> list[Tally]:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import optima_train.idpo  # noqa: F401  (imported once here, inherited by every forked run)
    import optima_train.isft  # noqa: F401
    import optima_train.isft_dpo  # noqa: F401
    import trl  # noqa: F401

    model = workdir / "tiny-llama"
    process = _spawn(_make_tiny_model, str(model))
    process.join()
    if process.exitcode != 0:
        return [Tally("d", "kill and resume", tried=1, failed=1, examples=["could not build the tiny model"])]
    rng = np.random.default_rng(seed)
    return [probe_loop(loop, str(model), kills, rng, workdir) for loop in loops]
