"""`IterativeTrainer`: what every generate-rank-select-train loop shares (iSFT, iDPO, ...).

A loop is a sequence of iterations, each a sequence of named steps (`generation`, `search`,
`training`, `evaluation`, ...) in a `RunDir`. This base class owns the parts that are the same
for every loop, so a new algorithm only writes its steps:

- fail-fast resource checks (env, data, models) before any work;
- `train()`: lock the run directory, refuse a changed config, evaluate the starting model once
  (`eval.baseline`), then run every iteration, skipping steps already marked done (resume);
- `_step()`: run one step into its folder, time it, write `DONE.json` last;
- the lifetime of the generation policy (one backend at a time: a vLLM engine is closed before
  the next model loads or training starts) and of the frozen readability reference;
- the run summary (`summary.json`) and its TensorBoard scalars.

A subclass sets `STEPS` (the steps that finish an iteration), `SAMPLER` (the config section with
`backend`, `batch_size`, `backend_kwargs` and `max_turns`), `SCALARS` (summary keys plotted in
TensorBoard) and `NAME`, and implements `_iteration(it)` and `model_after(it)`.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator, Mapping

from optima_envs.errors import ConfigError
from optima_train.config_io import config_to_dict
from optima_train.run_dir import RunDir, atomic_write_json, read_json

__all__ = ["IterativeTrainer", "PolicyFactory", "StepHook"]

PolicyFactory = Callable[[str, Any], Any]
"""Builds a policy from (model folder or name, SamplingParams). None: from the config's backend."""

StepHook = Callable[[int | str, str, Mapping[str, Any]], None]
"""Called after each finished step with (stage, step, DONE info); tests use it to interrupt runs."""


