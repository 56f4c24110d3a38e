"""`LlamaCppPolicy`: llama.cpp in-process (llama-cpp-python built from source), on a GGUF file.

Every `act` call renders each request's prompt with the Hugging Face tokenizer's chat template
(`optima_agents.chat.prompt_ids`, the ids `HFPolicy` and `VLLMPolicy` feed their models) and
hands the ids to llama.cpp, which never tokenizes or templates anything itself: the prompts are
the other backends' prompts token for token, and nothing can add a second BOS. All requests of
the call run in one llama.cpp context as parallel sequences with continuous batching
(`llamacpp_engine`).

Why it is built this way:
- **In-process, not an OpenAI-compatible server**: a server is a second process per model, built
  from llama.cpp's HTTP tools (llama-cpp-python's own server extra runs its `Llama` object, one
  sequence at a time); in-process, `act` reads the generated ids and the logits directly, and the
  parallel sequences are the mechanism llama.cpp's server slots use.
- **The low-level binding for batching**: llama-cpp-python's `Llama` decodes one sequence per
  object; llama.cpp's batch API (`llama_batch` with a sequence id per token) decodes many in one
  call, which is what makes a batched rollout fast (`llamacpp_engine` says how).
- **Weights** (`weights`, see `optima_agents.models.gguf_store`): the registry model's shipped
  Q4_1 GGUF, or the model's Hugging Face folder exported to F32, F16 or Q8_0. A trained model
  (the training loop hands each iteration's merged folder to the backend) is exported on load:
  merge-and-convert, chosen over llama.cpp's GGUF LoRA adapters (`lora=`, which this policy
  also runs) by measurement (`benchmarks/llamacpp_lora.py`, the shipped rank-32 referential
  adapter, 32 parallel sequences of 48 greedy tokens, 2 threads, AVX512-BF16 CPU, median of 3):
  merged F16 decodes 116 tokens/s, the same adapter over the F16 base 97 (0.83x), over the
  shipped Q4_1 base 59 (0.51x), all 32 greedy replies identical to the merged ones. Merging
  and exporting costs 7 s per training iteration (merge 3.0 s, F16 export 4.0 s) against 0.07 s
  to convert the adapter, and an iteration generates for many minutes, so the 17% slower
  decode costs far more than the export saves. The merged folder is also what every other
  backend runs, so parity is measured on the same weights. (A quantized base plus a float
  adapter would also not be the weights that were trained.)
- **Prefix reuse across turns** (`prefix_cache`, on by default): an agent's next prompt extends
  its last prompt and reply, so the engine keeps each finished sequence's cells (in its stream, or
  saved to host memory when streams run short) and prefills only the new tokens
  (`llamacpp_engine` says how).
- **Sampling in numpy** (`llamacpp_sampling.RowSampler`): per-row seeded generators, the same
  temperature / top-p rule as `HFPolicy`, and log-probs under the distribution drawn from.
- **Vocabulary check at load**: the GGUF's vocabulary must be the tokenizer's, entry for entry;
  a GGUF of another model fails at once instead of decoding plausible nonsense.

Parity against transformers float32 (`parity.check_parity` with the fp32 `ReferenceScorer`;
per prompt the largest per-token gap, in nats, between the reference's greedy choice and the
token llama.cpp chose; llama-cpp-python 0.3.36 built for AVX2/FMA, 2 threads, 16 parallel
sequences, on a 2-core AVX512 CPU shared with a training job):

Columns: `PARITY_OBSERVATIONS` x 24 tokens, then 16 synth-hop-ia first turns x 48 tokens; each
"identical to fp32 greedy, largest gap (median of the per-prompt largest gaps)":

| weights | probe prompts | synth-hop-ia first turns |
|---|---|---|
| F32 | 8/8, 0.000 | 15/16, 0.003 (0.000) |
| F16 | 8/8, 0.000 | 14/16, 0.003 (0.000) |
| Q8_0 | 5/8, 0.254 | 4/16, 0.699 (0.081) |
| BF16 | 6/8, 0.022 | not measured |
| Q4_1 (shipped) | 6/8, 0.132 | 2/16, 0.476 (0.127) |

A trained model (the shipped referential adapter merged into the base, exported on load) against
its own fp32 reference on the probe prompts: F16 and Q8_0 both 0.000 on 8 of 8.

BF16 is measured on the probe prompts only (the same build; 6 of 8 identical to llama.cpp's
F32 greedy output, the two others departing at near-ties): it rounds the weights to 8
mantissa bits, as the bf16 runs of the other backends do.

Every type passes the check's 0.75-nat tolerance; Q8_0 with the least margin. Why the order is
not the bit widths': the reference is the shipped Q4_1 file dequantized to float32, so Q4_1
carries the reference's weights exactly, and its gaps come only from llama.cpp rounding the
activations to 8 bits inside its quantized dot products; Q8_0 re-rounds those weights (at most
0.43% of each 32-weight block's largest value) and rounds the activations too. F32 and F16
depart only at near-ties (0.003 nats; llama.cpp sums in another order and keeps its KV cache in
float16).
Prompt lengths were equal on every prompt: the chat template and special tokens match.
"""

