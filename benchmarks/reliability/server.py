"""Probe (b): the rollout engine against fault-injecting OpenAI-compatible servers on 127.0.0.1.

Two test servers (`optima_agents.testing.StubServer`) answer from a seeded script in
which at least `fault_rate` of the replies are faults: HTTP 500/503, 429 with `Retry-After`,
hangs past the client's timeout, reset connections, bodies that are not JSON, and HTTP 200 JSON
with a missing or wrong-typed field; a third base URL is a port nothing listens on. Good replies
are canned text with canned token ids (no model). Every faulty 200 body carries a marker
(`FAULT-<n>`) in its text, so a malformed reply that slipped through as an answer is caught.

Held: every episode comes back, in order; an episode whose turn failed after the retries is an
infra failure with the error and no score, and every other turn is a canned reply; no marker
appears in any transcript; the buffer written from the records reads back equal; the dead URL
is marked down and gets few attempts.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from benchmarks.reliability.tally import Tally

CANNED = {"I know the facts. <A>Kelo</A>": [11, 12, 13, 14, 15], "We agree. <A>Kelo</A>": [21, 22, 23, 24]}
TIMEOUT_S = 0.4
FAULTS = ("http_500", "http_503", "http_429_retry_after", "hang", "connection_reset", "not_json", "truncated_json",
          "wrong_type", "missing_field")


def _good(rng: np.random.Generator) -> Any:
    from optima_agents.testing import Reply, completion

    text = list(CANNED)[int(rng.integers(len(CANNED)))]
    return Reply(body=completion(text, token_ids=list(CANNED[text])))


def _wrong_typed(marker: str, rng: np.random.Generator) -> dict[str, Any]:
    """A 200 body with `marker` as its text and one field of the wrong type."""
    from optima_agents.testing import completion

    body = completion(marker, token_ids=[1, 2])
    choice = body["choices"][0]
    breakers = [
        lambda: choice.update(token_ids=["a", "b"]), lambda: choice.update(token_ids=[-4]),
        lambda: choice.update(token_ids=[True]), lambda: choice.update(token_ids=[2**40]),
        lambda: choice.update(finish_reason=7), lambda: body["usage"].update(prompt_tokens="x"),
        lambda: body["usage"].update(completion_tokens=[1]), lambda: body.update(usage="none"),
        lambda: body.update(prompt_token_ids={"a": 1}), lambda: choice.update(token_ids="1 2"),
    ]
    breakers[int(rng.integers(len(breakers)))]()
    return body


def _missing(marker: str, rng: np.random.Generator) -> Any:
    """A 200 body without a field the policy needs (or not an object at all)."""
    from optima_agents.testing import completion

    body = completion(marker, token_ids=[1, 2])
    variants = [{**body, "choices": []}, {**body, "choices": None}, {k: v for k, v in body.items() if k != "choices"},
                {**body, "choices": [{"index": 0, "message": marker}]}, {**body, "choices": [None]},
                {**body, "choices": [{"index": 0, "finish_reason": "stop"}]}, [body], marker, 3]
    return copy.deepcopy(variants[int(rng.integers(len(variants)))])


def _fault(kind: str, marker: str, rng: np.random.Generator) -> Any:
    from optima_agents.testing import Reply

    return {
        "http_500": lambda: Reply(500, {"error": "boom"}),
        "http_503": lambda: Reply(503, raw=b"<html>Service Unavailable</html>"),
        "http_429_retry_after": lambda: Reply(429, {"error": "slow down"}, headers={"retry-after": "0"}),
        "hang": lambda: Reply(delay_s=TIMEOUT_S * 2.5),
        "connection_reset": lambda: Reply(reset=True),
        "not_json": lambda: Reply(raw=f"<html>{marker}</html>".encode()),
        "truncated_json": lambda: Reply(raw=f'{{"choices": [{{"message": {{"content": "{marker}"'.encode()),
        "wrong_type": lambda: Reply(body=_wrong_typed(marker, rng)),
        "missing_field": lambda: Reply(raw=b"null") if rng.random() < 0.1 else Reply(body=_missing(marker, rng)),
    }[kind]()


def _script(rng: np.random.Generator, length: int, fault_rate: float, tag: str) -> tuple[list[Any], list[str | None]]:
    """`length` replies, each a fault with probability `fault_rate`, and the kind of each (None: good)."""
    replies, kinds = [], []
    for n in range(length):
        if rng.random() < fault_rate:
            kind = FAULTS[int(rng.integers(len(FAULTS)))]
            replies.append(_fault(kind, f"FAULT-{tag}{n}", rng))
            kinds.append(kind)
        else:
            replies.append(_good(rng))
            kinds.append(None)
    return replies, kinds


class _Recording:
    """Wraps a policy and keeps every action it returned, by request seed and turn."""

    def __init__(self, inner: Any):
        self.inner, self.sampling = inner, inner.sampling
        self.failed: list[tuple[int, str]] = []

    def act(self, requests: Sequence[Any]) -> list[Any]:
        actions = self.inner.act(requests)
        self.failed += [(r.observation["turn"], a.error) for r, a in zip(requests, actions) if a.failed]
        return actions

    def identity(self) -> dict[str, Any]:
        return self.inner.identity()


def _check_record(record: Any) -> str | None:
    """Why a record breaks the contract (None: it keeps it)."""
    if "FAULT-" in " ".join(t.text for t in record.turns):
        return f"a faulty reply was recorded as an answer: {[t.text for t in record.turns]}"
    if record.infra_failure:
        if not record.error or record.score is not None or record.end_reason != "infra_failure" \
                or record.reward_components:
            return f"infra failure recorded wrongly: error={record.error!r} score={record.score}"
        return None
    bad = [t.text for t in record.turns if t.text not in CANNED or list(t.token_ids) != CANNED[t.text]]
    if bad:
        return f"turns that are not canned replies: {bad}"
    return None if record.scored else f"a completed episode was not scored ({record.score_error})"


def run(episodes: int, fault_rate: float, seed: int, workdir: Path, *, min_fault_rate: float = 0.3) -> list[Tally]:
    """Play `episodes` through two faulty servers and a dead URL (each reply a fault with probability
    `fault_rate`); one row per check and per fault kind. Fails unless at least `min_fault_rate` of
    the attempts met a fault."""
    from optima_agents.policies import OpenAIPolicy
    from optima_agents.rollout import RolloutEngine, episode_specs
    from optima_agents.servers import free_port
    from optima_agents.testing import StubServer

    rng = np.random.default_rng(seed)
    scripts = [_script(rng, 4000, fault_rate, tag) for tag in ("a", "b")]
    servers = [StubServer(replies) for replies, _ in scripts]
    dead = f"http://127.0.0.1:{free_port()}/v1"
    urls = [servers[0].base_url, dead, servers[1].base_url]
    policy = OpenAIPolicy("stub", base_urls=urls, tokenizer=None, timeout_s=TIMEOUT_S, max_retries=3, backoff_s=0.01,
                          concurrency=16, probe_backoff_s=0.5)
    recording = _Recording(policy)
    try:
        records = RolloutEngine("synth-hop-ia", recording, env_kwargs={"max_turns": 4}, progress=False).run(
            episode_specs(episodes))
        stats = {s["url"]: s for s in policy.url_stats()}
    finally:
        policy.close()
        for server in servers:
            server.close()
    faults = _fault_rows(scripts, servers, records)
    rows = [_episode_row(records, episodes, recording), _buffer_row(records, workdir), *faults,
            _dead_url_row(stats, dead)]
    faulty = sum(r.tried for r in faults) + stats[dead]["attempts"]
    attempts = sum(len(server.received) for server in servers) + stats[dead]["attempts"]
    rows[0].notes["fault_rate"] = round(faulty / max(attempts, 1), 3)
    if faulty < min_fault_rate * attempts:
        rows[0].fail(f"only {faulty} of {attempts} attempts met a fault, under the {min_fault_rate:.0%} required")
    return rows


def _episode_row(records: list[Any], episodes: int, recording: _Recording) -> Tally:
    row = Tally("b", "episodes: none lost, failures recorded as infra failures")
    if len(records) != episodes:
        row.fail(f"{episodes} episodes asked for, {len(records)} came back")
    for record in records:
        why = _check_record(record)
        row.check(why is None, f"episode seed {record.seed}: {why}")
    row.notes.update(infra_failures=sum(r.infra_failure for r in records), failed_turns=len(recording.failed),
                     scored=sum(r.scored for r in records))
    if len(recording.failed) != row.notes["infra_failures"]:
        row.fail(f"{len(recording.failed)} turns failed but {row.notes['infra_failures']} episodes are infra failures")
    return row


def _buffer_row(records: list[Any], workdir: Path) -> Tally:
    from optima_train.buffers import read_episodes, write_episodes

    row = Tally("b", "buffer: every record written and read back")
    write_episodes(workdir / "fault-server-buffer", records)
    back = read_episodes(workdir / "fault-server-buffer")
    for mine, theirs in zip(records, back):
        row.check(mine == theirs, f"record seed {mine.seed} read back differently")
    if len(back) != len(records):
        row.fail(f"{len(records)} records written, {len(back)} read back")
    return row


def _fault_rows(scripts: list[tuple[list[Any], list[str | None]]], servers: list[Any],
                records: list[Any]) -> list[Tally]:
    """One row per fault kind: faults served (a fault fails when its marker reached a transcript)."""
    leaked = set(re.findall(r"FAULT-[ab]\d+", " ".join(t.text for r in records for t in r.turns)))
    total = sum(len(server.received) for server in servers)
    rows = {kind: Tally("b", f"fault: {kind}") for kind in FAULTS}
    for (_, kinds), server, tag in zip(scripts, servers, ("a", "b")):
        for n, kind in enumerate(kinds[: len(server.received)]):
            if kind is not None:
                rows[kind].check(f"FAULT-{tag}{n}" not in leaked, f"FAULT-{tag}{n} ({kind}) reached a transcript")
    for row in rows.values():
        row.notes["share_of_replies"] = round(row.tried / max(total, 1), 3)
    return list(rows.values())


def _dead_url_row(stats: dict[str, dict[str, Any]], dead: str) -> Tally:
    """Attempts the dead URL got; held while it is marked down and got under 10% of all attempts."""
    row = Tally("b", "dead URL: marked down, little traffic")
    attempts = sum(s["attempts"] for s in stats.values())
    to_dead = stats[dead]["attempts"]
    share = to_dead / max(attempts, 1)
    good = stats[dead]["state"] == "down" and share < 0.1
    for _ in range(to_dead):
        row.check(good, f"dead URL state {stats[dead]['state']}, {to_dead} of {attempts} attempts ({share:.0%})")
    row.notes.update(attempts=attempts, to_dead_url=to_dead, share=round(share, 3), state=stats[dead]["state"],
                     times_down=stats[dead]["times_down"])
    return row
