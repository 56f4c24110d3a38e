"""Turn patterns for constrained sampling: facts copied verbatim, then optionally a closed answer."""

from __future__ import annotations

import re

import pytest

from optima_envs.core.turn_patterns import capitalised_names, escape, facts_then_answer

FACTS = ("Zorp was founded by Bami.", "Tela was born in 1950.", "Kru is a city in (Old) Vaz.")


def test_any_ordered_subset_of_the_facts_then_an_optional_answer_matches():
    pattern = facts_then_answer(FACTS, ["Bami", "Krelo"])
    for text in ("Zorp was founded by Bami.", "Tela was born in 1950. Zorp was founded by Bami.",
                 " ".join(FACTS), "Zorp was founded by Bami. <A>Krelo</A>", "<A>Bami</A>"):
        assert re.fullmatch(pattern, text), text


def test_other_text_other_facts_and_other_answers_do_not_match():
    pattern = facts_then_answer(FACTS, ["Bami", "Krelo"])
    for text in ("Bami was born in Krelo.", "Zorp was founded by Bami", "<A>Nobody</A>", "",
                 "I think <A>Krelo</A>", "<A>Krelo</A> Zorp was founded by Bami.", " ".join(FACTS * 2)):
        assert not re.fullmatch(pattern, text), text


def test_metacharacters_are_literal_and_spaces_are_not_escaped():
    assert escape("Kru is a city in (Old) Vaz.") == r"Kru is a city in \(Old\) Vaz\."
    assert not re.fullmatch(facts_then_answer(FACTS, []), "Kru is a city in Old Vaz!")


def test_only_facts_or_only_answers_and_neither_is_refused():
    assert re.fullmatch(facts_then_answer([], ["Bami"]), "<A>Bami</A>")
    assert not re.fullmatch(facts_then_answer(FACTS[:1], []), "Zorp was founded by Bami. <A>Bami</A>")
    with pytest.raises(ValueError, match="at least one fact or one answer"):
        facts_then_answer([], [])


def test_capitalised_names_in_first_seen_order_without_repeats():
    assert capitalised_names(["Zorp was founded by Bami.", "Bami was born in Krelo in 1950."]) == ("Zorp", "Bami", "Krelo")


@pytest.mark.parametrize("hops", [2, 3])
def test_synth_hop_candidates_hold_the_gold_and_only_names_of_its_type(hops):
    from optima_envs.tasks.synth_hop import answer_candidates, make_task

    source = make_task(hops=hops, distractors=4, comparison_rate=0.5).source
    for index in range(200):
        instance = source.get(index)
        candidates = answer_candidates(instance)
        assert instance.gold in candidates
        if instance.meta["kind"] == "comparison":
            assert len(candidates) == 2 and all(name in instance.question for name in candidates)
        else:  # a chain asks for a place: no founder, company or person is a candidate
            people = {t.split(" was born in ")[0] for t in (e.text for e in instance.evidence) if " was born in " in t}
            assert not people & set(candidates)
