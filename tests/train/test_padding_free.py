"""Padding-free SFT batches give the padded batches' loss on this stack (CPU, SDPA attention).

TRL's padding-free collator concatenates a batch into one row and restarts `position_ids` at
each example; transformers then builds a block-diagonal causal mask from the restarts, but only
without a KV cache (SFTTrainer passes `use_cache=False`). If that mask were dropped, tokens would
attend across examples and the loss would change, so the per-token losses are compared here on
the embedded model with SFT-shaped rows, under transformers' `sdpa` and under the per-sequence
attention Optima trains with (`optima_train.segmented_attention`).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.model


def _rows(tokenizer) -> list[dict[str, list[int]]]:
    texts = [("You are Alice. The river Kabaix flows through Orlem.", "Orlem. <A>Orlem</A>"),
             ("You are Bob. Orlem is the capital of Dasta, a province in the north.", "Dasta"),
             ("Question: who governs the region?", "The governor of Dasta governs it, so the answer is Dasta.")]
    rows = []
    for prompt, reply in texts:
        p, r = tokenizer.encode(prompt), tokenizer.encode(reply)
        # The labels SFTTrainer builds from `assistant_masks`: -100 outside the reply.
        rows.append({"input_ids": p + r, "labels": [-100] * len(p) + r})
    return rows


def _token_losses(model, batch) -> "torch.Tensor":  # noqa: F821
    import torch

    inputs = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "position_ids")}
    with torch.inference_mode():
        # As SFTTrainer calls it: with a KV cache transformers skips the packed-sequence mask.
        logits = model(**inputs, use_cache=False).logits.float()
    labels = batch["labels"]
    shift_logits, shift_labels = logits[:, :-1], labels[:, 1:]
    keep = shift_labels != -100
    losses = torch.nn.functional.cross_entropy(shift_logits[keep], shift_labels[keep], reduction="none")
    return losses


@pytest.mark.parametrize("segmented", [False, True], ids=["sdpa", "segmented"])
def test_padding_free_batch_matches_padded_batch(segmented: bool) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from optima_agents.models import resolve_model

    path = resolve_model("smollm2-135m")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    if segmented:  # how Optima trains: attention per packed sequence
        from optima_train.segmented_attention import use_segmented_attention

        assert use_segmented_attention(model)
    rows = _rows(tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    padded = DataCollatorForLanguageModeling(pad_token_id=pad)(rows)
    packed = DataCollatorForLanguageModeling(pad_token_id=pad, padding_free=True)(rows)
    assert packed["input_ids"].shape[0] == 1 and "attention_mask" not in packed
    assert packed["input_ids"].shape[1] == sum(len(r["input_ids"]) for r in rows)

    a, b = _token_losses(model, padded), _token_losses(model, packed)
    # every reply token but each row's first is predicted (position 0 is never a label)
    assert a.shape == b.shape and a.numel() == sum(sum(x != -100 for x in r["labels"]) for r in rows)
    assert torch.allclose(a, b, atol=1e-4), (a - b).abs().max()

    # The check can fail: the same packed row without position_ids attends across examples.
    crossed = {k: v for k, v in packed.items() if k != "position_ids"}
    assert not torch.allclose(a, _token_losses(model, crossed), atol=1e-4)
