"""Rollout throughput: one fixed dialogue workload through different generation paths.

Workload: `--episodes` synth-hop-ia episodes (episode i: reset seed i, instance i), the embedded
model (SmolLM2-135M-Instruct), greedy decoding, the same `--max-new-tokens` and `--max-turns`.
Reported per path: wall time, generated tokens, tokens/s, turns, backend calls, mean score.

Paths (`--backends`, comma-separated):
  hf-sequential  (a) transformers, one episode at a time (engine with max_live=1: each call is a
                 batch of one; what a simple per-episode loop does)
  hf-batched     (b) transformers through the batched engine (every live episode's turn in one
                 left-padded generate call, chunked by --batch-size)
  vllm-engine    (c) vLLM in-process (VLLMPolicy, bf16 compiled) through the same engine
  vllm-raw       (d) raw `LLM.generate` on the prompts (c) produced, in the same per-turn
                 batches, no dialogue bookkeeping; `engine_over_raw` = (c)/(d) tokens/s

Adding a path: write `def run_x(w: Workload) -> PathResult` (most are `run_engine(w, policy)`)
and register it in `PATHS`. Results merge into benchmarks/results/rollout_throughput.json, so
paths can be run separately as long as the workload is the same (other workloads replace it).

    python benchmarks/rollout_throughput.py                       # (a) and (b), 64 episodes
    python benchmarks/rollout_throughput.py --backends hf-batched --episodes 16
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._results import RESULTS, write_result  # noqa: E402

NAME = "rollout_throughput"


@dataclass(frozen=True)
class Workload:
    env_id: str = "synth-hop-ia"
    episodes: int = 64
    max_turns: int = 4
    max_new_tokens: int = 64
    model: str = "smollm2-135m"
    dtype: str = "bfloat16"
    batch_size: int = 64
    threads: int | None = None

    def specs(self) -> list[Any]:
        from optima_agents.rollout import EpisodeSpec

        return [EpisodeSpec(seed=i, index=i) for i in range(self.episodes)]

    def sampling(self) -> Any:
        from optima_agents.policies import SamplingParams

        return SamplingParams(temperature=0.0, max_new_tokens=self.max_new_tokens, seed=0)

    def key(self) -> dict[str, Any]:
        """What must match for results of different runs to be comparable."""
        return {k: v for k, v in asdict(self).items() if k not in ("batch_size", "threads")}


@dataclass
class PathResult:
    wall_s: float
    generated_tokens: int
    turns: int
    episodes: int
    backend_calls: int
    mean_score: float
    extra: dict[str, Any] = field(default_factory=dict)
    records: list[Any] = field(default_factory=list, repr=False)

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.wall_s if self.wall_s else 0.0

    def summary(self) -> dict[str, Any]:
        return {"wall_s": round(self.wall_s, 2), "generated_tokens": self.generated_tokens,
                "tokens_per_s": round(self.tokens_per_s, 2), "turns": self.turns, "episodes": self.episodes,
                "backend_calls": self.backend_calls, "mean_score": round(self.mean_score, 4), **self.extra}


_POLICY_CACHE: dict[tuple, Any] = {}
_RESULTS: dict[str, PathResult] = {}  # this process's results, e.g. for vllm-raw to reuse (c)'s prompts


def hf_policy(w: Workload) -> Any:
    """One loaded HFPolicy per (model, dtype, batch size, threads), shared by the hf paths."""
    from optima_agents.policies import HFPolicy

    key = (w.model, w.dtype, w.batch_size, w.threads)
    if key not in _POLICY_CACHE:
        _POLICY_CACHE[key] = HFPolicy(w.model, sampling=w.sampling(), dtype=w.dtype, batch_size=w.batch_size,
                                      num_threads=w.threads)
    return _POLICY_CACHE[key]


def run_engine(w: Workload, policy: Any, *, max_live: int | None = None) -> PathResult:
    """The workload through the batched rollout engine with `policy` (warmed up first)."""
    from optima_agents.rollout import EpisodeSpec, RolloutEngine

    env_kwargs = {"max_turns": w.max_turns}
    RolloutEngine(w.env_id, policy, env_kwargs=env_kwargs, progress=False).run([EpisodeSpec(seed=10**6, index=10**6)])
    engine = RolloutEngine(w.env_id, policy, env_kwargs=env_kwargs, max_live=max_live, progress=True)
    records = engine.run(w.specs())
    stats = engine.last_stats
    scored = [r.score for r in records if r.scored]
    return PathResult(wall_s=stats.wall_s, generated_tokens=stats.generated_tokens, turns=stats.turns,
                      episodes=len(records), backend_calls=stats.policy_calls,
                      mean_score=sum(scored) / len(scored) if scored else 0.0, records=records)


def run_hf_sequential(w: Workload) -> PathResult:
    """(a) transformers, one episode at a time."""
    return run_engine(w, hf_policy(w), max_live=1)


def run_hf_batched(w: Workload) -> PathResult:
    """(b) transformers through the batched engine."""
    return run_engine(w, hf_policy(w))


def vllm_policy(w: Workload) -> Any:
    """One in-process VLLMPolicy per (model, dtype), shared by the vllm paths (startup is slow)."""
    from optima_agents.policies import VLLMPolicy

    key = ("vllm", w.model, w.dtype)
    if key not in _POLICY_CACHE:
        _POLICY_CACHE[key] = VLLMPolicy(w.model, sampling=w.sampling(), dtype=w.dtype)
    return _POLICY_CACHE[key]


def run_vllm_engine(w: Workload) -> PathResult:
    """(c) vLLM in-process (bf16 compiled by default) through the batched engine.

    Also times the `LLM.generate` calls inside the run: `engine_overhead` = the share of the
    wall time spent outside them (env steps, chat formatting, output cleaning), a figure that,
    unlike (c)/(d), does not move with the load other processes put on the machine.
    """
    import time

    policy = vllm_policy(w)
    llm, calls = policy.llm, []
    generate = llm.generate

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return generate(*args, **kwargs)
        finally:
            calls.append(time.perf_counter() - start)

    llm.generate = timed
    try:
        result = run_engine(w, policy)
    finally:
        del llm.generate
    inside = sum(calls[-result.backend_calls:])  # the timed run's calls (after run_engine's warm-up)
    result.extra.update(self_check_passed=policy.verified, generate_s=round(inside, 2),
                        engine_overhead=round(1 - inside / result.wall_s, 4) if result.wall_s else None)
    return result


def run_vllm_raw(w: Workload) -> PathResult:
    """(d) raw `LLM.generate` on the prompts (c) produced: no env, no chat formatting, no cleaning.

    The prompts are rebuilt from (c)'s records (run here if needed), so both paths decode the
    same prompts; they are grouped by turn into the same batches the engine sent (one call per
    turn index: every live episode's turn), greedy, `max_tokens=w.max_new_tokens`, and only the
    `generate` calls are timed. One call over all turns at once is reported as `extra` (bigger
    batches, so faster, but not what a turn-by-turn dialogue can do).
    """
    import time

    from vllm import SamplingParams as VSamplingParams
    from vllm.inputs import TokensPrompt

    if "vllm-engine" not in _RESULTS:
        _RESULTS["vllm-engine"] = run_vllm_engine(w)
    policy = vllm_policy(w)
    records = _RESULTS["vllm-engine"].records
    prompts = turn_prompts(records, policy.tokenizer)
    turns = [t.turn for r in records for t in r.turns]
    params = VSamplingParams(temperature=0.0, max_tokens=w.max_new_tokens, stop_token_ids=policy.stop_token_ids,
                             detokenize=False)
    eos = set(policy.stop_token_ids)

    def generate(batch: list[list[int]]) -> tuple[float, int]:
        start = time.perf_counter()
        outputs = policy.llm.generate([TokensPrompt(prompt_token_ids=p) for p in batch], params, use_tqdm=False)
        wall = time.perf_counter() - start
        ids = [list(o.outputs[0].token_ids) for o in outputs]
        return wall, sum(len(x) - (1 if x and x[-1] in eos else 0) for x in ids)

    generate(prompts[:8])  # warm-up
    # (c) just computed these very prompts: with vLLM's prefix cache still holding them, (d) would
    # skip most prefill and look ~30% faster than any fresh run. Start (d) from an empty cache, as
    # (c) started on prompts it had not seen; later turns then reuse earlier turns' prefixes in
    # both paths alike.
    policy.llm.reset_prefix_cache()
    wall, tokens = 0.0, 0
    for turn in sorted(set(turns)):
        call_wall, call_tokens = generate([p for p, t in zip(prompts, turns) if t == turn])
        wall, tokens = wall + call_wall, tokens + call_tokens
    policy.llm.reset_prefix_cache()
    one_wall, one_tokens = generate(prompts)
    engine = _RESULTS["vllm-engine"]
    return PathResult(wall_s=wall, generated_tokens=tokens, turns=len(prompts), episodes=len(records),
                      backend_calls=len(set(turns)), mean_score=engine.mean_score,
                      extra={"one_call_wall_s": round(one_wall, 2),
                             "one_call_tokens_per_s": round(one_tokens / one_wall, 2),
                             "engine_over_raw": round(engine.tokens_per_s / (tokens / wall), 3) if wall else None})


def turn_prompts(records: list[Any], tokenizer: Any) -> list[list[int]]:
    """The prompt ids each turn of `records` was generated from (same chat formatting as the policies)."""
    from optima_agents.chat import prompt_ids

    prompts = []
    for record in records:
        for turn in record.turns:
            view = {"agent": turn.speaker, "system_prompt": record.system_prompts[record.agents.index(turn.speaker)],
                    "transcript": tuple({"speaker": t.speaker, "text": t.text} for t in record.turns[: turn.turn])}
            prompts.append(prompt_ids(view, tokenizer))
    return prompts


PATHS: dict[str, Callable[[Workload], PathResult]] = {
    "hf-sequential": run_hf_sequential,
    "hf-batched": run_hf_batched,
    "vllm-engine": run_vllm_engine,
    "vllm-raw": run_vllm_raw,
}


def same_transcripts(a: list[Any], b: list[Any]) -> float:
    """Share of episodes whose transcripts are identical (bf16 rounding depends on batch shape)."""
    same = sum([t.text for t in x.turns] == [t.text for t in y.turns] for x, y in zip(a, b))
    return same / len(a) if a else 0.0


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default="hf-sequential,hf-batched", help=f"comma-separated: {', '.join(PATHS)}")
    for name, value in asdict(Workload()).items():
        kind = str if isinstance(value, str) else int
        parser.add_argument(f"--{name.replace('_', '-')}", type=kind, default=value)
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.backends.split(",") if n.strip()]
    unknown = [n for n in names if n not in PATHS]
    if unknown:
        parser.error(f"unknown backend(s) {unknown}; choose from {list(PATHS)}")
    w = Workload(**{k: getattr(args, k) for k in asdict(Workload())})

    previous = _previous(w)
    results: dict[str, Any] = dict(previous.get("results", {}))
    load_before = os.getloadavg()
    for name in names:
        print(f"== {name}", flush=True)
        result = _RESULTS[name] = PATHS[name](w)
        results[name] = result.summary()
        print(json.dumps(results[name]), flush=True)
    payload: dict[str, Any] = {
        "workload": asdict(w),
        "results": results,
        "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]},
        "torch_threads": w.threads or _torch_threads(),
    }
    base = results.get("hf-sequential", {}).get("tokens_per_s")
    if base:
        payload["speedup_vs_hf_sequential"] = {
            n: round(r["tokens_per_s"] / base, 2) for n, r in results.items() if n != "hf-sequential"}
    if "hf-sequential" in _RESULTS and "hf-batched" in _RESULTS:
        payload["same_transcripts_a_vs_b"] = round(
            same_transcripts(_RESULTS["hf-sequential"].records, _RESULTS["hf-batched"].records), 3)
    path = write_result(NAME, payload)
    print(json.dumps({k: v for k, v in payload.items() if k != "workload"}, indent=2))
    print(f"wrote {path}")
    return payload


def _previous(w: Workload) -> dict[str, Any]:
    """The earlier results file, if it measured the same workload (so paths can run separately)."""
    try:
        old = json.loads((RESULTS / f"{NAME}.json").read_text())
    except (OSError, ValueError):
        return {}
    same = {k: v for k, v in old.get("workload", {}).items() if k not in ("batch_size", "threads")} == w.key()
    return old if same else {}


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


if __name__ == "__main__":
    main()
