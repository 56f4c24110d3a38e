"""Forward-pass speed of the embedded model in float32 and bf16 on this machine's CPU.

Why: `"auto"` dtypes (`optima_agents.models.dtypes`) pick bf16 only where the CPU runs it
natively. This measures what that choice is worth here: the same batch of prompt-length
sequences through the transformers model in each dtype, interleaved, median of `--repeats`.

    python benchmarks/dtype_speed.py
    python benchmarks/dtype_speed.py --name dtype_speed_avx512bf16   # another machine, its own file

Writes `benchmarks/results/<name>.json` and `.md` (default name `dtype_speed`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._results import RESULTS, invocation, write_report, write_result  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--name", default="dtype_speed", help="Result file name (one per machine measured).")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    from optima_agents.models import resolve_model
    from optima_agents.models.dtypes import cpu_has_native_bf16, resolve_dtype

    path = resolve_model(args.model)
    models = {name: AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, name)).eval()
              for name in ("float32", "bfloat16")}
    ids = torch.randint(100, 40000, (args.batch, args.length), generator=torch.Generator().manual_seed(0))
    times: dict[str, list[float]] = {name: [] for name in models}
    with torch.inference_mode():
        for name, model in models.items():  # warm-up
            model(input_ids=ids)
        for _ in range(args.repeats):
            for name, model in models.items():
                start = time.perf_counter()
                model(input_ids=ids)
                times[name].append(time.perf_counter() - start)
    tokens = args.batch * args.length
    rows = {name: {"seconds_median": statistics.median(t), "tokens_per_s": tokens / statistics.median(t), "seconds": t}
            for name, t in times.items()}
    ratio = rows["float32"]["tokens_per_s"] / rows["bfloat16"]["tokens_per_s"]
    command = invocation("dtype_speed.py")
    capability = torch.backends.cpu.get_cpu_capability()
    text = "\n".join([
        "# Forward-pass speed by dtype (transformers, CPU)", "",
        f"Made by: `{command}`. {args.model}, batch {args.batch} x {args.length} tokens, median of {args.repeats}; "
        f"CPU capability `{capability}`, native bf16: {cpu_has_native_bf16()}, {torch.get_num_threads()} torch threads; "
        f"`auto` resolves to `{resolve_dtype('auto', 'cpu')}` here.", "",
        "| dtype | seconds per pass | tokens/s |", "|---|---|---|",
        *(f"| {name} | {r['seconds_median']:.3f} | {r['tokens_per_s']:.0f} |" for name, r in rows.items()), "",
        f"float32 is {ratio:.2f}x bf16's speed on this machine.", ""])
    write_report(RESULTS / f"{args.name}.md", text)
    write_result(args.name, {"command": command, "model": args.model, "batch": args.batch, "length": args.length,
                                 "cpu_capability": capability, "native_bf16": cpu_has_native_bf16(),
                                 "torch_threads": torch.get_num_threads(), "dtypes": rows,
                                 "float32_over_bf16": ratio})
    print(text)


if __name__ == "__main__":
    main()
