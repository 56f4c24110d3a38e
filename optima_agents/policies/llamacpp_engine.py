"""A llama.cpp context that decodes many sequences at once, through llama-cpp-python's C API.

llama-cpp-python's high-level `Llama` class runs one sequence (its cache and sampler are per
object, and `Llama.generate` feeds one prompt), so batching there means one model copy per row.
This module uses the low-level binding (`llama_cpp.llama_cpp`: `llama_batch`, `llama_decode`,
`llama_get_logits_ith`, `llama_memory_seq_rm`), which is llama.cpp's own parallel decoding, as in
its `examples/parallel` and the server's slots:

- **One context, many sequences, one KV stream each.** The context holds up to `n_seq_max`
  sequences, each in its own KV stream of `n_ctx / n_seq_max` cells (llama.cpp's split mode,
  `kv_unified=False`). In a *unified* cache (`kv_unified=True`) every sequence's tokens sit in one
  buffer that the attention views whole, so each decoded token also attends, masked, over every
  other sequence's cells, work that is thrown away for independent dialogues. On 32 synth-hop
  episodes of SmolLM2-135M (Q4_1, 2 cores) split streams made 48.9 tokens/s against 46.5 unified
  (1.05x, median of 3) at 3.4 against 1.3 GiB peak memory
  (`benchmarks/results/llamacpp_kv/rollout_throughput.md`). Unified mode is kept as an option:
  it needs less memory and lets one long sequence use the cells short ones do not.
- **Continuous batching.** Every `llama_decode` call carries one new token of every sequence
  that is generating plus as much of the waiting prompts as fits in `n_batch` tokens (prompts
  may be split across calls). A sequence that finishes frees its slot and its KV cells at once,
  and the next waiting job takes them in the same loop, so the batch stays full until the queue
  runs dry.
- **Admission by KV budget.** A job is admitted only when its prompt plus its reply limit fits in
  the cells not promised to running jobs (unified mode; in split mode every sequence owns its
  stream), so a decode never runs out of room halfway.
- **Logits only where needed.** Only each sequence's last prompt token and its generated tokens
  ask for logits, so a long prefill computes no vocabulary projection for the rest.
- **Prefix reuse across calls** (split mode, `prefix_cache=True`). A finished sequence keeps its
  cells, and the engine remembers which tokens they hold (its prompt and all but the last
  generated token). A new job takes the free stream whose tokens share the longest prefix with
  its prompt (when that is at least half the prompt; else the least recently used stream), drops
  the cells past that prefix (`llama_memory_seq_rm`) and feeds only the rest.
  A dialogue agent's prompt on its next turn is its previous prompt, its reply and the partner's
  reply (`optima_agents.chat` keeps it so), so a multi-turn rollout prefills each turn's new
  tokens only, as vLLM's prefix cache does. A rollout has a history per agent of every live
  episode, usually more than the streams; a history that must make room is saved to host memory
  (`llama_state_seq_get_data`, about 23 KB per token for SmolLM2-135M, a few ms for a 400-token
  history) and copied back into a free stream when its agent speaks again, as llama.cpp's server
  saves and restores slots; past `host_cache_mib` the least recently saved are dropped. The
  reused cells were computed in other batches than a fresh prefill would use, so logits can
  differ in the last bits (as with vLLM's cache); greedy replies can then part at a near-tie.
  Unified mode clears the cache at every call: there kept cells would take room from the shared
  budget.

Choosing tokens (greedy, seeded sampling, stop rules) is the caller's: each `Job` carries a
`choose(logits)` and a `done(generated)` function.
"""

from __future__ import annotations

import ctypes
import logging
import os
import weakref
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

__all__ = ["CELLS_PER_SEQUENCE", "Job", "LlamaCppEngine", "UNIFIED_CELLS", "default_threads", "shared_prefix"]

#: Default KV cells of one sequence's stream (split mode), and of the whole unified cache.
CELLS_PER_SEQUENCE = 2048
UNIFIED_CELLS = 16384
#: The least share of a prompt that a kept stream must hold for a job to take that stream (else
#: it takes the least recently used one); llama.cpp's server uses the same rule and value
#: (`--slot-prompt-similarity 0.5`).
REUSE_SIMILARITY = 0.5


