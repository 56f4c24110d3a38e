"""The episode buffer's table schema (version 2): one row per `EpisodeRecord`.

Columns (nullable unless noted):

- `schema_version` (int16, not null): this schema's version, `SCHEMA_VERSION`.
- `env_id` (string, not null), `env_version` (int32, not null): the registered task and version.
- `seed` (int64): the `reset` seed. `index` (int64): the instance index asked for (null: drawn
  from the seed). `options` (string, not null): the other reset options, JSON.
- `instance_id` (string, not null), `question` (string, not null), `gold` (string, not null):
  the instance; `gold` is JSON (a string, a list of aliases, a number ...).
- `agents`, `roles`, `system_prompts` (list<string>, not null): per agent, in speaking order.
- `format_instruction` (string): the format instruction used, if any.
- `turns` (list<struct>, not null), one per utterance: `turn` (int32), `speaker` (string), `text`
  (string), `token_ids` (list<int32>; empty when the policy reported none), `num_tokens` (int32,
  the cost the env charged), `tokens_exact` (bool), `answer` (string, the parsed answer),
  `finish_reason` (string: stop/length), `prompt_tokens` (int32), `truncated` (bool),
  `logprobs` (list<float64>, nullable: one log-prob per token id, null when the policy gave
  none; float64 so a record reads back equal to the one written).
- `final_answer` (string), `score` (float64; null when not scored), `score_ok` (bool, not null),
  `score_error` (string), `end_reason` (string, not null; "infra_failure" for infra failures).
- `total_tokens` (int64, not null); `agent_tokens` (list<int64>, not null), aligned with `agents`.
- `reward_components` (list<struct<name string, value float64>>, not null): named reward parts.
- `policies`, `sampling` (list<string>, not null): per agent (aligned with `agents`), the policy
  identity and the sampling settings, each as JSON.
- `infra_failure` (bool, not null), `error` (string): the episode stopped on an infrastructure
  failure; never score it as wrong.
- `plain_system_prompts` (list<string>): the system prompts without the format instruction,
  aligned with `agents`; an empty list when they equal `system_prompts` (no instruction was
  used, so nothing is stored twice), null when the record did not carry them.

Why lists aligned with `agents` rather than maps, and JSON strings for free-form values: Parquet
maps and open structs read back awkwardly through Hugging Face `datasets`, while these columns
load as plain lists and strings everywhere (pandas, polars, DuckDB, `datasets`).

Version history: 1: first release. 2: `turns[].logprobs`. 3: `plain_system_prompts`. Parts of
older versions still read (a version 1 turn gets `logprobs=None`; a record of version 1 or 2 gets
`plain_system_prompts=None`); `episode_schema(version)` is the schema a part of that version must
have. New parts are always written with the current version.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import pyarrow as pa

from optima_agents.rollout.records import EpisodeRecord, TurnRecord

__all__ = ["EPISODE_SCHEMA", "SCHEMA_VERSION", "SCHEMA_VERSION_KEY", "episode_schema", "file_schema_version",
           "record_to_row", "records_to_table", "row_to_record", "table_to_records"]

SCHEMA_VERSION = 3
#: Parquet key-value metadata key holding the schema version of a file.
SCHEMA_VERSION_KEY = b"optima.schema_version"

_TURN_FIELDS_V1 = [
    pa.field("turn", pa.int32(), nullable=False),
    pa.field("speaker", pa.string(), nullable=False),
    pa.field("text", pa.string(), nullable=False),
    pa.field("token_ids", pa.list_(pa.int32()), nullable=False),
    pa.field("num_tokens", pa.int32(), nullable=False),
    pa.field("tokens_exact", pa.bool_(), nullable=False),
    pa.field("answer", pa.string()),
    pa.field("finish_reason", pa.string(), nullable=False),
    pa.field("prompt_tokens", pa.int32(), nullable=False),
    pa.field("truncated", pa.bool_(), nullable=False),
]
TURN_TYPE = pa.struct([*_TURN_FIELDS_V1, pa.field("logprobs", pa.list_(pa.float64()))])

COMPONENT_TYPE = pa.struct([pa.field("name", pa.string(), nullable=False), pa.field("value", pa.float64())])


def _episode_fields(turn_type: pa.DataType, *, plain_prompts: bool = True) -> list[pa.Field]:
    """Every column, with the given turn struct and with or without `plain_system_prompts` (what
    differs between versions)."""
    return [
        pa.field("schema_version", pa.int16(), nullable=False),
        pa.field("env_id", pa.string(), nullable=False),
        pa.field("env_version", pa.int32(), nullable=False),
        pa.field("seed", pa.int64()),
        pa.field("index", pa.int64()),
        pa.field("options", pa.string(), nullable=False),
        pa.field("instance_id", pa.string(), nullable=False),
        pa.field("question", pa.string(), nullable=False),
        pa.field("gold", pa.string(), nullable=False),
        pa.field("agents", pa.list_(pa.string()), nullable=False),
        pa.field("roles", pa.list_(pa.string()), nullable=False),
        pa.field("system_prompts", pa.list_(pa.string()), nullable=False),
        pa.field("format_instruction", pa.string()),
        pa.field("turns", pa.list_(turn_type), nullable=False),
        pa.field("final_answer", pa.string()),
        pa.field("score", pa.float64()),
        pa.field("score_ok", pa.bool_(), nullable=False),
        pa.field("score_error", pa.string()),
        pa.field("end_reason", pa.string(), nullable=False),
        pa.field("total_tokens", pa.int64(), nullable=False),
        pa.field("agent_tokens", pa.list_(pa.int64()), nullable=False),
        pa.field("reward_components", pa.list_(COMPONENT_TYPE), nullable=False),
        pa.field("policies", pa.list_(pa.string()), nullable=False),
        pa.field("sampling", pa.list_(pa.string()), nullable=False),
        pa.field("infra_failure", pa.bool_(), nullable=False),
        pa.field("error", pa.string()),
        *([pa.field("plain_system_prompts", pa.list_(pa.string()))] if plain_prompts else []),
    ]


EPISODE_SCHEMA = pa.schema(_episode_fields(TURN_TYPE), metadata={SCHEMA_VERSION_KEY: str(SCHEMA_VERSION).encode()})
_SCHEMAS = {
    1: pa.schema(_episode_fields(pa.struct(_TURN_FIELDS_V1), plain_prompts=False), metadata={SCHEMA_VERSION_KEY: b"1"}),
    2: pa.schema(_episode_fields(TURN_TYPE, plain_prompts=False), metadata={SCHEMA_VERSION_KEY: b"2"}),
    SCHEMA_VERSION: EPISODE_SCHEMA,
}


def file_schema_version(schema: pa.Schema) -> int:
    """The schema version a Parquet file's key-value metadata names. A file without it (rewritten
    by another tool, which dropped the metadata) gets the version whose turn struct and columns it has."""
    raw = (schema.metadata or {}).get(SCHEMA_VERSION_KEY)
    if not raw:
        turns = schema.field("turns").type if "turns" in schema.names else None
        return next((v for v, known in _SCHEMAS.items()
                     if known.field("turns").type == turns and set(known.names) == set(schema.names)), SCHEMA_VERSION)
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"its schema version metadata {raw!r} is not an integer") from None


def episode_schema(version: int = SCHEMA_VERSION) -> pa.Schema:
    """The table schema of episode parts written with schema `version`.

    Raises:
        ValueError: a version this code does not know (newer: upgrade Optima).
    """
    if version not in _SCHEMAS:
        newer = version > SCHEMA_VERSION
        raise ValueError(f"episode schema version {version} is {'newer than' if newer else 'not one of'} this "
                         f"Optima's versions {sorted(_SCHEMAS)}" + ("; upgrade optima" if newer else ""))
    return _SCHEMAS[version]


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def record_to_row(record: EpisodeRecord) -> dict[str, Any]:
    """One record as a row of `EPISODE_SCHEMA` (plain Python values)."""
    agents = list(record.agents)
    return {
        "schema_version": SCHEMA_VERSION,
        "env_id": record.env_id, "env_version": record.env_version, "seed": record.seed, "index": record.index,
        "options": _dumps(record.options), "instance_id": record.instance_id, "question": record.question,
        "gold": _dumps(record.gold), "agents": agents, "roles": list(record.roles),
        "system_prompts": list(record.system_prompts), "format_instruction": record.format_instruction,
        "turns": [
            {"turn": t.turn, "speaker": t.speaker, "text": t.text, "token_ids": list(t.token_ids),
             "num_tokens": t.num_tokens, "tokens_exact": t.tokens_exact, "answer": t.answer,
             "finish_reason": t.finish_reason, "prompt_tokens": t.prompt_tokens, "truncated": t.truncated,
             "logprobs": None if t.logprobs is None else list(t.logprobs)}
            for t in record.turns
        ],
        "final_answer": record.final_answer, "score": record.score, "score_ok": record.score_ok,
        "score_error": record.score_error, "end_reason": record.end_reason, "total_tokens": record.total_tokens,
        "agent_tokens": [int(record.agent_tokens.get(a, 0)) for a in agents],
        "reward_components": [{"name": k, "value": v} for k, v in record.reward_components.items()],
        "policies": [_dumps(record.policies.get(a, {})) for a in agents],
        "sampling": [_dumps(record.sampling.get(a, {})) for a in agents],
        "infra_failure": record.infra_failure, "error": record.error,
        "plain_system_prompts": _plain_column(record),
    }


def _plain_column(record: EpisodeRecord) -> list[str] | None:
    """`plain_system_prompts` as stored: empty when equal to `system_prompts` (see the module doc)."""
    plain = record.plain_system_prompts
    if plain is None:
        return None
    return [] if tuple(plain) == tuple(record.system_prompts) else list(plain)


def _plain_prompts(row: Mapping[str, Any], system_prompts: tuple[str, ...]) -> tuple[str, ...] | None:
    """The inverse of `_plain_column`; None for rows of versions before the column existed."""
    stored = row.get("plain_system_prompts")
    if stored is None:
        return None
    return tuple(stored) if len(stored) else system_prompts


def row_to_record(row: Mapping[str, Any]) -> EpisodeRecord:
    """The inverse of `record_to_row`; accepts rows from pyarrow or from `datasets`, of this
    schema version or an older one (a version 1 turn has no `logprobs`, a version 1 or 2 row no
    `plain_system_prompts`: each reads as None).

    Raises:
        ValueError: the row was written with a newer schema version than this code knows.
    """
    version = int(row.get("schema_version") or 0)
    if version > SCHEMA_VERSION:
        raise ValueError(
            f"episode row has schema_version {version}, newer than this Optima's {SCHEMA_VERSION}; upgrade optima"
        )
    agents = tuple(row["agents"])
    system_prompts = tuple(row["system_prompts"])
    return EpisodeRecord(
        env_id=row["env_id"], env_version=int(row["env_version"]), seed=row["seed"], index=row["index"],
        options=json.loads(row["options"]), instance_id=row["instance_id"], question=row["question"],
        gold=json.loads(row["gold"]), agents=agents, roles=tuple(row["roles"]),
        system_prompts=system_prompts, format_instruction=row["format_instruction"],
        turns=tuple(TurnRecord.from_dict(t) for t in row["turns"]),
        final_answer=row["final_answer"], score=row["score"], score_ok=bool(row["score_ok"]),
        score_error=row["score_error"], end_reason=row["end_reason"], total_tokens=int(row["total_tokens"]),
        agent_tokens={a: int(t) for a, t in zip(agents, row["agent_tokens"])},
        reward_components={c["name"]: c["value"] for c in row["reward_components"]},
        policies={a: json.loads(p) for a, p in zip(agents, row["policies"])},
        sampling={a: json.loads(s) for a, s in zip(agents, row["sampling"])},
        infra_failure=bool(row["infra_failure"]), error=row["error"],
        plain_system_prompts=_plain_prompts(row, system_prompts),
    )


def records_to_table(records: list[EpisodeRecord] | tuple[EpisodeRecord, ...]) -> pa.Table:
    """Records as a table of `EPISODE_SCHEMA` (schema metadata carries the version)."""
    return pa.Table.from_pylist([record_to_row(r) for r in records], schema=EPISODE_SCHEMA)


def table_to_records(table: pa.Table) -> list[EpisodeRecord]:
    """The records of a table written with this schema (or an older version of it)."""
    return [row_to_record(row) for row in table.to_pylist()]
