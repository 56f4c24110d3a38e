"""Attention per packed sequence (`optima_train.segmented_attention`) is the attention of each
sequence alone, and anything that is not a packed row goes to `sdpa` unchanged."""

from __future__ import annotations

import pytest

from optima_train.segmented_attention import SEGMENTED_SDPA, plain_causal, segment_bounds, use_segmented_attention
from tests.train.tiny_model import build_tiny_model


def _positions(*lengths: int):
    import torch

    return torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)


def test_segment_bounds_of_a_packed_row() -> None:
    assert segment_bounds(_positions(3, 1, 4)) == [(0, 3), (3, 4), (4, 8)]


@pytest.mark.parametrize("case", ["one sequence", "two rows", "continuation", "none", "one token"])
def test_segment_bounds_is_none_where_the_row_is_not_packed(case: str) -> None:
    import torch

    positions = {"one sequence": _positions(5), "two rows": torch.cat([_positions(2, 3)] * 2),
                 "continuation": _positions(3, 2) + 7, "none": None, "one token": _positions(1)}[case]
    assert segment_bounds(positions) is None


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


def _model(folder, segmented: bool):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    if segmented:
        assert use_segmented_attention(model) and model.config._attn_implementation == SEGMENTED_SDPA
    return model


def test_packed_row_scores_and_gradients_as_each_sequence_alone(tiny) -> None:
    import torch

    lengths = (5, 9, 3, 7)
    ids = torch.randint(6, 40, (1, sum(lengths)), generator=torch.Generator().manual_seed(0))
    model = _model(tiny, segmented=True)
    logits = model(input_ids=ids, position_ids=_positions(*lengths), use_cache=False).logits
    logits.square().mean().backward()
    packed_grad = model.model.layers[0].self_attn.q_proj.weight.grad.clone()

    reference = _model(tiny, segmented=False)
    starts = [0, 5, 14, 17]
    alone = torch.cat([reference(input_ids=ids[:, s:s + n], use_cache=False).logits for s, n in zip(starts, lengths)], 1)
    alone.square().mean().backward()
    assert torch.allclose(logits, alone, atol=1e-5), (logits - alone).abs().max()
    assert torch.allclose(packed_grad, reference.model.layers[0].self_attn.q_proj.weight.grad, atol=1e-6)

    # The check can fail: the whole row as one sequence is not the same attention.
    whole = reference(input_ids=ids, use_cache=False).logits
    assert not torch.allclose(logits, whole, atol=1e-3)


def test_padded_batches_go_to_sdpa_unchanged(tiny) -> None:
    import torch

    ids = torch.randint(6, 40, (2, 8), generator=torch.Generator().manual_seed(1))
    mask = torch.tensor([[1] * 8, [0] * 3 + [1] * 5])
    out = [_model(tiny, segmented).eval()(input_ids=ids, attention_mask=mask).logits for segmented in (False, True)]
    assert torch.equal(out[0], out[1])


def test_a_model_not_on_sdpa_is_left_alone(tiny) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny, dtype=torch.float32, attn_implementation="eager")
    assert not use_segmented_attention(model) and model.config._attn_implementation == "eager"


def test_only_plain_causal_attention_is_segmented() -> None:
    from transformers import LlamaConfig, MistralConfig, Qwen2Config

    assert plain_causal(LlamaConfig())
    assert plain_causal(Qwen2Config(use_sliding_window=False))
    assert not plain_causal(Qwen2Config(use_sliding_window=True, sliding_window=64, max_window_layers=0))
    assert not plain_causal(MistralConfig(sliding_window=64))
