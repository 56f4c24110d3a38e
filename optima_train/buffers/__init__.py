"""Episode buffers: versioned Parquet tables of `EpisodeRecord`s, appended atomically.

    from optima_train.buffers import write_episodes, read_episodes, load_episode_dataset
    write_episodes("runs/iter0", records)          # adds runs/iter0/part-0000N.parquet
    records = read_episodes("runs/iter0")          # back to EpisodeRecords
    ds = load_episode_dataset("runs/iter0")        # a Hugging Face datasets.Dataset

The schema is documented in `optima_train.buffers.schema`; the on-disk layout and atomicity in
`optima_train.buffers.writer`.
"""

from optima_train.buffers.schema import (
    EPISODE_SCHEMA,
    SCHEMA_VERSION,
    record_to_row,
    records_to_table,
    row_to_record,
    table_to_records,
)
from optima_train.buffers.writer import (
    PART_GLOB,
    EpisodeWriter,
    list_parts,
    load_episode_dataset,
    read_episodes,
    read_part_metadata,
    remove_temp_files,
    write_episodes,
)

__all__ = [
    "EPISODE_SCHEMA",
    "PART_GLOB",
    "SCHEMA_VERSION",
    "EpisodeWriter",
    "list_parts",
    "load_episode_dataset",
    "read_episodes",
    "read_part_metadata",
    "record_to_row",
    "records_to_table",
    "remove_temp_files",
    "row_to_record",
    "table_to_records",
    "write_episodes",
]
