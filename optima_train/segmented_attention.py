"""Causal attention per packed sequence for padding-free training.

Padding-free SFT (`SFTConfig(padding_free=True)`) concatenates a batch into one row whose
`position_ids` restart at 0 at every sequence. transformers' `sdpa` then builds a
block-diagonal causal mask over the whole row and runs attention on all of it: with four
sequences of length L that is (4L)^2 scores where 4 L^2 are needed, the key and value heads are
repeated for grouped-query attention because a mask is given, and on a CPU none of the masked
blocks is skipped. `segmented_sdpa` reads the sequence starts from `position_ids` and runs
`sdpa` on each sequence alone with `is_causal` and no mask, which is the same attention (each
query sees its own sequence's earlier keys) at a quarter of the work for four sequences.

Anything that is not a packed row (a batch of several rows, a padding mask, one sequence)
goes to transformers' `sdpa` unchanged, and a model with sliding-window layers is never switched
(its mask is not plain causal). `use_segmented_attention(model)` registers the
implementation under `SEGMENTED_SDPA` and switches the model to it; masks are built as for
`sdpa`, so switching back is always safe.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SEGMENTED_SDPA", "plain_causal", "segment_bounds", "segmented_sdpa", "use_segmented_attention"]

SEGMENTED_SDPA = "optima_segmented_sdpa"


def segment_bounds(position_ids: Any) -> list[tuple[int, int]] | None:
    """(start, end) of each packed sequence in a one-row `position_ids` (a new sequence starts
    wherever the position does not follow the previous one by 1); None unless the row holds at
    least two sequences and each starts at position 0 (a row whose positions start elsewhere is
    a continuation, as in decoding with a cache)."""
    if position_ids is None or position_ids.dim() != 2 or position_ids.shape[0] != 1:
        return None
    row = position_ids[0]
    if row.numel() < 2:
        return None
    starts = ((row[1:] - row[:-1]) != 1).nonzero().flatten().add(1).tolist()
    if not starts:
        return None
    starts = [0, *starts]
    if any(int(row[s]) != 0 for s in starts):
        return None
    return list(zip(starts, [*starts[1:], row.numel()]))


def segmented_sdpa(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, dropout: float = 0.0,
                   scaling: float | None = None, position_ids: Any = None, **kwargs: Any) -> tuple[Any, None]:
    """transformers' attention-function signature: query (1, heads, T, d), key and value (1,
    kv heads, T, d); returns (1, T, heads, d). Per-sequence causal `sdpa` on a packed row whose
    keys and queries are the same tokens, `sdpa` as is on anything else."""
    import torch
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    bounds = segment_bounds(position_ids) if query.shape[2] == key.shape[2] else None
    if bounds is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      position_ids=position_ids, **kwargs)
    parts = [sdpa_attention_forward(module, query[:, :, s:e], key[:, :, s:e], value[:, :, s:e], None,
                                    dropout=dropout, scaling=scaling, is_causal=True)[0] for s, e in bounds]
    return torch.cat(parts, dim=1), None


def plain_causal(config: Any) -> bool:
    """Whether every layer of a model with this config attends to all earlier tokens (no sliding
    window), the only attention a per-sequence `is_causal` call reproduces."""
    if any(kind != "full_attention" for kind in getattr(config, "layer_types", None) or ()):
        return False
    return getattr(config, "sliding_window", None) is None or getattr(config, "use_sliding_window", True) is False


def use_segmented_attention(model: Any) -> bool:
    """Register `segmented_sdpa` (with `sdpa`'s masks) and switch `model` to it when it runs
    `sdpa` now with plain causal attention; returns whether it did (a model on eager, flash or
    flex attention, or with sliding-window layers, is left alone)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) not in ("sdpa", SEGMENTED_SDPA) or not plain_causal(config):
        return False
    AttentionInterface.register(SEGMENTED_SDPA, segmented_sdpa)
    AttentionMaskInterface.register(SEGMENTED_SDPA, sdpa_mask)
    model.set_attn_implementation(SEGMENTED_SDPA)
    return True
