"""Whether a cell's score came from talking: the numbers behind the board's `no-talk`,
`comm gain [CI]` and `partner-only` columns, from finished cells.

- `comm_gain(base, ablated)`: the mean over questions of `score - score_ablated`, with a paired
  95% bootstrap interval (questions resampled together, so the interval is the difference's,
  not two marginal intervals'); only questions scored in both cells count.
- `place_scores(outcomes, places)`: the mean score on each kind of question by where its answer
  lies (`optima_envs.core.places`), e.g. on the questions only the partner can answer.
- `heldout_places(heldout, locations)`: those places for a cell's recorded held-out set (rebuilt from
  the env, so any cell on the board, old or new, can be split).
- `told_split(...)` / `heldout_told(...)`: on the questions only the partner can answer, how often
  the partners told the answering seat what it lacked (`optima_envs.core.places.partners_informed`:
  in a game, the speaker named the target and no other object) and the score when they did and
  when they did not. It tells a pair whose partner does not say what is needed from one whose
  answerer does not read it.
- `diagnose(...)`: all of it for the dialogues `optima eval` played.
- `normalised_gain(score, no_talk, skyline)`: (score - no-talk) / (skyline - no-talk), where the
  skyline is one agent holding all the evidence (`cot`): 0 at the no-talk ceiling, 1 at the
  skyline.
"""

from __future__ import annotations

import functools
import json
import math
from typing import Any, Mapping, Sequence

from optima_envs.core.places import PLACES, answer_place, partners_informed
from optima_eval.evaluation import Interval, bootstrap_interval
from optima_eval.leaderboard.cells import recorded_env_kwargs
from optima_eval.systems import Outcome

__all__ = ["answer_place_of", "comm_gain", "diagnose", "heldout_places", "heldout_setup", "heldout_told",
           "normalised_gain", "place_scores", "told_split"]


def comm_gain(base: Sequence[Outcome], ablated: Sequence[Outcome]) -> Interval:
    """Mean paired difference `base - ablated` over questions scored in both, with its interval."""
    other = {o.position: o for o in ablated if o.scored}
    differences = [o.score - other[o.position].score for o in base if o.scored and o.position in other]
    return bootstrap_interval(differences)


def place_scores(outcomes: Sequence[Outcome], places: Mapping[int, str | None]) -> dict[str, Interval]:
    """Mean score (with its interval) per answer place; an unscored question is left out."""
    split: dict[str, list[float]] = {place: [] for place in PLACES}
    for o in outcomes:
        place = places.get(o.position)
        if o.scored and place is not None:
            split[place].append(float(o.score))
    return {place: bootstrap_interval(scores) for place, scores in split.items()}


def heldout_places(heldout: Mapping[str, Any],
                   locations: Mapping[str, Any] | None = None) -> dict[int, str | None] | None:
    """Position -> answer place for a cell's stored held-out description (and the data files its
    `locations` recorded, read here: `recorded_env_kwargs`); None when the task has no split
    (debate) or its env cannot be built here (e.g. its data folder is missing)."""
    setup = heldout_setup(heldout, locations)
    if setup is None:
        return None
    task, _, questions = setup
    places = {q.position: answer_place(task, q.instance, q.evidence) for q in questions}
    return None if all(p is None for p in places.values()) else places


def heldout_setup(heldout: Mapping[str, Any],
                  locations: Mapping[str, Any] | None = None) -> tuple[Any, tuple[str, ...], list[Any]] | None:
    """(task, agent names, questions) of a cell's recorded held-out set, built once per set (so
    scripts that read a cell's dialogues see the questions the board scored); None when its env
    cannot be built here."""
    return _heldout_setup(_setup_key(heldout, locations))


def heldout_told(outcomes: Sequence[Outcome], heldout: Mapping[str, Any],
                 locations: Mapping[str, Any] | None = None) -> dict[str, Interval] | None:
    """`told_split` for a cell's outcomes on its stored held-out set; None where it has no meaning."""
    setup = heldout_setup(heldout, locations)
    return None if setup is None else told_split(*setup, outcomes)


def told_split(task: Any, agents: Sequence[str], questions: Sequence[Any],
               outcomes: Sequence[Outcome]) -> dict[str, Interval] | None:
    """On the partner-only questions of dialogues (outcomes with a transcript): `told`, the share
    whose partners told the answering seat what it lacked; `score_told` and `score_not_told`, the
    mean score on each part. None when no such dialogue was scored (single-agent systems, debate)."""
    by_position = {q.position: q for q in questions}
    seats = {name: i for i, name in enumerate(agents)}
    told: list[float] = []
    parts: dict[bool, list[float]] = {True: [], False: []}
    for o in outcomes:
        q = by_position.get(o.position)
        if q is None or not o.scored or not o.transcript:
            continue
        if answer_place(task, q.instance, q.evidence) != "partner":
            continue
        messages = [(seats[t["speaker"]], t["text"]) for t in o.transcript if t["speaker"] in seats]
        informed = bool(partners_informed(task, q.instance, q.evidence, messages))
        told.append(float(informed))
        parts[informed].append(float(o.score))
    if not told:
        return None
    return {"told": bootstrap_interval(told), "score_told": bootstrap_interval(parts[True]),
            "score_not_told": bootstrap_interval(parts[False])}


