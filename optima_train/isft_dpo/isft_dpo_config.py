"""`ISFTDPOConfig`: iSFT-DPO, alternating an iSFT stage and an iDPO stage for some cycles.

    cfg = load_config(ISFTDPOConfig, "configs/isft_dpo/synth_hop.yaml", ["cycles.count=2"])

One flat config: the task, model, reward, LoRA, evaluation and run sections are shared by
both stages; `generation`, `selection` and `sft` drive the iSFT stage, `search`, `mcts`,
`pairs` and `dpo` the iDPO stage (the same sections as `ISFTConfig` and `IDPOConfig`).
`sub_configs` turns it into the `ISFTConfig` and `IDPOConfig` of each stage, which is what runs.

Questions: cycle `c` uses fresh training questions, `task.train_questions` per iSFT iteration
then `search.questions` (or `task.train_questions`) per iDPO iteration, following on from
`task.train_first_index` (the reference draws new questions at every stage).
Defaults from the reference recipes (`train/sft_dpo_recipes/*.yaml`): 3 cycles of one iSFT
iteration and one iDPO iteration each; the format-diverse instructions only in the first cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from optima_agents.mcts.mcts_config import MCTSConfig, PairConfig
from optima_envs.errors import ConfigError
from optima_train.config.fields import help_meta as _help
from optima_train.config.io import config_to_dict, from_dict
from optima_train.config.sampler import SCHEDULING_KEYS
from optima_train.config.sections import (
    EvalSection,
    LoraSection,
    ModelSection,
    RunSection,
    TaskSection,
    check_question_ranges,
)
from optima_train.config.train import launch_keys
from optima_train.idpo.idpo_config import DPOTrainSection, IDPOConfig, SearchRewardSection, SearchSection
from optima_train.isft.isft_config import GenerationSection, ISFTConfig, SelectionSection, TrainSection

__all__ = ["CycleSection", "ISFTDPOConfig", "ISFTDPORunSection", "stage_dir"]


def first_cycle_only(constrained_answers: str, cycle: int) -> str:
    """A cycle's iSFT stage numbers its iterations from 0 again, so "first_iteration" means the
    run's first iteration only in cycle 0."""
    return "never" if constrained_answers == "first_iteration" and cycle > 0 else constrained_answers


def stage_dir(output_dir: str, cycle: int, stage: str) -> str:
    """The run directory of `cycle`'s `stage` ("isft" or "idpo") inside an iSFT-DPO run."""
    return f"{output_dir}/cycle_{cycle:03d}/{stage}"


@dataclass
class CycleSection:
    count: int = field(default=3, metadata=_help("Cycles of (iSFT stage, iDPO stage) (reference iteration_times: 3)."))
    isft_iterations: int = field(default=1, metadata=_help("iSFT iterations per cycle (reference: 1)."))
    idpo_iterations: int = field(default=1, metadata=_help("iDPO iterations per cycle (reference: 1)."))

    def __post_init__(self) -> None:
        for name in ("count", "isft_iterations", "idpo_iterations"):
            if getattr(self, name) < 1:
                raise ConfigError(f"cycles.{name} must be >= 1, got {getattr(self, name)}")


@dataclass
class ISFTDPORunSection(RunSection):
    output_dir: str = field(default="runs/isft_dpo", metadata=_help("Run directory (resumed when it exists)."))
    iterations: int = field(default=1, metadata=_help("Unused: the number of stages comes from the cycles section."))


