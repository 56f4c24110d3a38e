"""iSFT-DPO (docs/design.md section 2): alternate iSFT and iDPO stages; the config and the trainer."""

from optima_train.isft_dpo.isft_dpo_config import ISFTDPOConfig, stage_dir
from optima_train.isft_dpo.isft_dpo_trainer import ISFTDPOTrainer

__all__ = ["ISFTDPOConfig", "ISFTDPOTrainer", "stage_dir"]
