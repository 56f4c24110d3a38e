"""The search driver: MCTS over dialogue turns on any snapshot/restore env and any Policy.

One search iteration, for every tree at once:

1. select a node per tree (`selection.select`: softmax over values among the top-k candidates,
   skipping nodes like an already expanded one; terminal nodes are never candidates);
2. expand it with `rollouts_per_expansion` full rollouts at the search temperature. With
   `enumerate_answers`, a node where an answering agent speaks on a task with a closed answer
   set is expanded, as soon as a rollout creates it, into one rollout per answer move (that
   reply given, not sampled) instead of the one rollout that reached it: every such node holds
   every move, whether or not the policy would sample it, and the values above it average over
   the moves.
   All pending turns of all rollouts of all trees go to the policy in one `act` call per step, so the
   backend batches them. A sampled utterance within `merge_similarity` of an existing sibling
   joins that sibling (the rollout continues from the sibling's snapshot, so every node's
   snapshot is exactly the dialogue along its path);
3. score every finished rollout in one reward call and back its reward up from its leaf to
   the root (node values are running means; reward components are averaged alongside).

A rollout whose policy call failed (infrastructure) or whose dialogue could not be scored is
dropped: nothing is backed up, and the nodes it alone created keep 0 visits (they are never
selected nor paired). Determinism: selection draws from one RNG per tree, seeded from
(`seed`, tree index); each turn request carries a seed derived from (`seed`, tree index,
iteration, rollout, depth), so the result depends neither on the batch nor on other trees.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from optima_agents.mcts.errors import EnvNotSearchableError
from optima_agents.mcts.mcts_config import MCTSConfig
from optima_agents.mcts.reward import FinishedDialogue, OptimaTreeReward, TreeReward
from optima_agents.mcts.selection import find_similar, select
from optima_agents.mcts.tree import Node, Tree
from optima_agents.policies.base import Action, Policy, TurnRequest, capabilities_of
from optima_agents.rollout.engine import answering_agents, derive_seed


@dataclass(frozen=True)
class TreeTask:
    """One tree to grow: its id and how to reset the env for its root (seed and options)."""

    tree_id: str
    seed: int | None = None
    options: Mapping[str, Any] | None = None


@dataclass
class SearchResult:
    """The searched trees, in task order, with counters and timings."""

    trees: list[Tree]
    stats: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Walker:
    tree: Tree
    tree_index: int
    iteration: int
    rollout: int
    expanded_id: int
    node_id: int
    error: str | None = None
    given: str | None = None
    """The first reply, given instead of sampled (an enumerated answer move); None: sampled."""


class MCTSPlanner:
    """Grows one tree per task with a policy and scores rollouts with a reward.

    Args:
        policy: any `Policy`. One declaring `with_sampling` (HFPolicy) is switched to the config's
            temperature, top_p and max_new_tokens; any other is used as given (see
            `sampling_mismatch`).
        reward: a `TreeReward`; default `OptimaTreeReward.without_reference_model()` (score
            minus token cost; pass `OptimaTreeReward(weights, ReadabilityScorer(...))` for the
            full Optima reward).
        config: the `MCTSConfig`.
        on_iteration: called after each iteration with (iteration, trees, stats of it).
    """

    def __init__(self, policy: Policy, reward: TreeReward | None = None, config: MCTSConfig | None = None, *,
                 on_iteration: Callable[[int, list[Tree], dict[str, Any]], None] | None = None):
        self.config = config or MCTSConfig()
        self.policy = self._search_policy(policy)
        self.reward = reward if reward is not None else OptimaTreeReward.without_reference_model()
        self.on_iteration = on_iteration

    def _search_policy(self, policy: Policy) -> Policy:
        """The policy at the config's sampling settings: `with_sampling` when the backend declares
        it (HFPolicy, ...), else the policy as given (check `sampling_mismatch`)."""
        sampling = getattr(policy, "sampling", None)
        c = self.config
        if sampling is None or not capabilities_of(policy).with_sampling:
            return policy
        wanted = dataclasses.replace(sampling, temperature=c.temperature, top_p=c.top_p,
                                     max_new_tokens=c.max_new_tokens)
        return policy if wanted == sampling else policy.with_sampling(wanted)

    def sampling_mismatch(self) -> str | None:
        """Why the policy's sampling settings differ from the config's, or None."""
        sampling = getattr(self.policy, "sampling", None)
        if sampling is None:
            return None
        c = self.config
        if (sampling.temperature, sampling.top_p, sampling.max_new_tokens) != (c.temperature, c.top_p, c.max_new_tokens):
            return (f"policy samples with temperature={sampling.temperature}, top_p={sampling.top_p}, "
                    f"max_new_tokens={sampling.max_new_tokens}; MCTSConfig asks for temperature={c.temperature}, "
                    f"top_p={c.top_p}, max_new_tokens={c.max_new_tokens}")
        return None

    # ------------------------------------------------------------------ search
    def search(self, env: Any, tasks: Sequence[TreeTask]) -> SearchResult:
        """Grow one tree per task on `env` (one env serves all trees: it is restored before
        every step). Returns the trees and per-search counters."""
        _require_searchable(env)
        config = self.config
        started = time.perf_counter()
        trees = [self._root(env, task) for task in tasks]
        rngs = [np.random.default_rng([config.seed, i]) for i in range(len(trees))]
        answering = answering_agents(env) if config.enumerate_answers else frozenset()
        stats = {"iterations": 0, "policy_calls": 0, "turn_requests": 0, "rollouts": 0, "dropped_rollouts": 0,
                 "reward_calls": 0, "merges": 0, "generate_s": 0.0, "reward_s": 0.0}
        for iteration in range(config.iterations):
            walkers = []
            for index, (tree, rng) in enumerate(zip(trees, rngs)):
                if tree.exhausted:
                    continue
                chosen = select(tree, config, rng)
                for node_id, twin in chosen.skipped.items():
                    if tree.nodes[node_id].skipped_by is None:
                        tree.nodes[node_id].skipped_by = twin
                if chosen.node_id is None:
                    tree.exhausted = True
                    continue
                tree.mark_expanded(chosen.node_id, iteration)
                node = tree.nodes[chosen.node_id]
                moves = answer_moves(env, node, answering) if not tree.children(node.node_id) else []
                walkers += [_Walker(tree, index, iteration, r, chosen.node_id, chosen.node_id, given=move)
                            for r, move in enumerate(moves or [None] * config.rollouts_per_expansion)]
            if not walkers:
                break
            round_stats = self._run(env, walkers, answering)
            for key, value in round_stats.items():
                stats[key] += value
            stats["iterations"] += 1
            if self.on_iteration is not None:
                self.on_iteration(iteration, trees, round_stats)
        stats["search_s"] = time.perf_counter() - started
        return SearchResult(trees=trees, stats=stats)

    def _root(self, env: Any, task: TreeTask) -> Tree:
        observations, _ = env.reset(seed=task.seed, options=dict(task.options or {}))
        speaker = env.current_speaker
        state = env.state
        meta = {"seed": task.seed, "options": dict(task.options or {}), "agents": list(env.possible_agents),
                "instance_id": state.instance.instance_id, "env_id": getattr(env, "env_id", None)}
        return Tree(task.tree_id, snapshot=env.snapshot(), observation=observations[speaker], next_speaker=speaker,
                    meta=meta)

    def _run(self, env: Any, walkers: list[_Walker], answering: frozenset[str] = frozenset()) -> dict[str, Any]:
        """Step every walker to a leaf (one policy call per step for all), then score and back up;
        a walker that creates a node where an agent of `answering` speaks is split into one
        walker per answer move of it (see the module doc)."""
        config = self.config
        stats = {"policy_calls": 0, "turn_requests": 0, "rollouts": 0, "dropped_rollouts": 0, "reward_calls": 0,
                 "merges": 0, "generate_s": 0.0, "reward_s": 0.0}
        pending = list(walkers)
        everyone = list(walkers)  # with the walkers split off on the way (a split one keeps no error)
        finished: list[_Walker] = []
        while pending:
            nodes = [w.tree.nodes[w.node_id] for w in pending]
            sampled = [i for i, w in enumerate(pending) if w.given is None]
            requests = [
                TurnRequest(agent=nodes[i].next_speaker, observation=nodes[i].observation,
                            seed=derive_seed(config.seed, pending[i].tree_index, pending[i].iteration,
                                             pending[i].rollout, nodes[i].depth))
                for i in sampled
            ]
            actions: list[Any] = [Action(text=w.given) if w.given is not None else None for w in pending]
            if requests:
                t0 = time.perf_counter()
                for i, action in zip(sampled, self.policy.act(requests)):
                    actions[i] = action
                stats["generate_s"] += time.perf_counter() - t0
                stats["policy_calls"] += 1
                stats["turn_requests"] += len(requests)
            for walker in pending:
                walker.given = None  # only the expansion's first reply is given
            still = []
            for walker, node, action in zip(pending, nodes, actions):
                if action.failed:
                    walker.error = action.error or "policy call failed"
                    continue
                child, merged = self._step(env, walker, node, action)
                stats["merges"] += merged
                walker.node_id = child.node_id
                moves = [] if merged or child.terminal else answer_moves(env, child, answering)
                if moves:
                    # Rollout ids past the expansion's own keep the copies' later sampling seeds apart.
                    first = config.rollouts_per_expansion * (1 + walker.rollout * len(moves))
                    copies = [dataclasses.replace(walker, rollout=first + k, given=move) for k, move in enumerate(moves)]
                    everyone.extend(copies)
                    still.extend(copies)
                    continue
                (finished if child.terminal else still).append(walker)
            pending = still
        dropped = sum(w.error is not None for w in everyone)
        dialogues = [self._finished(w) for w in finished]
        t0 = time.perf_counter()
        scored = list(self.reward(dialogues)) if dialogues else []
        stats["reward_s"] += time.perf_counter() - t0
        stats["reward_calls"] += 1 if dialogues else 0
        for walker, dialogue, (reward, components) in zip(finished, dialogues, scored):
            if reward is None or not dialogue.score_ok:
                dropped += 1
                continue
            walker.tree.backup(walker.node_id, reward, components, iteration=walker.iteration,
                               expanded_id=walker.expanded_id)
            stats["rollouts"] += 1
        stats["dropped_rollouts"] = dropped
        return stats

    def _step(self, env: Any, walker: _Walker, node: Node, action: Any) -> tuple[Node, bool]:
        """Add the utterance under `node` (or join the sibling it resembles); returns (child, merged)."""
        tree = walker.tree
        twin = find_similar(action.text, tree.children(node.node_id), self.config.merge_similarity)
        if twin is not None:
            twin.merges += 1
            return twin, True
        env.restore(node.snapshot)
        observations, _, _, _, _ = env.step({node.next_speaker: action.to_env_action()})
        state = env.state
        message = state.messages[-1]
        depth = node.depth + 1
        cut = not state.ended and self.config.max_depth is not None and depth >= self.config.max_depth
        terminal = state.ended or cut
        speaker = env.current_speaker
        child = tree.add_child(
            node.node_id, speaker=message.speaker, text=message.text,
            token_ids=tuple(message.token_ids or action.token_ids or ()), num_tokens=message.num_tokens,
            terminal=terminal, end_reason=state.end_reason or ("max_depth" if cut else None),
            next_speaker=None if terminal else speaker, snapshot=env.snapshot(),
            observation=None if terminal else observations[speaker], iteration=walker.iteration,
        )
        return child, False

    @staticmethod
    def _finished(walker: _Walker) -> FinishedDialogue:
        leaf = walker.tree.nodes[walker.node_id]
        state = leaf.snapshot.state
        outcome = state.outcome or {}
        return FinishedDialogue(
            tree_id=walker.tree.tree_id, leaf_id=leaf.node_id, agents=tuple(walker.tree.meta.get("agents", ())),
            utterances=tuple((m.speaker, m.text) for m in state.messages), tokens=state.total_tokens,
            score=outcome.get("score"), score_ok=bool(outcome.get("score_ok", True)), end_reason=leaf.end_reason or "",
            state=state,
        )


def answer_moves(env: Any, node: Node, answering: frozenset[str]) -> list[str]:
    """Every answer move of a node where an answering agent speaks, on a task whose answer set is
    closed (`Task.answer_options`); [] elsewhere, or when `answering` is empty (enumeration off)."""
    if node.next_speaker not in answering:
        return []
    options = getattr(getattr(env, "task", None), "answer_options", None)
    if options is None:
        return []
    return list(options(node.snapshot.state.instance))


def _require_searchable(env: Any) -> None:
    missing = [name for name in ("snapshot", "restore", "reset", "step") if not callable(getattr(env, name, None))]
    if missing or not hasattr(type(env), "current_speaker"):
        raise EnvNotSearchableError(
            f"MCTS needs an env with reset/step/snapshot/restore and current_speaker (a DialogueEnv); "
            f"{type(env).__name__} lacks {missing or ['current_speaker']}"
        )
