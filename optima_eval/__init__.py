"""Evaluation: the held-out set every model is judged on (`heldout`), the inference systems
compared on it (`systems`, message ablation included), held-out evaluation of a checkpoint with
confidence intervals (`evaluation`), and the leaderboard with its communication diagnostics
(`leaderboard`). Results record paths portably (`portable_paths`). It sits between the agents
(policies, rollouts) it runs and the training loops that call it to judge each iteration."""
