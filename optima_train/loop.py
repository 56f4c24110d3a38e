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

- one iteration (`_iteration`): its `STEPS` in order, the held-out evaluation when due, the
  iteration's `metrics.json`, the run summary and the console line;
- the held-out evaluation (`_evaluation`, `evaluate_model`) and the choice of the weights a
  training step starts from (`_training_init`).

A subclass is generic in its config (`class IDPOTrainer(IterativeTrainer[IDPOConfig])`; the
config follows `optima_train.config.sections.TrainingConfig`: the shared sections, a `train`
section and a `sampler` property naming the section whose `backend`, `batch_size`,
`backend_kwargs` and `max_turns` build the generation policy). It sets `STEPS` (the steps that
finish an iteration; step `x` is the method `_x(folder, it)`), `SCALARS` (summary keys plotted in
TensorBoard) and `NAME`, and implements the step methods, `model_after(it)`, `_eval_sampling()`,
`_summary(it, info)` (its own summary keys) and `_summary_detail(summary)` (its part of the
console line).
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Callable, ClassVar, Generic, Iterable, Iterator, Mapping, TypeVar

from optima_envs.atomic_files import atomic_write_json
from optima_envs.errors import ConfigError
from optima_train.config.io import config_to_dict
from optima_train.config.sections import TrainingConfig
from optima_train.run_dir import RunDir, read_json

__all__ = ["IterativeTrainer", "PolicyFactory", "StepHook", "log_scalars"]

C = TypeVar("C", bound=TrainingConfig)

PolicyFactory = Callable[[str, Any], Any]
"""Builds a policy from (model folder or name, SamplingParams). None: from the config's backend."""

StepHook = Callable[[int | str, str, Mapping[str, Any]], None]
"""Called after each finished step with (stage, step, DONE info); tests use it to interrupt runs."""


