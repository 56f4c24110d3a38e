"""Episode buffers: versioned Parquet tables of `EpisodeRecord`s, appended atomically, checked on read.

    from optima_train.buffers import write_episodes, read_episodes, load_episode_dataset
    write_episodes("runs/iter0", records)          # adds runs/iter0/part-0000N.parquet + its manifest entry
    records = read_episodes("runs/iter0")          # back to EpisodeRecords (every part checked)
    ds = load_episode_dataset("runs/iter0")        # a Hugging Face datasets.Dataset

Rewards sit beside a buffer in a side table keyed by episode (`optima_train.buffers.rewards`).
The schema is documented in `optima_train.buffers.schema`; the on-disk layout and atomicity in
`optima_train.buffers.writer`; the manifest and its checks in `optima_train.buffers.manifest`.
"""

from optima_train.buffers.manifest import MANIFEST_NAME, BufferCorruptError, BufferWarning, PartEntry
from optima_train.buffers.reader import (
    PART_GLOB,
    list_parts,
    load_episode_dataset,
    read_episodes,
    read_part_metadata,
    rebuild_manifest,
    remove_temp_files,
    verify_buffer,
)
from optima_train.buffers.rewards import (
    REWARDS_FILE,
    EpisodeRewards,
    attach_rewards,
    read_rewards,
    write_rewards,
)
from optima_train.buffers.schema import (
    EPISODE_SCHEMA,
    SCHEMA_VERSION,
    record_to_row,
    records_to_table,
    row_to_record,
    table_to_records,
)
from optima_train.buffers.writer import EpisodeWriter, write_episodes

__all__ = [
    "EPISODE_SCHEMA",
    "MANIFEST_NAME",
    "PART_GLOB",
    "REWARDS_FILE",
    "SCHEMA_VERSION",
    "BufferCorruptError",
    "BufferWarning",
    "EpisodeRewards",
    "EpisodeWriter",
    "PartEntry",
    "attach_rewards",
    "list_parts",
    "load_episode_dataset",
    "read_episodes",
    "read_part_metadata",
    "read_rewards",
    "rebuild_manifest",
    "record_to_row",
    "records_to_table",
    "remove_temp_files",
    "row_to_record",
    "table_to_records",
    "verify_buffer",
    "write_episodes",
    "write_rewards",
]
