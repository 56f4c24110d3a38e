"""Rollout throughput: one fixed dialogue workload through different generation paths.

Workload: `--episodes` synth-hop-ia episodes (episode i: reset seed i, instance i; default 256),
the embedded model (SmolLM2-135M-Instruct), greedy decoding, the same `--max-new-tokens` (64)
and `--max-turns` (4). Each path runs `--repeats` times (default 3) after a warm-up; reported per
path: tokens/s (the median run's, and every run's), wall time, time to the first and the last
finished episode, generated tokens, turns, backend calls, mean score, and the peak resident
memory of the processes the path uses (this process and the engine or server processes it
drives, sampled every 0.25 s).

Paths (`--backends`, comma-separated; the default runs the five that compare the engine with
the reference implementation's way of generating):
  reference-style       a pool of `--ref-threads` (64) threads, one dialogue per thread, each
                        sending its turns one by one to an OpenAI-compatible vLLM server that
                        the benchmark starts (`optima_agents.servers.VLLMServer`, same model and
                        dtype); the server batches whatever requests are in flight
  engine-openai         the rollout engine, OpenAI backend, same server, continuous scheduling
                        (`--inflight` requests at most, also the client's connection pool)
  engine-openai-lockstep  the same in lock step (one batched `act` per turn)
  engine-vllm           the engine with in-process vLLM (`VLLMPolicy`), continuous scheduling
  engine-vllm-lockstep  the same engine and model in lock step; `engine_overhead` is the share of
                        its wall time spent outside `LLM.generate`
  vllm-raw              raw `LLM.generate` on the prompts engine-vllm produced, in the same per-turn
                        batches as lock step, no dialogue bookkeeping; `engine_over_raw` = engine
                        tokens/s over raw tokens/s for each engine-vllm path
  hf-sequential         transformers, one episode at a time (engine with max_live=1)
  hf-batched            transformers through the lock-step engine (chunked by --batch-size)
  engine-llamacpp-W     the engine with in-process llama.cpp (`LlamaCppPolicy`, weight type W), in
                        lock step (the policy has no `submit`); `--batch-size` parallel sequences,
                        each in its own KV stream; `engine_overhead` as for engine-vllm-lockstep
  engine-llamacpp-unified-W  the same with one unified KV buffer for all sequences
                        (`kv_unified=True`), where every token's attention spans every sequence's
                        cells: the split/unified ratio is what the per-sequence streams buy
  engine-llamacpp-nocache-W  split streams without the prefix cache (`prefix_cache=False`): every
                        turn's prompt is prefilled whole; the ratio is what keeping the cells buys
  reference-style-llamacpp-W  the reference-style pool of `--ref-threads` threads on the same
                        llama.cpp policy; since that policy is in-process, a micro-batcher stands in
                        for the server: it gathers the requests the threads are waiting on into one
                        batched `act` call, as llama.cpp's server slots batch concurrent requests
                        (`run_reference_style_llamacpp` says why this and not one call per request)

`engine-llamacpp` and `reference-style-llamacpp` in `--backends` expand to one path per weight
type of `--llamacpp-weights` (q4_1, the registry's shipped GGUF, by default; q8_0, f16, f32 are
exported from the model folder on first use); each row records the backend and the weight type
(`backend`, `weights`, `gguf`) that ran. `--dtype` does not apply to them. KV cells: the
policy's default of 2,048 per sequence's stream, and 32,768 for the unified buffer (room for 64
sequences of the longest prompt of this workload, a fourth turn of about 400 tokens, plus its
reply, so admission by KV budget does not cap the batch).
Every timed llama.cpp run starts with an empty prefix cache (`LlamaCppEngine.clear`), as every
vLLM run starts with an emptied prefix cache.
`--ref-window-ms` (50) is how long the micro-batcher waits for one more request before sending
a batch that is not full.

`--dtype auto` (the default) resolves as the policies do: bf16 where the CPU or GPU runs it
natively (AMX, AVX-512 bf16, CUDA), float32 where bf16 would be emulated and far slower
(docs/design.md section 4); the results record the resolved dtype.

Each path that keeps its episode records also gets its share of this machine's ceiling
(`ceiling_share`, from the `benchmarks/results/machine_ceiling*.json` measured on the same CPU
kind; `ceiling_share` says how): the fewest seconds its own workload can take at the
measured matmul rates, over its wall time.

Besides the JSON, a markdown summary (`rollout_throughput.md`) holds the table and the targets
the paths are held to (`TARGETS`), each marked met or not.

The server and the in-process engine are started once, on first use, with `--kv-cache-gib` of KV
cache each; vLLM's prefix cache is emptied before every timed run (the server is started with
`VLLM_SERVER_DEV_MODE=1` for its `/reset_prefix_cache`), so no run reuses a previous run's
prompts. Greedy paths should produce the same dialogues: `same_transcripts` gives the share of
episodes each path shares with engine-vllm (bf16 rounding can differ with batch shape).

Adding a path: write `def run_x(w: Workload) -> PathResult` and register it in `PATHS`. Results
merge into benchmarks/results/rollout_throughput.json, so paths can be run separately as long as
the workload is the same (other workloads replace it); `--quick` writes
rollout_throughput_quick.json instead and never merges; `--results-dir` writes (and merges)
elsewhere.

    python benchmarks/rollout_throughput.py                   # the five engine/reference paths
    python benchmarks/rollout_throughput.py --quick           # 32 episodes, 1 repeat: a smoke run
    python benchmarks/rollout_throughput.py --backends hf-batched --episodes 16
    python benchmarks/rollout_throughput.py --backends engine-llamacpp,reference-style-llamacpp
    python benchmarks/rollout_throughput.py --backends engine-llamacpp --llamacpp-weights q4_1,q8_0,f16
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._results import RESULTS, invocation, machine, write_report, write_result  # noqa: E402
from benchmarks.machine_ceiling import generation_ceiling, kind_name, same_cpu_ceiling, turn_prompts  # noqa: E402
from optima_agents.models.dtypes import resolve_dtype_here  # noqa: E402
from optima_agents.models.gguf_export import CONVERTED_TYPES  # noqa: E402

NAME = "rollout_throughput"


DEFAULT_PATHS = "reference-style,engine-openai,engine-vllm,engine-vllm-lockstep,vllm-raw"
QUICK = {"episodes": 32, "repeats": 1}
_SETTINGS = ("batch_size", "threads", "repeats", "ref_threads", "inflight", "kv_cache_gib", "enforce_eager",
             "llamacpp_ctx", "ref_window_ms")


@dataclass(frozen=True)
class Workload:
    env_id: str = "synth-hop-ia"
    episodes: int = 256
    max_turns: int = 4
    max_new_tokens: int = 64
    model: str = "smollm2-135m"
    dtype: str = "auto"
    batch_size: int = 64
    threads: int | None = None
    repeats: int = 3
    ref_threads: int = 64
    inflight: int = 256
    kv_cache_gib: float = 4.0
    enforce_eager: bool = False
    llamacpp_ctx: int | None = None  # None: the policy's 2,048 cells per sequence; 32,768 when unified
    ref_window_ms: float = 50.0

    def specs(self) -> list[Any]:
        from optima_agents.rollout import EpisodeSpec

        return [EpisodeSpec(seed=i, index=i) for i in range(self.episodes)]

    def sampling(self) -> Any:
        from optima_agents.policies import SamplingParams

        return SamplingParams(temperature=0.0, max_new_tokens=self.max_new_tokens, seed=0)

    def key(self) -> dict[str, Any]:
        """What must match for results of different runs to be comparable."""
        return {k: v for k, v in asdict(self).items() if k not in _SETTINGS}


@dataclass
class PathResult:
    wall_s: float
    generated_tokens: int
    turns: int
    episodes: int
    backend_calls: int
    mean_score: float
    first_episode_s: float | None = None
    peak_rss_gib: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    transcripts: list[list[str]] = field(default_factory=list, repr=False)
    records: list[Any] = field(default_factory=list, repr=False)

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.wall_s if self.wall_s else 0.0

    def summary(self) -> dict[str, Any]:
        first = None if self.first_episode_s is None else round(self.first_episode_s, 2)
        return {"tokens_per_s": round(self.tokens_per_s, 2), "wall_s": round(self.wall_s, 2),
                "first_episode_s": first, "last_episode_s": round(self.wall_s, 2),
                "generated_tokens": self.generated_tokens, "turns": self.turns, "episodes": self.episodes,
                "backend_calls": self.backend_calls, "mean_score": round(self.mean_score, 4),
                "peak_rss_gib": self.peak_rss_gib, **self.extra}


def repeated(w: Workload, run: Callable[[], PathResult], *, before: Callable[[], None] = lambda: None,
             processes: Callable[[], list[Any]] = lambda: []) -> PathResult:
    """`run` `w.repeats` times (`before` each, untimed); the run with the median tokens/s, with
    every run's tokens/s and the peak memory over all runs of this process and `processes()`."""
    runs = []
    peak = 0.0
    for _ in range(w.repeats):
        before()
        with PeakRss(processes()) as rss:
            runs.append(run())
        peak = max(peak, rss.peak_gib)
    ranked = sorted(runs, key=lambda r: r.tokens_per_s)
    chosen = ranked[(len(ranked) - 1) // 2]
    chosen.peak_rss_gib = round(peak, 3)
    chosen.extra["runs_tokens_per_s"] = [round(r.tokens_per_s, 2) for r in runs]
    chosen.extra["median_tokens_per_s"] = round(statistics.median(r.tokens_per_s for r in runs), 2)
    return chosen


class PeakRss:
    """Samples the summed resident memory of this process and `processes` (psutil processes,
    each with its descendants) every `interval_s` while the block runs."""

    def __init__(self, processes: list[Any], interval_s: float = 0.25):
        import psutil

        self.roots = [psutil.Process(), *processes]
        self.interval_s = interval_s
        self.peak_gib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> "PeakRss":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        import psutil

        while True:
            total = 0
            for pid in self._pids():
                try:
                    total += psutil.Process(pid).memory_info().rss
                except psutil.Error:  # the process ended between listing and reading it
                    pass
            self.peak_gib = max(self.peak_gib, total / 1024**3)
            if self._stop.wait(self.interval_s):
                return

    def _pids(self) -> set[int]:
        import psutil

        pids = {self.roots[0].pid}
        for root in self.roots[1:]:
            try:
                pids |= {root.pid, *(c.pid for c in root.children(recursive=True))}
            except psutil.Error:
                pass
        return pids


def engine_children() -> list[Any]:
    """This process's child processes other than benchmark servers (the in-process vLLM engine)."""
    import psutil

    server_pids = {s.process.pid for s in _SERVERS.values() if s.process is not None}
    return [c for c in psutil.Process().children() if c.pid not in server_pids]


def transcripts_of(records: list[Any]) -> list[list[str]]:
    return [[t.text for t in r.turns] for r in records]


_POLICY_CACHE: dict[tuple, Any] = {}
_SERVERS: dict[tuple, Any] = {}
_RESULTS: dict[str, PathResult] = {}  # this process's results, e.g. for vllm-raw to reuse engine-vllm's prompts


def hf_policy(w: Workload) -> Any:
    """One loaded HFPolicy per (model, dtype, batch size, threads), shared by the hf paths."""
    from optima_agents.policies import HFPolicy

    key = (w.model, w.dtype, w.batch_size, w.threads)
    if key not in _POLICY_CACHE:
        _POLICY_CACHE[key] = HFPolicy(w.model, sampling=w.sampling(), dtype=w.dtype, batch_size=w.batch_size,
                                      num_threads=w.threads)
    return _POLICY_CACHE[key]


def run_engine(w: Workload, policy: Any, *, max_live: int | None = None, scheduling: str = "lock-step",
               max_inflight: int | None = None, before: Callable[[], None] = lambda: None,
               after: Callable[[PathResult], None] = lambda result: None,
               processes: Callable[[], list[Any]] = lambda: []) -> PathResult:
    """The workload through the rollout engine with `policy` (warmed up first), `w.repeats` times
    (`before` and `after` each run, untimed)."""
    from optima_agents.rollout import EpisodeSpec, RolloutEngine

    env_kwargs = {"max_turns": w.max_turns}
    options = {"max_live": max_live, "scheduling": scheduling, "max_inflight": max_inflight}
    RolloutEngine(w.env_id, policy, env_kwargs=env_kwargs, progress=False, **options).run(
        [EpisodeSpec(seed=10**6, index=10**6)])

    def once() -> PathResult:
        engine = RolloutEngine(w.env_id, policy, env_kwargs=env_kwargs, progress=True, **options)
        records = engine.run(w.specs())
        stats = engine.last_stats
        scored = [r.score for r in records if r.scored]
        result = PathResult(wall_s=stats.wall_s, generated_tokens=stats.generated_tokens, turns=stats.turns,
                            episodes=len(records), backend_calls=stats.policy_calls,
                            mean_score=sum(scored) / len(scored) if scored else 0.0,
                            first_episode_s=stats.first_episode_s,
                            extra={"scheduling": stats.scheduling, "infra_failures": stats.infra_failures},
                            transcripts=transcripts_of(records), records=records)
        after(result)
        return result

    return repeated(w, once, before=before, processes=processes)


def run_hf_sequential(w: Workload) -> PathResult:
    """Transformers, one episode at a time."""
    return run_engine(w, hf_policy(w), max_live=1)


def run_hf_batched(w: Workload) -> PathResult:
    """Transformers through the lock-step engine."""
    return run_engine(w, hf_policy(w))


def vllm_policy(w: Workload) -> Any:
    """One in-process VLLMPolicy per (model, dtype, mode), shared by the vllm paths (startup is slow)."""
    from optima_agents.policies import VLLMPolicy

    key = ("vllm", w.model, w.dtype, w.enforce_eager, w.kv_cache_gib)
    if key not in _POLICY_CACHE:
        _POLICY_CACHE[key] = VLLMPolicy(w.model, sampling=w.sampling(), dtype=w.dtype, enforce_eager=w.enforce_eager,
                                        kv_cache_gib=w.kv_cache_gib)
    return _POLICY_CACHE[key]


def run_engine_vllm(w: Workload) -> PathResult:
    """The engine with in-process vLLM, continuous scheduling (requests join the running batch)."""
    policy = vllm_policy(w)
    result = run_engine(w, policy, scheduling="continuous", max_inflight=w.inflight,
                        before=policy.llm.reset_prefix_cache, processes=engine_children)
    result.extra.update(self_check_passed=policy.verified)
    return result


def run_engine_vllm_lockstep(w: Workload) -> PathResult:
    """The engine with in-process vLLM in lock step (one `LLM.generate` per turn of all episodes).

    Also times the `LLM.generate` calls inside the run: `engine_overhead` = the share of the
    wall time spent outside them (env steps, chat formatting, output cleaning), a figure that,
    unlike engine/raw, does not move with the load other processes put on the machine.
    """
    policy = vllm_policy(w)
    llm, calls = policy.llm, []
    generate = llm.generate

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return generate(*args, **kwargs)
        finally:
            calls.append(time.perf_counter() - start)

    def before() -> None:
        llm.reset_prefix_cache()
        calls.clear()

    def after(result: PathResult) -> None:
        inside = sum(calls)
        result.extra.update(generate_s=round(inside, 2),
                            engine_overhead=round(1 - inside / result.wall_s, 4) if result.wall_s else None)

    llm.generate = timed
    try:
        result = run_engine(w, policy, scheduling="lock-step", before=before, after=after, processes=engine_children)
    finally:
        del llm.generate
    result.extra.update(self_check_passed=policy.verified)
    return result


def run_vllm_raw(w: Workload) -> PathResult:
    """Raw `LLM.generate` on the prompts engine-vllm produced: no env, no chat formatting, no cleaning.

    The prompts are rebuilt from engine-vllm's records (run here if needed, else engine-vllm-
    lockstep's when only that ran), so every path decodes the same prompts; they are grouped by
    turn into the batches lock step sends (one call per turn index: every episode's turn), greedy,
    `max_tokens=w.max_new_tokens`, and only the `generate` calls are timed. One call over all
    turns at once is reported as `extra` (bigger batches, so faster, but not what a turn-by-turn
    dialogue can do).
    """
    from vllm import SamplingParams as VSamplingParams
    from vllm.inputs import TokensPrompt

    source = next((n for n in ("engine-vllm", "engine-vllm-lockstep") if n in _RESULTS), None)
    if source is None:
        source = "engine-vllm"
        _RESULTS[source] = run_engine_vllm(w)
    policy = vllm_policy(w)
    records = _RESULTS[source].records
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

    def once() -> PathResult:
        # Each run starts from an empty prefix cache, as the engine runs do; later turns then reuse
        # earlier turns' prefixes in every path alike.
        policy.llm.reset_prefix_cache()
        wall, tokens = 0.0, 0
        for turn in sorted(set(turns)):
            call_wall, call_tokens = generate([p for p, t in zip(prompts, turns) if t == turn])
            wall, tokens = wall + call_wall, tokens + call_tokens
        return PathResult(wall_s=wall, generated_tokens=tokens, turns=len(prompts), episodes=len(records),
                          backend_calls=len(set(turns)), mean_score=_RESULTS[source].mean_score,
                          extra={"prompts_from": source})

    result = repeated(w, once, processes=engine_children)
    policy.llm.reset_prefix_cache()
    one_wall, one_tokens = generate(prompts)
    result.extra.update(one_call_wall_s=round(one_wall, 2), one_call_tokens_per_s=round(one_tokens / one_wall, 2))
    raw = result.tokens_per_s
    result.extra["engine_over_raw"] = {n: round(_RESULTS[n].tokens_per_s / raw, 3) if raw else None
                                       for n in ("engine-vllm", "engine-vllm-lockstep") if n in _RESULTS}
    return result


# ---------------------------------------------------------------------- server paths
def vllm_server(w: Workload) -> Any:
    """One OpenAI-compatible vLLM server per (model, dtype, mode), started on first use, stopped at exit.

    `--max-num-seqs` is raised to `w.inflight` (the server default on CPU is 128), so the server can
    batch every request the engine keeps in flight; the reference-style pool sends fewer."""
    from optima_agents.servers import VLLMServer

    key = (w.model, w.dtype, w.enforce_eager, w.kv_cache_gib, w.inflight)
    if key not in _SERVERS:
        _SERVERS[key] = VLLMServer(w.model, dtype=w.dtype, enforce_eager=w.enforce_eager, served_model_name=w.model,
                                   kv_cache_gib=w.kv_cache_gib, extra_args=["--max-num-seqs", str(w.inflight)],
                                   env={"VLLM_SERVER_DEV_MODE": "1"}).start()
    return _SERVERS[key]


SERVER_PATHS = {"reference-style", "engine-openai", "engine-openai-lockstep"}


def stop_servers() -> None:
    while _SERVERS:
        _SERVERS.popitem()[1].stop()


def server_tree(server: Any) -> Callable[[], list[Any]]:
    import psutil

    return lambda: [psutil.Process(server.process.pid)]


def reset_server_cache(server: Any) -> Callable[[], None]:
    """POST /reset_prefix_cache (dev mode), so a run does not reuse the previous run's prompts."""
    import httpx

    root = server.base_url.removesuffix("/v1")
    return lambda: httpx.post(f"{root}/reset_prefix_cache", timeout=60).raise_for_status()


def openai_policy(w: Workload, server: Any, concurrency: int) -> Any:
    from optima_agents.policies import OpenAIPolicy

    key = ("openai", server.base_url, concurrency)
    if key not in _POLICY_CACHE:
        _POLICY_CACHE[key] = OpenAIPolicy(server.served_model_name, base_urls=[server.base_url], sampling=w.sampling(),
                                          tokenizer=_tokenizer(w), concurrency=concurrency, timeout_s=600)
    return _POLICY_CACHE[key]


def _tokenizer(w: Workload) -> Any:
    """The model's tokenizer, loaded once per model for every path that needs it."""
    return _load_tokenizer(w.model)


@lru_cache(maxsize=None)
def _load_tokenizer(model: str) -> Any:
    from transformers import AutoTokenizer

    from optima_agents.models import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model(model))