class IterativeTrainer(Generic[C]):
    """Runs (or resumes) one iterative training run; see the module doc for what subclasses add.

    Args:
        config: the run's config (a `TrainingConfig`, plus the loop's own sections).
        policy_factory: optional; builds generation/evaluation policies (tests pass scripted ones).
        reference_loss: optional per-utterance loss function (tests pass a fake); default a
            `ReadabilityScorer` on `model.reference` (or the starting model), cached in the run.
        on_step_done: optional hook after every finished step.
        console: a `rich` console for progress lines (default: a new one on stderr).
    """

    NAME: ClassVar[str] = "loop"
    STEPS: ClassVar[tuple[str, ...]] = ()
    SCALARS: ClassVar[tuple[str, ...]] = ("heldout_score", "heldout_tokens")
    NEEDS_SNAPSHOT: ClassVar[bool] = False

    def __init__(self, config: C, *, policy_factory: PolicyFactory | None = None,
                 reference_loss: Callable | None = None, on_step_done: StepHook | None = None, console: Any = None):
        self.config = config
        self.run_dir = RunDir(config.run.output_dir)
        self._policy_factory = policy_factory
        self._reference_loss = reference_loss
        self._on_step_done = on_step_done
        self._policy: tuple[str, Any] | None = None  # (the weights the engine loaded, its policy)
        self._weight_swap_logged = False
        self._base_path: str | None = None
        if console is None:
            from rich.console import Console

            console = Console(stderr=True)
        self.console = console
        self.steps_run: list[tuple[int | str, str]] = []

    # ------------------------------------------------------------------ to implement
    def model_after(self, it: int) -> str:
        """The model iteration `it` produced."""
        raise NotImplementedError

    def _eval_sampling(self) -> Any:
        """The `SamplingParams` of held-out evaluations."""
        raise NotImplementedError

    def _summary(self, it: int, info: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """The loop's own summary keys of iteration `it`, from its steps' DONE infos."""
        raise NotImplementedError

    def _summary_detail(self, summary: Mapping[str, Any]) -> str:
        """The loop's own part of the console line (between the held-out figures and the loss)."""
        raise NotImplementedError

    def _eval_max_live(self) -> int | None:
        """The most evaluation episodes in flight (None: all)."""
        return None

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

    def _env_kwargs(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        out = dict(kwargs)
        if self.config.sampler.max_turns is not None:
            out["max_turns"] = self.config.sampler.max_turns
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

    def _iteration(self, it: int) -> dict[str, Any]:
        """Run iteration `it`'s steps (and its evaluation when due), then write its summaries."""
        info: dict[str, dict[str, Any]] = {}
        for step in self.STEPS:
            info[step] = self._step(it, step, self._step_fn(step, it))
        if self._evaluates(it):
            info["evaluation"] = self._step(it, "evaluation", lambda f: self._evaluation(f, self.model_after(it)))
        ev = info.get("evaluation")
        summary = {
            "iteration": it,
            "heldout_score": ev["score"]["mean"] if ev else None,
            "heldout_score_ci": [ev["score"]["low"], ev["score"]["high"]] if ev else None,
            "heldout_tokens": ev["tokens"]["mean"] if ev else None,
            "heldout_tokens_ci": [ev["tokens"]["low"], ev["tokens"]["high"]] if ev else None,
            **self._summary(it, info),
            "checkpoint": self.model_after(it),
            "seconds": {k: v.get("seconds") for k, v in info.items()},
        }
        atomic_write_json(self.run_dir.stage_dir(it) / "metrics.json",
                          {"iteration": it, "summary": summary, "steps": info})
        self._write_run_summary(it, summary)
        self.console.print(self._summary_line(summary))
        return summary

    def _step_fn(self, step: str, it: int) -> Callable[[Path], dict[str, Any]]:
        method = getattr(self, f"_{step}", None)
        if not callable(method):
            raise TypeError(f"{type(self).__name__} lists step {step!r} in STEPS but has no method _{step}(folder, it)")
        return lambda folder: method(folder, it)

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

    def evaluate_model(self, model: str, stage: str, *, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Evaluate any model on this run's held-out set as a resumable step `<run>/<stage>/evaluation`
        (e.g. the starting model with a "be concise" instruction: `options={"format_instruction": ...}`)."""
        with self.run_dir.lock():
            return self._step(stage, "evaluation", lambda f: self._evaluation(f, model, options))

    def _evaluation(self, folder: Path, model: str, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Greedy held-out dialogues of `model` (the same questions and seeds for every model)."""
        from optima_eval.evaluation import evaluate
        from optima_train.buffers import write_episodes

        cfg = self.config
        policy = self._policy_for(model, self._eval_sampling())
        result, records = evaluate(policy, cfg.task.env_id, env_kwargs=self._env_kwargs(cfg.task.eval_kwargs()),
                                   episodes=cfg.eval.episodes, first_index=cfg.task.eval_first_index,
                                   seed=cfg.eval.seed, options=options, max_live=self._eval_max_live(),
                                   progress=cfg.run.progress, model_name=model)
        write_episodes(folder / "episodes", records, metadata={"writer": self.NAME})
        info = {**result.to_dict(), "options": dict(options or {})}
        atomic_write_json(folder / "metrics.json", info)
        return info

    # ------------------------------------------------------------------ models
    def model_before(self, it: int) -> str:
        """The model that generates iteration `it`'s data."""
        return self.base_model if it == 0 else self.model_after(it - 1)

    def _training_init(self, it: int) -> str:
        """The weights iteration `it` trains from: the previous iteration's (`train.init: previous`)
        or the starting model's (`train.init: base`)."""
        return self.model_before(it) if self.config.train.init == "previous" else self.base_model

    def _unchanged(self, it: int, why: str) -> None:
        """Say that iteration `it` does not train, and why."""
        self.console.print(f"[yellow]iter {it}: {why}; the model is unchanged[/]")

    def close(self) -> None:
        """Release the generation backend now (a vLLM engine's processes and memory) rather than at
        garbage collection; the trainer stays usable. A policy that declares no `close` capability
        is just dropped."""
        from optima_agents.policies import capabilities_of

        if self._policy is not None and capabilities_of(self._policy[1]).close:
            self._policy[1].close()
        self._policy = None

    def release_for_training(self) -> None:
        """Free the generation backend's memory before a training step. An engine that serves this
        run's adapters stays: its weights never change (the next checkpoint reaches it as an
        adapter). It sleeps through training where it can (vLLM sleep mode on GPUs: weights moved
        to host memory, KV cache freed) and wakes at the next generation; on a CPU it just waits."""
        from optima_agents.policies import capabilities_of

        policy = None if self._policy is None else self._policy[1]
        if policy is not None and capabilities_of(policy).adapters and policy.max_adapter_rank > 0:
            policy.sleep()
            return
        self.close()

    def _policy_for(self, model: str, sampling: Any) -> Any:
        """The policy for `model` with `sampling`, reusing the loaded backend when it holds `model`
        and declares `with_sampling`."""
        from optima_agents.policies import capabilities_of

        if self._policy_factory is not None:
            return self._policy_factory(model, sampling)
        if self._policy is not None and capabilities_of(self._policy[1]).with_sampling:
            loaded, policy = self._policy
            if capabilities_of(policy).adapters:
                policy.wake_up()
            if loaded == model:
                return policy.with_sampling(sampling)
            served = self._served_as_adapter(loaded, policy, model)
            if served is not None:
                return served.with_sampling(sampling)
        from optima_eval.evaluation import build_policy

        self.close()  # free the previous model before loading the next
        s = self.config.sampler
        policy = build_policy(s.backend, model, sampling, dtype=self.config.model.resolved_dtype(), batch_size=s.batch_size,
                              device=self.config.model.resolved_device(),
                              backend_kwargs={**self._engine_lora_options(), **s.backend_kwargs})
        self._policy = (model, policy)
        return policy

    def _planned_training_steps(self) -> int:
        """Training steps the whole run takes (each adds an adapter to a served stack)."""
        return int(self.config.run.iterations)

    def _engine_lora_options(self) -> dict[str, Any]:
        """Engine options for serving this run's adapters (`adapter_stack.engine_lora_options`);
        the choice is logged with the first engine."""
        from optima_train.adapter_stack import engine_lora_options

        lora = getattr(self.config, "lora", None)
        rank = lora.r if lora is not None and lora.enabled else None
        options, why = engine_lora_options(self.config.model.weight_swap, backend=self.config.sampler.backend,
                                           lora_rank=rank, training_steps=self._planned_training_steps(),
                                           device=self.config.model.resolved_device())
        if not self._weight_swap_logged:
            self.console.print(f"[dim]{why}[/]")
            self._weight_swap_logged = True
        return options

    def _served_as_adapter(self, loaded: str, policy: Any, model: str) -> Any | None:
        """`policy` (an engine holding `loaded`) serving `model` through its stacked LoRA adapters,
        or None (then the engine is replaced), with the reason logged."""
        import hashlib

        from optima_agents.policies import capabilities_of
        from optima_train.adapter_stack import adapter_chain, stack_adapters

        if not capabilities_of(policy).adapters or policy.max_adapter_rank == 0:
            return None
        chain = adapter_chain(model, loaded)
        if isinstance(chain, str):
            self.console.print(f"[yellow]new engine for {model}: {chain}[/]")
            return None
        name = hashlib.sha256("\n".join(str(a.resolve()) for a in chain).encode()).hexdigest()[:16]
        folder = self.run_dir.root / "served_adapters" / name
        config = folder / "adapter_config.json"  # named by its chain: written once, reused after
        rank = read_json(config)["r"] if config.is_file() else stack_adapters(chain, folder, base=loaded)
        if rank > policy.max_adapter_rank:
            self.console.print(f"[yellow]new engine for {model}: its adapter stack has rank {rank}, the running "
                               f"engine serves at most {policy.max_adapter_rank}[/]")
            return None
        self.console.print(f"[dim]{model}: served on the running engine as {len(chain)} stacked adapter(s), "
                           f"rank {rank}[/]")
        return policy.with_adapter(folder)

    @property
    def reference_loss(self) -> Callable | None:
        """The readability scorer once loaded (or given), else None; another trainer may reuse it."""
        return self._reference_loss

    def _reference(self) -> Callable:
        """The frozen readability reference (per-utterance loss), loaded once."""
        if self._reference_loss is None:
            from optima_train.rewards import ReadabilityScorer

            ref = self.config.model.reference or self.base_model
            self._reference_loss = ReadabilityScorer(ref, dtype=self.config.model.resolved_dtype(),
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
        log_scalars(self.run_dir.root, self.NAME, [(it, summary)], self.SCALARS)

    def _summary_line(self, s: Mapping[str, Any]) -> str:
        secs = " ".join(f"{k[:6]} {v:.0f}s" for k, v in s["seconds"].items() if v is not None)
        return (f"[bold green]iter {s['iteration']}[/] held-out score {self._fmt(s['heldout_score'])} | "
                f"tokens {self._fmt(s['heldout_tokens'], '.1f')} | {self._summary_detail(s)} | "
                f"train loss {self._fmt(s['train_loss'], '.4f')} | {secs}")

    @staticmethod
    def _fmt(x: Any, spec: str = ".3f") -> str:
        return "n/a" if x is None else format(x, spec)


def log_scalars(root: Path, prefix: str, points: Iterable[tuple[int, Mapping[str, Any]]], keys: Iterable[str]) -> None:
    """Plot `row[key]` at `step` for every (step, row) and key that has a value, as
    `<prefix>/<key>` in `<root>/tensorboard`."""
    from torch.utils.tensorboard import SummaryWriter

    keys = tuple(keys)
    with SummaryWriter(log_dir=str(Path(root) / "tensorboard")) as writer:
        for step, row in points:
            for key in keys:
                if row.get(key) is not None:
                    writer.add_scalar(f"{prefix}/{key}", float(row[key]), step)
