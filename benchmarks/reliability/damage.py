"""Probe (c): damaged dataset files and damaged episode buffers.

Data files: a copy of each dataset env's fixture folder has one of the files it reads damaged
(a flipped byte, a byte that is not UTF-8, a cut-off end, a missing line, an empty file, random
bytes, a folder in its place), then every instance is loaded, with `on_error="raise"` and with
`"skip"`. It holds when the env loads and plays, or raises an `OptimaError` that names the
damaged file; anything else (another exception, an error that does not say which file) fails.
A byte that is not UTF-8 must be reported with its line (`file:line`), and under `"skip"` a
line-oriented file (.jsonl, .csv, .txt) must still load without that line.

Buffers: a three-part buffer gets single-byte flips in a part or in the manifest, a deleted or
truncated part, a deleted manifest, a part with a column of the wrong type, and a part the
manifest does not list. It holds when reading raises `BufferCorruptError` naming the damaged
file (for the unlisted part: the records read back unchanged, with a warning); a read that
returns records from a damaged buffer fails. Records a buffer cannot store, and folders that
hold no buffer, are tried by `benchmarks.reliability.writes`.
"""

from __future__ import annotations

import re
import shutil
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np

import optima_envs
from optima_envs.data.common import clear_cache
from optima_envs.errors import OptimaError
from optima_envs.test import env_kwargs

from benchmarks.reliability import writes
from benchmarks.reliability.tally import Tally

Damage = Callable[[Path, np.random.Generator], None]


def _flip(path: Path, rng: np.random.Generator) -> None:
    data = bytearray(path.read_bytes())
    data[int(rng.integers(len(data)))] ^= int(rng.integers(1, 256))
    path.write_bytes(bytes(data))


def _not_utf8(path: Path, rng: np.random.Generator) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    k = int(rng.integers(len(lines)))
    cut = int(rng.integers(len(lines[k]) + 1))
    lines[k] = lines[k][:cut] + bytes([int(rng.choice([0x80, 0xC3, 0xFF, 0xFE]))]) + lines[k][cut:]
    path.write_bytes(b"".join(lines))


def _truncate(path: Path, rng: np.random.Generator) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(rng.integers(len(data)))])


def _drop_line(path: Path, rng: np.random.Generator) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    del lines[int(rng.integers(len(lines)))]
    path.write_bytes(b"".join(lines))


def _empty(path: Path, rng: np.random.Generator) -> None:
    path.write_bytes(b"")


def _garbage(path: Path, rng: np.random.Generator) -> None:
    path.write_bytes(rng.integers(0, 256, size=int(rng.integers(1, 2000)), dtype=np.uint8).tobytes())


def _folder(path: Path, rng: np.random.Generator) -> None:
    path.unlink()
    path.mkdir()


DATA_DAMAGE: dict[str, Damage] = {"flipped_byte": _flip, "not_utf8": _not_utf8, "truncated": _truncate,
                                  "missing_line": _drop_line, "empty": _empty, "random_bytes": _garbage,
                                  "folder_instead": _folder}


