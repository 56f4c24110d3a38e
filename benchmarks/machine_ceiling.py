"""What this machine can do for a model, measured: matrix-product GFLOP/s at the model's own
shapes (float32, and bfloat16 where the CPU runs it natively) and memory copy bandwidth, so a
throughput result can say how far it is from the hardware.

    python benchmarks/machine_ceiling.py                    # the embedded model's shapes
    python benchmarks/machine_ceiling.py --model DIR --repeats 5

For each linear layer of a decoder block (q, k, v, o, gate, up, down) and the LM head, a product
of `rows x in_features` activations by the `in_features x out_features` weight is timed at
several row counts: 1 row is one decode step of one sequence, 64 rows a batch of decode steps or
a short prefill, 1,024 a long prefill. The per-token rate of a whole forward pass is the layer
rates weighted by their FLOPs (`forward_ceiling`), the figure a generation or training
throughput result divides its own FLOPs by (`workload_ceiling_s`). Bandwidth is the median of
repeated copies of a 256 MiB tensor (read + write counted).

Writes `benchmarks/results/machine_ceiling_<kind>.json` and `.md` (e.g. `machine_ceiling_avx2`), so
the ceilings of the CPU kinds (AMX, AVX512-BF16 or AVX2 only) sit side by side: every figure
depends on the kind, and a throughput result reads the ceiling of the kind it runs on
(`same_cpu_ceiling`; `machine_ceiling.json`, the first one measured, holds AVX512-BF16).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import RESULTS, cpu_kind, invocation, write_report, write_result  # noqa: E402

NAME = "machine_ceiling"
ROWS = (1, 8, 64, 256, 1024)


@dataclass(frozen=True)
class ModelShapes:
    """The matrix shapes of a Llama-style decoder, from its config.json."""

    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    layers: int
    vocab: int

    @classmethod
    def from_folder(cls, folder: str | Path) -> "ModelShapes":
        """The shapes of the model in a Hugging Face folder (its config.json)."""
        return cls.from_config(json.loads((Path(folder) / "config.json").read_text()))

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "ModelShapes":
        return cls(hidden=config["hidden_size"], intermediate=config["intermediate_size"],
                   heads=config["num_attention_heads"],
                   kv_heads=config.get("num_key_value_heads", config["num_attention_heads"]),
                   layers=config["num_hidden_layers"], vocab=config["vocab_size"])

    def linears(self) -> dict[str, tuple[int, int]]:
        """(in_features, out_features) of each product a token goes through once per layer, and
        the LM head once per token."""
        head_dim = self.hidden // self.heads
        kv = self.kv_heads * head_dim
        return {"q": (self.hidden, self.hidden), "k": (self.hidden, kv), "v": (self.hidden, kv),
                "o": (self.hidden, self.hidden), "gate": (self.hidden, self.intermediate),
                "up": (self.hidden, self.intermediate), "down": (self.intermediate, self.hidden),
                "lm_head": (self.hidden, self.vocab)}

    def layer_count(self, name: str) -> int:
        return 1 if name == "lm_head" else self.layers

    def forward_flops_per_token(self) -> float:
        """Multiply-adds of the linear layers for one token, times 2 (attention scores over the
        context are left out: at these context lengths they are a few percent)."""
        return self.decoder_flops_per_token() + self.head_flops_per_token()

    def decoder_flops_per_token(self) -> float:
        """The forward FLOPs of the decoder blocks' linear layers for one token (no LM head)."""
        return sum(2.0 * i * o * self.layers for n, (i, o) in self.linears().items() if n != "lm_head")

    def head_flops_per_token(self) -> float:
        """The forward FLOPs of the LM head for one position."""
        return 2.0 * self.hidden * self.vocab

    def adapter_flops_per_token(self, rank: int) -> float:
        """The forward FLOPs of rank-`rank` LoRA adapters on every decoder linear layer, one token."""
        return sum(2.0 * rank * (i + o) * self.layers for n, (i, o) in self.linears().items() if n != "lm_head")


