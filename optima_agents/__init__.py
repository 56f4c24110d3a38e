"""Policies (transformers, vLLM, OpenAI-compatible servers, scripted), the batched rollout
engine, and the MCTS planner over dialogue turns."""
