"""Contract checks every registered env must pass. They raise AssertionError with both values;
they never print. Run them all with `check_env(env_id)`."""

from __future__ import annotations

import contextlib
import io
import warnings
from typing import Any, Callable

from gymnasium.utils.env_checker import data_equivalence

from optima_envs.core.dialogue_env import DialogueEnv
from optima_envs.core.reset_args import ResetOptionWarning
from optima_envs.test.scripted import random_messages


def check_parallel_api(env: DialogueEnv, num_cycles: int = 50) -> None:
    """PettingZoo's parallel API test (random Unicode actions for every agent), quiet: its pass line
    and the warning its probe `options={"options": 1}` draws are expected, not news. PettingZoo's
    test package is imported here, not with this module, because it imports pytest when pytest is
    installed."""
    from pettingzoo.test import parallel_api_test

    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*unknown key 'options';", category=ResetOptionWarning)
        parallel_api_test(env, num_cycles=num_cycles)


def _episode(env: DialogueEnv, seed: int, messages: list[str]) -> list[Any]:
    trace: list[Any] = [env.reset(seed=seed)]
    queue = list(messages)
    while env.agents:
        trace.append(env.step({env.current_speaker: queue.pop(0) if queue else ""}))
    trace.append(env.render())
    return trace


def check_seed_determinism(make_env: Callable[[], DialogueEnv], seed: int = 42) -> None:
    """Two envs, same seed, same actions: every observation, reward, flag and info is identical,
    for the whole episode (not just the first step), and a third seed gives a different start."""
    messages = random_messages(seed, 40)
    first, second = _episode(make_env(), seed, messages), _episode(make_env(), seed, messages)
    assert len(first) == len(second), f"episode lengths differ: {len(first)} != {len(second)}"
    for step, (a, b) in enumerate(zip(first, second)):
        assert data_equivalence(a, b), f"step {step} differs for seed {seed}:\n{a!r}\n!=\n{b!r}"


def check_snapshot_roundtrip(env: DialogueEnv, seed: int = 7, at_turn: int = 1) -> None:
    """Snapshot after `at_turn` messages, play on, restore, replay the same actions: identical
    results; the observations right after `restore` equal those at the snapshot; and two
    snapshots stay independent of each other. The episode must still be running at the
    snapshot (otherwise nothing would be compared), so `at_turn` must be below `max_turns`."""
    messages = random_messages(seed, 40)
    env.reset(seed=seed)
    for turn, message in enumerate(messages[:at_turn]):
        assert env.agents, (f"the episode ended after {turn} message(s), before the snapshot at turn {at_turn}: "
                            f"pass a smaller at_turn (max_turns={env.max_turns})")
        env.step({env.current_speaker: message})
    assert env.agents, (f"the episode ended at turn {at_turn}, the snapshot turn: nothing is left to replay; "
                        f"pass a smaller at_turn (max_turns={env.max_turns})")
    at_snapshot = (env.observations_for(env.state), env.render())
    snap = env.snapshot()
    rest = messages[at_turn:]
    first = _continue(env, rest)
    assert first, "no step was played after the snapshot"
    later = env.snapshot()
    env.restore(snap)
    restored = (env.observations_for(env.state), env.render())
    assert data_equivalence(at_snapshot, restored), \
        f"observations after restore differ from those at the snapshot:\n{at_snapshot!r}\n!=\n{restored!r}"
    second = _continue(env, rest)
    assert data_equivalence(first, second), f"replay after restore differs:\n{first!r}\n!=\n{second!r}"
    env.restore(later)
    assert env.state is later.state and not env.agents, "restoring the end-of-episode snapshot did not end the episode"
    env.restore(snap)
    assert env.state.turn == at_turn, f"first snapshot changed: turn {env.state.turn} != {at_turn}"


def _continue(env: DialogueEnv, messages: list[str]) -> list[Any]:
    out = []
    queue = list(messages)
    while env.agents:
        out.append(env.step({env.current_speaker: queue.pop(0) if queue else ""}))
    return out


def check_env(env_id: str, **kwargs: Any) -> None:
    """All contract checks on one registered id."""
    from optima_envs.registration import make

    check_parallel_api(make(env_id, **kwargs))
    check_seed_determinism(lambda: make(env_id, **kwargs))
    check_snapshot_roundtrip(make(env_id, **kwargs))