def run_engine_openai(w: Workload, scheduling: str = "continuous") -> PathResult:
    """The engine with the OpenAI backend on the benchmark's server."""
    server = vllm_server(w)
    policy = openai_policy(w, server, w.inflight)
    return run_engine(w, policy, scheduling=scheduling, max_inflight=w.inflight, before=reset_server_cache(server),
                      processes=server_tree(server))


def run_engine_openai_lockstep(w: Workload) -> PathResult:
    """The engine with the OpenAI backend on the benchmark's server, in lock step."""
    return run_engine_openai(w, scheduling="lock-step")


def run_reference_style(w: Workload) -> PathResult:
    """The reference implementation's way: `w.ref_threads` threads, one dialogue per thread at a
    time, each turn one request to the server as soon as the previous reply is in."""
    server = vllm_server(w)
    policy = openai_policy(w, server, w.ref_threads)
    return run_thread_pool(w, lambda request: policy.act([request])[0], before=reset_server_cache(server),
                           processes=server_tree(server))


def run_thread_pool(w: Workload, act_one: Callable[[Any], Any], *, before: Callable[[], None] = lambda: None,
                    after: Callable[[PathResult], None] = lambda result: None,
                    processes: Callable[[], list[Any]] = lambda: []) -> PathResult:
    """`w.ref_threads` threads, one dialogue per thread at a time, each turn `act_one(request)`
    as soon as the previous reply is in (warmed up first; `before` and `after` each run, untimed).

    Each thread has its own env; requests carry the engine's per-request seeds
    (`derive_seed(episode seed, turn)`), so the dialogues are the engine's."""
    import optima_envs
    from optima_agents.policies import TurnRequest
    from optima_agents.rollout import derive_seed

    local = threading.local()

    def play(spec: Any, start: float) -> tuple[list[str], int, int, float | None, float, bool]:
        env = getattr(local, "env", None)
        if env is None:
            env = local.env = optima_envs.make(w.env_id, max_turns=w.max_turns)
        observations, _ = env.reset(seed=spec.seed, options=spec.reset_options())
        tokens = turns = 0
        while env.agents:
            speaker = env.current_speaker
            observation = observations[speaker]
            action = act_one(TurnRequest(speaker, observation, seed=derive_seed(spec.seed, observation["turn"])))
            if action.failed:
                return [m.text for m in env.state.messages], tokens, turns, None, time.perf_counter() - start, True
            observations, *_ = env.step({speaker: action.to_env_action()})
            tokens += int(action.meta.get("generated_tokens", len(action.token_ids)))
            turns += 1
        score = env.state.outcome.get("score")
        return [m.text for m in env.state.messages], tokens, turns, score, time.perf_counter() - start, False

    pool = ThreadPoolExecutor(w.ref_threads)
    try:
        pool.submit(play, replace(w.specs()[0], seed=10**6, index=10**6), time.perf_counter()).result()  # warm-up

        def once() -> PathResult:
            start = time.perf_counter()
            played = list(pool.map(lambda spec: play(spec, start), w.specs()))
            wall = time.perf_counter() - start
            scores = [p[3] for p in played if p[3] is not None]
            result = PathResult(wall_s=wall, generated_tokens=sum(p[1] for p in played),
                                turns=sum(p[2] for p in played), episodes=len(played),
                                backend_calls=sum(p[2] for p in played),
                                mean_score=sum(scores) / len(scores) if scores else 0.0,
                                first_episode_s=min(p[4] for p in played) if played else None,
                                extra={"threads": w.ref_threads, "infra_failures": sum(p[5] for p in played)},
                                transcripts=[p[0] for p in played])
            after(result)
            return result

        return repeated(w, once, before=before, processes=processes)
    finally:
        # an interrupted run must not wait for every thread's dialogue: stopping the server (or
        # the batcher) ends them
        pool.shutdown(wait=False, cancel_futures=True)