def _play_all(env_id: str, kwargs: dict[str, Any]) -> None:
    """Load the env and reset it on every instance, with one step each."""
    env = optima_envs.make(env_id, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        size = len(env.task.source)
    for index in range(size):
        env.reset(seed=index, options={"index": index})
        env.step({env.current_speaker: "I think <A>x</A>"})


_LINE_FILES = (".jsonl", ".csv", ".txt")


def _data_verdict(damage: Damage, target: Path, copy: Path, on_error: str, error: Exception | None) -> str | None:
    """Why loading a damaged copy broke the contract (None: it kept it)."""
    what = f"{damage.__name__} of {target.name} (on_error={on_error})"
    if error is None:
        return None
    if not isinstance(error, OptimaError):
        return f"{what}: {type(error).__name__}: {error}"
    if str(target) not in str(error) and str(copy) not in str(error):
        return f"{what}: the error does not name the file: {error}"
    if damage is _not_utf8 and not re.search(re.escape(str(target)) + r":\d+", str(error)):
        return f"{what}: the error does not name the line: {error}"
    skip_expected = damage is _not_utf8 and on_error == "skip" and target.suffix in _LINE_FILES
    if skip_expected and "no instances loaded" not in str(error):
        return f"{what}: one bad line rejected the whole file: {error}"
    return None


def _data_trial(env_id: str, kwargs: dict[str, Any], damage: Damage, rng: np.random.Generator, workdir: Path,
                row: Tally) -> None:
    source = Path(kwargs["data_dir"])
    copy = workdir / f"{env_id}-{row.tried}"
    shutil.copytree(source, copy)
    local = {**kwargs, "data_dir": str(copy)}
    files = optima_envs.make(env_id, **local).task.source.files
    target = files[int(rng.integers(len(files)))]
    damage(target, rng)
    for on_error in ("raise", "skip"):
        clear_cache()
        failure: Exception | None = None
        try:
            _play_all(env_id, {**local, "on_error": on_error})
        except Exception as error:  # the probe's point: every exception is judged below
            failure = error
        why = _data_verdict(damage, target, copy, on_error, failure)
        row.check(why is None, str(why))
    shutil.rmtree(copy)


def data_rows(trials: int, seed: int, workdir: Path) -> list[Tally]:
    """`trials` damaged copies per dataset env (damage kinds in turn), each loaded two ways."""
    rng = np.random.default_rng(seed)
    rows = []
    for env_id in sorted(optima_envs.list_envs()):
        kwargs = env_kwargs(env_id)
        if "data_dir" not in kwargs:
            continue
        row = Tally("c", f"data files: {env_id}")
        kinds = list(DATA_DAMAGE.values())
        for k in range(trials):
            _data_trial(env_id, kwargs, kinds[k % len(kinds)], rng, workdir, row)
        row.notes["damages"] = sorted(DATA_DAMAGE)
        rows.append(row)
    clear_cache()
    return rows


# ----------------------------------------------------------------------------- buffers

def _buffer(workdir: Path, name: str) -> Path:
    """A three-part buffer of scripted synth-hop episodes."""
    from optima_agents.policies import ScriptedPolicy
    from optima_agents.rollout import rollout
    from optima_train.buffers import write_episodes

    records = rollout("synth-hop-ia", ScriptedPolicy(lambda o: f"turn {o['turn']} <A>Kelo</A>"), 9,
                      env_kwargs={"max_turns": 3}, progress=False)
    folder = workdir / name
    for k in range(3):
        write_episodes(folder, records[3 * k: 3 * k + 3])
    return folder


def _expect_error(row: Tally, folder: Path, names: Path, what: str) -> None:
    """One trial: reading `folder` must raise BufferCorruptError naming `names`."""
    from optima_train.buffers import BufferCorruptError, read_episodes

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            read_episodes(folder)
    except BufferCorruptError as error:
        row.check(str(names) in str(error), f"{what}: the error does not name {names.name}: {error}")
    except Exception as error:  # the probe's point: anything else is a failure to report
        row.fail(f"{what}: {type(error).__name__}: {error}")
    else:
        row.fail(f"{what}: read back without an error")


def buffer_rows(flips: int, seed: int, workdir: Path) -> list[Tally]:
    """Every kind of buffer damage; single-byte flips `flips` times in parts and in the manifest."""
    from optima_train.buffers import MANIFEST_NAME

    rng = np.random.default_rng(seed)
    folder = _buffer(workdir, "buffer")
    parts = sorted(folder.glob("part-*.parquet"))
    originals = {p: p.read_bytes() for p in [*parts, folder / MANIFEST_NAME]}
    rows = {name: Tally("c", f"buffer: {name}") for name in
            ("flipped byte in a part", "flipped byte in the manifest", "deleted part", "truncated part",
             "deleted manifest", "column of the wrong type", "part not in the manifest")}
    for k in range(flips):
        part = parts[int(rng.integers(len(parts)))]
        _flip(part, rng)
        _expect_error(rows["flipped byte in a part"], folder, part, f"flip {k} in {part.name}")
        part.write_bytes(originals[part])
        _flip(folder / MANIFEST_NAME, rng)
        _expect_error(rows["flipped byte in the manifest"], folder, folder / MANIFEST_NAME, f"flip {k} in the manifest")
        (folder / MANIFEST_NAME).write_bytes(originals[folder / MANIFEST_NAME])
    for part in parts:
        part.unlink()
        _expect_error(rows["deleted part"], folder, part, f"deleted {part.name}")
        part.write_bytes(originals[part])
        _truncate(part, rng)
        _expect_error(rows["truncated part"], folder, part, f"truncated {part.name}")
        part.write_bytes(originals[part])
    (folder / MANIFEST_NAME).unlink()
    _expect_error(rows["deleted manifest"], folder, folder, "deleted manifest")
    (folder / MANIFEST_NAME).write_bytes(originals[folder / MANIFEST_NAME])
    _wrong_type(rows["column of the wrong type"], workdir)
    _unlisted(rows["part not in the manifest"], folder, parts[0])
    return list(rows.values())


def _wrong_type(row: Tally, workdir: Path) -> None:
    """A part whose `score` column holds strings, and one whose `seed` is a float, each with a
    manifest rebuilt around it (so only the type check can catch it)."""
    import pyarrow.parquet as pq

    from optima_train.buffers import BufferCorruptError, rebuild_manifest

    for column, kind in (("score", "string"), ("seed", "double"), ("question", "large_string")):
        folder = _buffer(workdir, f"typed-{column}")
        part = sorted(folder.glob("part-*.parquet"))[1]
        table = pq.read_table(part)
        index = table.schema.get_field_index(column)
        pq.write_table(table.set_column(index, column, table.column(column).cast(kind)), part)
        try:
            rebuild_manifest(folder)
        except BufferCorruptError:
            row.ok()  # refused before it could be trusted
            continue
        _expect_error(row, folder, part, f"{column} stored as {kind}")


def _unlisted(row: Tally, folder: Path, part: Path) -> None:
    from optima_train.buffers import BufferWarning, read_episodes

    before = read_episodes(folder)
    stray = folder / "part-00042.parquet"
    shutil.copy(part, stray)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        after = read_episodes(folder)
    row.check(after == before and any(issubclass(w.category, BufferWarning) for w in caught),
              "a part the manifest does not list changed what was read, or was not reported")
    stray.unlink()


def run(data_trials: int, flips: int, seed: int, workdir: Path) -> list[Tally]:
    return [*data_rows(data_trials, seed, workdir), *buffer_rows(flips, seed, workdir),
            *writes.run(workdir / "writes")]