def training_flops(shapes: ModelShapes, tokens: int, labelled: int, lora_rank: int | None) -> float:
    """The fewest FLOPs of training steps over `tokens` tokens of which `labelled` carry loss.

    Every decoder linear layer runs its forward product and the product that passes the gradient
    to its input; a full fine-tune (`lora_rank` None) also forms its weight gradient, a frozen
    LoRA base does not. Adapters run all three products. The LM head (untrained by LoRA) is needed
    only at the labelled positions: forward and input gradient. Attention over the context is
    left out, as in `forward_flops_per_token`."""
    base = shapes.decoder_flops_per_token() * (2 if lora_rank else 3) * tokens
    adapters = 3 * shapes.adapter_flops_per_token(lora_rank) * tokens if lora_rank else 0.0
    return base + adapters + shapes.head_flops_per_token() * 2 * labelled


def scoring_flops(shapes: ModelShapes, sequences: Sequence[tuple[int, int]]) -> float:
    """The fewest forward FLOPs of scoring texts by their token NLL: for each `(context, scored)`
    pair, the decoder over all `context + scored` tokens and the LM head only at the `scored`
    positions whose next token is predicted."""
    return sum(shapes.decoder_flops_per_token() * (c + n) + shapes.head_flops_per_token() * n for c, n in sequences)


def native_bf16(kind: str) -> bool:
    return kind in ("AMX", "AVX512-BF16")


def median_seconds(run: Callable[[], Any], *, repeats: int, min_time_s: float = 0.2) -> float:
    """Median over `repeats` timings of one call; each timing repeats the call until it has run
    for `min_time_s`, so small products are not timer noise."""
    run()
    times = []
    for _ in range(repeats):
        calls, start = 0, time.perf_counter()
        while True:
            run()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time_s:
                break
        times.append(elapsed / calls)
    return statistics.median(times)


def matmul_gflops(rows: int, in_features: int, out_features: int, dtype: Any, repeats: int) -> float:
    """GFLOP/s of `rows x in` @ `in x out` in `dtype` (the weight stored as nn.Linear stores it)."""
    import torch

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(rows, in_features, generator=generator).to(dtype)
    w = torch.randn(out_features, in_features, generator=generator).to(dtype)
    with torch.inference_mode():
        seconds = median_seconds(lambda: torch.nn.functional.linear(x, w), repeats=repeats)
    return 2.0 * rows * in_features * out_features / seconds / 1e9


