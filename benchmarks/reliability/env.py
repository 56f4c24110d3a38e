"""Probe (a): fuzzed steps over every registered env.

Each step sends a random action: text of any Unicode (lone surrogates, control characters,
answer tags, text over the length limit), text with valid or invalid token ids, or no valid
action at all (wrong types, the wrong agent, a missing speaker); resets get random valid and
invalid seeds and options. An env holds when it accepts what it should (five dicts, the
message stored as UTF-8-encodable text, `message_repaired` and token costs right, everything an
episode ends with storable) and refuses the rest with an `OptimaError` that leaves the state as
it was. Anything else (another exception, a changed state after a refusal, unstorable text)
fails. Dataset envs run on the dataset fixtures that ship with optima_envs
(`optima_envs.test.env_kwargs`).
"""

from __future__ import annotations

import json
import math
import warnings
from typing import Any, Callable

import numpy as np

import optima_envs
from optima_envs.core.reset_args import ResetOptionWarning
from optima_envs.core.text import repair_text
from optima_envs.errors import ConfigError, EpisodeEndedError, InvalidActionError, OptimaError
from optima_envs.test import env_kwargs

from benchmarks.reliability.tally import Tally

_ALPHABET = list("abc <A>/ 12.\u00e9\u4e2d\U0001F600\n\t\x00\x1b\u2028") + [
    "<A>x</A>", "<A></A>", "\\boxed{3}", "\ud800", "\udfff", "\ud83d\ude00", "#### 7", "(B)"]
_BAD_IDS: list[Any] = [[-1], [True], [1.5], ["7"], [2**31], [[1]], "123", 7, {"a": 1}]
_BAD_ACTIONS: list[Any] = [3, None, b"bytes", ["a"], ("a",), {"token_ids": [1]}, {"text": 5}]
_BAD_RESETS: list[tuple[Any, Any]] = [
    (True, None), ([1, 2], None), (-3, None), ("7", None), (1.5, None), (0, "index"),
    (0, {"index": 10**9}), (0, {"index": "3"}), (0, {"index": True}), (0, {"format_instruction": 10**6}),
    (0, {"format_instruction": "be brief \ud800"}), (0, {"instance": "q"}), (0, ["index", 1]),
]


def _text(rng: np.random.Generator, max_chars: int) -> str:
    size = int(rng.integers(0, 60)) if rng.random() > 0.03 else max_chars + int(rng.integers(1, 50))
    return "".join(rng.choice(_ALPHABET, size=size))


def _action(rng: np.random.Generator, speaker: str, agents: list[str], max_chars: int) -> tuple[Any, bool]:
    """(the `step` argument, whether the env must accept it)."""
    roll = rng.random()
    text = _text(rng, max_chars)
    if roll < 0.55:
        return {speaker: text}, True
    if roll < 0.75:
        ids = [int(i) for i in rng.integers(0, 50_000, size=int(rng.integers(0, 30)))]
        return {speaker: {"text": text if ids else "", "token_ids": ids}}, True
    if roll < 0.85:
        bad = _BAD_IDS[int(rng.integers(len(_BAD_IDS)))]
        return {speaker: {"text": text or "x", "token_ids": bad}}, False
    if roll < 0.92:
        return {speaker: _BAD_ACTIONS[int(rng.integers(len(_BAD_ACTIONS)))]}, False
    other = [a for a in agents if a != speaker]
    choices: list[Any] = [{other[0]: text}, {"mallory": text, speaker: text}, text, [text], None]
    return choices[int(rng.integers(len(choices)))], False


def _storable(*values: Any) -> None:
    """Raises when anything in `values` could not be written as UTF-8 JSON (what buffers need)."""
    json.dumps(values, ensure_ascii=False, default=str).encode("utf-8")


def _check_step(env: Any, action: Any, speaker: str, result: Any) -> str | None:
    """Why an accepted step broke the contract (None: it did not)."""
    if not (isinstance(result, tuple) and len(result) == 5 and all(isinstance(d, dict) for d in result)):
        return f"step returned {type(result).__name__}, not five dicts"
    infos = result[4]
    sent = action[speaker]
    text = sent if isinstance(sent, str) else sent["text"]
    expected_text, repaired = repair_text(text[: env.max_message_chars])
    message = env.state.messages[-1]
    flagged = infos[speaker].get("message_repaired")
    if message.text != expected_text or flagged is not repaired:
        return f"stored {message.text[:40]!r} (message_repaired={flagged}), expected {expected_text[:40]!r} " \
               f"(message_repaired={repaired})"
    if isinstance(sent, dict) and infos[speaker]["message_tokens"] != len(sent["token_ids"]):
        return f"message_tokens {infos[speaker]['message_tokens']} != {len(sent['token_ids'])} token ids"
    if not env.agents and "score" not in infos[speaker]:
        return "the episode ended without a score in infos"
    _storable(result[0], infos, message.text)
    return None


