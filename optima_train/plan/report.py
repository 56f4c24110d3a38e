"""`optima train <algo> --plan`: the launch plan of a parsed config, as text plus a list of problems.

It says which processes run where (the coordinating loop, the vLLM engine, the training processes),
the memory each GPU needs in each phase, the tokens one iteration samples and trains on, and what
that costs in GPU-hours under the stated `plan.arithmetic.Throughput` assumptions. Problems (a phase that does
not fit a GPU, a launch the loop cannot start) are listed last; the command then exits with 2.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from optima_train.plan.arithmetic import (
    AMP_FP32,
    DEEPSPEED_BF16,
    GIB,
    GPUSpec,
    Throughput,
    activation_bytes,
    decode_tokens_per_s,
    dialogue_tokens,
    generation_gpu_hours,
    training_flops,
    training_gpu_hours,
    training_memory,
    vllm_memory,
)
from optima_train.plan.inputs import Launch, ModelSize, read_launch, resolve_size
from optima_train.plan.workload import Stage, agents, workload

__all__ = ["CUDA_CONTEXT", "PlanReport", "build_report"]

#: Memory a process takes on a GPU before any tensor (CUDA context and allocator slack), assumed.
CUDA_CONTEXT = 1 * GIB
#: vLLM's defaults (of the versions we know; newer ones vary), used when backend_kwargs leave them out.
VLLM_DEFAULTS = {"gpu_memory_utilization": 0.9, "max_num_seqs": 256}


@dataclass
class PlanReport:
    """The printed plan (`text()`), the problems that make `--plan` exit with 2, and the GPU-hours
    per iteration by phase (for docs and tests)."""

    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    gpu_hours: dict[str, float] = field(default_factory=dict)

    def text(self) -> str:
        problems = [f"  - {p}" for p in self.problems] or ["  none"]
        return "\n".join([*self.lines, "problems", *problems]) + "\n"


def _gib(n: float) -> str:
    return f"{n / GIB:6.1f} GiB"


def build_report(cfg: Any, *, command: str, gpu: GPUSpec, model_size: str | None = None, prompt_tokens: int = 1000,
                 throughput: Throughput = Throughput()) -> PlanReport:
    """The plan of `cfg` on GPUs of type `gpu` (see the module doc).

    Args:
        command: the command line shown in the header.
        model_size: `--model-size` (a known model, a folder, or a parameter count), else the size
            comes from `model.name`.
        prompt_tokens: the assumed prompt (system prompt and evidence) of one agent, for sequence
            lengths and prefill.

    Raises:
        ConfigError: the model's size cannot be found, or an accelerate config cannot be read.
    """
    r = PlanReport()
    model = resolve_size(cfg.model.name, model_size)
    ref_name = cfg.model.reference or cfg.model.name
    uses_ref = cfg.reward.lambda_loss > 0
    ref = (resolve_size(ref_name, None, what="model.reference") if cfg.model.reference else model) if uses_ref \
        else None
    period, stages = workload(cfg)
    launches = {s.train_name: read_launch(s.train, device=cfg.model.device) for s in stages}
    on_gpu = cfg.model.device == "cuda" or (cfg.model.device == "auto" and (
        any(s.sampler.backend == "vllm" for s in stages) or any(x.kind in ("ddp", "deepspeed") for x in launches.values())))
    from optima_agents.models.dtypes import resolve_dtype

    dtype_bytes = 2 if resolve_dtype(cfg.model.dtype, "cuda") == "bfloat16" else 4  # a plan is for GPUs
    ref_bytes = ref.parameters * dtype_bytes if (ref is not None and on_gpu) else 0

    r.lines += [f"launch plan: {command}", "  (estimates from the config alone: no model, data or GPU was used)",
                f"model        {model.name}: {model.parameters / 1e9:.3f}B parameters ({model.source})"]
    if model.arch is not None:
        a = model.arch
        r.lines.append(f"             {a.num_layers} layers, hidden {a.hidden_size}, {a.num_heads} heads, "
                       f"{a.num_kv_heads} KV heads x {a.head_dim}, vocab {a.vocab_size:,}")
    r.lines.append(f"reference    {ref.name} ({ref.parameters / 1e9:.3f}B), the readability LM, in the coordinator "
                   f"{'on GPU 0' if on_gpu else 'on the CPU'}" if ref else "reference    none (reward.lambda_loss=0)")
    r.lines.append(f"hardware     {gpu.name}: {gpu.memory_bytes / GIB:.1f} GiB, {gpu.bf16_flops / 1e12:.0f} TFLOP/s "
                   f"bf16, {gpu.bandwidth / 1e9:,.0f} GB/s ({gpu.source})")

    r.lines.append("processes")
    r.lines.append("  coordinator  1 process on node 0: the loop, rewards, selection, evaluation"
                   + (f"; holds the readability reference ({_gib(ref_bytes).strip()})" if ref_bytes else ""))
    for sampler_name, sampler in _unique((s.sampler_name, s.sampler) for s in stages):
        r.lines.append(f"  {sampler_name:<12} {_sampler_text(sampler)}")
        _check_sampler_fits(r, sampler_name, sampler, launches)
    for train_name, launch in launches.items():
        r.lines.append(f"  {train_name + ' step':<12} {_launch_text(launch)}")
        _check_launch(r, train_name, launch)
    r.lines.append("  the phases take turns on the same GPUs: the generation engine is closed before each training "
                   "step starts")

    for sampler_name, sampler in _unique((s.sampler_name, s.sampler) for s in stages):
        if sampler.backend == "vllm":
            _vllm_section(r, sampler_name, sampler, model, gpu, ref_bytes)
    for _, stage in _unique((s.train_name, s) for s in stages):
        _train_section(r, cfg, stage, launches[stage.train_name], model, gpu, ref_bytes)
    _tokens_and_cost(r, cfg, period, stages, launches, model, gpu, prompt_tokens, throughput)
    return r


def _unique(pairs: Any) -> list[tuple[str, Any]]:
    seen: dict[str, Any] = {}
    for name, value in pairs:
        seen.setdefault(name, value)
    return list(seen.items())


def _engine_gpus(sampler: Any) -> int:
    kw = sampler.backend_kwargs
    return int(kw.get("tensor_parallel_size", 1)) * int(kw.get("pipeline_parallel_size", 1))


def _sampler_text(sampler: Any) -> str:
    if sampler.backend == "vllm":
        kw = sampler.backend_kwargs
        return (f"vLLM in the coordinator: tensor_parallel_size={kw.get('tensor_parallel_size', 1)}, "
                f"pipeline_parallel_size={kw.get('pipeline_parallel_size', 1)} -> {_engine_gpus(sampler)} GPU(s) "
                "of node 0")
    return f"backend {sampler.backend!r} in the coordinator (one device)"


def _launch_text(launch: Launch) -> str:
    if launch.launcher == "inline":
        return "inline: in the coordinator process (one device)"
    kind = {"ddp": "DDP", "deepspeed": f"DeepSpeed ZeRO-{launch.zero_stage}", "cpu": "CPU processes (gloo)",
            "inline": "one process"}[launch.kind]
    where = launch.config_file or "accelerate's default config"
    return (f"accelerate launch ({where}): {launch.processes} process(es) = {launch.machines} node(s) x "
            f"{launch.gpus_per_machine}, {kind}")


def _check_sampler_fits(r: PlanReport, name: str, sampler: Any, launches: dict[str, Launch]) -> None:
    per_node = [x.gpus_per_machine for x in launches.values() if x.kind in ("ddp", "deepspeed")]
    if sampler.backend == "vllm" and per_node and _engine_gpus(sampler) > min(per_node):
        r.problems.append(f"{name}: the vLLM engine needs {_engine_gpus(sampler)} GPUs on node 0, but the training "
                          f"launch has {min(per_node)} per node")


def _check_launch(r: PlanReport, name: str, launch: Launch) -> None:
    if launch.problem:
        r.problems.append(f"{name}: {launch.problem}")
    if launch.machines > 1 and launch.kind == "ddp":
        r.problems.append(f"{name}: {launch.config_file} is a {launch.machines}-node DDP launch, which needs "
                          "`accelerate launch` run on every node; the loop starts it on node 0 only. Use a DeepSpeed "
                          "config with deepspeed_multinode_launcher: pdsh (configs/gpu/accelerate/2x8_zero3.yaml), "
                          "which starts every node from node 0")
    if launch.machines > 1 and launch.kind == "deepspeed" and not (
            launch.hostfile and launch.multinode_launcher in ("pdsh", "openmpi", "mvapich", "mpich")):
        r.problems.append(f"{name}: {launch.config_file} spans {launch.machines} nodes; set deepspeed_hostfile and "
                          "deepspeed_multinode_launcher (pdsh) so that node 0 starts every node")


def _vllm_section(r: PlanReport, name: str, sampler: Any, model: ModelSize, gpu: GPUSpec, ref_bytes: int) -> None:
    kw = sampler.backend_kwargs
    util = float(kw.get("gpu_memory_utilization", VLLM_DEFAULTS["gpu_memory_utilization"]))
    tp = int(kw.get("tensor_parallel_size", 1))
    r.lines.append(f"memory per GPU, {name} (vLLM reserves gpu_memory_utilization={util:g} of "
                   f"{gpu.memory_bytes / GIB:.1f} GiB)")
    if model.arch is None:
        r.lines.append(f"  weights      {_gib(model.parameters * 2 / tp)}  (KV cache: needs the architecture)")
        return
    mem = vllm_memory(model.parameters, gpu, utilization=util, tensor_parallel=tp,
                      kv_bytes_per_token=model.arch.kv_bytes_per_token(tensor_parallel=tp))
    r.lines += [f"  weights      {_gib(mem.weights)}  (bf16 / tensor_parallel_size {tp})",
                f"  activations  {_gib(mem.activation_reserve)}  (assumed; vLLM measures its peak at start-up)",
                f"  KV cache     {_gib(mem.kv_cache)}  = {mem.kv_tokens:,} tokens at "
                f"{mem.kv_bytes_per_token / 1024:g} KiB per token per GPU"]
    gpu0 = mem.reserved + ref_bytes + CUDA_CONTEXT
    if ref_bytes:
        r.lines.append(f"  GPU 0        {_gib(gpu0)}  (the vLLM reserve + the coordinator's reference and CUDA "
                       "context)")
    if gpu0 > gpu.memory_bytes:
        most = (gpu.memory_bytes - ref_bytes - CUDA_CONTEXT) / gpu.memory_bytes
        r.problems.append(f"{name}: GPU 0 needs {gpu0 / GIB:.1f} GiB of {gpu.memory_bytes / GIB:.1f} (vLLM's reserve "
                          f"beside the readability reference); set {name}.backend_kwargs.gpu_memory_utilization <= "
                          f"{int(most * 100) / 100:.2f}")
    if mem.kv_tokens < int(kw.get("max_model_len", 1)):
        r.problems.append(f"{name}: the KV cache holds {mem.kv_tokens:,} tokens, fewer than one sequence of "
                          f"max_model_len={kw.get('max_model_len')}")


def _train_section(r: PlanReport, cfg: Any, stage: Stage, launch: Launch, model: ModelSize, gpu: GPUSpec,
                   ref_bytes: int) -> None:
    t, lora = stage.train, cfg.lora
    precision = DEEPSPEED_BF16 if launch.kind == "deepspeed" and t.bf16 else AMP_FP32
    arch = model.arch
    if lora.enabled and arch is None:
        trainable, how = 0, "LoRA (adapter size needs the architecture: not counted)"
    elif lora.enabled:
        trainable = arch.lora_parameters(lora.r, lora.target_modules)
        how = f"LoRA r={lora.r} on {','.join(lora.target_modules)}: {trainable / 1e6:.1f}M trainable"
    else:
        trainable, how = model.parameters, "full fine-tuning"
    batch = t.per_device_train_batch_size * (2 if stage.preference else 1)
    act = activation_bytes(arch, batch=batch, seq_len=t.max_length, checkpointing=t.gradient_checkpointing) \
        if arch else 0
    world = launch.processes
    mem = training_memory(model.parameters, trainable, precision, zero_stage=launch.zero_stage, world_size=world,
                          reference_copy=stage.preference and not lora.enabled, activations=act)
    split = f" / {world}" if world > 1 else ""
    zero = launch.zero_stage
    r.lines += [f"memory per {'process' if launch.kind == 'cpu' else 'GPU'}, {stage.train_name} step ({how}; "
                f"{precision.name}{f'; ZeRO-{zero}' if zero else ''})",
                f"  weights      {_gib(mem.weights)}  ({precision.weight_bytes} B/param{split if zero >= 3 else ''})",
                f"  gradients    {_gib(mem.gradients)}  ({precision.grad_bytes} B/trainable param"
                f"{split if zero >= 2 else ''})",
                f"  optimizer    {_gib(mem.optimizer)}  (AdamW, {precision.optimizer_bytes} B/trainable param"
                f"{split if zero >= 1 else ''})"]
    if mem.reference:
        r.lines.append(f"  reference    {_gib(mem.reference)}  (DPO's frozen copy of the weights)")
    r.lines.append(f"  activations  {_gib(mem.activations)}  (rough: batch {batch} x {t.max_length} tokens, gradient "
                   f"checkpointing {'on' if t.gradient_checkpointing else 'off'})" if arch
                   else "  activations  n/a (needs the architecture)")
    total = mem.total + CUDA_CONTEXT
    r.lines.append(f"  total        {_gib(total)}  (with {CUDA_CONTEXT / GIB:.0f} GiB CUDA context); GPU 0 also holds "
                   f"the coordinator's {_gib(ref_bytes + CUDA_CONTEXT).strip()}" if ref_bytes and launch.kind != "cpu"
                   else f"  total        {_gib(total)}  (with {CUDA_CONTEXT / GIB:.0f} GiB CUDA context)")
    if launch.kind != "cpu" and cfg.model.device != "cpu":
        gpu0 = total + ref_bytes + (CUDA_CONTEXT if ref_bytes else 0)
        if gpu0 > gpu.memory_bytes:
            r.problems.append(f"{stage.train_name} step: GPU 0 needs about {gpu0 / GIB:.1f} GiB of "
                              f"{gpu.memory_bytes / GIB:.1f}; use more GPUs, a higher ZeRO stage, LoRA, a smaller "
                              "per_device_train_batch_size or gradient_checkpointing")


def _tokens_and_cost(r: PlanReport, cfg: Any, period: str, stages: list[Stage], launches: dict[str, Launch],
                     model: ModelSize, gpu: GPUSpec, prompt_tokens: int, throughput: Throughput) -> None:
    r.lines.append(f"tokens per {period} (upper bounds: every turn uses its max_new_tokens; prompts assumed "
                   f"{prompt_tokens:,} tokens per agent)")
    if not stages:
        r.lines.append("  not known: this algorithm's config declares no plan_workload()")
        return
    eval_turns = stages[0].turns
    eval_new = cfg.eval.max_new_tokens or stages[0].max_new_tokens
    eval_tokens = dialogue_tokens(cfg.eval.episodes, eval_turns, eval_new)
    gen_hours = train_hours = 0.0
    for s in stages:
        x = f"{s.repeats} x " if s.repeats > 1 else ""
        generated = dialogue_tokens(s.dialogues, s.turns, s.max_new_tokens) * s.repeats
        r.lines.append(f"  {s.name} {s.sampler_name:<10} {x}{s.dialogues_how} x {s.turns} turns x {s.max_new_tokens} "
                       f"tokens = {generated:,}")
        rate = _decode_rate(s, model, gpu, prompt_tokens, throughput)
        if rate is not None:
            prefill = s.dialogues * s.repeats * (agents(cfg) * prompt_tokens + s.turns * s.max_new_tokens)
            gen_hours += generation_gpu_hours(generated, prefill, model.parameters, gpu, tokens_per_s=rate[0],
                                              engine_gpus=_engine_gpus(s.sampler), throughput=throughput)
            r.lines.append(f"  {'':<16}decode at {rate[0]:,.0f} tokens/s per engine ({rate[1]} sequences of "
                           f"~{rate[2]:,} tokens in flight), prefill {prefill:,} tokens")
        t = s.train
        seq = min(t.max_length, prompt_tokens + s.turns * s.max_new_tokens)
        per_example = seq * (2 if s.preference else 1)
        if t.max_steps > 0:
            examples = t.max_steps * t.per_device_train_batch_size * t.gradient_accumulation_steps * \
                launches[s.train_name].processes
            how, epochs = f"max_steps {t.max_steps} x global batch", 1.0
        else:
            examples, how, epochs = s.examples, s.examples_how, t.num_train_epochs
        trained = int(examples * per_example * epochs) * s.repeats
        kind = "pairs x (chosen + rejected)" if s.preference else "examples"
        r.lines.append(f"  {s.name} {s.train_name + ' step':<10} {x}<= {examples:,} {kind} ({how}) x <= {seq:,} "
                       f"tokens x {epochs:g} epoch(s) = {trained:,}")
        train_hours += training_gpu_hours(training_flops(model.parameters, trained,
                                                         checkpointing=t.gradient_checkpointing,
                                                         reference_forward=s.preference), gpu, throughput)
    r.lines.append(f"  evaluation        {cfg.eval.episodes:,} held-out dialogues x {eval_turns} turns x {eval_new} "
                   f"tokens = {eval_tokens:,} (when evaluated)")
    r.gpu_hours.update({"generation": gen_hours, "training": train_hours})
    gen_gpus = max((_engine_gpus(s.sampler) for s in stages if s.sampler.backend == "vllm"), default=0)
    train_gpus = max(x.processes for x in launches.values())
    cpu = all(x.kind == "cpu" for x in launches.values())
    r.lines += [f"cost per {period} (GPU-hours, upper bounds; assumptions: {throughput.bandwidth_efficiency:.0%} of the "
                f"memory bandwidth when decoding, {throughput.flops_efficiency:.0%} of peak FLOP/s otherwise)",
                f"  generation   {gen_hours:8.2f}" + (f"  (~{gen_hours / gen_gpus:.2f} h on {gen_gpus} GPUs)" if gen_gpus
                                                      else "  (only estimated for the vllm backend)"),
                f"  training     {train_hours:8.2f}  (~{train_hours / train_gpus:.2f} h on {train_gpus} "
                f"{'process(es)' if cpu else 'GPU(s)'})",
                f"  sources      {throughput.bandwidth_source}; {throughput.flops_source}; {gpu.source}"]


def _decode_rate(s: Stage, model: ModelSize, gpu: GPUSpec, prompt_tokens: int,
                 throughput: Throughput) -> tuple[float, int, int] | None:
    """(tokens/s of one engine, sequences in flight, mean context) for a vllm sampler."""
    if s.sampler.backend != "vllm" or model.arch is None:
        return None
    kw = s.sampler.backend_kwargs
    tp = int(kw.get("tensor_parallel_size", 1))
    per_token = model.arch.kv_bytes_per_token(tensor_parallel=tp)
    mem = vllm_memory(model.parameters, gpu, tensor_parallel=tp, kv_bytes_per_token=per_token,
                      utilization=float(kw.get("gpu_memory_utilization", VLLM_DEFAULTS["gpu_memory_utilization"])))
    context = prompt_tokens + s.turns * s.max_new_tokens // 2
    live = getattr(s.sampler, "max_live", None) or s.dialogues
    batch = max(1, min(live, int(kw.get("max_num_seqs", VLLM_DEFAULTS["max_num_seqs"])), mem.kv_tokens // context))
    rate = decode_tokens_per_s(model.parameters, gpu, batch=batch, context=context, kv_bytes_per_token=per_token,
                               tensor_parallel=tp, throughput=throughput)
    return rate, batch, context
