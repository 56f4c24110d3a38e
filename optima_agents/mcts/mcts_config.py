"""Typed settings of the MCTS planner and of DPO pair extraction, with the paper's defaults.

Where a default comes from is said in each field's help: "paper" is arXiv 2410.08115 (section
3.3 and appendix), "reference" is the authors' release (thunlp/Optima, `train/monte_carlo_deploy.py`
and `train/dpo_recipes/*.yaml`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, Mapping

from optima_agents.mcts.errors import MCTSConfigError

KeepScope = Literal["batch", "tree"]
RejectedRule = Literal["worst", "hardest", "all"]


@dataclass(frozen=True)
class MCTSConfig:
    """How one search over dialogue turns runs.

    Parameters:
        > Search

        iterations (`int`, *optional*, defaults to `8`):
            Node expansions per tree (reference `explore_count: 8`; the iSFT-DPO recipes use 10).
        rollouts_per_expansion (`int`, *optional*, defaults to `3`):
            Full dialogues sampled from an expanded node (reference `expand`: 3).
        top_k (`int`, *optional*, defaults to `10`):
            Candidates, by value, that the softmax selection draws from (reference: 10).
        selection_temperature (`float`, *optional*, defaults to `1.0`):
            Temperature of the softmax over candidate values (reference: a plain softmax).
        skip_similarity (`float`, *optional*, defaults to `0.25`):
            A candidate whose text is within this normalised edit distance of an already
            expanded node is not expanded (paper: 0.25). 0 disables the check.
        merge_similarity (`float`, *optional*, defaults to `0.1`):
            A sampled utterance within this normalised edit distance of an existing sibling
            joins that sibling instead of making a new child (reference: 0.1). 0 disables merging.
        max_depth (`int` or `None`, *optional*, defaults to `None`):
            Utterances from the root after which a rollout stops and its node counts as a leaf;
            `None` means the env's own turn limit (reference: 10, the tasks' limit).
        enumerate_answers (`bool`, *optional*, defaults to `False`):
            Expand a node where an answering agent speaks, on a task with a closed set of answer
            moves (`Task.answer_options`: a game's picks), into one child per move as soon as a
            rollout creates it, instead of sampling the move: every such node then yields a pair
            (the best move against the worst), whether or not the policy would have sampled a
            right one there. The values of the nodes above average over every move, so use it
            where the answering turn is what is trained. Off in the paper, which searches open
            answers only.

        > Sampling

        temperature (`float`, *optional*, defaults to `0.7`):
            Sampling temperature of the rollouts (paper: 0.7).
        top_p (`float`, *optional*, defaults to `1.0`):
            Nucleus sampling of the rollouts.
        max_new_tokens (`int`, *optional*, defaults to `256`):
            Longest utterance a rollout may sample.
        seed (`int`, *optional*, defaults to `0`):
            Seeds node selection (one RNG per tree) and every rollout request (a seed derived
            from tree, iteration, rollout and depth), so a search does not depend on batching.
    """

    # Search
    iterations: int = field(default=8, metadata={"help": "Node expansions per tree (reference explore_count 8)."})
    rollouts_per_expansion: int = field(default=3, metadata={"help": "Full rollouts per expansion (reference 3)."})
    top_k: int = field(default=10, metadata={"help": "Candidates by value that selection draws from (reference 10)."})
    selection_temperature: float = field(default=1.0, metadata={"help": "Softmax temperature over candidate values."})
    skip_similarity: float = field(
        default=0.25, metadata={"help": "Skip candidates within this edit-distance ratio of an expanded node (paper)."}
    )
    merge_similarity: float = field(
        default=0.1, metadata={"help": "Merge a sampled utterance into a sibling within this ratio (reference)."}
    )
    max_depth: int | None = field(
        default=None, metadata={"help": "Utterances per dialogue in the tree; None means the env's max_turns."}
    )
    enumerate_answers: bool = field(
        default=False, metadata={"help": "Expand an answering turn into every move of a closed answer set "
                                         "(Task.answer_options) instead of sampling it."}
    )
    # Sampling
    temperature: float = field(default=0.7, metadata={"help": "Rollout sampling temperature (paper 0.7)."})
    top_p: float = field(default=1.0, metadata={"help": "Rollout nucleus sampling."})
    max_new_tokens: int = field(default=256, metadata={"help": "Longest sampled utterance."})
    seed: int = field(default=0, metadata={"help": "Seeds selection and every rollout request."})

    def __post_init__(self) -> None:
        for name in ("iterations", "rollouts_per_expansion", "top_k", "max_new_tokens"):
            _require(getattr(self, name) >= 1, name, getattr(self, name), "must be >= 1")
        _require(self.selection_temperature > 0, "selection_temperature", self.selection_temperature, "must be > 0")
        for name in ("skip_similarity", "merge_similarity"):
            value = getattr(self, name)
            _require(0.0 <= value <= 1.0, name, value, "must be an edit-distance ratio in [0, 1]")
        if self.max_depth is not None:
            _require(self.max_depth >= 1, "max_depth", self.max_depth, "must be >= 1 or None (the env's max_turns)")
        _require(self.temperature >= 0, "temperature", self.temperature, "must be >= 0 (0 is greedy)")
        _require(0 < self.top_p <= 1, "top_p", self.top_p, "must be in (0, 1]")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "MCTSConfig":
        return _from_dict(cls, values)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class PairConfig:
    """Which (chosen, rejected) sibling pairs a searched tree yields for DPO.

    Parameters:
        min_chosen_value (`float`, *optional*, defaults to `0.4`):
            The best child's value must exceed this (reference recipes `initial_dpo_episilon`:
            0.4 for the QA tasks, 0.5 for GSM8K; its code default is 0.15).
        min_gap (`float`, *optional*, defaults to `0.2`):
            The best child's value minus the worst child's must exceed this (paper: 0.2).
        keep_fraction (`float`, *optional*, defaults to `0.5`):
            Share of the qualifying pairs kept, highest chosen value first (paper: the top half).
            At least one pair is kept when any qualifies (as the reference does).
        keep_scope (`str`, *optional*, defaults to `"batch"`):
            `"batch"` ranks the pairs of all trees together (the paper's rule); `"tree"` keeps
            the top fraction of each tree (the reference code).
        rejected (`str`, *optional*, defaults to `"worst"`):
            Which sibling is the rejected reply. `"worst"`: the lowest-valued child (the paper's
            rule). `"hardest"`: the highest-valued child whose gap to the best still exceeds
            `min_gap`, a hard negative. On a closed-answer node (every pick enumerated) every wrong
            pick scores the same, so their values differ only by the reference model's likelihood
            (the readability term): "worst" rejects the pick the model least wanted to make, and
            "hardest" the wrong pick it most wanted to make, which pushes against its prior.
            `"all"`: one pair per sibling more than `min_gap` below the best (hardest first), so
            every wrong pick is rejected once and no move is favoured on the rejected side.
    """

    min_chosen_value: float = field(default=0.4, metadata={"help": "Best child's value must exceed this."})
    min_gap: float = field(default=0.2, metadata={"help": "Best minus worst child value must exceed this (paper)."})
    keep_fraction: float = field(default=0.5, metadata={"help": "Share of pairs kept by chosen value (paper 0.5)."})
    keep_scope: KeepScope = field(
        default="batch", metadata={"help": "Rank pairs across the batch or per tree.", "choices": ["batch", "tree"]}
    )
    rejected: RejectedRule = field(
        default="worst", metadata={"help": "Rejected sibling: the lowest-valued ('worst', paper) or the highest-valued "
                                           "beyond min_gap ('hardest'), or one pair per sibling beyond min_gap ('all').",
                                  "choices": ["worst", "hardest", "all"]}
    )

    def __post_init__(self) -> None:
        _require(self.min_gap >= 0, "min_gap", self.min_gap, "must be >= 0")
        _require(0 < self.keep_fraction <= 1, "keep_fraction", self.keep_fraction, "must be in (0, 1]")
        if self.keep_scope not in ("batch", "tree"):
            raise MCTSConfigError(f"PairConfig.keep_scope must be 'batch' or 'tree', got {self.keep_scope!r}")
        if self.rejected not in ("worst", "hardest", "all"):
            raise MCTSConfigError(f"PairConfig.rejected must be 'worst', 'hardest' or 'all', got {self.rejected!r}")

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "PairConfig":
        return _from_dict(cls, values)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _require(ok: bool, name: str, value: Any, rule: str) -> None:
    if not ok:
        raise MCTSConfigError(f"MCTS setting {name} {rule}, got {value!r}")


def _from_dict(cls, values: Mapping[str, Any]):
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise MCTSConfigError(f"unknown {cls.__name__} fields {unknown}; known fields are {sorted(known)}")
    return cls(**values)