# ---------------------------------------------------------------------- llama.cpp paths
#: Weight types the llama.cpp paths run (`--llamacpp-weights`): each is its own result row. The
#: shipped Q4_1 and every type `gguf_export` writes, smallest first.
LLAMACPP_WEIGHTS = ("q4_1", *reversed(CONVERTED_TYPES))
#: Path families that `--llamacpp-weights` expands into one path per weight type.
LLAMACPP_FAMILIES = ("engine-llamacpp", "engine-llamacpp-unified", "engine-llamacpp-nocache", "reference-style-llamacpp")
#: KV cells of the unified buffer when `--llamacpp-ctx` is not given.
BENCH_UNIFIED_CELLS = 32768


def expand_paths(names: list[str], weights: list[str]) -> list[str]:
    """`names` with each llama.cpp family replaced by one path per weight type, weight type by
    weight type (`engine-llamacpp-q4_1, reference-style-llamacpp-q4_1, engine-llamacpp-f16, ...`),
    so one llama.cpp model is loaded at a time; repeated names are kept once."""
    families = list(dict.fromkeys(n for n in names if n in LLAMACPP_FAMILIES))
    out: list[str] = []
    for name in names:
        if name not in LLAMACPP_FAMILIES:
            out.append(name)
        elif name == families[0]:
            out += [f"{family}-{kind}" for kind in weights for family in families]
    return list(dict.fromkeys(out))


