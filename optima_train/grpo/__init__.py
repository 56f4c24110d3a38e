"""Multi-agent GRPO (group-relative clipped policy gradient on the Optima reward): the config and the trainer."""

from optima_train.grpo.grpo_config import GRPOConfig
from optima_train.grpo.grpo_trainer import GRPOTrainer

__all__ = ["GRPOConfig", "GRPOTrainer"]
