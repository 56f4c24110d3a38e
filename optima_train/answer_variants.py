"""Every closed-set final answer of a sampled dialogue: the dialogue once per answer move.

On a task whose answer moves form a small closed set (`Task.answer_options`, e.g. a game's
picks) and whose answer ends the dialogue, the last turn of a dialogue can be replaced by each
move without replaying anything before it: the earlier turns, and so what the answerer was told,
stay the same. Each variant is scored by the task, as the env would have scored it.

Why: iSFT keeps the best dialogue per question, so it teaches only answers the model already
samples. A listener that picks right 40% of the time, mostly the letters it favours, yields
kept dialogues whose answers repeat its bias. With every move enumerated, each question whose
messages carry the answer yields a right dialogue whatever the answerer sampled: the same
widening as the tree search's `mcts.enumerate_answers`, for sampled dialogues.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

from optima_envs.core.task import Task
from optima_envs.core.types import Message
from optima_envs.errors import ConfigError
from optima_envs.scoring import score_response

__all__ = ["ENUMERATED", "answer_variants", "check_enumerable", "enumerate_answers"]

Tokenize = Callable[[str], Sequence[int]]

ENUMERATED = "enumerated"
"""The `finish_reason` of a last turn written by enumeration, not sampled: no policy made it,
so it has no log-probs, and a trainer that needs the sampling distribution can tell it apart."""


def check_enumerable(task: Task | None, env_id: str) -> Task:
    """The task, when its final answers can be enumerated; a ConfigError that says why not otherwise."""
    if task is None or task.answer_options is None:
        raise ConfigError(f"generation.enumerate_answers needs a task with a closed set of answer moves "
                          f"(Task.answer_options, e.g. referential-game's picks); {env_id} has none: set it to false")
    if task.score_dialogue is not None:
        raise ConfigError(f"generation.enumerate_answers: {env_id} scores the whole dialogue, not its last answer, "
                          "so a replaced answer cannot be rescored alone; set it to false")
    return task


def answer_variants(record: Any, task: Task, instance: Any, tokenize: Tokenize) -> list[Any]:
    """`record` once per answer move of `instance`, in `task.answer_options` order: the sampled
    record itself for the move it made, a rescored copy with the last turn replaced for the
    others (its `finish_reason` is `ENUMERATED`). Only a scored record whose last turn is an answer that ended the dialogue has
    variants; any other record comes back alone (`[record]`)."""
    if not record.scored or not record.turns or record.turns[-1].answer is None:
        return [record]
    history = tuple(_message(t) for t in record.turns[:-1])
    last = record.turns[-1]
    if task.termination(history, _message(last)) != record.end_reason:
        return [record]  # the answer did not end the dialogue (e.g. max_turns came first)
    variants = []
    for option in task.answer_options(instance):
        if option == last.text:
            variants.append(record)
            continue
        ids = tuple(int(i) for i in tokenize(option))
        answer = task.extract(option).answer
        turn = replace(last, text=option, token_ids=ids, num_tokens=len(ids), tokens_exact=True, answer=answer,
                       finish_reason=ENUMERATED, truncated=False, logprobs=None)
        if task.termination(history, _message(turn)) is None:
            continue  # this move would not have ended the dialogue, so its ending is unknown
        result = score_response(option, instance, extractor=task.extract, metric=task.metric)
        agent_tokens = dict(record.agent_tokens)
        agent_tokens[last.speaker] += turn.num_tokens - last.num_tokens
        total = record.total_tokens + turn.num_tokens - last.num_tokens
        components = {"tokens": float(total)}
        if result.score is not None:
            components = {"score": float(result.score), **components}
        variants.append(replace(record, turns=(*record.turns[:-1], turn), final_answer=result.answer,
                                score=result.score, score_ok=result.ok, score_error=result.error,
                                total_tokens=total, agent_tokens=agent_tokens, reward_components=components))
    return variants


def enumerate_answers(records: Sequence[Any], env: Any, tokenize: Tokenize) -> list[Any]:
    """Every record's `answer_variants` (records without an index, or without an answer that
    ended them, pass through unchanged), in the records' order."""
    task = check_enumerable(getattr(env, "task", None), str(getattr(env, "env_id", "this env")))
    out: list[Any] = []
    for record in records:
        if record.index is None:
            out.append(record)
            continue
        out.extend(answer_variants(record, task, task.source.get(record.index), tokenize))
    return out


def _message(turn: Any) -> Message:
    return Message(turn=turn.turn, speaker=turn.speaker, text=turn.text, token_ids=tuple(turn.token_ids),
                   num_tokens=turn.num_tokens, answer=turn.answer, truncated=turn.truncated)