def llamacpp_policy(w: Workload, weights: str, *, kv_unified: bool = False, prefix_cache: bool = True) -> Any:
    """The LlamaCppPolicy with `weights`, `w.batch_size` parallel sequences and `w.llamacpp_ctx` KV
    cells (split streams, or one unified buffer), with or without its prefix cache; one llama.cpp
    model is kept at a time (loading another closes the previous one)."""
    from optima_agents.policies.llamacpp import LlamaCppPolicy

    n_ctx = w.llamacpp_ctx or (BENCH_UNIFIED_CELLS if kv_unified else None)
    key = ("llamacpp", w.model, weights, w.batch_size, w.threads, n_ctx, kv_unified, prefix_cache)
    if key not in _POLICY_CACHE:
        for other in [k for k in _POLICY_CACHE if k[0] == "llamacpp"]:
            _POLICY_CACHE.pop(other).close()
        _POLICY_CACHE[key] = LlamaCppPolicy(w.model, sampling=w.sampling(), weights=weights,
                                            batch_size=w.batch_size, n_ctx=n_ctx, num_threads=w.threads,
                                            kv_unified=kv_unified, prefix_cache=prefix_cache)
    return _POLICY_CACHE[key]


def llamacpp_settings(policy: Any) -> dict[str, Any]:
    """What a llama.cpp row records of the backend that ran: weight type and file, sizes, version."""
    identity = policy.identity()
    return {"backend": identity["backend"], "weights": identity["weights"]["type"],
            "weights_source": identity["weights"]["source"], "gguf": Path(identity["weights"]["file"]).name,
            "parallel_sequences": identity["parallel_sequences"], "n_ctx": identity["n_ctx"],
            "kv_unified": identity["kv_unified"], "prefix_cache": identity["prefix_cache"],
            "llama_threads": identity["threads"], "llama_cpp_version": identity["llama_cpp_version"]}


