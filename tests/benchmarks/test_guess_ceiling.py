"""The type-aware guess: an agent scores 1/k among the k answer-type names it has seen, 0 without the gold."""

from __future__ import annotations

import pytest

from benchmarks.guess_ceiling import seat_guess
from optima_envs.core.types import Evidence, TaskInstance


def _chain(facts: list[str]) -> TaskInstance:
    return TaskInstance("i", "In which city was the founder of Zorp born?", "Krelo",
                        evidence=tuple(Evidence(t) for t in facts),
                        meta={"kind": "chain", "hops": 2})


FACTS = ["Zorp was founded by Bami.", "Bami was born in Krelo.", "Tiva was born in Omsel.", "Dapun was born in 1916."]


@pytest.mark.parametrize(("held", "expected"), [
    ([1], 1.0),        # the only city it holds is the gold
    ([1, 2], 0.5),     # the gold and a distractor city
    ([2, 3], 0.0),     # a city, but not the gold
    ([0], 0.0),        # no city at all: no guess
])
def test_a_seat_guesses_among_the_cities_it_has_seen(held, expected):
    instance = _chain(FACTS)
    assert seat_guess(instance, [FACTS[i] for i in held]) == expected
