"""The rollout engine's progress bar: episodes done and generated tokens per second."""

from __future__ import annotations

from typing import Any

__all__ = ["ProgressBar"]


class ProgressBar:
    """A rich progress bar (episodes done, tokens/s), or nothing when disabled."""

    def __init__(self, enabled: bool, total: int, description: str):
        self.enabled, self.total, self.description = enabled, total, description
        self._progress: Any = None

    def __enter__(self) -> "ProgressBar":
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("episodes"),
                TextColumn("{task.fields[tps]:.1f} tok/s"), TimeElapsedColumn(),
            )
            self._progress.__enter__()
            self._task = self._progress.add_task(self.description, total=self.total, tps=0.0)
        return self

    def update(self, done: int, tokens_per_s: float) -> None:
        if self._progress is not None:
            self._progress.update(self._task, advance=done, tps=tokens_per_s)

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)
