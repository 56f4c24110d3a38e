"""`HFPolicy`: the transformers backend (the CPU default).

Every `act` call formats each request with the model's chat template (`optima_agents.chat`),
sorts the prompts by length, and runs one left-padded `generate` per chunk of `batch_size`.

Why it is built this way:
- **Left padding**, done here rather than by the tokenizer: decoder-only models continue from
  the last position, so every row must end at the same column. `generate` derives position ids
  from the attention mask, so a padded row decodes like the same prompt alone (tested in fp32:
  batch and single greedy outputs are identical, on CPU and on CUDA).
- **Sorting by length** keeps rows of similar length together (less padding, less wasted
  compute); results are returned in request order.
- **bfloat16 by default on CPU**: on this project's CPUs (avx512_bf16, no AMX) a bf16 matmul is
  2.2-2.7x faster than fp32 (measured; docs/design.md section 4's AMX figure does not apply to them).
  bf16 greedy output is sane (SmolLM2 answers "The capital of France is
  Paris." in both dtypes, tested) but not token-identical to fp32, and bf16 rounding depends on
  the batch shape: at a near-tie a row can decode differently in a batch than alone (seen on 1
  of 3 prompts within 12 tokens; on 16 prompts, bf16 greedy matched fp32 exactly on 7). A fixed
  batch composition still repeats exactly. Pass
  `dtype="float32"` for batch-independent, reference-grade runs.
- **Eager attention on CPU** (`attn_implementation=None` picks it there): torch's CPU SDPA
  kernel is slow for one-token decode steps over a padded batch. Measured with SmolLM2 bf16 on
  one core, batch 32: 259 ms per decode step with "sdpa", 150 ms with "eager"; the batched
  rollout ran 1.5x faster end to end (52 vs 34 tokens/s); batch 1 and prefill are about even
  (SDPA prefill ~15% faster). On CUDA the transformers default (SDPA) is kept.
- **Seeded sampling without global state**: sampling happens in a logits processor
  (`_SeededSampler`) that draws each row's token from that row's own `torch.Generator`, seeded
  from the request seed (and `SamplingParams.seed`); `generate` then runs greedily over the
  one-hot result. The global torch RNG is never touched, and a row's sample does not depend on
  which other requests shared its batch (up to the float rounding that padding can change).
  Requests without a seed get seeds from `SamplingParams.seed` and a per-policy call counter
  (reproducible for the same sequence of calls), or fresh entropy when that seed is None.
- **Log-probs recorded by a logits processor** (`SamplingParams.logprobs`): the sampler notes
  the log-prob of the token it drew, under its temperature / top-p distribution; under greedy
  decoding `_GreedyLogprobs`, the last processor, notes the log-prob of the argmax under the
  final scores (the model's logits, in float32). Either keeps one float per row and step, where
  `output_scores` would keep a full-vocabulary float32 row per token (1.6 GB for 64 rows of 128
  tokens) and would only show the sampler's one-hot. Meaning: `optima_agents.policies.logprobs`.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, Iterator, Sequence

from optima_agents.chat import DEFAULT_CHAT_FORMAT, ChatFormat, clean_output, prompt_ids
from optima_agents.policies.base import Action, PolicyCapabilities, SamplingParams, TurnRequest, request_row_seed
from optima_agents.policies.logprobs import align_logprobs

__all__ = ["HFPolicy"]

_DTYPES = ("auto", "bfloat16", "float16", "float32")


class HFPolicy:
    """A transformers causal LM as a batched policy.

    Args:
        model (str or PreTrainedModel, *optional*, defaults to `"smollm2-135m"`): a registry
            name, a local model folder or a hub id (resolved with `resolve_model`), or an
            already loaded model (then pass `tokenizer`).
        tokenizer (*optional*): the tokenizer; loaded from the model folder when None.
        sampling (SamplingParams, *optional*): temperature 0 is greedy.
        dtype (str, *optional*, defaults to `"auto"`): `"bfloat16"`, `"float16"`, `"float32"`, or
            `"auto"`: bf16 where `device` runs it natively, else float32
            (`optima_agents.models.dtypes`); ignored for an already loaded model.
        device (str, *optional*, defaults to `"cpu"`): where the model runs.
        batch_size (int, *optional*, defaults to 64): the most rows per `generate` call.
        chat_format (ChatFormat, *optional*): how transcripts become chat messages.
        attn_implementation (str, *optional*): passed to `from_pretrained`; None: "eager" on CPU
            (faster batched decoding, see above), transformers' default elsewhere. Ignored for an
            already loaded model.
        num_threads (int, *optional*): torch CPU threads during `act` (set, then restored, since
            torch's thread count is process-wide). None: leave torch's setting alone. 1 is much
            faster for small batches on a CPU shared with other busy processes (measured 6x on
            2 oversubscribed cores), where multi-threaded kernels wait on descheduled threads.

    Raises:
        ModelNotFoundError: the model name cannot be resolved.
        ValueError: a bad dtype or batch size.
    """

    capabilities = PolicyCapabilities(with_sampling=True, chat_format=True)

    def __init__(
        self,
        model: Any = "smollm2-135m",
        *,
        tokenizer: Any = None,
        sampling: SamplingParams = SamplingParams(),
        dtype: str = "auto",
        device: str = "cpu",
        batch_size: int = 64,
        chat_format: ChatFormat = DEFAULT_CHAT_FORMAT,
        attn_implementation: str | None = None,
        num_threads: int | None = None,
    ):
        if dtype not in _DTYPES:
            raise ValueError(f"HFPolicy dtype must be one of {_DTYPES}, got {dtype!r}")
        if batch_size < 1:
            raise ValueError(f"HFPolicy batch_size must be >= 1, got {batch_size}")
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from optima_agents.models.dtypes import resolve_dtype

        dtype = resolve_dtype(dtype, device)
        self.sampling = sampling
        self.batch_size = batch_size
        self.chat_format = chat_format
        self.device = device
        self.num_threads = num_threads
        self._calls = 0
        if isinstance(model, str):
            from optima_agents.models import resolve_model

            self.model_name = model
            self.model_path = resolve_model(model)
            if attn_implementation is None and str(device).startswith("cpu"):
                attn_implementation = "eager"
            extra = {"attn_implementation": attn_implementation} if attn_implementation else {}
            with _quiet_loading():
                self.model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=getattr(torch, dtype), **extra)
            self.model.to(device)
            self.dtype = dtype
        else:
            self.model = model
            self.model_path = getattr(model, "name_or_path", None) or getattr(model.config, "_name_or_path", None)
            self.model_name = self.model_path or type(model).__name__
            self.dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
            self.device = str(next(model.parameters()).device)
        if tokenizer is None:
            if not self.model_path:
                raise ValueError("HFPolicy got a model object without a name_or_path; pass tokenizer=")
            tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.tokenizer = tokenizer
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        gen_eos = getattr(self.model.generation_config, "eos_token_id", None)
        gen_eos = gen_eos if isinstance(gen_eos, list) else [gen_eos]
        self.stop_token_ids = sorted({i for i in [tokenizer.eos_token_id, *gen_eos] if i is not None})

    # ------------------------------------------------------------------ Policy
    def act(self, requests: Sequence[TurnRequest]) -> list[Action]:
        """One action per request, in order; see the module doc for batching and seeding."""
        if not requests:
            return []
        self._calls += 1
        prompts = [prompt_ids(r.observation, self.tokenizer, self.chat_format) for r in requests]
        seeds = [request_row_seed(self.sampling, r, self._calls, i) for i, r in enumerate(requests)]
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        actions: list[Action | None] = [None] * len(prompts)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            outputs = self._generate([prompts[i] for i in chunk], [seeds[i] for i in chunk])
            for i, (generated, logprobs) in zip(chunk, outputs):
                actions[i] = self._to_action(generated, len(prompts[i]), logprobs)
        return actions  # type: ignore[return-value]

    def identity(self) -> dict[str, Any]:
        """Backend, model (as given), resolved path, revision, dtype, sampling and chat format."""
        return {
            "backend": "hf",
            "model": self.model_name,
            "model_path": self.model_path,
            "revision": _revision(self.model_path, self.model),
            "dtype": self.dtype,
            "attn_implementation": getattr(self.model.config, "_attn_implementation", None),
            "sampling": self.sampling.to_dict(),
            "chat_format": self.chat_format.to_dict(),
        }

    def with_sampling(self, sampling: SamplingParams) -> "HFPolicy":
        """A policy sharing this one's model and tokenizer, with other sampling settings."""
        other = copy.copy(self)
        other.sampling = sampling
        other._calls = 0
        return other

    # ------------------------------------------------------------------ internals
    def _generate(self, prompts: list[list[int]], seeds: list[int]) -> list[tuple[list[int], list[float] | None]]:
        """Each row's generated ids, with one log-prob per id when `SamplingParams.logprobs`."""
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, ids in enumerate(prompts):
            input_ids[row, width - len(ids) :] = torch.tensor(ids, dtype=torch.long)
            attention_mask[row, width - len(ids) :] = 1
        sp = self.sampling
        config = GenerationConfig(
            max_new_tokens=sp.max_new_tokens, do_sample=False, eos_token_id=self.stop_token_ids,
            pad_token_id=self.pad_id, stop_strings=list(sp.stop) or None,
        )
        processors = LogitsProcessorList()
        recorder: _SeededSampler | _GreedyLogprobs | None = None
        if sp.temperature > 0:
            recorder = _SeededSampler(seeds, sp.temperature, sp.top_p, record=sp.logprobs)
            processors.append(recorder)
        elif sp.logprobs:
            recorder = _GreedyLogprobs()
            processors.append(recorder)
        threads, training = torch.get_num_threads(), self.model.training
        if self.num_threads is not None:
            torch.set_num_threads(self.num_threads)
        self.model.eval()  # a model being trained may be passed in: restore its mode afterwards
        try:
            with torch.inference_mode():
                out = self.model.generate(
                    input_ids=input_ids.to(self.device), attention_mask=attention_mask.to(self.device),
                    generation_config=config, logits_processor=processors,
                    tokenizer=self.tokenizer if sp.stop else None,
                )
        finally:
            torch.set_num_threads(threads)
            self.model.train(training)
        rows = [row[width:].tolist() for row in out.cpu()]
        if not sp.logprobs or recorder is None:
            return [(row, None) for row in rows]
        steps = recorder.steps_by_row()  # (rows, steps): one value per generated position
        return [(row, steps[r, : len(row)].tolist()) for r, row in enumerate(rows)]

    def _to_action(self, generated: list[int], prompt_len: int, logprobs: list[float] | None = None) -> Action:
        cleaned = clean_output(self.tokenizer, generated, max_new_tokens=self.sampling.max_new_tokens,
                               stop=self.sampling.stop, stop_token_ids=self.stop_token_ids)
        meta = {"generated_tokens": cleaned.generated_tokens, "reencoded": cleaned.reencoded,
                "raw_token_ids": tuple(generated)}  # as generated (parity scores these, not the re-encoded ids)
        aligned = None if logprobs is None else align_logprobs(generated, logprobs, cleaned.token_ids)
        if logprobs is not None and aligned is None:
            meta["logprobs_missing"] = "the reply was re-encoded: its stored ids are not the sampled ones"
        return Action(
            text=cleaned.text, token_ids=cleaned.token_ids, finish_reason=cleaned.finish_reason,
            prompt_tokens=prompt_len, meta=meta, logprobs=aligned,
        )


class _SeededSampler:
    """A logits processor that samples each row with its own generator and returns a one-hot.

    Temperature, then nucleus (top-p) filtering, then one uniform draw per row from that row's
    `torch.Generator` mapped through the CDF. The returned scores are 0 at the drawn token and
    -inf elsewhere, so greedy decoding picks it. With `record`, each step's log-prob of the drawn
    token under that same distribution (temperature, then the renormalised nucleus) is kept.
    """

    def __init__(self, seeds: Sequence[int], temperature: float, top_p: float, *, record: bool = False):
        import torch

        self.generators = [torch.Generator().manual_seed(int(s)) for s in seeds]
        self.temperature = temperature
        self.top_p = top_p
        self.record = record
        self.steps: list[Any] = []

    def steps_by_row(self) -> Any:
        """The recorded log-probs as a (rows, steps) float tensor."""
        return _stack_steps(self.steps, len(self.generators))

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        probs = torch.softmax(scores.float() / self.temperature, dim=-1)
        if self.top_p < 1.0:
            sorted_probs, sorted_idx = probs.sort(dim=-1, descending=True)
            before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass strictly before each token
            sorted_probs = sorted_probs.masked_fill(before >= self.top_p, 0.0)
            probs = torch.zeros_like(probs).scatter_(-1, sorted_idx, sorted_probs)
        cdf = probs.cpu().cumsum(dim=-1)
        draws = torch.stack([torch.rand((), generator=g) for g in self.generators]).unsqueeze(-1)
        choice = torch.searchsorted(cdf, draws * cdf[:, -1:], right=True).clamp_max(cdf.shape[-1] - 1)
        choice = choice.to(scores.device)
        if self.record:
            logp = torch.log_softmax(scores.float() / self.temperature, dim=-1).gather(-1, choice).squeeze(-1)
            if self.top_p < 1.0:  # renormalise over the nucleus the draw came from
                logp = (logp - torch.log(probs.sum(dim=-1))).clamp_max(0.0)  # a one-token nucleus rounds to ~+1e-8
            self.steps.append(logp.cpu())
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(-1, choice, 0.0)


class _GreedyLogprobs:
    """A logits processor, last in the list under greedy decoding, that records each row's
    log-prob of the argmax token (the one greedy decoding picks) and leaves the scores as they are."""

    def __init__(self) -> None:
        self.steps: list[Any] = []
        self.rows = 0

    def steps_by_row(self) -> Any:
        """The recorded log-probs as a (rows, steps) float tensor."""
        return _stack_steps(self.steps, self.rows)

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        s = scores.float()
        self.rows = s.shape[0]
        self.steps.append((s.max(dim=-1).values - s.logsumexp(dim=-1)).cpu())
        return scores


def _stack_steps(steps: list[Any], rows: int) -> Any:
    import torch

    return torch.stack(steps, dim=1) if steps else torch.zeros((rows, 0))


@contextlib.contextmanager
def _quiet_loading() -> Iterator[None]:
    """Hide transformers' per-tensor "Loading weights" bar (noise in CLI output), then restore it."""
    from transformers.utils import logging as hf_logging

    was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_on:
            hf_logging.enable_progress_bar()


def _revision(model_path: str | None, model: Any) -> str | None:
    """The registry wheel hash for pulled models, the hub commit for hub models, else None."""
    if model_path:
        from pathlib import Path

        from optima_agents.models.cache import read_manifest

        manifest = read_manifest(Path(model_path)) if Path(model_path).is_dir() else None
        if manifest:
            source = manifest.get("source", {})
            if source.get("adapter_sha256"):
                return f"{source.get('base')}+{manifest.get('name')}@sha256:{source['adapter_sha256'][:16]}"
            sha = source.get("wheel_sha256")
            return f"{source.get('requirement')}@sha256:{sha[:16]}" if sha else None
    return getattr(model.config, "_commit_hash", None)
