"""Other views of a dialogue env: AEC (turn by turn) and single-agent Gymnasium."""

from optima_envs.wrappers.aec import DialogueAECEnv
from optima_envs.wrappers.single_agent import FixedPolicy, SingleAgentWrapper

__all__ = ["DialogueAECEnv", "FixedPolicy", "SingleAgentWrapper"]