class IterativeTrainer:
    """Runs (or resumes) one iterative training run; see the module doc for what subclasses add.

    Args:
        config: the run's config (task, model, run, eval and reward sections, plus the loop's own).
        policy_factory: optional; builds generation/evaluation policies (tests pass scripted ones).
        reference_loss: optional per-utterance loss function (tests pass a fake); default a
            `ReadabilityScorer` on `model.reference` (or the starting model), cached in the run.
        on_step_done: optional hook after every finished step.
        console: a `rich` console for progress lines (default: a new one on stderr).
    """

    NAME: ClassVar[str] = "loop"
    STEPS: ClassVar[tuple[str, ...]] = ()
    SAMPLER: ClassVar[str] = "generation"
    SCALARS: ClassVar[tuple[str, ...]] = ("heldout_score", "heldout_tokens")
    NEEDS_SNAPSHOT: ClassVar[bool] = False

    def __init__(self, config: Any, *, policy_factory: PolicyFactory | None = None,
                 reference_loss: Callable | None = None, on_step_done: StepHook | None = None, console: Any = None):
        self.config = config
        self.run_dir = RunDir(config.run.output_dir)
        self._policy_factory = policy_factory
        self._reference_loss = reference_loss
        self._on_step_done = on_step_done
        self._policy: tuple[str, Any] | None = None
        self._base_path: str | None = None
        if console is None:
            from rich.console import Console

            console = Console(stderr=True)
        self.console = console
        self.steps_run: list[tuple[int | str, str]] = []

    # ------------------------------------------------------------------ to implement
    def _iteration(self, it: int) -> dict[str, Any]:
        raise NotImplementedError

    def model_after(self, it: int) -> str:
        """The model iteration `it` produced."""
        raise NotImplementedError

    def _first_train_index(self) -> int:
        return self.config.task.train_first_index

    # ------------------------------------------------------------------ checks
    def check_data(self, *, load: bool = False) -> None:
        """The env id, its options and its data: every env the run uses is built, which finds
        local data files (`load`: and reset once, which reads them, or downloads hub data).

        Raises:
            ConfigError: an unknown env id, bad env kwargs, or missing data.
        """
        import optima_envs
        from optima_envs.errors import OptimaError

        cfg = self.config
        checks = (("task.train_env_kwargs", cfg.task.train_kwargs(), self._first_train_index()),
                  ("task.eval_env_kwargs", cfg.task.eval_kwargs(), cfg.task.eval_first_index))
        for what, kwargs, index in checks:
            try:
                env = optima_envs.make(cfg.task.env_id, **self._env_kwargs(kwargs))
                if load:
                    env.reset(seed=0, options={"index": index})
                if self.NEEDS_SNAPSHOT and not callable(getattr(env, "snapshot", None)):
                    raise ConfigError(f"env {cfg.task.env_id!r} has no snapshot()/restore(); MCTS cannot search it")
            except OptimaError as error:
                raise ConfigError(f"task.env_id={cfg.task.env_id!r} with {what}={kwargs}: {error}") from None

    def check_resources(self) -> None:
        """Fail fast, before any work: the env and its data (read once), the models.

        Raises:
            ConfigError: an unknown env id, bad env kwargs or missing data, or a missing model.
        """
        from optima_agents.models import ModelNotFoundError, resolve_model

        cfg = self.config
        self.check_data(load=True)
        for name, value in (("model.name", cfg.model.name), ("model.reference", cfg.model.reference)):
            if value is None:
                continue
            try:
                path = resolve_model(value)
            except ModelNotFoundError as error:
                raise ConfigError(f"{name}={value!r}: {error}") from None
            if name == "model.name":
                self._base_path = path

    @property
    def _sampler(self) -> Any:
        return getattr(self.config, self.SAMPLER)

    def _env_kwargs(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(kwargs)
        if self._sampler.max_turns is not None:
            out["max_turns"] = self._sampler.max_turns
        return out

    @property
    def base_model(self) -> str:
        """The starting model's folder."""
        if self._base_path is None:
            from optima_agents.models import resolve_model

            self._base_path = resolve_model(self.config.model.name)
        return self._base_path

    # ------------------------------------------------------------------ the loop
    def train(self) -> list[dict[str, Any]]:
        """Run every iteration not finished yet; returns one summary per iteration."""
        cfg = self.config
        self.check_resources()
        with self._torch_threads(cfg.run.num_threads), self.run_dir.lock():
            if self.run_dir.check_config(config_to_dict(cfg), may_change=type(cfg).RESUMABLE):
                done = self.run_dir.finished_iterations(self.STEPS)
                self.console.print(f"[bold]resuming[/] {self.run_dir.root}: {len(done)} iteration(s) finished")
            if cfg.eval.baseline:
                self._step("baseline", "evaluation", lambda folder: self._evaluation(folder, self.base_model))
            return [self._iteration(it) for it in range(cfg.run.iterations)]

    @staticmethod
    @contextlib.contextmanager
    def _torch_threads(count: int | None) -> Iterator[None]:
        """torch's CPU thread count for the run (None: unchanged), restored afterwards: it is
        process-wide, and the caller's own work after `train()` must not inherit it."""
        if count is None:
            yield
            return
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(count)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    def _evaluates(self, it: int) -> bool:
        return (it + 1) % self.config.eval.every == 0 or it == self.config.run.iterations - 1

    def _step(self, stage: int | str, step: str, fn: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
        """Run `fn(folder)` as step `step` of `stage` unless it is done; its info plus `seconds`
        is written to `DONE.json` last, so a killed step reruns from scratch."""
        if self.run_dir.is_done(stage, step):
            return self.run_dir.done_info(stage, step)
        label = stage if isinstance(stage, str) else f"iter {stage}"
        self.console.print(f"[cyan]{label}[/] {step} ...")
        folder = self.run_dir.begin_step(stage, step)
        start = time.perf_counter()
        info = {**fn(folder), "seconds": round(time.perf_counter() - start, 3)}
        self.run_dir.mark_done(stage, step, info)
        self.steps_run.append((stage, step))
        if self._on_step_done is not None:
            self._on_step_done(stage, step, info)
        return info

    def _evaluation(self, folder: Path, model: str) -> dict[str, Any]:
        raise NotImplementedError

    # ------------------------------------------------------------------ models
    def model_before(self, it: int) -> str:
        """The model that generates iteration `it`'s data."""
        return self.base_model if it == 0 else self.model_after(it - 1)

    def close(self) -> None:
        """Release the generation backend now (a vLLM engine's processes and memory) rather than at
        garbage collection; the trainer stays usable. Policies without `close` are just dropped."""
        if self._policy is not None and callable(getattr(self._policy[1], "close", None)):
            self._policy[1].close()
        self._policy = None

    def _policy_for(self, model: str, sampling: Any) -> Any:
        """The policy for `model` with `sampling`, reusing the loaded backend when it holds `model`."""
        if self._policy_factory is not None:
            return self._policy_factory(model, sampling)
        if self._policy is not None and self._policy[0] == model and hasattr(self._policy[1], "with_sampling"):
            return self._policy[1].with_sampling(sampling)
        from optima_train.evaluation import build_policy

        self.close()  # free the previous model before loading the next
        s = self._sampler
        policy = build_policy(s.backend, model, sampling, dtype=self.config.model.dtype, batch_size=s.batch_size,
                              device=self.config.model.resolved_device(), backend_kwargs=s.backend_kwargs)
        self._policy = (model, policy)
        return policy

    @property
    def reference_loss(self) -> Callable | None:
        """The readability scorer once loaded (or given), else None; another trainer may reuse it."""
        return self._reference_loss

    def _reference(self) -> Callable:
        """The frozen readability reference (per-utterance loss), loaded once."""
        if self._reference_loss is None:
            from optima_train.rewards import ReadabilityScorer

            ref = self.config.model.reference or self.base_model
            self._reference_loss = ReadabilityScorer(ref, dtype=self.config.model.dtype,
                                                     device=self.config.model.resolved_device(),
                                                     max_batch_tokens=self.config.reward.readability_batch_tokens,
                                                     cache_path=self.run_dir.readability_cache)
        return self._reference_loss

    # ------------------------------------------------------------------ summaries
    def _write_run_summary(self, it: int, summary: Mapping[str, Any]) -> None:
        """Merge iteration `it`'s summary into `summary.json` and plot its `SCALARS`."""
        path = self.run_dir.summary_path
        rows = [r for r in (read_json(path) if path.exists() else {}).get("iterations", []) if r["iteration"] != it]
        rows = sorted([*rows, dict(summary)], key=lambda r: r["iteration"])
        done = self.run_dir.is_done("baseline", "evaluation")
        atomic_write_json(path, {"baseline": self.run_dir.done_info("baseline", "evaluation") if done else None,
                                 "iterations": rows})
        from torch.utils.tensorboard import SummaryWriter

        with SummaryWriter(log_dir=str(self.run_dir.root / "tensorboard")) as writer:
            for key in self.SCALARS:
                if summary.get(key) is not None:
                    writer.add_scalar(f"{self.NAME}/{key}", float(summary[key]), it)
