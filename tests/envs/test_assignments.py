"""`key=value` parsing shared by overrides, system specs, `--set` and `--env-kwarg`."""

from __future__ import annotations

import pytest

from optima_envs.assignments import parse_assignment, parse_value
from optima_envs.errors import ConfigError


@pytest.mark.parametrize("text, expected", [
    ("4", 4), ("0.5", 0.5), ("true", True), ("null", None), ("[a, b]", ["a", "b"]), ("", ""),
    ("a: b: c", "a: b: c"), ("[unclosed", "[unclosed"), ("/data/my sets", "/data/my sets"),
])
def test_values_are_yaml_and_text_that_is_not_stays_as_given(text, expected):
    assert parse_value(text) == expected


def test_an_assignment_splits_at_the_first_equals_sign():
    assert parse_assignment(" train.lr = 1e-4", what="x", example="y") == ("train.lr", "1e-4")  # PyYAML reads 1e-4 as text
    assert parse_assignment("question=a=b", what="x", example="y") == ("question", "a=b")


@pytest.mark.parametrize("text", ["k", "=4", "  =x"])
def test_no_key_or_no_equals_sign_is_refused_with_the_example(text):
    with pytest.raises(ConfigError, match=r"--set takes key=value \(e.g. gsm8k-debate.split=test\)"):
        parse_assignment(text, what="--set", example="gsm8k-debate.split=test")


def test_the_leaderboard_reads_a_value_that_is_not_yaml_as_text():
    from optima_train.cli.leaderboard import _task_sets

    assert _task_sets(["synth-hop-ia.question=a: b: c"], ["synth-hop-ia"]) == {"synth-hop-ia": {"question": "a: b: c"}}
