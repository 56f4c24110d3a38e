"""`optima train <algo> --plan`: the launch plan of a config, without loading a model, data or a GPU.

- `arithmetic`: the pure functions (model sizes, memory per GPU, tokens and GPU-hours) and the
  known GPUs and models;
- `inputs`: the model's size (a folder's config.json, the known models or `--model-size`) and
  the launch topology (the train section's accelerate config and `launch_args`);
- `workload`: what one iteration samples and trains, as the algorithm's config declares it
  (`plan_workload() -> list[Stage]`, with the `isft_stage`, `idpo_stage` and `grpo_stage` builders);
- `report`: the printed plan and its problems (`build_report`).
"""

from optima_train.plan.arithmetic import GPUS, KNOWN_MODELS
from optima_train.plan.report import PlanReport, build_report
from optima_train.plan.workload import Stage, grpo_stage, idpo_stage, isft_stage, workload

__all__ = ["GPUS", "KNOWN_MODELS", "PlanReport", "Stage", "build_report", "grpo_stage", "idpo_stage", "isft_stage",
           "workload"]
