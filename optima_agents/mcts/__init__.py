"""Monte Carlo tree search over dialogue turns, and DPO pairs from the searched trees.

    from optima_agents.mcts import MCTSConfig, PairConfig, MCTSPlanner, extract_pairs
"""

from optima_agents.mcts.errors import EnvNotSearchableError, MCTSConfigError, MCTSError, TreeInvariantError
from optima_agents.mcts.mcts_config import MCTSConfig, PairConfig
from optima_agents.mcts.pairs import NodePair, PairExtraction, extract_pairs
from optima_agents.mcts.planner import MCTSPlanner, SearchResult, TreeTask
from optima_agents.mcts.reward import FinishedDialogue, OptimaTreeReward, TreeReward, score_only_reward
from optima_agents.mcts.tree import Node, RolloutRecord, Tree

__all__ = [
    "EnvNotSearchableError", "FinishedDialogue", "MCTSConfig", "MCTSConfigError", "MCTSError", "MCTSPlanner", "Node",
    "NodePair", "OptimaTreeReward", "PairConfig", "PairExtraction", "RolloutRecord", "SearchResult", "Tree",
    "TreeInvariantError", "TreeReward", "TreeTask", "extract_pairs", "score_only_reward",
]
