"""What every dataset loader shares: reading rows with file-and-line locations, finding a
split's files, loading from the Hugging Face hub, selecting a reproducible subset, and a lazy,
cached `InstanceSource` (`DatasetSource`) that the per-dataset loaders subclass.

A loader says where a split's files are (`file_patterns`), where the dataset is on the hub
(`hub_id`, `hub_config`) and how one row becomes a `TaskInstance` (`to_instance`); the rest is
here. Errors name the file and line (`dev.jsonl:17`), the item of a JSON list (`dev.json[16]`)
or the hub row, and the field.

Subset selection (`limit`, `seed`): without `limit` every row is used, in file order. With
`limit=N`, the rows are taken in the order of `np.random.default_rng(seed).permutation(n_rows)`
and the first N that load are kept, so the subset is reproducible, and a larger `limit` with the
same seed extends a smaller one.
"""

from __future__ import annotations

import os
import warnings
from collections import OrderedDict
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, ClassVar, Literal, Mapping, Sequence

import numpy as np

from optima_envs.core.types import TaskInstance
from optima_envs.data.rows import Row, read_csv, read_json, read_jsonl, read_parquet, read_rows, require
from optima_envs.errors import ConfigError, DataError, DataNotFoundError

__all__ = [
    "CACHE_SIZE", "DATA_DIR_ENV", "DataConfig", "DataWarning", "DatasetSource", "OnError", "Row", "check_files", "clear_cache",
    "env_data_dir", "find_files", "load_hub_rows", "positional_id", "read_csv", "read_json", "read_jsonl", "read_parquet",
    "read_rows", "require",
]

OnError = Literal["raise", "skip"]
CACHE_SIZE = 16


class DataWarning(UserWarning):
    """Warned when rows were skipped (`on_error="skip"`); the list is on `source.skipped`."""


