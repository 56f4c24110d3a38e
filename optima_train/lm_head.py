"""Project only the labelled positions through the LM head when TRL trains on a CPU.

TRL's trainers (SFT, DPO, GRPO) replace the model's forward with a fused LM head
(`trl.trainer.utils.add_fused_lm_head`) that returns per-token log-probabilities without the full
`(tokens, vocabulary)` logits. On Triton devices it projects only the positions whose next-token
label is not -100; elsewhere it projects every position, because on compiled backends (Neuron) a
batch-dependent row count would recompile the tiles on every batch. A CPU runs eagerly: a changing
row count costs nothing there, while every projected row costs a `hidden x vocabulary` product
forward and another backward (2 x 576 x 49,152 multiply-adds per row for the embedded model, about
a fifth of its per-token work). In an SFT row most tokens are the prompt (system text, evidence,
the dialogue so far), all labelled -100, so projecting them is wasted.

`labelled_positions_only()` is a context manager that makes TRL's choice "project only the
labelled rows" on CPUs too, for the training inside it. The loss and its gradients are the same
(the skipped rows contributed exact zeros); `tests/train/test_lm_head.py` checks that against the
unpatched head and that only the labelled rows reach the projection. It changes the one name TRL's
fused head reads for that choice, and does nothing (with a warning) on a TRL without it.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Callable, Iterator

__all__ = ["labelled_positions_only"]

log = logging.getLogger(__name__)

# The function `add_fused_lm_head` calls to decide whether to project only the labelled rows.
_DECIDER = "_use_triton"


@contextlib.contextmanager
def labelled_positions_only() -> Iterator[bool]:
    """Within the block, TRL's fused LM head projects only labelled positions on a CPU as it does
    on Triton devices; yields whether that is in effect (False on a TRL without the fused head)."""
    try:
        from trl.trainer import utils as trl_utils
    except ImportError:
        yield False
        return
    decide: Callable[[Any], bool] | None = getattr(trl_utils, _DECIDER, None)
    if decide is None or not hasattr(trl_utils, "add_fused_lm_head"):
        log.warning("this TRL has no fused LM head to narrow (trl.trainer.utils.%s missing); the LM head "
                    "projects every position", _DECIDER)
        yield False
        return
    if getattr(decide, "labelled_only_on_cpu", False):  # nested: already in effect
        yield True
        return

    def decide_with_cpu(device: Any) -> bool:
        return device.type == "cpu" or decide(device)

    decide_with_cpu.labelled_only_on_cpu = True  # type: ignore[attr-defined]
    setattr(trl_utils, _DECIDER, decide_with_cpu)
    try:
        yield True
    finally:
        setattr(trl_utils, _DECIDER, decide)