def run_engine_llamacpp(w: Workload, weights: str, *, kv_unified: bool = False,
                        prefix_cache: bool = True) -> PathResult:
    """The engine with in-process llama.cpp (`LlamaCppPolicy`), in lock step (the policy has no
    `submit`): one `act` per turn of every live episode, decoded as parallel sequences with
    continuous batching inside the call. `engine_overhead` is the share of the wall time spent
    outside `act` (env steps, engine bookkeeping); `prompt_tokens_fed` and `prompt_tokens_reused`
    count the prompt tokens prefilled and those served from kept cells (the prefix cache)."""
    policy = llamacpp_policy(w, weights, kv_unified=kv_unified, prefix_cache=prefix_cache)
    stats_before: dict[str, int] = {}
    calls: list[float] = []
    act = policy.act

    def timed(requests: Any) -> Any:
        start = time.perf_counter()
        try:
            return act(requests)
        finally:
            calls.append(time.perf_counter() - start)

    def before() -> None:
        calls.clear()
        policy.engine.clear()  # every repeat starts with no kept cells
        stats_before.update(policy.engine.stats)

    def after(result: PathResult) -> None:
        inside = sum(calls)
        stats = policy.engine.stats
        result.extra.update(act_s=round(inside, 2),
                            engine_overhead=round(1 - inside / result.wall_s, 4) if result.wall_s else None,
                            prompt_tokens_fed=stats["prompt_tokens"] - stats_before["prompt_tokens"],
                            prompt_tokens_reused=stats["reused_tokens"] - stats_before["reused_tokens"])

    policy.act = timed
    try:
        result = run_engine(w, policy, scheduling="lock-step", before=before, after=after)
    finally:
        del policy.act
    result.extra.update(llamacpp_settings(policy))
    return result


