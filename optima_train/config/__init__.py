"""Typed training configs: the sections every algorithm shares and how configs are read.

- `sections`: task, model, reward, LoRA, held-out evaluation and run, and `TrainingConfig`, what
  the training loop reads of a config;
- `sampler`: `SamplerSection`, the base of every section that samples dialogues (iSFT's and
  GRPO's `generation`, iDPO's `search`), and `RolloutSamplerSection` for whole-dialogue sampling;
- `train`: `TRLTrainSection`, the base of every method's `train` section;
- `fields`: field metadata (`help_meta`) and base fields with another default (`redefault`);
- `io`: configs from YAML files and `--set` overrides (`load_config`), and back (`dump_config`).

An algorithm's own sections and its config class live with the algorithm (`optima_train.isft`,
`optima_train.idpo`, `optima_train.grpo`, ...).
"""

from optima_train.config.fields import help_meta, redefault
from optima_train.config.io import config_to_dict, dump_config, from_dict, load_config, load_yaml
from optima_train.config.sampler import SCHEDULING_KEYS, RolloutSamplerSection, SamplerSection
from optima_train.config.sections import (
    EvalSection,
    LoraSection,
    ModelSection,
    RewardSection,
    RunSection,
    TaskSection,
    TrainingConfig,
    check_question_ranges,
)
from optima_train.config.train import TRLTrainSection, launch_keys

__all__ = ["SCHEDULING_KEYS", "EvalSection", "LoraSection", "ModelSection", "RewardSection", "RolloutSamplerSection",
           "RunSection", "SamplerSection", "TRLTrainSection", "TaskSection", "TrainingConfig", "check_question_ranges",
           "config_to_dict", "dump_config", "from_dict", "help_meta", "launch_keys", "load_config", "load_yaml",
           "redefault"]
