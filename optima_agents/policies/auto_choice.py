"""What `--backend auto` chooses from: candidates, their probe results, and the rule that picks one.

Pure data and one pure function (`choose_fastest`); nothing here loads a model. The probes that
fill in a `ProbeResult` are in `auto_probe.py`, the cached decision in `auto_cache.py`, and
`auto.py` ties them together.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence

from optima_envs.errors import OptimaError

__all__ = ["BackendChoice", "Candidate", "NoBackendPassedError", "ProbeResult", "choose_fastest"]

#: Weight precisions from the least to the most lossy: a tie in speed goes to the earlier one.
PRECISION_ORDER = ("float32", "f32", "bfloat16", "float16", "f16", "q8_0", "q4_1")


class NoBackendPassedError(OptimaError):
    """Raised when `--backend auto` finds no candidate that loads, passes parity and generates."""


@dataclass(frozen=True)
class Candidate:
    """One backend in one precision, as `auto` tries it.

    Args:
        backend: a registered backend name ("hf", "vllm", "llamacpp").
        runs_in: what the weights run in: the dtype for hf and vllm ("float32", "bfloat16"), the
            GGUF weight type for llamacpp ("f32", "f16", "bf16", "q8_0", "q4_1").
        weights: the llamacpp `weights` option (the weight type), None for the other backends.
    """

    backend: str
    runs_in: str
    weights: str | None = None

    @property
    def label(self) -> str:
        """`"llamacpp q8_0"`: how logs and error messages name the candidate."""
        return f"{self.backend} {self.runs_in}"

    @property
    def backend_kwargs(self) -> dict[str, Any]:
        """The backend-specific options that select this candidate (`{"weights": "q8_0"}`)."""
        return {} if self.weights is None else {"weights": self.weights}

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "runs_in": self.runs_in, "weights": self.weights}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Candidate":
        return cls(data["backend"], data["runs_in"], data.get("weights"))


@dataclass(frozen=True)
class ProbeResult:
    """What probing one candidate measured.

    Args:
        candidate: what was probed.
        tokens_per_s: generated tokens per second of the timed batch (None when it did not run).
        failure: why the candidate is out (it did not load, failed parity, or failed to
            generate); None when it passed.
        largest_gap: the largest per-token gap to the float32 reference on the parity prompts,
            in nats (None when parity did not run).
        load_s: seconds to build the policy (exports of GGUF files included).
    """

    candidate: Candidate
    tokens_per_s: float | None = None
    failure: str | None = None
    largest_gap: float | None = None
    load_s: float | None = None

    @property
    def passed(self) -> bool:
        return self.failure is None and self.tokens_per_s is not None

    def summary(self) -> str:
        """One line: the candidate and its figures, or why it is out."""
        if not self.passed:
            return f"{self.candidate.label}: out ({self.failure or 'no throughput measured'})"
        gap = "" if self.largest_gap is None else f", largest parity gap {self.largest_gap:.3f} nats"
        load = "" if self.load_s is None else f", loaded in {self.load_s:.1f} s"
        return f"{self.candidate.label}: {self.tokens_per_s:.1f} tokens/s{gap}{load}"

    def to_dict(self) -> dict[str, Any]:
        return {"candidate": self.candidate.to_dict(), "tokens_per_s": self.tokens_per_s, "failure": self.failure,
                "largest_gap": self.largest_gap, "load_s": self.load_s}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ProbeResult":
        return cls(Candidate.from_dict(data["candidate"]), data.get("tokens_per_s"), data.get("failure"),
                   data.get("largest_gap"), data.get("load_s"))


@dataclass(frozen=True)
class BackendChoice:
    """The backend `auto` resolved to, and the probe it came from.

    Args:
        chosen: the winning probe result.
        probes: every candidate's result, in probe order.
        source: "probed" (measured now) or "cached" (read from the choice cache).
        key: the cache key (machine, model, options, package versions).
        probed_at: when the probe ran (ISO time).
    """

    chosen: ProbeResult
    probes: tuple[ProbeResult, ...] = ()
    source: Literal["probed", "cached"] = "probed"
    key: str = ""
    probed_at: str = ""

    @property
    def backend(self) -> str:
        return self.chosen.candidate.backend

    @property
    def runs_in(self) -> str:
        """The dtype (hf, vllm) or GGUF weight type (llamacpp) the chosen backend runs."""
        return self.chosen.candidate.runs_in

    @property
    def backend_kwargs(self) -> dict[str, Any]:
        return self.chosen.candidate.backend_kwargs

    def describe(self) -> str:
        """One line for a log or a terminal: what was chosen, how fast, and from where."""
        how = "probed now" if self.source == "probed" else f"cached choice, probed {self.probed_at}"
        passed = sum(p.passed for p in self.probes)
        return (f"{self.chosen.summary()} ({how}; the fastest of the {passed} of {len(self.probes)} candidates "
                "that passed)")

    def to_dict(self) -> dict[str, Any]:
        """What a result records: the chosen backend and weight type, and every probe's figures."""
        return {"backend": self.backend, "runs_in": self.runs_in, "backend_kwargs": self.backend_kwargs,
                "source": self.source, "key": self.key, "probed_at": self.probed_at,
                "chosen": self.chosen.to_dict(), "probes": [p.to_dict() for p in self.probes]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: Literal["probed", "cached"] = "cached") -> "BackendChoice":
        return cls(ProbeResult.from_dict(data["chosen"]), tuple(ProbeResult.from_dict(p) for p in data["probes"]),
                   source, data.get("key", ""), data.get("probed_at", ""))


def _precision_rank(runs_in: str) -> int:
    return PRECISION_ORDER.index(runs_in) if runs_in in PRECISION_ORDER else len(PRECISION_ORDER)


def choose_fastest(results: Sequence[ProbeResult]) -> ProbeResult:
    """The fastest candidate that passed (loaded, passed parity, generated).

    A tie in tokens/s goes to the less lossy precision (`PRECISION_ORDER`), then to the backend
    name, so the same results give the same winner in any order.

    Raises:
        NoBackendPassedError: no result passed (or there are none); the message names every
            candidate and why it is out.
    """
    passed = [r for r in results if r.passed]
    if passed:
        return min(passed, key=lambda r: (-float(r.tokens_per_s or 0.0), _precision_rank(r.candidate.runs_in),
                                          r.candidate.backend, r.candidate.runs_in))
    if not results:
        raise NoBackendPassedError(
            "backend 'auto' found no local backend to try: install one of transformers + torch (hf), vllm, or "
            "llama-cpp-python (llamacpp), or name a backend with --backend")
    lines = "\n  ".join(r.summary() for r in results)
    raise NoBackendPassedError(
        f"backend 'auto': none of the {len(results)} candidate(s) passed on this machine:\n  {lines}\n"
        "Fix the failure of the backend you want, or name a backend with --backend")