from __future__ import annotations

import copy
import threading
from pathlib import Path
from typing import Any, Sequence

from optima_agents.chat import DEFAULT_CHAT_FORMAT, ChatFormat, clean_output, prompt_ids
from optima_agents.policies.base import Action, PolicyCapabilities, SamplingParams, TurnRequest, request_row_seed
from optima_agents.policies.llamacpp_sampling import RowSampler
from optima_agents.policies.logprobs import align_logprobs

__all__ = ["LlamaCppPolicy", "vocabulary_mismatch"]

INSTALL = ("pip install 'optima[llamacpp]' (builds llama-cpp-python==0.3.36 from source; set CMAKE_ARGS as "
           "scripts/venv.sh does for a portable build)")


class LlamaCppPolicy:
    """A GGUF model on llama.cpp (in-process) as a batched policy.

    Args:
        model (str, *optional*, defaults to `"smollm2-135m"`): a registry name or a Hugging Face
            model folder (resolved with `resolve_model`; its tokenizer and chat template render
            the prompts), or a `.gguf` file (then the tokenizer is read from the file).
        sampling (SamplingParams, *optional*): temperature 0 is greedy.
        weights (str, *optional*, defaults to `"auto"`): "q4_1" (the registry model's shipped
            file), "f32", "f16", "bf16", "q8_0" (the folder exported on first use, then cached), a path
            to a `.gguf` file, or "auto": the shipped file for a registry base model, F16 for any
            other folder (see the parity table above). Ignored when `model` is a `.gguf` file.
        batch_size (int, *optional*, defaults to 32): the most sequences decoded together.
        n_ctx (int, *optional*): KV cells in all (None: 2048 per sequence, or 16384 with
            `kv_unified`); each sequence gets `n_ctx / batch_size` of them unless `kv_unified`.
        kv_unified (bool, *optional*, defaults to False): one KV buffer for all sequences instead
            of one stream each (`llamacpp_engine` says why split is the default).
        prefix_cache (bool, *optional*, defaults to True): keep each finished sequence's cells and
            prefill only what a later prompt adds to them (an agent's next turn extends its last
            prompt and reply); split streams only (`llamacpp_engine` says how).
        host_cache_mib (int, *optional*, defaults to 2048): host memory for agent histories moved
            out of their KV streams to make room, copied back when the agent speaks again.
        lora (str, *optional*): a LoRA adapter applied over the weights at run time: a GGUF LoRA
            file, or a PEFT adapter folder (converted once by `gguf_lora.export_lora_gguf`,
            cached under `<home>/gguf/lora/`). Trained models are served merged instead (see
            above); this is for adapters made elsewhere and for the measurement that chose.
        n_batch (int, *optional*, defaults to 2048): the most tokens per llama.cpp decode call.
        num_threads (int, *optional*): CPU threads; None: every core this process may use.
        chat_format (ChatFormat, *optional*): how transcripts become chat messages.
        home (str, *optional*): the Optima home holding pulled models and GGUF files.
        verbose (bool, *optional*, defaults to False): show llama.cpp's own logs.

    Raises:
        BackendUnavailableError: llama-cpp-python is not installed (the message says how).
        ModelNotFoundError: the model or the GGUF file cannot be found.
        ValueError: bad weights or sizes, or a GGUF whose vocabulary is not the tokenizer's.
    """

    capabilities = PolicyCapabilities(with_sampling=True, close=True, chat_format=True)

    def __init__(
        self,
        model: str = "smollm2-135m",
        *,
        sampling: SamplingParams = SamplingParams(),
        weights: str = "auto",
        batch_size: int = 32,
        n_ctx: int | None = None,
        n_batch: int = 2048,
        kv_unified: bool = False,
        prefix_cache: bool = True,
        host_cache_mib: int = 2048,
        lora: str | None = None,
        num_threads: int | None = None,
        chat_format: ChatFormat = DEFAULT_CHAT_FORMAT,
        home: str | None = None,
        verbose: bool = False,
    ):
        if batch_size < 1:
            raise ValueError(f"LlamaCppPolicy batch_size must be >= 1, got {batch_size}")
        if num_threads is not None and num_threads < 1:
            raise ValueError(f"LlamaCppPolicy num_threads must be >= 1 or None, got {num_threads}")
        _require_llama_cpp()
        from transformers import AutoTokenizer

        from optima_agents.models import resolve_model
        from optima_agents.models.gguf_store import GGUFWeights, gguf_lora_file, gguf_weights
        from optima_agents.policies.llamacpp_engine import LlamaCppEngine

        self.sampling = sampling
        self.chat_format = chat_format
        self.model_name = str(model)
        if self.model_name.lower().endswith(".gguf"):
            self.weights = gguf_weights(None, self.model_name, home=home)
            self.model_path = None
            self.tokenizer = AutoTokenizer.from_pretrained(str(self.weights.path.parent),
                                                           gguf_file=self.weights.path.name)
            generation_eos: list[int] = []
        else:
            self.model_path = resolve_model(self.model_name, home=home)
            self.weights: GGUFWeights = gguf_weights(self.model_path, weights, home=home)
            self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
            generation_eos = _generation_eos(Path(self.model_path))
        self.stop_token_ids = sorted({i for i in [self.tokenizer.eos_token_id, *generation_eos] if i is not None})
        self.lora = None if lora is None else gguf_lora_file(Path(lora), self.weights, home=home)
        self.engine = LlamaCppEngine(self.weights.path, n_seq_max=batch_size, n_ctx=n_ctx, n_batch=n_batch,
                                     n_threads=num_threads, kv_unified=kv_unified, lora=self.lora,
                                     prefix_cache=prefix_cache, host_cache_mib=host_cache_mib, verbose=verbose)
        mismatch = vocabulary_mismatch(self.tokenizer, self.engine.n_vocab, self.engine.token_text)
        if mismatch:
            self.engine.close()
            raise ValueError(f"{self.weights.path} does not fit the tokenizer of {self.model_name}: {mismatch}. "
                             "Pass the GGUF file of this model (weights=...) or its own folder.")
        self._lock = threading.Lock()
        self._calls = 0

    # ------------------------------------------------------------------ Policy
    def act(self, requests: Sequence[TurnRequest]) -> list[Action]:
        """One action per request, in order, all decoded together (continuous batching)."""
        if not requests:
            return []
        from optima_agents.policies.llamacpp_engine import Job

        if self.engine is None:
            raise RuntimeError("this LlamaCppPolicy was closed (close() freed its model); make a new one")
        with self._lock:
            self._calls += 1
            sp = self.sampling
            actions: list[Action | None] = [None] * len(requests)
            jobs: list[tuple[int, Job]] = []
            for i, request in enumerate(requests):
                ids = prompt_ids(request.observation, self.tokenizer, self.chat_format)
                room = self.engine.max_seq_len - len(ids)
                if room < 1:
                    actions[i] = Action(text="", finish_reason="error", prompt_tokens=len(ids),
                                        error=f"prompt of {len(ids)} tokens does not fit the llama.cpp context "
                                              f"({self.engine.max_seq_len} tokens per sequence; raise n_ctx)")
                    continue
                sampler = RowSampler(sp, request_row_seed(sp, request, self._calls, i))
                jobs.append((i, Job(prompt=ids, max_new=min(sp.max_new_tokens, room),
                                    choose=lambda logits, s=sampler: s.choose(logits, want_logprob=sp.logprobs),
                                    done=self._done)))
            self.engine.run([job for _, job in jobs])
            for i, job in jobs:
                actions[i] = self._to_action(job)
        return actions  # type: ignore[return-value]

    def identity(self) -> dict[str, Any]:
        """Backend, model, the GGUF file and its weight type, engine settings, sampling, chat format."""
        from types import SimpleNamespace

        import llama_cpp

        from optima_agents.policies.hf import _revision

        identity = {
            "backend": "llamacpp",
            "model": self.model_name,
            "model_path": self.model_path,
            "revision": _revision(self.model_path, SimpleNamespace(config=None)) if self.model_path else None,
            "dtype": self.weights.weight_type,
            "weights": {"type": self.weights.weight_type, "source": self.weights.source,
                        "file": str(self.weights.path)},
            "llama_cpp_version": llama_cpp.__version__,
            "parallel_sequences": self.engine.n_seq_max if self.engine else None,
            "n_ctx": self.engine.n_ctx if self.engine else None,
            "kv_unified": self.engine.kv_unified if self.engine else None,
            "prefix_cache": self.engine.prefix_cache if self.engine else None,
            "threads": self.engine.n_threads if self.engine else None,
            "sampling": self.sampling.to_dict(),
            "chat_format": self.chat_format.to_dict(),
        }
        if self.lora is not None:  # only then, so identities without an adapter stay as they were
            identity["lora"] = str(self.lora)
        return identity

    def with_sampling(self, sampling: SamplingParams) -> "LlamaCppPolicy":
        """A policy sharing this one's model and context, with other sampling settings."""
        other = copy.copy(self)
        other.sampling = sampling
        other._calls = 0
        return other

    def verify(self, reference: Any = None, *, max_new_tokens: int = 24, prompts: Sequence[Any] | None = None) -> Any:
        """Run the parity check against transformers float32 now (see the module doc's table);
        return the `ParityReport`, or raise `BackendParityError` when a token is further than
        0.75 nats from the reference's greedy choice.

        Args:
            reference: a `parity.ReferenceScorer` (default: this model's folder in fp32 transformers).
            max_new_tokens: reply length of the probe.
            prompts: probe observations (default: `PARITY_OBSERVATIONS`).

        Raises:
            ValueError: no reference given for a policy loaded from a bare `.gguf` file.
        """
        from optima_agents.policies.parity import PARITY_OBSERVATIONS, ReferenceScorer, check_parity

        if reference is None:
            if self.model_path is None:
                raise ValueError("verify() needs a reference model for a policy loaded from a .gguf file: pass "
                                 "reference=ReferenceScorer(<the model's Hugging Face folder>)")
            reference = ReferenceScorer(self.model_path, tokenizer=self.tokenizer, chat_format=self.chat_format)
        greedy = self.with_sampling(SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens))
        report = check_parity({f"llamacpp-{self.weights.weight_type}": greedy},
                              PARITY_OBSERVATIONS if prompts is None else prompts, reference=reference)
        report.raise_for_failures()
        return report

    def close(self) -> None:
        """Free the llama.cpp model and context now. Policies made by `with_sampling` share them:
        closing any of them closes them for all."""
        if self.engine is not None:
            self.engine.close()
            self.engine = None

    # ------------------------------------------------------------------ internals
    def _done(self, generated: list[int]) -> bool:
        if generated[-1] in self.stop_token_ids:
            return True
        if not self.sampling.stop:
            return False
        text = self.tokenizer.decode(generated, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        return any(s and s in text for s in self.sampling.stop)

    def _to_action(self, job: Any) -> Action:
        generated = list(job.generated)
        cleaned = clean_output(self.tokenizer, generated, max_new_tokens=self.sampling.max_new_tokens,
                               stop=self.sampling.stop, stop_token_ids=self.stop_token_ids)
        meta = {"generated_tokens": cleaned.generated_tokens, "reencoded": cleaned.reencoded,
                "raw_token_ids": tuple(generated)}  # as generated (parity scores these, not the re-encoded ids)
        logprobs = None
        if self.sampling.logprobs:
            logprobs = align_logprobs(generated, job.logprobs, cleaned.token_ids)
            if logprobs is None:
                meta["logprobs_missing"] = "the reply was re-encoded: its stored ids are not the sampled ones"
        return Action(text=cleaned.text, token_ids=cleaned.token_ids, finish_reason=cleaned.finish_reason,
                      prompt_tokens=len(job.prompt), meta=meta, logprobs=logprobs)


def vocabulary_mismatch(tokenizer: Any, n_vocab: int, token_text: Any) -> str | None:
    """Why a GGUF vocabulary (`n_vocab` entries, `token_text(id)`) is not `tokenizer`'s, or None.

    Both store byte-level BPE entries in the same form (`"Ġthe"`), so every entry must be equal.
    """
    if n_vocab != len(tokenizer):
        return f"the GGUF has {n_vocab} tokens, the tokenizer {len(tokenizer)}"
    entries = tokenizer.convert_ids_to_tokens(list(range(n_vocab)))
    for token, entry in enumerate(entries):
        if token_text(token) != entry:
            return f"token {token} is {token_text(token)!r} in the GGUF and {entry!r} in the tokenizer"
    return None


def _generation_eos(folder: Path) -> list[int]:
    """The end-of-turn ids `generation_config.json` declares (none when the file is absent)."""
    import json

    path = folder / "generation_config.json"
    if not path.is_file():
        return []
    eos = json.loads(path.read_text(encoding="utf-8")).get("eos_token_id")
    return [int(i) for i in (eos if isinstance(eos, list) else [eos]) if i is not None]


def _require_llama_cpp() -> None:
    """Import llama_cpp now, so a missing or broken build fails with what to install."""
    from optima_agents.policies.registry import BackendUnavailableError

    try:
        import llama_cpp  # noqa: F401
    except ImportError as exc:
        raise BackendUnavailableError(
            f"backend 'llamacpp' needs llama-cpp-python ({exc}). Install it: {INSTALL}") from exc
