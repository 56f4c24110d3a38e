"""The training-throughput benchmark reads every variant name it prints back to the same setting."""

from __future__ import annotations

import pytest

from benchmarks.training_throughput import DEFAULT_VARIANTS, OPTIMA_PATH, Variant


@pytest.mark.parametrize("name", [*DEFAULT_VARIANTS, OPTIMA_PATH])
def test_names_round_trip(name):
    assert Variant.parse(name).name == name


def test_the_optima_path_draws_fast_dropout_masks_at_the_default_probability():
    variant = Variant.parse(OPTIMA_PATH)
    assert (variant.dtype, variant.padding_free, variant.fast_dropout, variant.dropout) == ("bf16-weights", True, True,
                                                                                          0.05)
    assert OPTIMA_PATH in DEFAULT_VARIANTS


@pytest.mark.parametrize("name, message", [
    ("bf16 padded segmented", "segmented attention needs padding-free rows"),
    ("bf16 padding-free fast-dropout dropout 0", "fast-dropout and dropout 0 exclude each other"),
    ("bf16 padding-free dropout 0 fast-dropout", "'fast-dropout' is not one of"),
    ("int8 padded", "start with a dtype"),
])
def test_bad_names_are_refused_with_the_reason(name, message):
    with pytest.raises(ValueError, match=message):
        Variant.parse(name)
