"""Leaderboard cells: one system with its settings, one model on one backend, one task's
held-out set. A cell's key hashes everything that changes its result, so a rerun finds it on
disk and computes nothing; a killed run resumes inside a cell from its last finished chunk.

Layout under the output folder:

    cells/<env id>/<system>/<model label>-<key>.json        a finished cell (summary + outcomes)
    cells/<env id>/<system>/<model label>-<key>.partial.jsonl  finished chunks: outcomes, seconds
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from optima_envs.atomic_files import atomic_write_json
from optima_envs.data.identity import content_digest, side_folder
from optima_eval.evaluation import Interval, bootstrap_interval
from optima_eval.heldout import HeldOut
from optima_eval.portable_paths import Roots, expand, portable
from optima_eval.systems import Outcome, System

__all__ = [
    "ABLATION_FIELDS", "IDENTITY_FIELDS", "LOCATION_KWARGS", "Cell", "CellResult", "HeldOut", "ModelSpec", "Partial", "append_partial",
    "cell_path", "describe_heldout", "heldout_identity", "heldout_locations", "identity_key", "model_identity", "read_cell",
    "read_partial", "recorded_env_kwargs", "rewrite_cell", "store_cell", "summarize_outcomes", "system_spec", "write_cell",
]

#: The parts of a cell's description that are its identity (the rest says how and when it was computed).
IDENTITY_FIELDS = ("system", "settings", "model", "heldout", "max_new_tokens", "ablation", "swap_group")
#: The fields only an ablation cell has: the cell it ablates is keyed without them.
ABLATION_FIELDS = ("ablation", "swap_group")

#: Env options that say where a task's data is, not what it is: the data's content is keyed instead.
LOCATION_KWARGS = ("data_dir", "data_files", "evidence_dir")


def describe_heldout(heldout: HeldOut) -> dict[str, Any]:
    """What identifies a held-out set's questions in a cell's key: the env and its options, and
    the content of the data it reads rather than where the data is (see `heldout_identity`)."""
    import optima_envs

    recorded = {"env_id": heldout.env_id, "env_version": optima_envs.spec(heldout.env_id).version,
                "env_kwargs": {k: str(v) for k, v in sorted(heldout.env_kwargs.items())},
                "count": heldout.count, "seed": heldout.seed, "first_index": heldout.first_index}
    return heldout_identity(recorded, heldout.data[0])


def heldout_locations(heldout: HeldOut, roots: Roots | None = None) -> dict[str, Any]:
    """Where a held-out set's data was read from, as a result records it (`portable`): its local
    files (`data`) and the folder of its per-question side files (`evidence`), if any."""
    out: dict[str, Any] = {"data": [portable(path, roots) for path in heldout.data[1]]}
    side = side_folder(heldout.source)
    if side is not None:
        out["evidence"] = portable(side, roots)
    return {k: v for k, v in out.items() if v}


def heldout_identity(recorded: Mapping[str, Any], data: Mapping[str, Any] | None) -> dict[str, Any]:
    """A held-out description as the key takes it: the env options naming where the data is
    (`LOCATION_KWARGS`) left out, what the data is (`data_identity`) put in; a task that
    generates its questions has no `data`. Shared by a fresh description and the migration of a
    recorded one, so both give one key."""
    out = {**recorded, "env_kwargs": {k: v for k, v in recorded["env_kwargs"].items() if k not in LOCATION_KWARGS}}
    if data is not None:
        out["data"] = dict(data)
    return out


def recorded_env_kwargs(description: Mapping[str, Any]) -> dict[str, Any]:
    """The `make()` kwargs of a stored cell's held-out set on this machine: its recorded options
    (stored as text, read back as YAML) and, when the cell recorded the files it read, those files
    and its side folder (`$OPTIMA_DATA_DIR/...` read under this machine's data folder) in place of
    any recorded folder."""
    import yaml

    kwargs = {k: None if v == "None" else yaml.safe_load(v) for k, v in description["heldout"]["env_kwargs"].items()}
    locations = description.get("locations", {})
    if locations.get("data"):
        kwargs = {k: v for k, v in kwargs.items() if k not in LOCATION_KWARGS}
        kwargs["data_files"] = [expand(f) for f in locations["data"]]
        if locations.get("evidence"):
            kwargs["evidence_dir"] = expand(locations["evidence"])
    return {k: expand(v) if k in LOCATION_KWARGS and isinstance(v, str) else v for k, v in kwargs.items()}


@dataclass(frozen=True)
class ModelSpec:
    """A model on a backend. `label` names it on the board (e.g. "smollm2-135m" or
    "isft-iter0"); `model` is a registry name, a folder or a hub id (or a served name for the
    openai backend); `backend` is a concrete backend (never "auto": `LeaderboardConfig` resolves
    it first); `dtype` is what the weights run in: a torch dtype (hf, vllm) or the GGUF weight
    type (llamacpp: "f32", "f16", "q8_0", "q4_1"), so cells of different weight types differ in
    key and in board row."""

    label: str
    model: str
    backend: str = "hf"
    dtype: str = "bfloat16"
    backend_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def with_weight_type(self) -> "ModelSpec":
        """This model as it runs: on llamacpp, `dtype` and the `weights` option name the GGUF
        weight type ("auto" and "shipped" resolved to the type they stand for; a `.gguf` file, as
        the model or the weights, is "gguf" and keeps its path); other backends as they are."""
        if self.backend != "llamacpp":
            return self
        weights = str(self.backend_kwargs.get("weights", "auto")).lower()
        if self.model.lower().endswith(".gguf") or weights.endswith(".gguf"):
            return dataclasses.replace(self, dtype="gguf")
        if weights in ("auto", "shipped"):
            weights = "q4_1" if weights == "shipped" else _default_weight_type(self.model)
        return dataclasses.replace(self, dtype=weights, backend_kwargs={**self.backend_kwargs, "weights": weights})

    def fingerprint(self) -> dict[str, Any]:
        """What identifies the weights: for a local folder, the name, size and content digest of
        every weight and config file (a retrained checkpoint at the same path is a new model);
        otherwise the name as given. Not the folder's path (absolute or relative) or the files'
        times, so the same weights on another machine, or pulled again, find the cells computed
        with them (see `model_identity`)."""
        out: dict[str, Any] = {"model": self.model, "backend": self.backend, "dtype": self.dtype,
                               "backend_kwargs": {k: str(v) for k, v in sorted(self.backend_kwargs.items())}}
        from optima_agents.policies.registry import backend_spec

        if not backend_spec(self.backend).loads_weights:  # a server's weights are its own: its name is all we know
            return out
        from optima_agents.models import resolve_model
        from optima_agents.models.cache import MANIFEST_NAME  # when and how it was pulled: not the weights

        path = Path(resolve_model(self.model))
        if path.is_dir():
            files = sorted(p for p in path.iterdir()
                           if p.suffix in (".safetensors", ".json", ".bin") and p.name != MANIFEST_NAME)
            out["files"] = [(p.name, p.stat().st_size, content_digest(p)) for p in files]
        return model_identity(out)

    def location(self, roots: Roots | None = None) -> str | None:
        """Where a model given as a folder was read from, as a result records it; None for a
        registry name, hub id or served name (the name says it)."""
        return portable(self.model, roots) if "model" not in self.fingerprint() else None


def _default_weight_type(model: str) -> str:
    """What llamacpp's `weights="auto"` runs for `model` (`gguf_store.default_weight_type`)."""
    from optima_agents.models import resolve_model
    from optima_agents.models.gguf_store import default_weight_type

    folder = resolve_model(model)
    return default_weight_type(folder) if Path(folder).is_dir() else "auto"


def model_identity(recorded: Mapping[str, Any]) -> dict[str, Any]:
    """A model's fingerprint as the key takes it: a folder named by its path is its files (the
    path, as given or resolved, is left out); a registry name, hub id or served name stays. Shared
    by a fresh fingerprint and the migration of a recorded one, so both give one key."""
    from optima_agents.models.registry import MODEL_REGISTRY

    out = {k: v for k, v in recorded.items() if k != "path"}
    if "files" in out and str(out.get("model", "")).strip().lower() not in MODEL_REGISTRY:
        out.pop("model", None)
    return out


def identity_key(identity: Mapping[str, Any]) -> str:
    """The cache key of a cell's identity: 16 hex digits of its canonical JSON's sha256."""
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def cell_path(root: Path, env_id: str, system: str, label: str, key: str, ablation: str | None = None) -> Path:
    """Where a cell with these parts is stored under the board folder `root` (see the module doc)."""
    folder = Path(root) / "cells" / env_id / system
    if ablation is not None:
        folder = folder / f"ablation-{ablation}"
    return folder / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', label)}-{key}.json"


@dataclass(frozen=True)
class Cell:
    """One leaderboard cell (see the module doc)."""

    heldout: HeldOut
    system: System
    model: ModelSpec
    max_new_tokens: int = 128
    ablation: str | None = None
    """A message ablation of the system's dialogues ("remove" or "swap"): this cell is the
    ablation of the cell with the same parts and no ablation (`base`)."""

    @functools.cached_property
    def identity(self) -> dict[str, Any]:
        """Everything that changes the cell's result; computed once (it stats the weight files)."""
        identity = {"system": self.system.name, "settings": self.system.settings(),
                    "model": self.model.fingerprint(), "heldout": describe_heldout(self.heldout),
                    "max_new_tokens": self.max_new_tokens}
        if self.ablation is not None:
            identity["ablation"] = self.ablation
            group = getattr(self.heldout.task, "swap_group", None) if self.ablation == "swap" else None
            if group is not None:  # donors of the same group: another measurement than any donor
                identity["swap_group"] = group.__name__
        return identity

    @property
    def base(self) -> "Cell":
        """The cell this one ablates (itself when it ablates nothing)."""
        return Cell(self.heldout, self.system, self.model, self.max_new_tokens)

    @functools.cached_property
    def key(self) -> str:
        return identity_key(self.identity)

    def locations(self, roots: Roots | None = None) -> dict[str, Any]:
        """Where the cell's model folder and data files were read from, as a result records them:
        for the reader and for rebuilding its questions, never part of the key."""
        out: dict[str, Any] = {"model": self.model.location(roots), **heldout_locations(self.heldout, roots)}
        return {k: v for k, v in out.items() if v}

    def path(self, root: Path) -> Path:
        return cell_path(root, self.heldout.env_id, self.system.name, self.model.label, self.key, self.ablation)

    def partial_path(self, root: Path) -> Path:
        return self.path(root).with_suffix(".partial.jsonl")


@dataclass(frozen=True)
class CellResult:
    """A finished cell as stored: what it is, its summary, and every question's outcome."""

    description: Mapping[str, Any]
    summary: Mapping[str, Any]
    outcomes: tuple[Outcome, ...]
    path: Path

    @property
    def score(self) -> Interval:
        return Interval(**self.summary["score"])

    @property
    def tokens(self) -> Interval:
        return Interval(**self.summary["tokens"])


def summarize_outcomes(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """Mean score over scored questions and mean tokens per question over questions that ran,
    each with a 95% bootstrap interval; infra and scoring failures counted apart."""
    ran = [o for o in outcomes if not o.infra_failure]
    scored = [o for o in ran if o.scored]
    return {
        "score": bootstrap_interval([o.score for o in scored]).__dict__,
        "tokens": bootstrap_interval([o.tokens for o in ran]).__dict__,
        "questions": len(outcomes), "scored": len(scored),
        "infra_failures": len(outcomes) - len(ran), "scoring_failures": len(ran) - len(scored),
    }


@dataclass
class Partial:
    """What a killed cell kept: its finished chunks' outcomes and the seconds they took."""

    outcomes: dict[int, Outcome] = field(default_factory=dict)
    seconds: float = 0.0


def read_partial(path: Path) -> Partial:
    """Outcomes and timings of finished chunks; a line cut off by a kill ends the read (its chunk reruns)."""
    partial = Partial()
    if not path.exists():
        return partial
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            data = json.loads(line)
            if "chunk_seconds" in data:
                partial.seconds += float(data["chunk_seconds"])
                continue
            outcome = Outcome.from_dict(data)
        except (json.JSONDecodeError, TypeError, KeyError, ValueError):
            break
        partial.outcomes[outcome.position] = outcome
    return partial


def append_partial(path: Path, outcomes: Sequence[Outcome], *, seconds: float) -> None:
    """Append one finished chunk, its outcomes then its seconds, in one write, so a resumed cell
    reports the time of every run that worked on it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(o.to_dict()) for o in outcomes] + [json.dumps({"chunk_seconds": round(seconds, 1)})]
    with path.open("a", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
        f.flush()


def write_cell(cell: Cell, root: Path, outcomes: Sequence[Outcome], *, seconds: float,
               derived_from: str | None = None) -> CellResult:
    """Store a finished cell atomically and drop its partial file."""
    description = {**cell.identity, "key": cell.key, "label": cell.model.label,
                   "system_spec": system_spec(cell.system), "seconds": round(seconds, 1),
                   "derived_from": derived_from, "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
    if cell.ablation is not None:
        description["ablates"] = cell.base.key
    locations = cell.locations()
    if locations:
        description["locations"] = locations
    path = cell.path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    result = store_cell(path, description, outcomes)
    cell.partial_path(root).unlink(missing_ok=True)
    return result


def rewrite_cell(result: CellResult, outcomes: Sequence[Outcome]) -> CellResult:
    """Store a finished cell's outcomes again (re-scored), keeping what the cell is and how it
    was computed, and noting when it was re-scored."""
    return store_cell(result.path, {**result.description, "rescored": time.strftime("%Y-%m-%dT%H:%M:%S")}, outcomes)


def store_cell(path: Path, description: Mapping[str, Any], outcomes: Sequence[Outcome]) -> CellResult:
    """Write a cell atomically: its description, the summary of its outcomes, the outcomes by position."""
    ordered = tuple(sorted(outcomes, key=lambda o: o.position))
    summary = summarize_outcomes(ordered)
    atomic_write_json(path, {"cell": description, "summary": summary, "outcomes": [o.to_dict() for o in ordered]})
    return CellResult(description, summary, ordered, path)


def read_cell(path: Path) -> CellResult:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return CellResult(data["cell"], data["summary"], tuple(Outcome.from_dict(o) for o in data["outcomes"]), Path(path))


def system_spec(system: System) -> str:
    """`name` plus the settings that differ from the defaults (`sc:k=4`), for tables."""
    import dataclasses

    default = type(system)()
    changed = [f"{f.name}={getattr(system, f.name)}" for f in dataclasses.fields(system)
               if getattr(system, f.name) != getattr(default, f.name)]
    return ":".join([system.name, *changed])