@dataclass
class ISFTDPOConfig:
    """iSFT-DPO (docs/design.md section 2): alternate an iSFT stage and an iDPO stage.

    Sections: task, model, generation, selection, sft (iSFT training), search, mcts, pairs, dpo
    (DPO training), reward, lora, eval, cycles, run.
    """

    task: TaskSection = field(default_factory=TaskSection)
    model: ModelSection = field(default_factory=ModelSection)
    generation: GenerationSection = field(default_factory=GenerationSection)
    selection: SelectionSection = field(default_factory=SelectionSection)
    sft: TrainSection = field(default_factory=TrainSection)
    search: SearchSection = field(default_factory=SearchSection)
    mcts: MCTSConfig = field(default_factory=MCTSConfig)
    pairs: PairConfig = field(default_factory=PairConfig)
    dpo: DPOTrainSection = field(default_factory=DPOTrainSection)
    reward: SearchRewardSection = field(default_factory=SearchRewardSection)
    lora: LoraSection = field(default_factory=LoraSection)
    eval: EvalSection = field(default_factory=EvalSection)
    cycles: CycleSection = field(default_factory=CycleSection)
    run: ISFTDPORunSection = field(default_factory=ISFTDPORunSection)

    #: Fields that may differ when resuming a run (everything else must match the stored config).
    RESUMABLE: ClassVar[tuple[str, ...]] = ("cycles.count", "run.progress", "run.num_threads", "sft.padding_free",
                                            *SCHEDULING_KEYS, *launch_keys("sft", "dpo"))

    #: What one reported unit of `--plan` is called.
    PLAN_PERIOD = "cycle"

    def plan_workload(self) -> list:
        """What one cycle samples and trains (`optima train ... --plan`)."""
        from optima_train.plan.workload import idpo_stage, isft_stage

        c = self.cycles
        return [isft_stage(self, self.generation, self.sft, "sft", self.task.train_questions, c.isft_iterations),
                idpo_stage(self, self.search, self.dpo, "dpo", self.dpo_questions, c.idpo_iterations)]

    def __post_init__(self) -> None:
        check_question_ranges(self.task, self.eval, self.task.train_first_index,
                              self.questions_per_cycle * self.cycles.count)

    @property
    def dpo_questions(self) -> int:
        return self.search.questions or self.task.train_questions

    @property
    def questions_per_cycle(self) -> int:
        c = self.cycles
        return self.task.train_questions * c.isft_iterations + self.dpo_questions * c.idpo_iterations

    def stage_first_index(self, cycle: int, stage: str) -> int:
        """The first training question of `stage` ("isft" or "idpo") in `cycle`."""
        start = self.task.train_first_index + cycle * self.questions_per_cycle
        return start if stage == "isft" else start + self.task.train_questions * self.cycles.isft_iterations

    def sub_configs(self, cycle: int, *, start_model: str, base_model: str, output_dir: str) -> dict[str, Any]:
        """The `ISFTConfig` of `cycle`'s iSFT stage, starting from `start_model` (the previous
        cycle's last checkpoint, or the starting model), and a builder of its `IDPOConfig`.

        The readability reference stays the original model (`model.reference`, else
        `base_model`) in every stage. Returns {"isft": ISFTConfig, "idpo": callable(model) -> IDPOConfig}.
        """
        d = config_to_dict(self)
        reference = self.model.reference or base_model
        run = {"seed": self.run.seed + 1000 * cycle, "progress": self.run.progress, "num_threads": self.run.num_threads}
        reward = d["reward"]
        isft = from_dict(ISFTConfig, {
            "task": {**d["task"], "train_first_index": self.stage_first_index(cycle, "isft")},
            "model": {**d["model"], "name": start_model, "reference": reference},
            "generation": {**d["generation"],
                           "format_pool_first_iteration": self.generation.format_pool_first_iteration and cycle == 0,
                           "constrained_answers": first_cycle_only(self.generation.constrained_answers, cycle)},
            "reward": {k: v for k, v in reward.items() if k != "grounded_only"}, "selection": d["selection"], "lora": d["lora"], "train": d["sft"],
            "eval": {**d["eval"], "baseline": self.eval.baseline and cycle == 0},
            "run": {**run, "output_dir": stage_dir(output_dir, cycle, "isft"),
                    "iterations": self.cycles.isft_iterations},
        })

        def idpo(model: str) -> IDPOConfig:
            return from_dict(IDPOConfig, {
                "task": {**d["task"], "train_first_index": self.stage_first_index(cycle, "idpo"),
                         "train_questions": self.dpo_questions},
                "model": {**d["model"], "name": model, "reference": reference},
                "search": {**d["search"], "new_questions_each_iteration": True},
                "mcts": d["mcts"], "pairs": d["pairs"], "reward": reward, "lora": d["lora"], "train": d["dpo"],
                "eval": {**d["eval"], "baseline": False},
                "run": {**run, "output_dir": stage_dir(output_dir, cycle, "idpo"),
                        "iterations": self.cycles.idpo_iterations},
            })

        return {"isft": isft, "idpo": idpo}