def _setup_key(heldout: Mapping[str, Any], locations: Mapping[str, Any] | None) -> str:
    return json.dumps({"heldout": heldout, "locations": dict(locations or {})}, sort_keys=True)


@functools.lru_cache(maxsize=None)
def _heldout_setup(key: str) -> tuple[Any, tuple[str, ...], list[Any]] | None:
    """(task, agent names, questions) of a recorded held-out set, built once per set; None when
    its env cannot be built here."""
    import optima_envs
    from optima_eval.heldout import HeldOut
    from optima_envs.errors import OptimaError

    recorded = json.loads(key)
    heldout = recorded["heldout"]
    try:
        kwargs = recorded_env_kwargs(recorded)
        questions = HeldOut(heldout["env_id"], kwargs, heldout["count"], heldout["seed"],
                            heldout["first_index"]).questions()
        env = optima_envs.make(heldout["env_id"], **kwargs)
    except (OptimaError, OSError):
        return None
    return env.unwrapped.task, tuple(env.possible_agents), questions


def normalised_gain(score: float, no_talk: float, skyline: float) -> float:
    """(score - no_talk) / (skyline - no_talk); NaN when the skyline is not above the no-talk."""
    if any(math.isnan(x) for x in (score, no_talk, skyline)) or skyline <= no_talk:
        return float("nan")
    return (score - no_talk) / (skyline - no_talk)


def diagnose(env_id: str, env_kwargs: Mapping[str, Any], policy: Any, records: Sequence[Any], *, seed: int,
             first_index: int, max_new_tokens: int, format_instruction: str | None = None,
             progress: bool = False) -> dict[str, Any]:
    """The communication diagnostics of greedy held-out dialogues already played (`records`,
    episode i: reset seed `seed + i`, instance `first_index + i`, as `optima eval` plays them):
    the no-talk ceiling (`solo` with the same policy), both message ablations of the same
    questions with `comm_gain`, and the score split by answer place. Plays 3 more runs of the
    questions (solo, swap, remove); returns plain data."""
    from optima_eval.heldout import HeldOut
    from optima_eval.systems import SystemContext, make_system
    from optima_eval.systems.ablation import ABLATION_MODES, MessageAblation
    from optima_eval.systems.dialogue import dialogue_outcome

    heldout = HeldOut(env_id, env_kwargs, len(records), seed, first_index)
    questions = heldout.questions()
    base = [dialogue_outcome(r, q) for r, q in zip(records, questions)]

    def context(ablation: MessageAblation | None = None) -> SystemContext:
        return SystemContext(env_id, env_kwargs, questions, policy, max_new_tokens=max_new_tokens,
                             progress=progress, ablation=ablation)

    dialogue = make_system("mas", format_instruction=format_instruction)
    no_talk = make_system("solo").run(context())
    out: dict[str, Any] = {"no_talk": _interval(no_talk).__dict__, "score_ablated": {}, "comm_gain": {}}
    for mode in ABLATION_MODES:
        ablation = MessageAblation.swap(base, heldout.task, questions) if mode == "swap" else MessageAblation(mode)
        ablated = dialogue.run(context(ablation))
        out["score_ablated"][mode] = _interval(ablated).__dict__
        out["comm_gain"][mode] = comm_gain(base, ablated).__dict__
    places = {q.position: answer_place_of(q, env_id, env_kwargs) for q in questions}
    out["places"] = {p: i.__dict__ for p, i in place_scores(base, places).items()} if any(places.values()) else None
    env = _env(env_id, json.dumps(dict(env_kwargs), sort_keys=True, default=str))
    told = told_split(env.unwrapped.task, env.possible_agents, questions, base)
    out["told"] = None if told is None else {k: i.__dict__ for k, i in told.items()}
    return out


def _interval(outcomes: Sequence[Outcome]) -> Interval:
    return bootstrap_interval([o.score for o in outcomes if o.scored])


@functools.lru_cache(maxsize=8)
def _env(env_id: str, kwargs_key: str) -> Any:
    import optima_envs

    return optima_envs.make(env_id, **json.loads(kwargs_key))


def answer_place_of(question: Any, env_id: str, env_kwargs: Mapping[str, Any]) -> str | None:
    """Where one held-out question's answer lies (`optima_envs.core.places`)."""
    env = _env(env_id, json.dumps(dict(env_kwargs), sort_keys=True, default=str))
    return answer_place(env.unwrapped.task, question.instance, question.evidence)
