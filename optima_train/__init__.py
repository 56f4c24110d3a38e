"""Rewards, episode buffers and the generate-rank-select-train loops (iSFT, iDPO, iSFT-DPO)."""