def _one_step(env: Any, rng: np.random.Generator, tally: Tally) -> None:
    speaker = env.current_speaker
    action, valid = _action(rng, speaker, env.possible_agents, env.max_message_chars)
    before = env.state
    try:
        result = env.step(action)
    except InvalidActionError as error:
        if valid:
            tally.fail(f"refused a valid action {action!r:.80}: {error}")
        else:
            tally.check(env.state is before, f"refusing {action!r:.80} changed the state")
        return
    except Exception as error:  # the probe's point: anything else is a failure to report
        tally.fail(f"{type(error).__name__}: {error} for action {action!r:.80}")
        return
    if not valid:
        tally.fail(f"accepted an invalid action {action!r:.80}")
        return
    try:
        why = _check_step(env, action, speaker, result)
    except (TypeError, ValueError, KeyError) as error:
        why = f"unstorable or incomplete result: {type(error).__name__}: {error}"
    tally.check(why is None, str(why))


def _reset(env: Any, rng: np.random.Generator, tally: Tally) -> bool:
    """One reset attempt: invalid ones must raise ConfigError, an unknown option key must be
    ignored (the episode is the one without it); returns whether the env is live."""
    if rng.random() < 0.03:
        return _unknown_option(env, int(rng.integers(2**31)), tally)
    if rng.random() < 0.1:
        seed, options = _BAD_RESETS[int(rng.integers(len(_BAD_RESETS)))]
        try:
            env.reset(seed=seed, options=options)
        except ConfigError:
            tally.ok()
        except Exception as error:  # the probe's point: anything else is a failure to report
            tally.fail(f"reset(seed={seed!r}, options={options!r}) raised {type(error).__name__}: {error}")
        else:
            tally.fail(f"reset(seed={seed!r}, options={options!r}) was accepted")
        return False
    options: dict[str, Any] = {}
    if rng.random() < 0.5:
        options["index"] = int(rng.integers(len(env.task.source)))
    if rng.random() < 0.3:
        choices: list[Any] = ["sample", 0, repair_text(_text(rng, 80))[0]]
        options["format_instruction"] = choices[int(rng.integers(len(choices)))]
    try:
        env.reset(seed=int(rng.integers(2**31)), options=options)
    except Exception as error:  # the probe's point: anything else is a failure to report
        tally.fail(f"valid reset(options={options!r}) raised {type(error).__name__}: {error}")
        return False
    tally.ok()
    return True


def _unknown_option(env: Any, seed: int, tally: Tally) -> bool:
    """`reset(options={"idx": 1})` plays the episode `reset` without it plays (with a warning)."""
    try:
        plain, _ = env.reset(seed=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResetOptionWarning)
            typo, _ = env.reset(seed=seed, options={"idx": 1})
    except Exception as error:  # the probe's point: anything else is a failure to report
        tally.fail(f"reset(seed={seed}, options={{'idx': 1}}) raised {type(error).__name__}: {error}")
        return False
    tally.check(typo == plain, f"reset(seed={seed}, options={{'idx': 1}}) played another episode than without it")
    return True


def _after_end(env: Any, tally: Tally) -> None:
    try:
        env.step({env.possible_agents[0]: "more"})
    except EpisodeEndedError:
        tally.ok()
    except Exception as error:  # the probe's point: anything else is a failure to report
        tally.fail(f"step after the end raised {type(error).__name__}: {error}")
    else:
        tally.fail("step after the end was accepted")


def fuzz_env(env_id: str, make: Callable[[], Any], steps: int, seed: int) -> Tally:
    """`steps` fuzzed steps (plus the resets between episodes) on one env."""
    tally = Tally("a", env_id)
    try:
        env = make()
    except OptimaError as error:
        tally.fail(f"could not build the env: {error}")
        return tally
    rng = np.random.default_rng(seed)
    done = 0
    while done < steps:
        if not _reset(env, rng, tally):
            continue
        while env.agents and done < steps:
            _one_step(env, rng, tally)
            done += 1
        if not env.agents and rng.random() < 0.2:
            _after_end(env, tally)
    tally.notes["steps"] = done
    return tally


def run(total_steps: int, seed: int) -> list[Tally]:
    """At least `total_steps` fuzzed steps, spread evenly over every registered env."""
    ids = sorted(optima_envs.list_envs())
    per_env = math.ceil(total_steps / len(ids))
    return [fuzz_env(env_id, lambda e=env_id: optima_envs.make(e, **env_kwargs(e)), per_env, seed + i)
            for i, env_id in enumerate(ids)]