def copy_bandwidth_gbs(repeats: int, mib: int = 256) -> float:
    """GB/s of a large tensor copy, counting the bytes read and the bytes written."""
    import torch

    src = torch.ones(mib * 2**20 // 4, dtype=torch.float32)
    dst = torch.empty_like(src)
    seconds = median_seconds(lambda: dst.copy_(src), repeats=repeats)
    return 2 * src.numel() * 4 / seconds / 1e9


def forward_ceiling(shapes: ModelShapes, gflops: dict[str, float]) -> float:
    """GFLOP/s of a whole forward pass at one row count: the time of each product at its
    measured rate, summed over the layers (a FLOP-weighted harmonic mean)."""
    flops = {n: 2.0 * i * o * shapes.layer_count(n) for n, (i, o) in shapes.linears().items()}
    seconds = sum(f / (gflops[n] * 1e9) for n, f in flops.items())
    return sum(flops.values()) / seconds / 1e9


def workload_ceiling_s(flops_per_token: float, decode_tokens: int, prefill_tokens: int,
                       decode_gflops: float, prefill_gflops: float) -> float:
    """The fewest seconds a workload can take at the measured rates: decode tokens at the
    decode-shaped rate, prefill tokens (the prompt tokens not served from a prefix cache) at the
    prefill-shaped rate. A measured time divided into this is the share of the ceiling reached."""
    return (flops_per_token * decode_tokens / (decode_gflops * 1e9)
            + flops_per_token * prefill_tokens / (prefill_gflops * 1e9))


def uncached_prefill_tokens(sequences: Sequence[tuple[Sequence[int], Sequence[int]]], block: int = 1) -> int:
    """Prompt tokens a perfect prefix cache would still have to compute, for (prompt, reply) id
    sequences in the order they were generated: each prompt's tokens past its longest prefix
    that is a prefix of an earlier prompt followed by its reply. This is the least prefill work
    the workload allows, so the ceiling built on it is the strictest one.

    `block` > 1 counts a cache that keeps whole blocks of that many tokens, as vLLM's does: the
    shared prefix is rounded down to whole blocks, and a prompt's last token is always computed."""
    trie: dict[int, dict] = {}
    total = 0
    for prompt, reply in sequences:
        node, shared = trie, 0
        for token in prompt:
            if token not in node:
                break
            node, shared = node[token], shared + 1
        if block > 1:
            shared = min(shared, len(prompt) - 1) // block * block
        total += len(prompt) - shared
        node = trie
        for token in (*prompt, *reply):
            node = node.setdefault(token, {})
    return total


def turn_prompts(records: Sequence[Any], tokenizer: Any) -> list[list[int]]:
    """The prompt ids each turn of `records` was generated from (the policies' chat formatting)."""
    from optima_agents.chat import prompt_ids

    prompts = []
    for record in records:
        for turn in record.turns:
            view = {"agent": turn.speaker, "system_prompt": record.system_prompts[record.agents.index(turn.speaker)],
                    "transcript": tuple({"speaker": t.speaker, "text": t.text} for t in record.turns[: turn.turn])}
            prompts.append(prompt_ids(view, tokenizer))
    return prompts


def generation_ceiling(records: Sequence[Any], tokenizer: Any, payload: dict[str, Any], dtype: str, *,
                       decode_tokens: int | None = None) -> dict[str, Any]:
    """The fewest seconds generating `records` (episode records) can take on this machine: every
    generated token decoded at the 64-row rate, every prompt token a perfect prefix cache could not
    serve prefilled at the 1,024-row rate, in `dtype` (or the fastest measured one,
    `ceiling_rates`). `decode_tokens`: the backend's own count of generated tokens, where it kept
    one (the replies' ids are the cleaned text re-encoded)."""
    prompts = turn_prompts(records, tokenizer)
    replies = [t.token_ids for r in records for t in r.turns]
    prefill = uncached_prefill_tokens(list(zip(prompts, replies)))
    decode = sum(len(reply) for reply in replies) if decode_tokens is None else decode_tokens
    decode_rate, prefill_rate, rate_dtype = ceiling_rates(payload, dtype)
    seconds = workload_ceiling_s(payload["forward_gflop_per_token"] * 1e9, decode, prefill, decode_rate, prefill_rate)
    return {"ceiling_s": seconds, "decode_tokens": decode, "prefill_tokens": prefill,
            "prompt_tokens": sum(map(len, prompts)), "dtype": rate_dtype}


def ceiling_rates(payload: dict[str, Any], dtype: str) -> tuple[float, float, str]:
    """(decode GFLOP/s, prefill GFLOP/s, the dtype they are for) from a `machine_ceiling.json`
    payload: decode at 64 rows (a batch of decode steps), prefill at 1,024 rows; the fastest
    measured dtype when `dtype` was not measured (llama.cpp's quantized products, say), so the
    ceiling is never looser than the machine's best."""
    rates = payload["results"]
    if dtype not in rates:
        dtype = max(payload["dtypes"], key=lambda d: rates[d]["forward"]["64"])
    forward = rates[dtype]["forward"]
    return forward["64"], forward["1024"], dtype


def kind_name(kind: str) -> str:
    """The result name of CPU kind `kind`'s ceiling: "machine_ceiling_avx512_bf16" for "AVX512-BF16"."""
    return f"{NAME}_{kind.lower().replace('-', '_').replace(' ', '_')}"


def ceiling_for(kind: str) -> dict[str, Any] | None:
    """The committed ceiling measured on CPU kind `kind` (`machine_ceiling_<kind>.json`, else
    `machine_ceiling.json` when it holds that kind), with `file` naming where it was read; None
    when no such file exists, since a ceiling from another kind of CPU says nothing about this one."""
    for name in (kind_name(kind), NAME):
        path = RESULTS / f"{name}.json"
        try:
            payload = json.loads(path.read_text())
        except FileNotFoundError:
            continue
        except ValueError as err:
            raise ValueError(f"{path}: not valid JSON ({err}); rerun benchmarks/machine_ceiling.py") from err
        if payload.get("cpu_kind") == kind:
            return {**payload, "file": path.name}
    return None


def same_cpu_ceiling() -> dict[str, Any] | None:
    """`ceiling_for` this machine's CPU kind."""
    return ceiling_for(cpu_kind())


def measure(shapes: ModelShapes, dtypes: Sequence[str], repeats: int) -> dict[str, Any]:
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    out: dict[str, Any] = {}
    for name in dtypes:
        dtype = getattr(torch, name)
        per_layer = {rows: {layer: matmul_gflops(rows, i, o, dtype, repeats)
                            for layer, (i, o) in shapes.linears().items()} for rows in ROWS}
        out[name] = {"per_layer": {str(r): v for r, v in per_layer.items()},
                     "forward": {str(r): forward_ceiling(shapes, v) for r, v in per_layer.items()}}
    out["copy_bandwidth_gbs"] = copy_bandwidth_gbs(repeats)
    return out


def report(payload: dict[str, Any]) -> str:
    shapes, kind = payload["shapes"], payload["cpu_kind"]
    per_token = payload["forward_gflop_per_token"]
    lines = ["# Machine ceiling: matrix products at the model's shapes, and memory bandwidth", "",
             f"Command: `{payload['command']}`", "",
             f"CPU: {kind}, {payload['threads']} threads, torch {payload['torch']}. Model shapes: hidden "
             f"{shapes['hidden']}, intermediate {shapes['intermediate']}, {shapes['layers']} layers, vocabulary "
             f"{shapes['vocab']}: {per_token:.3f} GFLOP per token of forward pass (linear layers), about 2x that "
             "per token of LoRA training (the forward and input-gradient products of the frozen layers) and 3x "
             f"for a full fine-tune (the weight gradients too). Median of {payload['repeats']} timings.", "",
             "## Whole forward pass (GFLOP/s, the layers weighted by their FLOPs) and the token rate it allows", "",
             "| dtype | rows | GFLOP/s | forward tokens/s at that rate |", "|---|---|---|---|"]
    for dtype in payload["dtypes"]:
        for rows, rate in payload["results"][dtype]["forward"].items():
            lines.append(f"| {dtype} | {rows} | {rate:.1f} | {rate / per_token:.0f} |")
    lines += ["", "## Per product (GFLOP/s)", "", "| dtype | rows | " + " | ".join(shapes_names(payload)) + " |",
              "|---|---|" + "---|" * len(shapes_names(payload))]
    for dtype in payload["dtypes"]:
        for rows, layers in payload["results"][dtype]["per_layer"].items():
            lines.append(f"| {dtype} | {rows} | " + " | ".join(f"{layers[n]:.1f}" for n in shapes_names(payload)) + " |")
    lines += ["", f"Memory copy bandwidth (read + write): **{payload['results']['copy_bandwidth_gbs']:.1f} GB/s**. "
              "Decoding one token of one sequence reads every weight once, so at batch 1 the rate is bounded by "
              f"bandwidth: {payload['results']['copy_bandwidth_gbs'] / max(payload['weight_gb'], 1e-9):.0f} "
              f"tokens/s for {payload['weight_gb'] * 1e3:.0f} MB of float32 weights."]
    return "\n".join(lines) + "\n"


def shapes_names(payload: dict[str, Any]) -> list[str]:
    first = payload["dtypes"][0]
    return list(next(iter(payload["results"][first]["per_layer"].values())))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="Registry name or model folder (its config.json).")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtypes", default="auto", help="Comma-separated torch dtypes; auto: float32, plus "
                        "bfloat16 where the CPU runs it natively.")
    parser.add_argument("--name", default=None, help="Result name (default: machine_ceiling_<cpu kind>).")
    args = parser.parse_args(argv)
    import torch

    from optima_agents.models.resolve import resolve_model

    shapes = ModelShapes.from_folder(resolve_model(args.model))
    kind = cpu_kind()
    name = args.name or kind_name(kind)
    dtypes = (["float32", "bfloat16"] if native_bf16(kind) else ["float32"]) if args.dtypes == "auto" \
        else args.dtypes.split(",")
    params = sum(i * o * shapes.layer_count(n) for n, (i, o) in shapes.linears().items())
    payload = {"command": invocation("machine_ceiling.py", argv), "cpu_kind": kind, "threads": os.cpu_count(),
               "torch": torch.__version__, "repeats": args.repeats, "shapes": asdict(shapes),
               "forward_gflop_per_token": shapes.forward_flops_per_token() / 1e9, "weight_gb": params * 4 / 1e9,
               "dtypes": dtypes, "results": measure(shapes, dtypes, args.repeats)}
    write_result(name, payload)
    text = report(payload)
    write_report(RESULTS / f"{name}.md", text)
    print(text)


if __name__ == "__main__":
    main()
