"""The launch plan: its arithmetic against hand-computed numbers, the readers of model sizes and
accelerate configs, and `optima train <algo> --plan` on every shipped GPU config (nothing loads)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from optima_envs.errors import ConfigError
from optima_train.config.io import load_config
from optima_train.plan.arithmetic import (
    AMP_FP32,
    DEEPSPEED_BF16,
    GIB,
    GPUS,
    KNOWN_MODELS,
    activation_bytes,
    decode_tokens_per_s,
    dialogue_tokens,
    generation_gpu_hours,
    training_flops,
    training_gpu_hours,
    training_memory,
    vllm_memory,
)
from optima_train.plan.inputs import read_launch, resolve_size
from optima_train.plan.workload import workload

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "configs" / "gpu"
LLAMA8 = KNOWN_MODELS["meta-llama/meta-llama-3-8b-instruct"]
LLAMA3 = KNOWN_MODELS["meta-llama/llama-3.2-3b-instruct"]
SMOL = KNOWN_MODELS["smollm2-135m"]
P8 = 8_030_261_248  # Llama-3-8B: 2 x 128,256 x 4,096 embeddings + 32 x 218,112,000 per layer + 4,096 final norm
A100 = GPUS["a100-80gb"]


class TestModelArch:
    @pytest.mark.parametrize("arch, count", [
        (LLAMA8, P8),
        (LLAMA3, 3_212_749_824),  # tied: 128,256 x 3,072 + 28 x 100,669,440 + 3,072
        (SMOL, 134_515_008),      # tied: 49,152 x 576 + 30 x 3,540,096 + 576 (= the embedded model's safetensors)
    ], ids=["8b", "3b", "135m"])
    def test_parameter_counts(self, arch, count):
        assert arch.parameters() == count

    def test_kv_cache_per_token(self):
        assert LLAMA8.kv_bytes_per_token() == 2 * 32 * 8 * 128 * 2 == 131_072
        assert LLAMA8.kv_bytes_per_token(tensor_parallel=8) == 16_384  # one KV head per GPU
        assert SMOL.kv_bytes_per_token(tensor_parallel=4) == 2 * 30 * 1 * 64 * 2  # 3 heads over 4 GPUs: 1 each

    def test_lora_parameters(self):
        # r x (in + out) per projection: q 8,192 + k 5,120 + v 5,120 + o 8,192 + 3 x 18,432 = 81,920 per layer
        assert LLAMA8.lora_parameters(16, ["all-linear"]) == 16 * 32 * 81_920 == 41_943_040
        assert LLAMA8.lora_parameters(8, ["q_proj", "v_proj"]) == 8 * 32 * (8_192 + 5_120) == 3_407_872


class TestMemory:
    def test_zero3_divides_everything(self):
        m = training_memory(P8, P8, DEEPSPEED_BF16, zero_stage=3, world_size=8)
        assert (m.weights, m.gradients, m.optimizer) == (2_007_565_312, 2_007_565_312, 12_045_391_872)

    def test_zero2_keeps_whole_weights(self):
        m = training_memory(P8, P8, DEEPSPEED_BF16, zero_stage=2, world_size=8)
        assert (m.weights, m.gradients, m.optimizer) == (16_060_522_496, 2_007_565_312, 12_045_391_872)

    def test_ddp_full_fine_tuning_of_8b_needs_120_gib_per_gpu(self):
        m = training_memory(P8, P8, AMP_FP32, world_size=8)
        assert (m.weights, m.gradients, m.optimizer) == (4 * P8, 4 * P8, 8 * P8)
        assert m.total / GIB == pytest.approx(119.66, abs=0.01)

    def test_lora_trains_only_the_adapter_and_dpo_copies_the_reference(self):
        lora = training_memory(P8, 41_943_040, AMP_FP32)
        assert (lora.weights, lora.gradients, lora.optimizer) == (4 * P8, 167_772_160, 335_544_320)
        full = training_memory(P8, P8, DEEPSPEED_BF16, zero_stage=3, world_size=8, reference_copy=True)
        assert full.reference == full.weights == 2_007_565_312

    def test_bad_arguments(self):
        with pytest.raises(ValueError, match="zero_stage"):
            training_memory(10, 10, AMP_FP32, zero_stage=4)
        with pytest.raises(ValueError, match="trainable <= parameters"):
            training_memory(10, 11, AMP_FP32)

    def test_activations(self):
        # 32 x 2 x 2,048 x 4,096 saved inputs + 34 x 2,048 x 4,096 recomputed layer + 8 x 2,048 x 128,256 logits
        assert activation_bytes(LLAMA8, batch=1, seq_len=2048, checkpointing=True) == 2_923_429_888
        assert activation_bytes(LLAMA8, batch=1, seq_len=2048, checkpointing=False) == \
            32 * 34 * 2048 * 4096 + 8 * 2048 * 128_256

    def test_vllm_kv_cache(self):
        m = vllm_memory(P8, A100, utilization=0.75, tensor_parallel=8, kv_bytes_per_token=16_384)
        # 0.75 x 80 GiB - 8,030,261,248 x 2 / 8 - 2 GiB = 60,269,460,480 bytes of KV cache
        assert (m.reserved, m.weights, m.kv_cache, m.kv_tokens) == (64_424_509_440, 2_007_565_312, 60_269_460_480,
                                                                     3_678_555)
        with pytest.raises(ValueError, match="gpu_memory_utilization"):
            vllm_memory(P8, A100, utilization=1.5, kv_bytes_per_token=1)


class TestCost:
    def test_decode_rate_is_memory_bound_at_this_batch(self):
        # per GPU and step: 2,007,565,312 B of weights + 512 x 1,640 x 16,384 B of KV = 15,764,882,432 B
        # at 0.77 x 2,039 GB/s: 10.04 ms (compute: 2 x P x 512 / (8 x 312e12 x 0.4) = 8.24 ms) -> 512 / 10.04 ms
        rate = decode_tokens_per_s(P8, A100, batch=512, context=1640, kv_bytes_per_token=16_384, tensor_parallel=8)
        assert rate == pytest.approx(50_990, abs=1)
        # one sequence on one GPU: 16.06 GB per step -> 1.57e12 / 16.06e9 = 97.8 tokens/s
        assert decode_tokens_per_s(P8, A100, batch=1, context=1, kv_bytes_per_token=131_072) == \
            pytest.approx(97.76, abs=0.01)

    def test_gpu_hours(self):
        assert dialogue_tokens(100_000, 10, 128) == 128_000_000
        # SFT with checkpointing: 8 x P x 86,016,000 tokens / (312e12 x 0.4) = 44,278 s = 12.30 GPU-hours
        assert training_gpu_hours(training_flops(P8, 86_016_000, checkpointing=True), A100) == \
            pytest.approx(12.2994, abs=1e-3)
        assert training_flops(10, 1, checkpointing=False) == 60
        assert training_flops(10, 1, checkpointing=True, reference_forward=True) == 100
        # decode 128e6 / 50,990 x 8 GPUs = 20,082 s; prefill 2 x P x 328e6 / 1.248e14 = 42,210 s
        hours = generation_gpu_hours(128_000_000, 328_000_000, P8, A100, tokens_per_s=50_990.1, engine_gpus=8)
        assert hours == pytest.approx((128e6 / 50_990.1 * 8 + 2 * P8 * 328e6 / 1.248e14) / 3600)
        assert hours == pytest.approx(17.30, abs=0.01)


class TestModelSize:
    def test_known_names_ignore_case(self):
        size = resolve_size("META-LLAMA/Meta-Llama-3-8B-Instruct")
        assert size.parameters == P8 and size.arch == LLAMA8 and "known-model table" in size.source

    def test_a_shipped_adapter_has_its_base_models_size(self):
        size = resolve_size("smollm2-135m-referential")
        base = resolve_size("smollm2-135m")
        assert (size.name, size.parameters, size.arch) == ("smollm2-135m-referential", base.parameters, base.arch)
        assert size.source.startswith("a LoRA adapter over smollm2-135m")

    def test_folder_config_json_and_safetensors_headers(self, tmp_path):
        import torch
        from safetensors.torch import save_file

        config = {"vocab_size": 10, "hidden_size": 4, "intermediate_size": 8, "num_hidden_layers": 1,
                  "num_attention_heads": 2, "tie_word_embeddings": True}
        (tmp_path / "config.json").write_text(json.dumps(config))
        size = resolve_size(str(tmp_path))
        # 10 x 4 embeddings + (4 x 4 + 2 x 4 x 4 + 4 x 4 + 3 x 4 x 8 + 2 x 4) + 4 = 40 + 168 + 4
        assert size.parameters == 212 and size.arch.num_kv_heads == 2 and size.arch.head_dim == 2
        save_file({"a": torch.zeros(3, 5), "b": torch.zeros(7)}, str(tmp_path / "model.safetensors"))
        size = resolve_size(str(tmp_path))
        assert size.parameters == 22 and "safetensors headers" in size.source

    def test_the_embedded_model_folder(self):
        from optima_agents.models.cache import model_dir

        folder = model_dir("smollm2-135m")
        if not (folder / "config.json").is_file():
            pytest.skip("the embedded model is not pulled on this machine")
        size = resolve_size(str(folder))
        assert size.parameters == SMOL.parameters() == 134_515_008

    @pytest.mark.parametrize("text, count", [("8B", 8 * 10**9), ("8.03e9", 8_030_000_000), ("135m", 135 * 10**6)])
    def test_counts(self, text, count):
        size = resolve_size("runs/x/checkpoint", text)
        assert size.parameters == count and size.arch is None

    def test_unknown_model_says_how_to_pass_the_size(self):
        with pytest.raises(ConfigError, match=re.escape("model.name='org/unknown': not a local folder")) as info:
            resolve_size("org/unknown")
        assert "--model-size" in str(info.value) and "8.03e9" in str(info.value)


def _train(**fields):
    from optima_train.isft.isft_config import TrainSection

    return TrainSection(**fields)


class TestLaunch:
    def test_shipped_accelerate_configs(self, monkeypatch):
        monkeypatch.chdir(ROOT)
        cases = {"1x8_ddp": ("ddp", 8, 1, 0), "1x8_zero2": ("deepspeed", 8, 1, 2), "1x8_zero3": ("deepspeed", 8, 1, 3),
                 "2x8_ddp": ("ddp", 16, 2, 0), "2x8_zero2": ("deepspeed", 16, 2, 2),
                 "2x8_zero3": ("deepspeed", 16, 2, 3)}
        for name, expected in cases.items():
            launch = read_launch(_train(launcher="accelerate", accelerate_config=f"configs/gpu/accelerate/{name}.yaml"))
            assert (launch.kind, launch.processes, launch.machines, launch.zero_stage) == expected, name
        two = read_launch(_train(launcher="accelerate", accelerate_config="configs/gpu/accelerate/2x8_zero3.yaml"))
        assert two.multinode_launcher == "pdsh" and two.hostfile == "configs/gpu/accelerate/hostfile"

    @pytest.mark.parametrize("name", sorted(p.name for p in (GPU / "accelerate").glob("*.yaml")))
    def test_accelerate_reads_each_config(self, name):
        from accelerate.commands.config.config_args import load_config_from_file

        cluster = load_config_from_file(str(GPU / "accelerate" / name))
        assert cluster.num_processes in (8, 16)

    def test_deepspeed_jsons(self):
        for stage in (2, 3):
            data = json.loads((GPU / "accelerate" / f"zero{stage}.json").read_text())
            assert data["zero_optimization"]["stage"] == stage and data["bf16"]["enabled"] == "auto"

    def test_launch_args_override_and_cpu(self):
        launch = read_launch(_train(launcher="accelerate", launch_args=["--multi_gpu", "--num_processes", "2"]),
                             device="cpu")
        assert (launch.kind, launch.processes, launch.problem) == ("cpu", 2, None)
        single = read_launch(_train(launcher="accelerate", launch_args=["--num_processes", "2", "--cpu"]))
        assert "starts a single process" in single.problem
        assert read_launch(_train()).kind == "inline"

    def test_bad_files_and_args(self, tmp_path):
        with pytest.raises(ConfigError, match="does not exist"):
            read_launch(_train(launcher="accelerate", accelerate_config=str(tmp_path / "none.yaml")))
        (tmp_path / "fsdp.yaml").write_text("distributed_type: FSDP\n")
        with pytest.raises(ConfigError, match="models NO, MULTI_GPU"):
            read_launch(_train(launcher="accelerate", accelerate_config=str(tmp_path / "fsdp.yaml")))
        with pytest.raises(ConfigError, match="not valid `accelerate launch` arguments"):
            read_launch(_train(launcher="accelerate", launch_args=["--num_processes", "two"]))


class TestLaunchFields:
    def test_launch_settings_only_with_the_accelerate_launcher(self):
        with pytest.raises(ConfigError, match="set train.launcher=accelerate"):
            _train(accelerate_config="configs/gpu/accelerate/1x8_zero3.yaml")

    def test_launch_keys_may_change_on_resume(self):
        from optima_train.idpo import IDPOConfig
        from optima_train.isft import ISFTConfig
        from optima_train.isft_dpo import ISFTDPOConfig

        assert {"train.launcher", "train.accelerate_config", "train.launch_args"} <= set(ISFTConfig.RESUMABLE)
        assert "train.launch_args" in IDPOConfig.RESUMABLE
        assert {"sft.launcher", "dpo.launcher"} <= set(ISFTDPOConfig.RESUMABLE)

    def test_workload_of_an_undeclared_algorithm(self):
        class Plain:
            pass

        assert workload(Plain()) == ("iteration", [])


# ---------------------------------------------------------------------- the command
LOOPS = {"isft": "isft", "idpo": "idpo", "isft_dpo": "isft-dpo", "isft_3b": "isft"}
GPU_CONFIGS = sorted(p.relative_to(ROOT) for d in LOOPS for p in (GPU / d).glob("*.yaml"))


def _plan(args, monkeypatch):
    from typer.testing import CliRunner

    from optima_train.cli import app

    monkeypatch.chdir(ROOT)
    return CliRunner().invoke(app, ["train", *args, "--plan"])


@pytest.mark.parametrize("path", GPU_CONFIGS, ids=str)
def test_plan_of_every_gpu_config(path, monkeypatch):
    command = LOOPS[path.parts[2]]
    # iDPO starts from an iSFT checkpoint that does not exist yet: size it as the model it was trained from
    size = ["--model-size", "meta-llama/Meta-Llama-3-8B-Instruct"] if command == "idpo" and path.stem != "base" else []
    result = _plan([command, "--config", str(path), *size], monkeypatch)
    assert result.exit_code == 0, result.output
    assert result.output.rstrip().endswith("problems\n  none")
    assert "full fine-tuning" in result.output and "accelerate launch (configs/gpu/accelerate/1x8_zero" in result.output


def test_plan_of_the_8b_hotpotqa_isft_config(monkeypatch):
    result = _plan(["isft", "--config", "configs/gpu/isft/hotpotqa.yaml"], monkeypatch)
    out = result.output
    assert result.exit_code == 0, out
    for text in ("8.030B parameters", "tensor_parallel_size=8", "8 process(es) = 1 node(s) x 8, DeepSpeed ZeRO-3",
                 "3,678,555 tokens", "10,000 questions x 10 samples x 10 turns x 128 tokens = 128,000,000",
                 "<= 14,000 examples", "decode at 50,990 tokens/s", "generation      17.30", "training        12.30"):
        assert text in out, text


@pytest.mark.parametrize("override, problem", [
    ("train.accelerate_config=configs/gpu/accelerate/1x8_ddp.yaml", "train step: GPU 0 needs about"),
    ("generation.backend_kwargs.gpu_memory_utilization=0.9", "gpu_memory_utilization <= 0.80"),
    ("train.accelerate_config=configs/gpu/accelerate/2x8_ddp.yaml", "2-node DDP launch"),
])
def test_plan_lists_problems_and_exits_2(override, problem, monkeypatch):
    result = _plan(["isft", "--config", "configs/gpu/isft/hotpotqa.yaml", "--set", override], monkeypatch)
    assert result.exit_code == 2 and problem in result.output, result.output


def test_plan_errors_exit_2_before_anything_loads(monkeypatch):
    result = _plan(["idpo", "--config", "configs/gpu/idpo/hotpotqa.yaml"], monkeypatch)
    assert result.exit_code == 2 and "--model-size" in result.output
    result = _plan(["isft", "--config", "configs/gpu/isft/hotpotqa.yaml", "--gpu-type", "tpu"], monkeypatch)
    assert result.exit_code == 2 and "--gpu-type 'tpu' is not one of" in result.output


def test_plan_of_a_cpu_config_and_a_count_only_size(monkeypatch):
    result = _plan(["isft", "--config", "configs/isft/synth_hop.yaml", "--model-size", "135M"], monkeypatch)
    out = result.output
    assert result.exit_code == 0, out
    assert "inline: in the coordinator process" in out and "only estimated for the vllm backend" in out
    assert "LoRA (adapter size needs the architecture: not counted)" in out


def test_plan_gpu_type_changes_the_hardware(monkeypatch):
    result = _plan(["isft", "--config", "configs/gpu/isft/hotpotqa.yaml", "--gpu-type", "h100-80gb"], monkeypatch)
    assert result.exit_code == 0 and "h100-80gb: 80.0 GiB, 989 TFLOP/s" in result.output


def test_gpu_configs_cover_the_eight_paper_tasks_with_the_paper_settings(monkeypatch):
    from optima_train.idpo import IDPOConfig
    from optima_train.isft import ISFTConfig
    from optima_train.isft_dpo import ISFTDPOConfig

    monkeypatch.chdir(ROOT)
    tasks = {"hotpotqa-ia", "2wikimqa-ia", "triviaqa-ia", "cbt-ia", "gsm8k-debate", "math-debate", "arc-debate",
             "mmlu-debate"}
    for folder, cls in (("isft", ISFTConfig), ("idpo", IDPOConfig), ("isft_dpo", ISFTDPOConfig), ("isft_3b", ISFTConfig)):
        configs = [load_config(cls, p) for p in (GPU / folder).glob("*.yaml") if p.stem != "base"]
        assert {c.task.env_id for c in configs} == tasks, folder
        for c in configs:
            sampler = c.search if folder == "idpo" else c.generation
            assert not c.lora.enabled and sampler.backend == "vllm"
            assert sampler.backend_kwargs["tensor_parallel_size"] == 8
            assert c.run.output_dir.startswith(f"runs/gpu/{folder}/")
        expected = "meta-llama/Llama-3.2-3B-Instruct" if folder == "isft_3b" else "meta-llama/Meta-Llama-3-8B-Instruct"
        assert all((c.model.reference if folder == "idpo" else c.model.name) == expected for c in configs), folder


def test_every_builtin_algorithm_declares_its_workload(monkeypatch):
    from optima_train.config.io import load_config
    from optima_train.grpo import GRPOConfig

    cfg = load_config(GRPOConfig, ROOT / "configs/grpo/synth_hop.yaml", ["task.train_questions=12",
                                                                         "generation.group_size=4"])
    period, stages = workload(cfg)
    assert period == "iteration" and [s.name for s in stages] == ["GRPO"]
    assert stages[0].dialogues == 48 and stages[0].examples == 96 and not stages[0].preference
    result = _plan(["grpo", "--config", "configs/grpo/synth_hop.yaml"], monkeypatch)
    assert result.exit_code == 0, result.output
    assert "GRPO generation" in result.output and "declares no plan_workload" not in result.output