def run_reference_style_llamacpp(w: Workload, weights: str) -> PathResult:
    """The reference-style thread pool on the same in-process llama.cpp policy as engine-llamacpp.

    `w.ref_threads` threads each play one dialogue at a time and send each turn as one request, as
    reference-style does against its server. What answers them is what a server does with
    concurrent requests: a `MicroBatcher` gathers the waiting requests into one `act` call (up to
    `w.ref_threads`, or whatever has come in once none arrived for `w.ref_window_ms`), and `act`
    decodes them as parallel sequences, which is how llama.cpp's server slots serve concurrent
    requests. Calling `act([request])` from each thread behind the policy's lock would instead
    decode one sequence at a time and measure the absence of batching, not the thread pool.

    Where this differs from a llama.cpp server: a request that arrives while a batch is decoding
    waits for the batch to end instead of joining it at the next decode step. In this workload the
    threads move in waves (every thread of a batch gets its reply when the batch ends and sends
    its next turn a moment later), so almost no request arrives mid-batch; and the engine it is
    compared with waits the same way, for the slowest reply of each lock-step turn.
    `backend_idle` (the share of the wall time with no `act` running) and the batch sizes show how
    well the pool kept the backend fed; `same_transcripts_as_engine` compares its dialogues with
    engine-llamacpp's on the same weights, when that ran in this process.
    """
    from benchmarks._microbatch import MicroBatcher

    policy = llamacpp_policy(w, weights)
    batcher = MicroBatcher(policy.act, max_batch=w.ref_threads, window_s=w.ref_window_ms / 1000)

    def after(result: PathResult) -> None:
        sizes = batcher.batch_sizes
        result.backend_calls = len(sizes)
        result.extra.update(act_s=round(batcher.busy_s, 2),
                            backend_idle=round(1 - batcher.busy_s / result.wall_s, 4) if result.wall_s else None,
                            mean_batch=round(sum(sizes) / len(sizes), 2) if sizes else None,
                            smallest_batch=min(sizes, default=None), largest_batch=max(sizes, default=None),
                            window_ms=w.ref_window_ms)

    def before() -> None:
        batcher.reset_stats()
        policy.engine.clear()  # as engine-llamacpp: no run reuses cells another run left

    try:
        result = run_thread_pool(w, batcher, before=before, after=after)
    finally:
        batcher.close()
    result.extra.update(llamacpp_settings(policy))
    engine = _RESULTS.get(f"engine-llamacpp-{weights}")
    if engine is not None:
        result.extra["same_transcripts_as_engine"] = round(same_transcripts(engine.transcripts, result.transcripts), 3)
    return result


PATHS: dict[str, Callable[[Workload], PathResult]] = {
    "reference-style": run_reference_style,
    "engine-openai": run_engine_openai,
    "engine-openai-lockstep": run_engine_openai_lockstep,
    "engine-vllm": run_engine_vllm,
    "engine-vllm-lockstep": run_engine_vllm_lockstep,
    "vllm-raw": run_vllm_raw,
    "hf-sequential": run_hf_sequential,
    "hf-batched": run_hf_batched,
    **{f"engine-llamacpp-{kind}": partial(run_engine_llamacpp, weights=kind) for kind in LLAMACPP_WEIGHTS},
    **{f"engine-llamacpp-unified-{kind}": partial(run_engine_llamacpp, weights=kind, kv_unified=True)
       for kind in LLAMACPP_WEIGHTS},
    **{f"engine-llamacpp-nocache-{kind}": partial(run_engine_llamacpp, weights=kind, prefix_cache=False)
       for kind in LLAMACPP_WEIGHTS},
    **{f"reference-style-llamacpp-{kind}": partial(run_reference_style_llamacpp, weights=kind)
       for kind in LLAMACPP_WEIGHTS},
}


def same_transcripts(a: list[list[str]], b: list[list[str]]) -> float:
    """Share of episodes whose transcripts are identical (bf16 rounding depends on batch shape)."""
    same = sum(x == y for x, y in zip(a, b))
    return same / len(a) if a else 0.0


def ratios(results: dict[str, Any]) -> dict[str, float]:
    """The ratios the targets are stated in, for the paths that ran."""
    tps = {name: r.get("tokens_per_s") for name, r in results.items()}
    pairs = {"engine_vllm_over_reference": ("engine-vllm", "reference-style"),
             "engine_openai_over_reference": ("engine-openai", "reference-style"),
             "engine_openai_over_lockstep": ("engine-openai", "engine-openai-lockstep"),
             "engine_vllm_over_lockstep": ("engine-vllm", "engine-vllm-lockstep"),
             "engine_vllm_over_raw": ("engine-vllm", "vllm-raw")}
    out = {key: round(tps[a] / tps[b], 3) for key, (a, b) in pairs.items() if tps.get(a) and tps.get(b)}
    return {**out, **llamacpp_ratios(tps)}


