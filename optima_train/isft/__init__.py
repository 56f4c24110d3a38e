"""Iterative SFT (docs/design.md section 2): the config and the trainer."""

from optima_train.isft.isft_config import ISFTConfig
from optima_train.isft.isft_trainer import ISFTTrainer

__all__ = ["ISFTConfig", "ISFTTrainer"]
