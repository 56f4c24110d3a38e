"""Launch-plan arithmetic: model sizes, memory per GPU, tokens and GPU-hours, as pure functions.

`optima train <algo> --plan` (`optima_train.plan.report`) reads a config and calls these; nothing
here loads a model, a dataset or a GPU, so every number can be checked by hand (tests/train/test_plan.py).

Memory per GPU for training with AdamW (ZeRO paper, Rajbhandari et al. 2020, section 3.1):

- `AMP_FP32` (one process, or DDP): fp32 weights (4 B/param), fp32 gradients (4 B) and AdamW's two
  fp32 moments (8 B); bf16 is autocast. This is what `trl_glue` does without DeepSpeed (it loads fp32).
- `DEEPSPEED_BF16` (DeepSpeed with bf16): bf16 weights (2 B) and gradients (2 B), and an optimizer
  state of 12 B/param (fp32 master copy, momentum, variance).

ZeRO stage 1 divides the optimizer state over the data-parallel processes, stage 2 also the gradients,
stage 3 also the weights. LoRA trains only the adapter: the frozen base keeps its weights, while
gradients and optimizer state exist only for the adapter's parameters.

Costs are upper bounds built from stated assumptions (`Throughput`): decoding is the larger of a
memory-bandwidth time (the weights and every live sequence's KV cache are read once per step) and a
compute time (2 FLOPs per parameter per token); training takes 6 FLOPs per parameter per token
(Kaplan et al. 2020), 8 with gradient checkpointing (one forward recomputed), and DPO adds a
reference forward (2 per token) when the reference is a separate model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

__all__ = [
    "AMP_FP32", "DEEPSPEED_BF16", "GIB", "GPUS", "KNOWN_MODELS", "GPUSpec", "ModelArch", "Precision", "Throughput",
    "TrainMemory", "VLLMMemory", "activation_bytes", "decode_tokens_per_s", "dialogue_tokens", "generation_gpu_hours",
    "training_flops", "training_gpu_hours", "training_memory", "vllm_memory",
]

GIB = 1024**3

_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class ModelArch:
    """The shape of a Llama-style decoder (what config.json says), enough to count parameters,
    LoRA parameters and KV-cache bytes."""

    name: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    tie_embeddings: bool

    def parameters(self) -> int:
        """Embeddings (and an untied head), per layer the attention and SwiGLU projections (no
        biases) and two RMSNorms, and the final norm."""
        h, q, kv = self.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        layer = h * q + 2 * h * kv + q * h + 3 * h * self.intermediate_size + 2 * h
        embeddings = self.vocab_size * h * (1 if self.tie_embeddings else 2)
        return embeddings + self.num_layers * layer + h

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each projection of one layer, by PEFT module name."""
        h, q, kv, i = self.hidden_size, self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim, \
            self.intermediate_size
        return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}

    def lora_parameters(self, r: int, targets: Sequence[str]) -> int:
        """Parameters of a rank-`r` LoRA adapter on `targets` (PEFT names, or "all-linear": every
        projection but the LM head): r x (in + out) per adapted module."""
        names = _LINEAR if list(targets) == ["all-linear"] else [t for t in targets if t in _LINEAR]
        shapes = self.linear_shapes()
        return self.num_layers * sum(r * (shapes[n][0] + shapes[n][1]) for n in names)

    def kv_bytes_per_token(self, *, dtype_bytes: int = 2, tensor_parallel: int = 1) -> int:
        """KV-cache bytes one token takes on one GPU: keys and values of every layer; tensor
        parallelism splits the KV heads (each GPU keeps at least one)."""
        heads = max(1, self.num_kv_heads // tensor_parallel)
        return 2 * self.num_layers * heads * self.head_dim * dtype_bytes


#: Models the plan knows without their files (values from each model's config.json on the hub).
KNOWN_MODELS: dict[str, ModelArch] = {
    arch.name.lower(): arch for arch in (
        ModelArch("meta-llama/Meta-Llama-3-8B-Instruct", 128256, 4096, 14336, 32, 32, 8, 128, False),
        ModelArch("meta-llama/Meta-Llama-3-8B", 128256, 4096, 14336, 32, 32, 8, 128, False),
        ModelArch("meta-llama/Llama-3.2-3B-Instruct", 128256, 3072, 8192, 28, 24, 8, 128, True),
        ModelArch("meta-llama/Llama-3.2-3B", 128256, 3072, 8192, 28, 24, 8, 128, True),
        ModelArch("HuggingFaceTB/SmolLM2-135M-Instruct", 49152, 576, 1536, 30, 9, 3, 64, True),
        ModelArch("smollm2-135m", 49152, 576, 1536, 30, 9, 3, 64, True),
    )
}


@dataclass(frozen=True)
class GPUSpec:
    """One accelerator: memory, dense bf16 tensor-core peak and memory bandwidth (datasheet)."""

    name: str
    memory_bytes: int
    bf16_flops: float
    bandwidth: float
    source: str


GPUS: dict[str, GPUSpec] = {g.name: g for g in (
    GPUSpec("a100-80gb", 80 * GIB, 312e12, 2.039e12, "NVIDIA A100 datasheet, SXM4 80GB"),
    GPUSpec("a100-40gb", 40 * GIB, 312e12, 1.555e12, "NVIDIA A100 datasheet, SXM4 40GB"),
    GPUSpec("h100-80gb", 80 * GIB, 989e12, 3.35e12, "NVIDIA H100 datasheet, SXM5 (dense bf16)"),
    GPUSpec("h200-141gb", 141 * 10**9, 989e12, 4.8e12, "NVIDIA H200 datasheet, SXM (dense bf16)"),
)}


@dataclass(frozen=True)
class Precision:
    """Bytes per parameter: weights (every parameter), gradients and optimizer state (trainable ones)."""

    name: str
    weight_bytes: int
    grad_bytes: int
    optimizer_bytes: int


AMP_FP32 = Precision("fp32 weights, bf16 autocast", 4, 4, 8)
DEEPSPEED_BF16 = Precision("DeepSpeed bf16 (fp32 master in the optimizer)", 2, 2, 12)


@dataclass(frozen=True)
class TrainMemory:
    """Bytes per GPU of one training process."""

    weights: int
    gradients: int
    optimizer: int
    reference: int = 0
    activations: int = 0

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.reference + self.activations


def training_memory(parameters: int, trainable: int, precision: Precision, *, zero_stage: int = 0,
                    world_size: int = 1, reference_copy: bool = False, activations: int = 0) -> TrainMemory:
    """Memory per GPU of `parameters` weights of which `trainable` are trained with AdamW.

    Args:
        zero_stage: 0 (none), 1 (optimizer state divided by `world_size`), 2 (and gradients) or 3
            (and weights).
        reference_copy: DPO's frozen reference is a second copy of the weights (full fine-tuning);
            with LoRA it is the same model with the adapter disabled (no copy).
    """
    if zero_stage not in (0, 1, 2, 3):
        raise ValueError(f"zero_stage must be 0, 1, 2 or 3, got {zero_stage}")
    if not 0 <= trainable <= parameters or world_size < 1:
        raise ValueError(f"need 0 <= trainable <= parameters and world_size >= 1, got {trainable}, {parameters}, "
                         f"{world_size}")
    w = world_size if zero_stage >= 3 else 1
    g = world_size if zero_stage >= 2 else 1
    o = world_size if zero_stage >= 1 else 1
    weights = -(-parameters * precision.weight_bytes // w)
    return TrainMemory(weights=weights, gradients=-(-trainable * precision.grad_bytes // g),
                       optimizer=-(-trainable * precision.optimizer_bytes // o),
                       reference=weights if reference_copy else 0, activations=activations)


def activation_bytes(arch: ModelArch, *, batch: int, seq_len: int, checkpointing: bool) -> int:
    """A rough activation peak of one training process (bf16).

    A layer's saved activations are about 34 x batch x seq x hidden bytes (Korthikanti et al.
    2022, eq. 1, without the attention-score term that fused attention does not store); with
    gradient checkpointing only each layer's input (2 bytes per value) is kept, plus one layer's
    recompute. The logits add 8 bytes per vocabulary entry (fp32 values and their gradient).
    """
    tokens = batch * seq_len
    layer = 34 * tokens * arch.hidden_size
    saved = arch.num_layers * 2 * tokens * arch.hidden_size + layer if checkpointing else arch.num_layers * layer
    return saved + 8 * tokens * arch.vocab_size


@dataclass(frozen=True)
class VLLMMemory:
    """Per-GPU memory of one vLLM engine with tensor parallelism `tensor_parallel`."""

    reserved: int
    weights: int
    activation_reserve: int
    kv_cache: int
    kv_bytes_per_token: int
    kv_tokens: int


def vllm_memory(parameters: int, gpu: GPUSpec, *, utilization: float, tensor_parallel: int = 1,
                dtype_bytes: int = 2, kv_bytes_per_token: int, activation_reserve: int = 2 * GIB) -> VLLMMemory:
    """vLLM reserves `utilization` x GPU memory on each GPU for its share of the weights, its
    activation peak (`activation_reserve`, an assumption: vLLM measures it at start-up) and the KV
    cache, which gets the rest. `kv_bytes_per_token` is per GPU (`ModelArch.kv_bytes_per_token`)."""
    if not 0 < utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {utilization}")
    reserved = int(utilization * gpu.memory_bytes)
    weights = -(-parameters * dtype_bytes // tensor_parallel)
    kv = max(0, reserved - weights - activation_reserve)
    return VLLMMemory(reserved=reserved, weights=weights, activation_reserve=activation_reserve, kv_cache=kv,
                      kv_bytes_per_token=kv_bytes_per_token, kv_tokens=kv // kv_bytes_per_token)


def dialogue_tokens(dialogues: int, turns: int, max_new_tokens: int) -> int:
    """Most tokens `dialogues` dialogues can generate: every turn uses its whole budget."""
    return dialogues * turns * max_new_tokens


@dataclass(frozen=True)
class Throughput:
    """The efficiencies the cost model assumes, with where they come from."""

    bandwidth_efficiency: float = 0.77
    flops_efficiency: float = 0.40
    bandwidth_source: str = ("vLLM decoding Llama-3.1-8B on one A100 at batch 1 reached 77% of the memory-bandwidth "
                             "ceiling (johnmusgrave.com/p/vllm-throughput-latency-sweep-on)")
    flops_source: str = ("40% model-FLOPs utilisation, an assumption below the 46.2% PaLM reports "
                         "(Chowdhery et al. 2022, table 3)")


def decode_tokens_per_s(parameters: int, gpu: GPUSpec, *, batch: int, context: int, kv_bytes_per_token: int,
                        tensor_parallel: int = 1, dtype_bytes: int = 2,
                        throughput: Throughput = Throughput()) -> float:
    """Tokens per second of one vLLM engine decoding `batch` sequences of `context` tokens.

    One decode step reads every GPU's share of the weights and of the live KV cache
    (`kv_bytes_per_token` is per GPU) and does 2 x parameters FLOPs per sequence; it takes the
    longer of the two times at the assumed efficiencies, and yields `batch` tokens.
    """
    if batch < 1 or context < 1:
        raise ValueError(f"batch and context must be >= 1, got {batch} and {context}")
    per_gpu_bytes = parameters * dtype_bytes / tensor_parallel + batch * context * kv_bytes_per_token
    t_memory = per_gpu_bytes / (gpu.bandwidth * throughput.bandwidth_efficiency)
    t_compute = 2 * parameters * batch / (tensor_parallel * gpu.bf16_flops * throughput.flops_efficiency)
    return batch / max(t_memory, t_compute)


def generation_gpu_hours(decode_tokens: int, prefill_tokens: int, parameters: int, gpu: GPUSpec, *,
                         tokens_per_s: float, engine_gpus: int,
                         throughput: Throughput = Throughput()) -> float:
    """GPU-hours to decode `decode_tokens` at `tokens_per_s` per engine (all `engine_gpus` busy) and
    prefill `prefill_tokens` at 2 FLOPs per parameter and the assumed compute efficiency."""
    decode_s = decode_tokens / tokens_per_s * engine_gpus
    prefill_s = 2 * parameters * prefill_tokens / (gpu.bf16_flops * throughput.flops_efficiency)
    return (decode_s + prefill_s) / 3600


def training_flops(parameters: int, tokens: int, *, checkpointing: bool, reference_forward: bool = False) -> float:
    """FLOPs to train on `tokens` tokens: 6 per parameter and token (forward 2, backward 4), 2 more
    when gradient checkpointing recomputes the forward, 2 more for a separate DPO reference forward."""
    per_token = 6 + (2 if checkpointing else 0) + (2 if reference_forward else 0)
    return per_token * parameters * tokens


def training_gpu_hours(flops: float, gpu: GPUSpec, throughput: Throughput = Throughput()) -> float:
    """GPU-hours for `flops` at the assumed compute efficiency."""
    return flops / (gpu.bf16_flops * throughput.flops_efficiency) / 3600
