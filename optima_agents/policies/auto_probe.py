"""The probe behind `--backend auto`: which local backends are installed, and for each one, does
it pass parity on this machine and how fast does it generate?

Each candidate is loaded on its own (then closed), run greedily on the parity prompts
(`parity.check_parity` against one float32 `ReferenceScorer` shared by all), and, when it passes,
timed on one batch of sampled replies. A candidate that fails to load, fails parity or fails to
generate is recorded with the reason, never raised: on a given machine some backends are
expected not to work (vLLM without a supported device, llama.cpp not built).
"""

from __future__ import annotations

import gc
import importlib.util
import itertools
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from optima_agents.policies.auto_choice import Candidate, ProbeResult
from optima_agents.policies.parity import ParityTolerance

__all__ = ["ProbeSettings", "Prober", "installed_candidates", "probe_candidates"]

#: Options a candidate's policy gets only while it is probed: vLLM's own parity self-check
#: would repeat the probe's.
_PROBE_KWARGS: Mapping[str, Mapping[str, Any]] = {"vllm": {"verify": False}}


@dataclass(frozen=True)
class ProbeSettings:
    """How long the probe runs.

    Args:
        parity_prompts (int, *optional*, defaults to 8): how many of `PARITY_OBSERVATIONS` are
            checked (all eight: each deliberately broken model of the parity study failed on at
            least one of them, not on every one).
        parity_tokens (int, *optional*, defaults to 24): reply length of the parity check (the
            length the tolerance was measured at).
        sequences (int, *optional*, defaults to 16): replies in the timed batch.
        tokens (int, *optional*, defaults to 32): most tokens per timed reply.
        repeats (int, *optional*, defaults to 2): timed batches; the fastest counts, so a
            moment of load from another process does not decide.
        temperature (float, *optional*, defaults to 0.7): sampling temperature of the timed
            batch (sampled, so the repeated prompts give different replies).
        tolerance (ParityTolerance, *optional*): the parity rule (default: 0.75 nats).
    """

    parity_prompts: int = 8
    parity_tokens: int = 24
    sequences: int = 16
    tokens: int = 32
    repeats: int = 2
    temperature: float = 0.7
    tolerance: ParityTolerance = field(default_factory=ParityTolerance)

    def __post_init__(self) -> None:
        for name in ("parity_prompts", "parity_tokens", "sequences", "tokens", "repeats"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ProbeSettings.{name} must be a positive int, got {value!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Prober = Callable[[Sequence[Candidate], str, ProbeSettings, Mapping[str, Any]], list[ProbeResult]]
"""`probe(candidates, model_path, settings, options) -> one ProbeResult per candidate, in order`,
where `options` are the common options (dtype, batch_size, device) the chosen policy will get.
`probe_candidates` is the real one; tests pass scripted ones."""


def installed_candidates(model_path: str | Path, dtype: str) -> list[Candidate]:
    """The local backends installed here, least lossy first: hf and vllm in `dtype`, llamacpp in
    each GGUF weight type the model has (every type `gguf_export` writes from its folder, F32, F16,
    BF16 and Q8_0, and the shipped Q4_1 for a registry base model). Not openai (it needs a server) nor backends from
    other packages (nothing says how to probe them)."""
    from optima_agents.models.gguf_export import CONVERTED_TYPES
    from optima_agents.models.gguf_store import default_weight_type

    def installed(*modules: str) -> bool:
        return all(importlib.util.find_spec(m) is not None for m in modules)

    out = []
    if installed("torch", "transformers"):
        out.append(Candidate("hf", dtype))
    if installed("vllm"):
        out.append(Candidate("vllm", dtype))
    if installed("llama_cpp") and Path(model_path).is_dir():
        types = [*CONVERTED_TYPES] + (["q4_1"] if default_weight_type(model_path) == "q4_1" else [])
        out += [Candidate("llamacpp", t, weights=t) for t in types]
    return out


def probe_candidates(candidates: Sequence[Candidate], model_path: str, settings: ProbeSettings,
                     options: Mapping[str, Any]) -> list[ProbeResult]:
    """Probe each candidate in turn (see the module doc); one result per candidate, in order."""
    from optima_agents.policies.parity import ReferenceScorer

    reference = ReferenceScorer(model_path)
    try:
        return [probe_one(c, model_path, reference, settings, options) for c in candidates]
    finally:
        del reference
        gc.collect()


def probe_one(candidate: Candidate, model_path: str, reference: Any, settings: ProbeSettings,
              options: Mapping[str, Any]) -> ProbeResult:
    """Load, check parity, time; a failure at any step is the result's `failure`."""
    from optima_agents.policies import SamplingParams, capabilities_of, make_policy
    from optima_agents.policies.parity import PARITY_OBSERVATIONS, check_parity

    greedy = SamplingParams(temperature=0.0, max_new_tokens=settings.parity_tokens)
    common = {k: v for k, v in options.items() if k in ("batch_size", "device")}
    policy = None
    start = time.perf_counter()
    try:
        policy = make_policy(candidate.backend, model_path, sampling=greedy, dtype=candidate.runs_in, **common,
                             **candidate.backend_kwargs, **_PROBE_KWARGS.get(candidate.backend, {}))
        load_s = time.perf_counter() - start
        prompts = PARITY_OBSERVATIONS[: settings.parity_prompts]
        report = check_parity({candidate.label: policy}, prompts, reference=reference, tolerance=settings.tolerance)
        gap = report.largest_gap(candidate.label)
        if not report.ok:
            shown = "; ".join(report.failures[:2]) + (f"; {len(report.failures) - 2} more" if len(report.failures) > 2
                                                     else "")
            return ProbeResult(candidate, failure=f"parity failed: {shown}", largest_gap=gap, load_s=load_s)
        speed = _tokens_per_second(policy, settings)
        return ProbeResult(candidate, tokens_per_s=speed, largest_gap=gap, load_s=load_s)
    except Exception as error:  # a candidate that does not work here is a result, not a crash
        return ProbeResult(candidate, failure=f"{type(error).__name__}: {error}".strip())
    finally:
        if policy is not None and capabilities_of(policy).close:
            policy.close()
        del policy
        gc.collect()


def _tokens_per_second(policy: Any, settings: ProbeSettings) -> float:
    """Generated tokens per second of the fastest of `settings.repeats` timed batches."""
    from optima_agents.policies import SamplingParams, TurnRequest
    from optima_agents.policies.parity import PARITY_OBSERVATIONS

    sampled = policy.with_sampling(SamplingParams(temperature=settings.temperature,
                                                  max_new_tokens=settings.tokens, seed=0))
    observations = itertools.islice(itertools.cycle(PARITY_OBSERVATIONS), settings.sequences)
    requests = [TurnRequest(agent=o["agent"], observation=o, seed=i) for i, o in enumerate(observations)]
    best = 0.0
    for _ in range(settings.repeats):
        start = time.perf_counter()
        actions = sampled.act(requests)
        took = time.perf_counter() - start
        failed = [a for a in actions if a.failed]
        if failed:
            raise RuntimeError(f"{len(failed)} of {len(actions)} timed replies failed: {failed[0].error}")
        tokens = sum(int(a.meta.get("generated_tokens", len(a.token_ids))) for a in actions)
        best = max(best, tokens / max(took, 1e-9))
    return best