def llamacpp_ratios(tps: dict[str, float | None]) -> dict[str, float]:
    """The llama.cpp ratios, from tokens/s by path name.

    `engine_llamacpp_<w>_over_reference_llamacpp_<w>`: engine over thread pool on weight type w,
    for each w where both ran; `engine_llamacpp_over_reference_llamacpp` is that ratio for the
    weight type whose engine row is fastest. `engine_llamacpp_over_vllm`: the fastest
    engine-llamacpp row (any weight type) over engine-vllm. `engine_llamacpp_<w>_split_over_unified`
    and `engine_llamacpp_<w>_cache_over_nocache`: what the per-sequence streams and the prefix
    cache buy on weight type w."""
    engine = {kind: tps.get(f"engine-llamacpp-{kind}") for kind in LLAMACPP_WEIGHTS}
    paired = {kind: engine[kind] / tps[f"reference-style-llamacpp-{kind}"] for kind in LLAMACPP_WEIGHTS
              if engine[kind] and tps.get(f"reference-style-llamacpp-{kind}")}
    out = {f"engine_llamacpp_{kind}_over_reference_llamacpp_{kind}": round(r, 3) for kind, r in paired.items()}
    if paired:
        out["engine_llamacpp_over_reference_llamacpp"] = round(paired[max(paired, key=lambda k: engine[k])], 3)
    best = max((v for v in engine.values() if v), default=None)
    if best and tps.get("engine-vllm"):
        out["engine_llamacpp_over_vllm"] = round(best / tps["engine-vllm"], 3)
    for kind in LLAMACPP_WEIGHTS:
        if engine[kind] and tps.get(f"engine-llamacpp-unified-{kind}"):
            out[f"engine_llamacpp_{kind}_split_over_unified"] = round(
                engine[kind] / tps[f"engine-llamacpp-unified-{kind}"], 3)
        if engine[kind] and tps.get(f"engine-llamacpp-nocache-{kind}"):
            out[f"engine_llamacpp_{kind}_cache_over_nocache"] = round(
                engine[kind] / tps[f"engine-llamacpp-nocache-{kind}"], 3)
    return out


#: (label, a key of `ratios` or None for engine-vllm's own tokens/s, the least allowed value)
TARGETS = (("engine-vllm tokens/s", None, 600.0),
           ("engine-vllm / reference-style", "engine_vllm_over_reference", 1.5),
           ("engine-openai / reference-style", "engine_openai_over_reference", 1.3),
           ("engine-vllm / vllm-raw", "engine_vllm_over_raw", 0.9),
           ("best engine-llamacpp / engine-vllm", "engine_llamacpp_over_vllm", 1.5),
           ("engine-llamacpp / reference-style-llamacpp, same weights", "engine_llamacpp_over_reference_llamacpp", 1.5))


def ceiling_share(result: PathResult, w: Workload, tokenizer: Any, ceiling: dict[str, Any]) -> dict[str, Any]:
    """The path's workload against the machine (`machine_ceiling.generation_ceiling`: every
    generated token decoded, every prompt token a perfect prefix cache could not serve prefilled,
    in the path's dtype or, for llama.cpp, the fastest measured one); `ceiling_share` is its
    fewest seconds over the path's wall time."""
    dtype = "fastest" if result.extra.get("backend") == "llamacpp" else w.dtype
    fewest = generation_ceiling(result.records, tokenizer, ceiling, dtype, decode_tokens=result.generated_tokens)
    seconds = fewest["ceiling_s"]
    return {"ceiling_s": round(seconds, 2), "ceiling_share": round(seconds / result.wall_s, 3) if result.wall_s else None,
            "ceiling_prefill_tokens": fewest["prefill_tokens"], "ceiling_prompt_tokens": fewest["prompt_tokens"],
            "ceiling_dtype": fewest["dtype"], "ceiling_cpu": ceiling["cpu_kind"],
            "ceiling_file": ceiling["file"]}


