"""Where a question's answer lies: with the first agent that can answer, only with its
partners, or in the question itself.

A multi-agent score can rise without any agent using its partner: on an information-asymmetric
task a question whose gold answer is written in the first answering agent's own evidence can be
answered with no exchange at all. Splitting a score by `answer_place` shows which questions
needed the partner (`partner`), and so whether a gain came from talking.

- `alone`: the gold answer is written in the first answering agent's own evidence.
- `partner`: it is not, and the question does not name it: the partner holds what is needed
  (in a game: the hidden information, e.g. which object the speaker sees as the target).
- `named`: the question names it (a choice between named options, "Who was born first, A or
  B?"): the facts to choose need the partner, or a guess.

A task says how its instances split through `Task.answer_place`; for information-asymmetric
tasks without one, `place_by_gold_text` reads it off the gold text.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from optima_envs.core.types import Evidence, TaskInstance

__all__ = ["PLACES", "always_partner", "answer_place", "answers_grounded", "gold_in_text", "partners_informed",
           "place_by_gold_text", "seat_messages"]

PLACES = ("alone", "partner", "named")


def gold_in_text(gold: str, text: str) -> bool:
    """The gold answer as whole words of `text`, case-folded, trailing punctuation ignored."""
    words = gold.strip().rstrip(".!?").casefold()
    return bool(words) and re.search(rf"(?<!\w){re.escape(words)}(?!\w)", text.casefold()) is not None


def _golds(instance: TaskInstance) -> list[str]:
    """The instance's gold answer and its aliases, as text."""
    return [str(g) for g in instance.gold] if isinstance(instance.gold, (list, tuple)) else [str(instance.gold)]


def place_by_gold_text(instance: TaskInstance, evidence: Sequence[Sequence[Evidence]], answerer: int) -> str:
    """`named` when the question holds any gold text, `alone` when the answering seat's evidence
    does, else `partner`."""
    golds = _golds(instance)
    if any(gold_in_text(g, instance.question) for g in golds):
        return "named"
    own = " ".join(piece.render() for piece in evidence[answerer])
    return "alone" if any(gold_in_text(g, own) for g in golds) else "partner"


def always_partner(instance: TaskInstance, evidence: Sequence[Sequence[Evidence]], answerer: int) -> str:
    """For games whose answer always needs the partner's hidden information."""
    return "partner"


def _answerer(task: Any, num_agents: int) -> int:
    """The first seat whose role gives answers."""
    roles = task.prompts.roles(num_agents)
    return next((i for i, role in enumerate(roles) if role.gives_answer), 0)


def answer_place(task: Any, instance: TaskInstance, evidence: Sequence[Sequence[Evidence]]) -> str | None:
    """The place of one instance's answer (`PLACES`), seen from the first seat whose role gives
    answers; None for tasks where the agents hold no private evidence (debate)."""
    answerer = _answerer(task, len(evidence))
    if task.answer_place is not None:
        return task.answer_place(instance, evidence, answerer)
    if task.family != "ia":
        return None
    return place_by_gold_text(instance, evidence, answerer)


def partners_informed(task: Any, instance: TaskInstance, evidence: Sequence[Sequence[Evidence]],
                      messages: Sequence[tuple[int, str]]) -> bool | None:
    """Whether a dialogue's partners told the answering seat what it lacked.

    `messages` are (seat, text) pairs in order. Only `partner` questions are checked: on the
    others the answering seat needs nothing from its partners, so the answer is True. There the
    task's `informative` check reads the partners' messages (a game: the speaker described the
    target and no other object); without one, an information-asymmetric task asks that a partner
    wrote the gold text. None for tasks with no private evidence (debate), where it has no meaning.

    A right answer after messages that carry nothing is a guess; training on it teaches guessing.
    """
    place = answer_place(task, instance, evidence)
    if place is None:
        return None
    if place != "partner":
        return True
    answerer = _answerer(task, len(evidence))
    said = [text for seat, text in messages if seat != answerer]
    if task.informative is not None:
        return bool(task.informative(instance, evidence, said))
    golds = _golds(instance)
    return any(gold_in_text(g, " ".join(said)) for g in golds)


def seat_messages(turns: Sequence[Any], agents: Sequence[str]) -> list[tuple[int, str, bool]]:
    """(seat, text, answered) triples, the form `answers_grounded` reads, from messages that carry
    `speaker`, `text` and `answer` (the env's `Message`s or a record's turns); `agents` in seat order."""
    seats = {name: i for i, name in enumerate(agents)}
    return [(seats[turn.speaker], turn.text, bool(turn.answer)) for turn in turns]


def answers_grounded(instance: TaskInstance, evidence: Sequence[Sequence[Evidence]],
                     messages: Sequence[tuple[int, str, bool]]) -> bool | None:
    """Whether every answer in a dialogue was given by a seat that could know it then.

    `messages` are (seat, text, answered) triples in order, `answered` True where the text holds
    an answer. A seat could know the answer when every supporting piece of evidence is its own or
    was written out (case aside) in a partner's earlier message, or when a partner had
    already written the gold answer (trusting a partner who knows is not a guess). With distractors
    an agent can often name a right answer without knowing it (its one city, one of two named
    people); training on such lucky answers teaches answering before hearing the partner.

    None when the instance's evidence marks nothing as supporting (no check is possible).
    """
    support = [e.text for pieces in evidence for e in pieces if e.supporting]
    if not support:
        return None
    golds = _golds(instance)
    for k, (seat, _, answered) in enumerate(messages):
        if not answered:
            continue
        heard = " ".join(text for other, text, _ in messages[:k] if other != seat)
        known = " ".join([*(e.text for e in evidence[seat]), heard])
        if not (all(gold_in_text(fact, known) for fact in support) or any(gold_in_text(g, heard) for g in golds)):
            return False
    return True
