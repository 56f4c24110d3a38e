"""Readability: each utterance's mean token NLL under a frozen reference LM (docs/design.md section 2).

**What context an utterance is scored in.** The paper scores the utterance text itself, not the
dialogue. We do the same, and give its first token something to be predicted from: the input is
the reference model's chat-template *generation prompt* (for ChatML, `<|im_start|>assistant\\n`)
followed by the utterance's tokens, and the loss is the mean NLL of the utterance tokens only
(prompt and end-of-turn token excluded). The generation prompt is derived from the template (a
one-message conversation rendered with and without `add_generation_prompt`), never hard-coded;
a tokenizer without a chat template falls back to its BOS token, else EOS (GPT-2's document
separator), else no prefix (the first token is then not scored). No history: it is cheap (a
few prompt tokens per utterance), its value depends only on the text (so it can be cached by
text), and it asks exactly "is this something a model would say".

**Cost.** Utterances are deduplicated, cached by text (an in-memory LRU, plus an optional
append-only JSONL file so a resumed run or a later iteration never recomputes a text), sorted by
length and batched under a token budget, padded on the right (so causal attention needs no mask);
the model runs in bf16 where the hardware has it (float32 on other CPUs, where bf16 is emulated),
and the log-softmax is taken in float32 row by row.

The dialogue's value is the largest per-turn loss (`max_turn_loss`); empty utterances have no
tokens and no loss (the format rules penalise them instead).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any, Sequence

from optima_envs.rewards.turn_loss import TurnLossFn, max_turn_loss

__all__ = ["MAX_LENGTH", "ReadabilityScorer", "TurnLossFn", "max_turn_loss", "scoring_prefix_ids"]


#: Utterances longer than this many tokens are scored on their start (`ReadabilityScorer(max_length=)`).
MAX_LENGTH = 512


def scoring_prefix_ids(tokenizer: Any) -> list[int]:
    """The ids every utterance is scored after: the chat template's generation prompt, else BOS,
    else EOS, else none (see the module doc)."""
    if getattr(tokenizer, "chat_template", None):
        probe = [{"role": "user", "content": "x"}]
        plain = tokenizer.apply_chat_template(probe, tokenize=False)
        prompted = tokenizer.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
        if prompted.startswith(plain) and len(prompted) > len(plain):
            return list(tokenizer.encode(prompted[len(plain):], add_special_tokens=False))
    for token_id in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return [int(token_id)]
    return []


class _DiskCache:
    """Append-only JSONL of {"k": key, "v": loss}; tolerant of a torn last line after a crash."""

    def __init__(self, path: Path):
        self.path = path
        self.values: dict[str, float | None] = {}
        if path.exists():
            with path.open("r", encoding="utf-8") as f:
                for line in f:
                    try:
                        row = json.loads(line)
                        self.values[row["k"]] = row["v"]
                    except (json.JSONDecodeError, KeyError, TypeError):
                        continue  # a torn line from an interrupted write: recompute that text

    def add(self, items: dict[str, float | None]) -> None:
        if not items:
            return
        self.values.update(items)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write("".join(json.dumps({"k": k, "v": v}) + "\n" for k, v in items.items()))
            f.flush()
            os.fsync(f.fileno())


class ReadabilityScorer:
    """Mean token NLL of utterances under a frozen reference model, cached by text.

    Args:
        model: a model folder / registry name, or a loaded causal LM (then pass `tokenizer`).
        tokenizer: the tokenizer, when `model` is an object.
        dtype: "bfloat16", "float32", or "auto" (default): bf16 where `device` runs it natively
            (GPUs, CPUs with AMX or AVX512-BF16), else float32 (`optima_agents.models.dtypes`).
        max_batch_tokens: padded tokens per forward pass.
        max_length: utterances longer than this many tokens are scored on their first
            `max_length` tokens.
        cache_size: entries kept in the in-memory LRU.
        cache_path: optional JSONL file for the on-disk cache (e.g. `<run>/readability_cache.jsonl`).
        model_key: what identifies the reference model in cache keys (default: the model path).
        device: where the model runs ("cpu", "cuda", ...).

    Attributes:
        computed: number of texts actually run through the model (cache misses).
        hits: number of texts answered from a cache.
    """

    def __init__(self, model: Any, tokenizer: Any = None, *, dtype: str = "auto", max_batch_tokens: int = 4096,
                 max_length: int = MAX_LENGTH, cache_size: int = 200_000, cache_path: str | Path | None = None,
                 model_key: str | None = None, device: str = "cpu"):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from optima_agents.models.dtypes import resolve_dtype

        if dtype not in ("auto", "bfloat16", "float32"):
            raise ValueError(f"ReadabilityScorer: dtype must be 'auto', 'bfloat16' or 'float32', got {dtype!r}")
        dtype = resolve_dtype(dtype, device)
        torch_dtype = getattr(torch, dtype)
        if isinstance(model, (str, Path)):
            from optima_agents.models import resolve_model

            path = resolve_model(str(model))
            model_key = model_key or str(path)
            tokenizer = tokenizer or AutoTokenizer.from_pretrained(path)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
        elif tokenizer is None:
            raise ValueError("ReadabilityScorer: pass `tokenizer=` together with a loaded model")
        else:
            model = model.to(torch_dtype)
        model.to(device)
        model.eval()
        self.device = device
        for p in model.parameters():
            p.requires_grad_(False)
        self.model, self.tokenizer = model, tokenizer
        self.max_batch_tokens, self.max_length = max_batch_tokens, max_length
        self.model_key = model_key or getattr(model, "name_or_path", "") or type(model).__name__
        self.prefix_ids = scoring_prefix_ids(tokenizer)
        self._lru: OrderedDict[str, float | None] = OrderedDict()
        self._cache_size = cache_size
        self._disk = _DiskCache(Path(cache_path)) if cache_path else None
        self.computed = 0
        self.hits = 0

    # ------------------------------------------------------------------ public
    def __call__(self, texts: Sequence[str]) -> list[float | None]:
        return self.turn_losses(texts)

    def turn_losses(self, texts: Sequence[str]) -> list[float | None]:
        """Mean NLL per text, in order (None for a text with no tokens)."""
        keys = [self._key(t) for t in texts]
        found: dict[str, float | None] = {}
        todo: dict[str, str] = {}
        for key, text in zip(keys, texts):
            if key in found or key in todo:
                continue
            hit, value = self._lookup(key)
            if hit:
                found[key] = value
                self.hits += 1
            else:
                todo[key] = text
        if todo:
            fresh = dict(zip(todo, self._compute(list(todo.values()))))
            self.computed += len(fresh)
            if self._disk is not None:
                self._disk.add(fresh)
            found.update(fresh)
        for key, value in found.items():
            self._remember(key, value)
        return [found[k] for k in keys]

    def dialogue_loss(self, texts: Sequence[str]) -> float | None:
        """The largest per-turn loss of one dialogue."""
        return max_turn_loss(self.turn_losses(texts))

    # ------------------------------------------------------------------ cache
    def _key(self, text: str) -> str:
        return hashlib.sha1(f"{self.model_key}\x00assistant-turn\x00{text}".encode()).hexdigest()

    def _lookup(self, key: str) -> tuple[bool, float | None]:
        if key in self._lru:
            self._lru.move_to_end(key)
            return True, self._lru[key]
        if self._disk is not None and key in self._disk.values:
            return True, self._disk.values[key]
        return False, None

    def _remember(self, key: str, value: float | None) -> None:
        self._lru[key] = value
        self._lru.move_to_end(key)
        while len(self._lru) > self._cache_size:
            self._lru.popitem(last=False)

    # ------------------------------------------------------------------ model
    def _compute(self, texts: list[str]) -> list[float | None]:
        import torch

        encoded = [list(self.tokenizer.encode(t, add_special_tokens=False))[: self.max_length] for t in texts]
        out: list[float | None] = [None] * len(texts)
        order = sorted((i for i in range(len(texts)) if encoded[i]), key=lambda i: len(encoded[i]))
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        start = 0
        while start < len(order):
            end = start + 1
            while end < len(order) and (end - start + 1) * (len(self.prefix_ids) + len(encoded[order[end]])) <= self.max_batch_tokens:
                end += 1
            batch = order[start:end]
            width = len(self.prefix_ids) + len(encoded[batch[-1]])
            ids = torch.full((len(batch), width), pad, dtype=torch.long)
            for row, i in enumerate(batch):
                seq = self.prefix_ids + encoded[i]
                ids[row, : len(seq)] = torch.tensor(seq)
            with torch.inference_mode():
                ids = ids.to(self.device)
                # Rows are padded on the right, so under causal attention no scored position sees
                # padding: no attention mask is needed, and without one the attention runs its causal
                # kernel rather than a masked one (the same logits at every scored position).
                logits = self.model(input_ids=ids).logits
            for row, i in enumerate(batch):
                n, p = len(encoded[i]), len(self.prefix_ids)
                first = max(p, 1)  # with no prefix the first token cannot be predicted
                if first >= p + n:
                    continue
                pred = logits[row, first - 1: p + n - 1].float()
                target = ids[row, first: p + n]
                out[i] = float(torch.nn.functional.cross_entropy(pred, target, reduction="mean"))
            start = end
        return out