def markdown(payload: dict[str, Any], *, command: str) -> str:
    """The results as a table of paths, then each target with its measured value (paths that did
    not run leave their targets unmeasured)."""
    w, results = payload["workload"], payload["results"]
    lines = [f"# Rollout throughput: {w['episodes']} {w['env_id']} episodes", "",
             f"Made by: `{command}`. {w['model']}, {w['dtype']}, greedy, {w['max_turns']} turns, "
             f"{w['max_new_tokens']} new tokens per reply, median of {w['repeats']} run(s) per path; "
             f"{payload['machine']['cpus']} CPUs, load average before {payload['load_average']['before'][0]}.", "",
             "| path | tokens/s (median) | every run | first episode (s) | last episode (s) | generated tokens "
             "| share of ceiling | peak memory (GiB) | scheduling |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        runs = ", ".join(f"{x:g}" for x in r.get("runs_tokens_per_s", [r["tokens_per_s"]]))
        first = "–" if r.get("first_episode_s") is None else f"{r['first_episode_s']:.1f}"
        share = "–" if r.get("ceiling_share") is None else f"{r['ceiling_share']:.0%} of {r['ceiling_s']:.1f} s"
        lines.append(f"| {name} | {r['tokens_per_s']:.1f} | {runs} | {first} | {r['last_episode_s']:.1f} "
                     f"| {r['generated_tokens']} | {share} | {r.get('peak_rss_gib', '–')} | {r.get('scheduling', '–')} |")
    source = next((r["ceiling_file"] for r in results.values() if r.get("ceiling_file")), "machine_ceiling.json")
    lines += ["", "Share of ceiling: the fewest seconds the path's own workload can take at this machine's measured "
              f"matmul rates (`{source}`; linear-layer FLOPs of every generated token at the 64-row "
              "rate and of every prompt token a perfect prefix cache could not serve at the 1,024-row rate), over "
              "the path's wall time. llama.cpp rows use the fastest measured dtype's rates."]
    lines += ["", "| target | measured | least allowed | met |", "|---|---|---|---|"]
    measured = {**ratios(results), None: results.get("engine-vllm", {}).get("tokens_per_s")}
    for label, key, least in TARGETS:
        value = measured.get(key)
        if value is None:
            lines.append(f"| {label} | not run | {least:g} | – |")
            continue
        lines.append(f"| {label} | {value:.2f} | {least:g} | {'yes' if value >= least else 'no'} |")
    same = payload.get("same_transcripts_as")
    if same:
        shares = ", ".join(f"{n} {v:.3f}" for n, v in same.items() if n != "path")
        lines += ["", f"Share of episodes with the same transcript as {same['path']}: {shares}."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backends", default=DEFAULT_PATHS,
                        help=f"comma-separated: {', '.join([*PATHS, *LLAMACPP_FAMILIES])} (the last three: one "
                             "path per --llamacpp-weights type)")
    parser.add_argument("--llamacpp-weights", default="q4_1",
                        help=f"comma-separated weight types the llama.cpp paths run: {', '.join(LLAMACPP_WEIGHTS)}")
    parser.add_argument("--results-dir", type=Path, default=None,
                        help="where the JSON and markdown go and whose earlier results are merged "
                             "(default: benchmarks/results)")
    parser.add_argument("--quick", action="store_true",
                        help=f"a smoke run: {QUICK['episodes']} episodes, {QUICK['repeats']} repeat (unless given)")
    for name, value in asdict(Workload()).items():
        flag = f"--{name.replace('_', '-')}"
        if isinstance(value, bool):
            parser.add_argument(flag, action="store_true", default=None)
        else:
            kind = str if isinstance(value, str) else float if isinstance(value, float) else int
            parser.add_argument(flag, type=kind, default=None)
    args = parser.parse_args(argv)
    weights = [k.strip() for k in args.llamacpp_weights.split(",") if k.strip()]
    if not weights or set(weights) - set(LLAMACPP_WEIGHTS):
        parser.error(f"--llamacpp-weights {args.llamacpp_weights!r}: choose from {list(LLAMACPP_WEIGHTS)}")
    names = expand_paths([n.strip() for n in args.backends.split(",") if n.strip()], weights)
    unknown = [n for n in names if n not in PATHS]
    if unknown:
        parser.error(f"unknown backend(s) {unknown}; choose from {list(PATHS)}")
    given = {k: getattr(args, k) for k in asdict(Workload()) if getattr(args, k) is not None}
    w = Workload(**{**(QUICK if args.quick else {}), **given})
    w = replace(w, dtype=resolve_dtype_here(w.dtype))

    previous = {} if args.quick else _previous(w, args.results_dir)
    results: dict[str, Any] = dict(previous.get("results", {}))
    load_before = os.getloadavg()
    ceiling = same_cpu_ceiling()
    if ceiling is None:
        print(f"no {kind_name(machine()['cpu_kind'])}.json in benchmarks/results for this CPU kind: run "
              "benchmarks/machine_ceiling.py first for each path's share of the ceiling", flush=True)
    try:
        for i, name in enumerate(names):
            print(f"== {name}", flush=True)
            result = _RESULTS[name] = PATHS[name](w)
            if ceiling is not None and result.records:
                result.extra.update(ceiling_share(result, w, _tokenizer(w), ceiling))
            results[name] = result.summary()
            print(json.dumps(results[name]), flush=True)
            if not SERVER_PATHS & set(names[i + 1:]):
                stop_servers()  # free its cores and memory for the in-process paths
    finally:
        stop_servers()
    payload: dict[str, Any] = {
        "workload": asdict(w),
        "quick": args.quick,
        "results": results,
        "ratios": ratios(results),
        "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]},
        "torch_threads": w.threads or _torch_threads(),
    }
    base = results.get("hf-sequential", {}).get("tokens_per_s")
    if base:
        payload["speedup_vs_hf_sequential"] = {
            n: round(r["tokens_per_s"] / base, 2) for n, r in results.items() if n != "hf-sequential"}
    anchor = next((n for n in ("engine-vllm", "engine-vllm-lockstep", "engine-openai") if n in _RESULTS), None)
    if anchor is not None:
        payload["same_transcripts_as"] = {"path": anchor, **{
            n: round(same_transcripts(_RESULTS[anchor].transcripts, r.transcripts), 3)
            for n, r in _RESULTS.items() if n != anchor and r.transcripts}}
    path = write_result(f"{NAME}_quick" if args.quick else NAME, payload, folder=args.results_dir)
    write_report(path.with_suffix(".md"), markdown({**payload, "machine": machine()},
                                                   command=invocation("rollout_throughput.py", argv)))
    print(json.dumps({k: v for k, v in payload.items() if k != "workload"}, indent=2))
    print(f"wrote {path}")
    return payload


def _previous(w: Workload, folder: Path | None = None) -> dict[str, Any]:
    """The earlier results file in `folder` (None: RESULTS), if it measured the same workload (so
    paths can run separately)."""
    try:
        old = json.loads(((folder or RESULTS) / f"{NAME}.json").read_text())
    except (OSError, ValueError):
        return {}
    same = {k: v for k, v in old.get("workload", {}).items() if k not in _SETTINGS} == w.key()
    return old if same else {}


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


if __name__ == "__main__":
    main()
