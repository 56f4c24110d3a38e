"""Iterative DPO with MCTS over dialogue turns (docs/design.md section 2): the config and the trainer."""

from optima_train.idpo.idpo_config import IDPOConfig
from optima_train.idpo.idpo_trainer import IDPOTrainer

__all__ = ["IDPOConfig", "IDPOTrainer"]