@dataclass(frozen=True)
class DataConfig:
    """Where a dataset task's data comes from and which part of it is used.

    data_dir (str, *optional*): a folder holding the dataset's release files (or hub-format
        rows as .jsonl/.json/.parquet); the split's file is found by name.
    data_files (str or sequence of str, *optional*): the exact file(s) to read.
    split (str): the split; aliases such as "dev" are accepted (see `SPLIT_ALIASES`).
    limit (int, *optional*): use a seeded random subset of this many instances.
    seed (int, defaults to 0): the seed of that subset.
    on_error ("raise" or "skip", defaults to "raise"): what a malformed row does.
    hub_id (str, *optional*): the hub dataset used when no path is given (a per-dataset default).

    With neither `data_dir` nor `data_files`, the data comes from `$OPTIMA_DATA_DIR/<folder>`
    when that environment variable names a folder holding the dataset's folder (`folder` is the
    loader's `data_folder`: gsm8k, math, mmlu, arc_challenge, hotpotqa, 2wikimqa, triviaqa,
    cbt), and otherwise from the Hugging Face hub with `datasets`.
    """

    data_dir: str | None = None
    data_files: tuple[str, ...] | None = None
    split: str = "validation"
    limit: int | None = None
    seed: int = 0
    on_error: OnError = "raise"
    hub_id: str | None = None

    DATASET: ClassVar[str] = "dataset"
    SPLITS: ClassVar[tuple[str, ...]] = ("train", "validation", "test")
    SPLIT_ALIASES: ClassVar[Mapping[str, str]] = {"dev": "validation", "valid": "validation", "val": "validation"}

    def __post_init__(self) -> None:
        name = self.DATASET
        if self.data_dir is not None:
            if not isinstance(self.data_dir, (str, os.PathLike)):
                raise ConfigError(f"{name}: data_dir must be a path, got {self.data_dir!r}")
            object.__setattr__(self, "data_dir", os.path.expanduser(os.fspath(self.data_dir)))
        if self.data_files is not None:
            files = [self.data_files] if isinstance(self.data_files, (str, os.PathLike)) else self.data_files
            if not isinstance(files, (list, tuple)) or not files or \
                    not all(isinstance(f, (str, os.PathLike)) for f in files):
                raise ConfigError(f"{name}: data_files must be a path or a non-empty list of paths, "
                                  f"got {self.data_files!r}")
            object.__setattr__(self, "data_files", tuple(os.path.expanduser(os.fspath(f)) for f in files))
        if self.data_dir is not None and self.data_files is not None:
            raise ConfigError(f"{name}: pass data_dir or data_files, not both "
                              f"(data_dir={self.data_dir!r}, data_files={list(self.data_files)!r})")
        split = self.SPLIT_ALIASES.get(self.split, self.split) if isinstance(self.split, str) else self.split
        if split not in self.SPLITS:
            aliases = f" (aliases: {dict(self.SPLIT_ALIASES)})" if self.SPLIT_ALIASES else ""
            raise ConfigError(f"{name}: split must be one of {list(self.SPLITS)}{aliases}, got {self.split!r}")
        object.__setattr__(self, "split", split)
        if self.limit is not None and (isinstance(self.limit, bool) or not isinstance(self.limit, int)
                                       or self.limit < 1):
            raise ConfigError(f"{name}: limit must be a positive int or None, got {self.limit!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)) or self.seed < 0:
            raise ConfigError(f"{name}: seed must be a non-negative int, got {self.seed!r}")
        if self.on_error not in ("raise", "skip"):
            raise ConfigError(f"{name}: on_error must be 'raise' or 'skip', got {self.on_error!r}")
        if self.hub_id is not None and (not isinstance(self.hub_id, str) or not self.hub_id.strip()):
            raise ConfigError(f"{name}: hub_id must be a hub dataset id such as 'owner/name', got {self.hub_id!r}")


# ----------------------------------------------------------------------------- files and hub

DATA_DIR_ENV = "OPTIMA_DATA_DIR"
"""The environment variable naming a folder with one sub-folder per dataset (`data_folder`)."""


def env_data_dir(folder: str) -> Path | None:
    """`$OPTIMA_DATA_DIR/<folder>`, or None when the variable is unset or empty."""
    root = os.environ.get(DATA_DIR_ENV, "").strip()
    return Path(os.path.expanduser(root)) / folder if root else None


def check_files(paths: Sequence[str], *, dataset: str, hint: str) -> tuple[Path, ...]:
    """`data_files` as paths, each checked to be an existing file (a folder belongs in data_dir)."""
    found = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            raise DataNotFoundError(f"{dataset}: data file {str(path)!r} is a folder, not a file "
                                    f"(data_files={list(paths)!r}). Pass data_dir={str(path)!r} to read the split's "
                                    f"files from a folder, or name the files themselves in data_files.")
        if not path.is_file():
            raise DataNotFoundError(f"{dataset}: data file {str(path)!r} does not exist "
                                    f"(data_files={list(paths)!r}). {hint}")
        found.append(path)
    return tuple(found)


def find_files(data_dir: str, patterns: Sequence[str], *, dataset: str, split: str, hint: str) -> tuple[Path, ...]:
    """The files of the first glob pattern (relative to `data_dir`) that matches anything."""
    root = Path(data_dir)
    if not root.is_dir():
        raise DataNotFoundError(f"{dataset}: data_dir {str(root)!r} is not a folder. {hint}")
    for pattern in patterns:
        matches = sorted(p for p in root.glob(pattern) if p.is_file())
        if matches:
            return tuple(matches)
    raise DataNotFoundError(f"{dataset}: no file for split {split!r} in {str(root)!r}: looked for "
                            f"{list(patterns)}. Pass data_files=[...] to name the file(s). {hint}")


def load_hub_rows(hub_id: str, config: str | None, split: str, *, dataset: str, hint: str) -> list[Row]:
    """Rows of a hub dataset via `datasets.load_dataset`; any failure (offline machine, no such
    dataset, no network) becomes a `DataNotFoundError` that says how to pass local files."""
    where = f"{hub_id!r}" + (f" (config {config!r})" if config else "") + f", split {split!r}"
    try:
        import datasets
    except ImportError as error:
        raise DataNotFoundError(
            f"{dataset}: no data_dir or data_files was given, and loading {where} from the Hugging Face "
            f"hub needs the `datasets` package (pip install datasets). {hint}") from error
    try:
        table = datasets.load_dataset(hub_id, config, split=split)
    except Exception as error:  # offline, missing or unreachable: the cause is chained, not hidden
        raise DataNotFoundError(
            f"{dataset}: could not load {where} from the Hugging Face hub "
            f"({type(error).__name__}: {error}). {hint}") from error
    label = f"hub {hub_id}" + (f" ({config}, {split})" if config else f" ({split})")
    return [Row(item, f"{label} row {i}", i, split) for i, item in enumerate(table)]


# ----------------------------------------------------------------------------- the source

_CACHE: OrderedDict[Any, tuple[tuple[TaskInstance, ...], tuple[tuple[str, str], ...]]] = OrderedDict()


def clear_cache() -> None:
    """Forget every loaded dataset (the next access reads the files again)."""
    _CACHE.clear()


class DatasetSource:
    """A lazy `InstanceSource` over one split of a dataset.

    Construction only finds the files (so a missing file fails at `make()`); the rows are read
    and converted on first use (`len`, `get`, `instances`, i.e. the first `reset`) and cached,
    keyed by the files' paths, sizes and modification times and by the config, so later `make()`
    calls are free. Hub data is also loaded on first use. The cache keeps the last `CACHE_SIZE`
    loaded datasets alive; `clear_cache()` frees them.

    Attributes:
        skipped: `(where, message)` for every row skipped under `on_error="skip"`.
        origin: where the data comes from, for logs ("files: ..." or "hub: ...").
    """

    dataset: ClassVar[str] = "dataset"
    data_folder: ClassVar[str] = "dataset"  # the sub-folder of $OPTIMA_DATA_DIR holding the files
    default_hub_id: ClassVar[str] = ""
    dedupe_ids: ClassVar[bool] = False  # False: a repeated instance id is an error; True: see row_key

    def __init__(self, config: DataConfig):
        self.config = config
        self.hub_id = config.hub_id or self.default_hub_id
        if config.data_files is not None:
            self.files: tuple[Path, ...] | None = check_files(config.data_files, dataset=self.dataset, hint=self.hint())
        elif config.data_dir is not None:
            self.files = self.locate_files(config.data_dir)
        else:
            local = env_data_dir(self.data_folder)
            self.files = self.locate_files(str(local)) if local is not None and local.is_dir() else None
        if self.files is not None:
            more = " ..." if len(self.files) > 3 else ""
            self.origin = f"files: {', '.join(map(str, self.files[:3]))}{more}"
        else:
            self.origin = f"hub: {self.hub_id} {self.hub_config() or ''} {self.hub_split()}"
        self._instances: tuple[TaskInstance, ...] | None = None
        self.skipped: tuple[tuple[str, str], ...] = ()

    # ------------------------------------------------------------------ hooks for loaders
    def file_patterns(self) -> tuple[str, ...]:
        """Glob patterns, relative to `data_dir`, of the split's files; the first match wins."""
        raise NotImplementedError

    def locate_files(self, data_dir: str) -> tuple[Path, ...]:
        """The split's files under `data_dir` (default: the first of `file_patterns` that matches)."""
        return find_files(data_dir, self.file_patterns(), dataset=self.dataset, split=self.config.split,
                          hint=self.hint())

    def hub_config(self) -> str | None:
        return None

    def hub_split(self) -> str:
        return self.config.split

    def files_hint(self) -> str:
        """What a data_dir should hold, for error messages."""
        return "the dataset's release files"

    def read_file(self, path: Path) -> list[Row]:
        return read_rows(path)

    def read_hub(self) -> list[Row]:
        return load_hub_rows(self.hub_id, self.hub_config(), self.hub_split(), dataset=self.dataset, hint=self.hint())

    def to_instance(self, row: Row) -> TaskInstance:
        """One row as a TaskInstance; raise `row.fail(...)` for anything malformed."""
        raise NotImplementedError

    def loader_options(self) -> tuple[tuple[str, Any], ...]:
        """The loader's own knobs that change `to_instance` (part of the cache key)."""
        return ()

    def row_key(self, row: Row) -> str | None:
        """With `dedupe_ids`: the row's dataset id, read cheaply from the raw row. The k-th row
        (in file order, k >= 2) with an id already seen gets the instance id `<id>#k`, so ids
        stay the same whatever subset is selected."""
        return None

    # ------------------------------------------------------------------ InstanceSource
    def __len__(self) -> int:
        return len(self.instances)

    def get(self, index: int) -> TaskInstance:
        instances = self.instances
        if not 0 <= index < len(instances):
            raise IndexError(f"{self.dataset}: index {index} out of range [0, {len(instances)})")
        return instances[index]

    @property
    def instances(self) -> tuple[TaskInstance, ...]:
        if self._instances is None:
            self._instances, self.skipped = self._load_cached()
        return self._instances

    def hint(self) -> str:
        local = env_data_dir(self.data_folder)
        where = (f"${DATA_DIR_ENV}/{self.data_folder} ({str(local)!r}) is not a folder" if local is not None
                 else f"${DATA_DIR_ENV} is not set")
        return (f"Local files: {where}. Set {DATA_DIR_ENV} to a folder holding {self.data_folder}/ "
                f"({self.files_hint()}), or pass data_dir=... or data_files=[...], e.g. "
                f"optima_envs.make('{self.dataset}', data_dir='path/to/{self.data_folder}'); in a training config, "
                f"--set task.data_dir=path/to/{self.data_folder}.")

    # ------------------------------------------------------------------ loading
    def _cache_key(self) -> Any:
        if self.files is None:
            where: Any = ("hub", self.hub_id, self.hub_config(), self.hub_split())
        else:
            where = tuple((str(p.resolve()), p.stat().st_mtime_ns, p.stat().st_size) for p in self.files)
        options = tuple((f.name, getattr(self.config, f.name)) for f in fields(self.config))
        return type(self).__module__, type(self).__qualname__, where, options, self.loader_options()

    def _load_cached(self) -> tuple[tuple[TaskInstance, ...], tuple[tuple[str, str], ...]]:
        key = self._cache_key()
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
        result = self._load()
        _CACHE[key] = result
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
        return result

    def _read_all(self) -> list[Row]:
        if self.files is None:
            return self.read_hub()
        return [row for path in self.files for row in self.read_file(path)]

    def _load(self) -> tuple[tuple[TaskInstance, ...], tuple[tuple[str, str], ...]]:
        rows = self._read_all()
        limit, skip = self.config.limit, self.config.on_error == "skip"
        order = range(len(rows)) if limit is None else np.random.default_rng(self.config.seed).permutation(len(rows))
        instances: list[TaskInstance] = []
        skipped: list[tuple[str, str]] = []
        first_seen: dict[str, str] = {}
        suffixes = self._repeat_suffixes(rows) if self.dedupe_ids else {}
        for i in order:
            if limit is not None and len(instances) >= limit:
                break
            row = rows[int(i)]
            try:
                instance = self._convert(row)
                if int(i) in suffixes:
                    instance = replace(instance, instance_id=instance.instance_id + suffixes[int(i)])
                key = instance.instance_id
                if key in first_seen:
                    raise row.fail(f"duplicate instance id {key!r} (first at {first_seen[key]})")
            except DataError as error:
                if not skip:
                    raise
                skipped.append((row.where, str(error)))
                continue
            first_seen.setdefault(instance.instance_id, row.where)
            instances.append(instance)
        if skipped:
            warnings.warn(f"{self.dataset}: skipped {len(skipped)} malformed row(s) of {len(rows)} "
                          f"(on_error='skip'); the first: {skipped[0][1]}. See source.skipped.",
                          DataWarning, stacklevel=4)
        if not instances:
            raise DataError(f"{self.dataset}: no instances loaded from {self.origin} "
                            f"({len(rows)} rows read, {len(skipped)} skipped)")
        return tuple(instances), tuple(skipped)

    def _repeat_suffixes(self, rows: Sequence[Row]) -> dict[int, str]:
        seen: dict[str, int] = {}
        suffixes = {}
        for position, row in enumerate(rows):
            key = self.row_key(row) if row.error is None else None
            if key is not None:
                seen[key] = seen.get(key, 0) + 1
                if seen[key] > 1:
                    suffixes[position] = f"#{seen[key]}"
        return suffixes

    def _convert(self, row: Row) -> TaskInstance:
        if row.error is not None:
            raise row.fail(row.error)
        try:
            return self.to_instance(row)
        except DataError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as error:
            raise row.fail(f"malformed {self.dataset} row ({type(error).__name__}: {error})") from error


def positional_id(row: Row) -> str:
    """`<file stem or hub split>-<row index>` for datasets whose rows carry no id."""
    return f"{row.origin}-{row.index}"
