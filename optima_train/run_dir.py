"""Run directory layout and resume bookkeeping, shared by the iterative trainers.

    <run>/
      config.yaml                  the resolved config of the run (checked again on resume)
      run.lock                     held by the live process (pid); a stale one is taken over
      summary.json                 one row per finished iteration (rewritten as they finish)
      readability_cache.jsonl      reference-LM losses by text (never computed twice)
      tensorboard/                 per-iteration scalars (held-out score, tokens, reward, loss)
      baseline/evaluation/         the starting model on the held-out split (optional)
      iter_000/
        generation/   episodes/                      buffer: the N samples per training question
        scoring/      rewards.parquet                every reward component, keyed by episode (a side table of generation's buffer)
        selection/    sft.parquet, selection.json    the SFT dataset and why each was kept
        training/     checkpoint/ (a plain HF model folder), logs/ (TensorBoard), train.json
        evaluation/   episodes/, metrics.json        held-out dialogues; score and tokens with CIs
        metrics.json                                  the iteration's summary
      iter_001/ ...

**Steps and resume.** A step writes everything into its own folder and, last, an atomic
`DONE.json` (timings and counts). A step whose `DONE.json` exists is never run again; a step
folder without one holds a partial attempt and is wiped before the step reruns; only its
`<step>.progress/` sibling (parts a long step has finished, e.g. MCTS search rounds) is kept for
the rerun, and removed with the step's `DONE.json`. Every file is
written to a temporary name and renamed into place (`optima_envs.atomic_files`), so a kill at any moment leaves either the
old state or the new one. Restarting the same command therefore resumes at the first step
without a marker and loses nothing finished.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import yaml

from optima_envs.atomic_files import atomic_write_json, atomic_write_text
from optima_envs.errors import ConfigError, OptimaError

__all__ = ["ISFT_STEPS", "RunDir", "RunLockedError", "read_json"]

ISFT_STEPS = ("generation", "scoring", "selection", "training", "evaluation")
DONE = "DONE.json"


class RunLockedError(OptimaError, RuntimeError):
    """Raised when another live process is already running in the same run directory."""


def read_json(path: str | Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunDir:
    """One run's folder: paths, step markers, the config check and the process lock."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    # ------------------------------------------------------------------ paths
    @property
    def config_path(self) -> Path:
        return self.root / "config.yaml"

    @property
    def summary_path(self) -> Path:
        return self.root / "summary.json"

    @property
    def readability_cache(self) -> Path:
        return self.root / "readability_cache.jsonl"

    def stage_dir(self, stage: int | str) -> Path:
        """`iter_NNN` for an iteration number, else the named stage (e.g. "baseline")."""
        return self.root / (f"iter_{stage:03d}" if isinstance(stage, int) else stage)

    def step_dir(self, stage: int | str, step: str) -> Path:
        return self.stage_dir(stage) / step

    def checkpoint(self, iteration: int) -> Path:
        return self.step_dir(iteration, "training") / "checkpoint"

    # ------------------------------------------------------------------ steps
    def is_done(self, stage: int | str, step: str) -> bool:
        return (self.step_dir(stage, step) / DONE).is_file()

    def done_info(self, stage: int | str, step: str) -> dict[str, Any]:
        return read_json(self.step_dir(stage, step) / DONE)

    def begin_step(self, stage: int | str, step: str) -> Path:
        """Return the step folder, empty: leftovers of an unfinished attempt are removed."""
        folder = self.step_dir(stage, step)
        if (folder / DONE).exists():
            raise RuntimeError(f"step {step!r} of {self.stage_dir(stage).name} is already done")
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
        return folder

    def progress_dir(self, stage: int | str, step: str) -> Path:
        """Where a long step keeps the parts it has finished (e.g. search rounds): unlike the step
        folder it survives a killed attempt, so the rerun picks them up; removed once the step is done."""
        return self.stage_dir(stage) / f"{step}.progress"

    def mark_done(self, stage: int | str, step: str, info: Mapping[str, Any]) -> None:
        atomic_write_json(self.step_dir(stage, step) / DONE, dict(info))
        shutil.rmtree(self.progress_dir(stage, step), ignore_errors=True)

    def finished_iterations(self, steps: Sequence[str] = ISFT_STEPS) -> list[int]:
        out, i = [], 0
        while all(self.is_done(i, s) for s in steps):
            out.append(i)
            i += 1
        return out

    def last_checkpoint(self, before: int) -> Path | None:
        """The newest finished training checkpoint of an iteration < `before`."""
        for i in range(before - 1, -1, -1):
            if self.is_done(i, "training"):
                return self.checkpoint(i)
        return None

    # ------------------------------------------------------------------ config
    def check_config(self, config: Mapping[str, Any], *, may_change: Sequence[str] = ()) -> bool:
        """Write the config on a fresh run; on resume, refuse one that differs (except `may_change`).

        Returns True when resuming an existing run.

        Raises:
            ConfigError: the stored config differs; the message lists the differing keys.
        """
        if not self.config_path.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.config_path, yaml.safe_dump(dict(config), sort_keys=False))
            return False
        stored = yaml.safe_load(self.config_path.read_text(encoding="utf-8")) or {}
        diffs = [k for k in sorted(set(_flatten(stored)) | set(_flatten(config)))
                 if k not in may_change and _flatten(stored).get(k) != _flatten(config).get(k)]
        if diffs:
            shown = "; ".join(f"{k}: {_flatten(stored).get(k)!r} -> {_flatten(config).get(k)!r}" for k in diffs[:8])
            raise ConfigError(
                f"{self.root} holds a run with a different config ({shown}). Resume with the same config, "
                "or choose a new run.output_dir"
            )
        if any(_flatten(stored).get(k) != _flatten(config).get(k) for k in may_change):
            atomic_write_text(self.config_path, yaml.safe_dump(dict(config), sort_keys=False))
        return True

    # ------------------------------------------------------------------ lock
    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold `run.lock` for this process; a lock left by a dead process is taken over."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / "run.lock"
        me = {"pid": os.getpid(), "host": socket.gethostname()}
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            try:
                holder = read_json(path)
            except (OSError, json.JSONDecodeError):
                holder = {}
            pid = int(holder.get("pid", -1))
            if holder.get("host") == me["host"] and pid > 0 and pid != me["pid"] and _pid_alive(pid):
                raise RunLockedError(f"{self.root} is in use by process {pid}; wait for it or stop it") from None
            path.unlink(missing_ok=True)
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        with os.fdopen(fd, "w") as f:
            json.dump(me, f)
        try:
            yield
        finally:
            path.unlink(missing_ok=True)


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, Mapping):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): data}