def default_threads() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def shared_prefix(held: np.ndarray, prompt: np.ndarray) -> int:
    """How many leading tokens `held` and `prompt` have in common."""
    n = min(len(held), len(prompt))
    if n == 0:
        return 0
    differ = np.flatnonzero(held[:n] != prompt[:n])
    return int(differ[0]) if len(differ) else n


@dataclass
class Job:
    """One sequence to generate.

    Args:
        prompt: the prompt's token ids (at least one).
        max_new: the most tokens to generate (at least one).
        choose: `choose(logits) -> (token, logprob or None)` for the row's `(n_vocab,)` float32 logits.
        done: `done(generated) -> bool`, asked after each new token (end-of-turn token, stop string).
    """

    prompt: list[int]
    max_new: int
    choose: Callable[[np.ndarray], tuple[int, float | None]]
    done: Callable[[list[int]], bool]
    generated: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    seq: int = -1
    fed: int = 0
    reused: int = 0

    @property
    def cells(self) -> int:
        """KV cells this job may use: its prompt plus its reply limit."""
        return len(self.prompt) + self.max_new


class LlamaCppEngine:
    """A GGUF model on llama.cpp with one context for `n_seq_max` parallel sequences.

    Args:
        path: the GGUF file.
        n_seq_max: the most sequences decoded together (llama.cpp allows up to 256).
        n_ctx: KV cells in all (None: 2048 per sequence in split mode, 16384 unified; 2048 cells
            are about 47 MB of float16 cache for SmolLM2-135M). In split mode each sequence gets
            `n_ctx / n_seq_max` of them, the longest prompt plus reply a job may have.
        n_batch: the most tokens per `llama_decode` call (at least `n_seq_max`).
        n_threads: CPU threads (None: `default_threads()`).
        kv_unified: one KV buffer for all sequences (see the module docstring) instead of one
            stream per sequence.
        lora: a GGUF LoRA adapter file (`gguf_lora.export_lora_gguf`) applied over the model at
            scale 1 (llama.cpp frees it with the model).
        prefix_cache: keep finished sequences' cells and reuse the longest shared prefix of a
            new prompt (split mode only; see the module docstring).
        host_cache_mib: host memory for histories moved out of their streams to make room (about
            23 KB per token for SmolLM2-135M); 0: a history that must make room is dropped.
        verbose: let llama.cpp print its load and context logs to stderr.

    Raises:
        ImportError: llama-cpp-python is not installed.
        RuntimeError: llama.cpp cannot load the file, create the context or apply the LoRA.
    """

    def __init__(self, path: Path, *, n_seq_max: int = 32, n_ctx: int | None = None, n_batch: int = 2048,
                 n_threads: int | None = None, kv_unified: bool = False, lora: Path | None = None,
                 prefix_cache: bool = True, host_cache_mib: int = 2048, verbose: bool = False):
        import llama_cpp as lc

        logging.getLogger("llama-cpp-python").setLevel(logging.DEBUG if verbose else logging.ERROR)
        if not 1 <= n_seq_max <= int(lc.llama_max_parallel_sequences()):
            raise ValueError(f"n_seq_max must be in [1, {lc.llama_max_parallel_sequences()}], got {n_seq_max}")
        self._lc = lc
        self.path = Path(path)
        self.n_threads = n_threads or default_threads()
        lc.llama_backend_init()
        model_params = lc.llama_model_default_params()
        model_params.n_gpu_layers = 0
        self.model = lc.llama_model_load_from_file(str(self.path).encode(), model_params)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {self.path} (run with verbose=True to see why)")
        self.n_ctx_train = int(lc.llama_model_n_ctx_train(self.model))
        self.n_seq_max = n_seq_max
        self.n_batch = max(n_batch, n_seq_max)
        if n_ctx is None:
            n_ctx = UNIFIED_CELLS if kv_unified else CELLS_PER_SEQUENCE * n_seq_max
        self.kv_unified = kv_unified
        ctx_params = lc.llama_context_default_params()
        ctx_params.n_ctx = n_ctx
        ctx_params.n_batch = self.n_batch
        ctx_params.n_ubatch = min(512, self.n_batch)
        ctx_params.n_seq_max = n_seq_max
        ctx_params.n_threads = ctx_params.n_threads_batch = self.n_threads
        ctx_params.kv_unified = kv_unified
        ctx_params.no_perf = True
        self.ctx = lc.llama_init_from_model(self.model, ctx_params)
        if not self.ctx:
            lc.llama_model_free(self.model)
            self.model = None
            raise RuntimeError(f"llama.cpp could not create a context of {ctx_params.n_ctx} cells for "
                               f"{n_seq_max} sequences (lower n_ctx or batch_size)")
        self.lora = None if lora is None else Path(lora)
        if self.lora is not None:
            self._apply_lora(self.lora)
        self.n_ctx = int(lc.llama_n_ctx(self.ctx))
        self.n_ctx_seq = int(lc.llama_n_ctx_seq(self.ctx))
        self.memory = lc.llama_get_memory(self.ctx)
        self.vocab = lc.llama_model_get_vocab(self.model)
        self.n_vocab = int(lc.llama_vocab_n_tokens(self.vocab))
        self.batch = lc.llama_batch_init(self.n_batch, 0, 1)
        # Freed by `close()`, or when the engine is collected, or at interpreter exit while the
        # binding still works (a `__del__` running during shutdown finds its functions gone).
        self._finalizer = weakref.finalize(self, _free, lc, self.batch, self.ctx, self.model)
        self.prefix_cache = prefix_cache and not kv_unified
        self.host_cache_bytes = host_cache_mib * 2**20 if self.prefix_cache else 0
        self._forget()
        # Counters since load: decode calls, prompt tokens fed, prompt tokens served from kept
        # cells, tokens generated, the most sequences decoded together, and histories saved to
        # and restored from host memory.
        self.stats = {"decode_calls": 0, "prompt_tokens": 0, "reused_tokens": 0, "generated_tokens": 0,
                      "peak_sequences": 0, "saved_histories": 0, "restored_histories": 0}

    def _apply_lora(self, path: Path) -> None:
        import ctypes

        lc = self._lc
        adapter = lc.llama_adapter_lora_init(self.model, str(path).encode())
        if not adapter or lc.llama_set_adapters_lora(
                self.ctx, (lc.llama_adapter_lora_p_ctypes * 1)(adapter), 1, (ctypes.c_float * 1)(1.0)) != 0:
            lc.llama_free(self.ctx)
            lc.llama_model_free(self.model)
            self.ctx = self.model = None
            raise RuntimeError(f"llama.cpp could not apply the LoRA adapter {path} over {self.path} (not a GGUF "
                               "LoRA of this model? run with verbose=True to see why)")

    @property
    def max_seq_len(self) -> int:
        """The longest sequence (prompt + reply) one job may have: its stream's cells (all of
        them, unified), at most the model's training context."""
        return min(self.n_ctx_seq, self.n_ctx_train)

    def token_text(self, token: int) -> str:
        """The vocabulary entry of `token` as the GGUF stores it (byte-level BPE form)."""
        return self._lc.llama_vocab_get_text(self.vocab, token).decode("utf-8", errors="replace")

    def run(self, jobs: list[Job]) -> None:
        """Generate every job to completion, filling `job.generated` and `job.logprobs`.

        Raises:
            ValueError: a job that can never fit (`max_seq_len`), or an empty prompt.
            RuntimeError: llama.cpp failed to decode a batch.
        """
        for job in jobs:
            if not job.prompt or job.max_new < 1 or job.cells > self.max_seq_len:
                raise ValueError(f"a job of {len(job.prompt)} prompt + {job.max_new} new tokens does not fit "
                                 f"{self.max_seq_len} cells per sequence")
        lc = self._lc
        if not self.prefix_cache:
            self.clear()
        waiting, active = deque(jobs), {}
        free_seqs = list(range(self.n_seq_max - 1, -1, -1))
        promised = 0
        while waiting or active:
            while waiting and free_seqs and promised + waiting[0].cells <= self.n_ctx:
                job = waiting.popleft()
                self._admit(job, free_seqs)
                active[job.seq] = job
                promised += job.cells
            self.stats["peak_sequences"] = max(self.stats["peak_sequences"], len(active))
            outputs = self._fill_batch(list(active.values()))
            status = lc.llama_decode(self.ctx, self.batch)
            if status != 0:
                raise RuntimeError(f"llama_decode failed with status {status} on a batch of {self.batch.n_tokens} "
                                   f"tokens ({len(active)} sequences)")
            self.stats["decode_calls"] += 1
            for index, job in outputs:
                pointer = lc.llama_get_logits_ith(self.ctx, index)
                logits = np.ctypeslib.as_array(pointer, shape=(self.n_vocab,))
                token, logprob = job.choose(logits)
                job.generated.append(token)
                if logprob is not None:
                    job.logprobs.append(logprob)
                if len(job.generated) >= job.max_new or job.done(job.generated):
                    self._release(job)
                    del active[job.seq]
                    free_seqs.append(job.seq)
                    promised -= job.cells
                    self.stats["generated_tokens"] += len(job.generated)

    def clear(self) -> None:
        """Drop every kept cell and every history saved to host memory (the next prompts are
        prefilled whole)."""
        self._lc.llama_memory_clear(self.memory, True)
        self._forget()

    def _forget(self) -> None:
        """Empty the cache's bookkeeping: what each stream holds, when it was last used, and the
        histories saved to host memory (key -> (tokens, llama.cpp state))."""
        self._held: list[np.ndarray] = [np.zeros(0, dtype=np.int64) for _ in range(self.n_seq_max)]
        self._last_used, self._uses = [0] * self.n_seq_max, 0
        self._saved: OrderedDict[int, tuple[np.ndarray, Any]] = OrderedDict()
        self._saved_bytes, self._saves = 0, 0

    def _admit(self, job: Job, free_seqs: list[int]) -> None:
        """Give `job` a free stream, drop that stream's cells past the prefix it shares with the
        job's prompt, and start feeding after it (the last prompt token is always fed: its logits
        choose the first reply token).

        The history to continue is the kept stream, or the history saved to host memory, that
        shares the longest prefix with the prompt, when that prefix is at least
        `REUSE_SIMILARITY` of it (an agent's next turn); a saved one is copied back into the
        least recently used free stream. Otherwise the job takes that stream empty, so a new
        dialogue does not continue another agent's history for the few template tokens every
        prompt starts with (the rule of llama.cpp's server slots). A stream's history that must
        make room is saved to host memory first (`host_cache_mib`)."""
        prompt = np.asarray(job.prompt, dtype=np.int64)
        need = REUSE_SIMILARITY * len(prompt)
        seq, keep = -1, 0
        if self.prefix_cache:
            for candidate in free_seqs:
                shared = shared_prefix(self._held[candidate], prompt)
                if shared > keep:
                    seq, keep = candidate, shared
        saved, saved_keep = self._best_saved(prompt)
        if keep < need or saved_keep > keep:
            history = self._take_saved(saved) if saved_keep >= need else None  # before eviction trims the budget
            seq = min(free_seqs, key=lambda candidate: self._last_used[candidate])
            self._evict(seq)
            keep = saved_keep if history is not None and self._restore(history, seq) else 0
        keep = min(keep, len(job.prompt) - 1)
        free_seqs.remove(seq)
        if not self._lc.llama_memory_seq_rm(self.memory, seq, keep, -1):
            self._lc.llama_memory_seq_rm(self.memory, seq, -1, -1)  # partial removal refused: start empty
            keep = 0
        job.seq, job.fed, job.reused = seq, keep, keep
        self._held[seq] = prompt[:keep]
        self.stats["reused_tokens"] += keep

    def _best_saved(self, prompt: np.ndarray) -> tuple[int, int]:
        """The saved history sharing the longest prefix with `prompt`: (its key, that length)."""
        best, keep = -1, 0
        for key, (tokens, _) in self._saved.items():
            shared = shared_prefix(tokens, prompt)
            if shared > keep:
                best, keep = key, shared
        return best, keep

    def _evict(self, seq: int) -> None:
        """Empty stream `seq`, first saving the history it holds to host memory (as llama.cpp's
        server saves a slot: `llama_state_seq_get_data`), least recently saved ones dropped past
        the budget."""
        lc, tokens = self._lc, self._held[seq]
        if self.host_cache_bytes and len(tokens):
            size = int(lc.llama_state_seq_get_size(self.ctx, seq))
            if 0 < size <= self.host_cache_bytes:
                buffer = (ctypes.c_uint8 * size)()
                if lc.llama_state_seq_get_data(self.ctx, buffer, size, seq) == size:
                    self._saves += 1
                    self._saved[self._saves] = (tokens, buffer)
                    self._saved_bytes += size
                    self.stats["saved_histories"] += 1
                    while self._saved_bytes > self.host_cache_bytes:
                        _, (_, dropped) = self._saved.popitem(last=False)
                        self._saved_bytes -= len(dropped)
        lc.llama_memory_seq_rm(self.memory, seq, -1, -1)
        self._held[seq] = np.zeros(0, dtype=np.int64)

    def _take_saved(self, key: int) -> tuple[np.ndarray, Any]:
        """Remove the saved history `key` from host memory and return it (tokens, state)."""
        tokens, buffer = self._saved.pop(key)
        self._saved_bytes -= len(buffer)
        return tokens, buffer

    def _restore(self, history: tuple[np.ndarray, Any], seq: int) -> bool:
        """Copy a saved history into the empty stream `seq` (`llama_state_seq_set_data`); False,
        with the stream left empty, when llama.cpp does not take it."""
        tokens, buffer = history
        if self._lc.llama_state_seq_set_data(self.ctx, buffer, len(buffer), seq) != len(buffer):
            self._lc.llama_memory_seq_rm(self.memory, seq, -1, -1)
            return False
        self._held[seq] = tokens
        self.stats["restored_histories"] += 1
        return True

    def _release(self, job: Job) -> None:
        """Free a finished job's stream; with the prefix cache its cells stay, recorded as its
        prompt and every generated token but the last (which was never fed)."""
        self._uses += 1
        self._last_used[job.seq] = self._uses
        if self.prefix_cache:
            self._held[job.seq] = np.asarray(job.prompt + job.generated[:-1], dtype=np.int64)
        else:
            self._lc.llama_memory_seq_rm(self.memory, job.seq, -1, -1)

    def _fill_batch(self, active: list[Job]) -> list[tuple[int, Job]]:
        """Put every generating job's last token, then prompt chunks, into the batch; return
        (batch index, job) for each position whose logits are wanted."""
        batch, n, outputs = self.batch, 0, []
        for job in active:
            if job.fed == len(job.prompt) and job.generated:
                self._put(n, job.generated[-1], len(job.prompt) + len(job.generated) - 1, job.seq, True)
                outputs.append((n, job))
                n += 1
        for job in active:
            if job.fed < len(job.prompt) and n < self.n_batch:
                take = min(len(job.prompt) - job.fed, self.n_batch - n)
                for k in range(job.fed, job.fed + take):
                    last = k == len(job.prompt) - 1
                    self._put(n, job.prompt[k], k, job.seq, last)
                    if last:
                        outputs.append((n, job))
                    n += 1
                job.fed += take
                self.stats["prompt_tokens"] += take
        batch.n_tokens = n
        return outputs

    def _put(self, i: int, token: int, pos: int, seq: int, logits: bool) -> None:
        batch = self.batch
        batch.token[i] = token
        batch.pos[i] = pos
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = seq
        batch.logits[i] = logits

    def close(self) -> None:
        """Free the batch, the context and the model (safe to call twice)."""
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer()
        self.batch = self.ctx = self.model = None


def _free(lc: Any, batch: Any, ctx: Any, model: Any) -> None:
    lc.llama_batch_free(batch)
    lc.llama_free(ctx)
    lc.llama_model_free(model)
