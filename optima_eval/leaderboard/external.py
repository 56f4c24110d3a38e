"""Cells made by another stack (a verifiers eval, a TRL checkpoint played elsewhere), put on the
board beside the baselines.

An external cell is one JSON file (format 1; `docs/extending.md` shows one):

    {"optima_external_cell": 1,
     "task": "synth-hop-ia",
     "heldout": {"count": 200, "seed": 1000000, "first_index": 0, "env_kwargs": {}},
     "system": "verifiers-grpo", "model": "my-checkpoint", "dtype": "bfloat16",
     "made_by": "the command that made it", "source": {"stack": "verifiers", "version": "0.4.0"},
     "outcomes": [{"position": 0, "instance_id": "...", "score": 1.0, "tokens": 41, "answer": "Kelo"}, ...]}

It must answer the board's own held-out questions: every position once, each with the instance
id the task deals there (checked by dealing them), so its row compares with the others. A score
is in [0, 1], or null for an answer that could not be scored (counted apart, never as wrong);
tokens are what the model generated for the question. `heldout.env_kwargs` are the task's
options over its registered held-out split (its data's location is not one: give it with
`--set TASK.data_dir=...`). The file is stored as an ordinary cell, keyed by its content.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Mapping

from optima_envs.errors import ConfigError
from optima_eval.heldout import registered_kwargs
from optima_eval.leaderboard.cells import (LOCATION_KWARGS, CellResult, HeldOut, cell_path, describe_heldout,
                                            identity_key, store_cell)
from optima_eval.systems import Outcome

__all__ = ["FORMAT_VERSION", "import_external"]

FORMAT_VERSION = 1
_REQUIRED = ("optima_external_cell", "task", "heldout", "system", "model", "outcomes")
_OPTIONAL = ("dtype", "made_by", "source")
_HELDOUT = ("count", "seed", "first_index", "env_kwargs")
_OUTCOME_REQUIRED = ("position", "instance_id", "score", "tokens")
_OUTCOME_OPTIONAL = ("answer", "error")


def import_external(path: str | Path, root: str | Path, *,
                    location_kwargs: Mapping[str, Mapping[str, Any]] | None = None) -> CellResult:
    """Validate an external cell file and store it as a cell of the board under `root`.

    Args:
        path: the JSON file.
        root: the board folder (`optima leaderboard --out`).
        location_kwargs: per task, where its data is on this machine (`data_dir`, ...).

    Raises:
        ConfigError: the file is not valid JSON, not format 1, lacks or misnames a field, or does
            not answer the task's held-out questions; the message says which and how to fix it.
    """
    path = Path(path)
    where = f"external cell {path}"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{where}: no such file") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"{where}: not JSON ({error})") from None
    _check_keys(data, _REQUIRED, _OPTIONAL, where)
    if data["optima_external_cell"] != FORMAT_VERSION:
        raise ConfigError(f"{where}: optima_external_cell is {data['optima_external_cell']!r}; this version reads "
                          f"format {FORMAT_VERSION}")
    heldout = _heldout(data, where, dict((location_kwargs or {}).get(data["task"], {})))
    for name in ("system", "model"):
        if not isinstance(data[name], str) or not data[name].strip() or ":" in data[name]:
            raise ConfigError(f"{where}: {name} must be a non-empty name without ':', got {data[name]!r}")
    outcomes = _outcomes(data["outcomes"], heldout, where)
    dtype = data.get("dtype", "unknown")
    model = {"external": data["model"], "dtype": str(dtype)}
    identity = {"system": data["system"], "settings": {}, "model": model, "heldout": describe_heldout(heldout),
                "max_new_tokens": None, "external": {"outcomes": [o.to_dict() for o in outcomes]}}
    key = identity_key(identity)
    description = {**{k: v for k, v in identity.items() if k != "external"}, "key": key, "label": data["model"],
                   "system_spec": data["system"], "seconds": None, "derived_from": None,
                   "external": {"file": path.name, "made_by": data.get("made_by", ""), "source": data.get("source", {})},
                   "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
    target = cell_path(Path(root), heldout.env_id, data["system"], data["model"], key)
    target.parent.mkdir(parents=True, exist_ok=True)
    return store_cell(target, description, outcomes)


def _check_keys(data: Any, required: tuple[str, ...], optional: tuple[str, ...], where: str) -> None:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: must be a JSON object, got {type(data).__name__}")
    missing = [k for k in required if k not in data]
    unknown = sorted(set(data) - set(required) - set(optional))
    if missing or unknown:
        raise ConfigError(f"{where}: " + "; ".join(
            part for part in (f"missing {missing}" if missing else "", f"unknown {unknown}" if unknown else "") if part)
            + f" (fields: {list(required)}, optional {list(optional)})")


def _heldout(data: Mapping[str, Any], where: str, locations: dict[str, Any]) -> HeldOut:
    import optima_envs

    task = data["task"]
    if task not in optima_envs.list_envs():
        raise ConfigError(f"{where}: unknown task {task!r}; registered: {sorted(optima_envs.list_envs())}")
    raw = data["heldout"]
    _check_keys(raw, ("count", "seed"), ("first_index", "env_kwargs"), f"{where}: heldout")
    for name in ("count", "seed", "first_index"):
        value = raw.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "count" else 0):
            raise ConfigError(f"{where}: heldout.{name} must be an int >= {1 if name == 'count' else 0}, got {value!r}")
    env_kwargs = raw.get("env_kwargs", {})
    if not isinstance(env_kwargs, dict):
        raise ConfigError(f"{where}: heldout.env_kwargs must be an object, got {env_kwargs!r}")
    placed = sorted(set(env_kwargs) & set(LOCATION_KWARGS))
    if placed:
        raise ConfigError(f"{where}: heldout.env_kwargs names where the data is ({placed}); a file cannot say where "
                          f"another machine keeps it: give it with --set {task}.{placed[0]}=...")
    kwargs = registered_kwargs(task, {**env_kwargs, **locations})
    return HeldOut(task, kwargs, count=raw["count"], seed=raw["seed"], first_index=raw.get("first_index", 0))


def _outcomes(raw: Any, heldout: HeldOut, where: str) -> list[Outcome]:
    if not isinstance(raw, list):
        raise ConfigError(f"{where}: outcomes must be a list, got {type(raw).__name__}")
    questions = heldout.questions()
    out: dict[int, Outcome] = {}
    for n, item in enumerate(raw):
        at = f"{where}: outcomes[{n}]"
        _check_keys(item, _OUTCOME_REQUIRED, _OUTCOME_OPTIONAL, at)
        position, score, tokens = item["position"], item["score"], item["tokens"]
        if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position < heldout.count:
            raise ConfigError(f"{at}: position must be an int in [0, {heldout.count}), got {position!r}")
        if position in out:
            raise ConfigError(f"{at}: position {position} is answered twice")
        expected = questions[position].instance.instance_id
        if item["instance_id"] != expected:
            raise ConfigError(f"{at}: instance_id {item['instance_id']!r} is not the held-out question at position "
                              f"{position} ({expected!r}); answer the board's questions: instance first_index+i "
                              f"with reset seed seed+i")
        if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))
                                  or not math.isfinite(score) or not 0 <= score <= 1):
            raise ConfigError(f"{at}: score must be a number in [0, 1] or null (not scorable), got {score!r}")
        if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
            raise ConfigError(f"{at}: tokens must be an int >= 0, got {tokens!r}")
        answer = item.get("answer")
        if answer is not None and not isinstance(answer, str):
            raise ConfigError(f"{at}: answer must be a string or null, got {answer!r}")
        out[position] = Outcome(position=position, instance_id=expected, answer=answer,
                                score=None if score is None else float(score), score_ok=score is not None,
                                tokens=tokens, score_error=None if score is not None else "not scorable (external)",
                                error=item.get("error"))
    missing = [p for p in range(heldout.count) if p not in out]
    if missing:
        raise ConfigError(f"{where}: {len(missing)} of {heldout.count} held-out questions have no outcome "
                          f"(positions {missing[:5]}{' ...' if len(missing) > 5 else ''})")
    return [out[p] for p in range(heldout.count)]
