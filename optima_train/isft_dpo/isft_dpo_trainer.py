"""`ISFTDPOTrainer`: alternate iSFT and iDPO stages (docs/design.md section 2), resumable.

Each stage is a full run of its own trainer (`ISFTTrainer`, `IDPOTrainer`) in its own folder,
so it has the same layout, logs, step markers and resume behaviour:

    <run>/
      config.yaml, run.lock, summary.json, tensorboard/
      cycle_000/isft/   an iSFT run from the starting model (baseline evaluation here)
      cycle_000/idpo/   an iDPO run from cycle_000/isft's last checkpoint
      cycle_001/isft/   an iSFT run from cycle_000/idpo's last checkpoint
      ...

A killed run restarted with the same command finds every finished step of every stage and
goes on from the first unfinished one.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from optima_envs.atomic_files import atomic_write_json
from optima_train.config.io import config_to_dict
from optima_train.idpo.idpo_trainer import IDPOTrainer
from optima_train.isft.isft_trainer import ISFTTrainer
from optima_train.isft_dpo.isft_dpo_config import ISFTDPOConfig, stage_dir
from optima_train.loop import log_scalars
from optima_train.run_dir import RunDir

__all__ = ["ISFTDPOTrainer"]


class ISFTDPOTrainer:
    """Runs (or resumes) an iSFT-DPO run described by an `ISFTDPOConfig`.

    Args:
        config: the run's config.
        policy_factory, reference_loss, on_step_done, console: passed to both stage trainers
            (see `ISFTTrainer`); `on_step_done` gets the stage as `"cycle_000/isft:0"`-style labels.
    """

    def __init__(self, config: ISFTDPOConfig, *, policy_factory: Callable | None = None,
                 reference_loss: Callable | None = None, on_step_done: Callable | None = None, console: Any = None):
        self.config = config
        self.run_dir = RunDir(config.run.output_dir)
        self._kwargs = {"policy_factory": policy_factory, "reference_loss": reference_loss, "console": console}
        self._on_step_done = on_step_done
        self.steps_run: list[tuple[str, str]] = []
        if console is None:
            from rich.console import Console

            self._kwargs["console"] = Console(stderr=True)
        self.console = self._kwargs["console"]

    def check_data(self) -> None:
        """The env id, its options and its data, as both stages will use them (see
        `IterativeTrainer.check_data`); nothing is loaded.

        Raises:
            ConfigError: an unknown env id, bad env kwargs, or missing data.
        """
        for stage in self._first_stages():
            stage.check_data()

    def check_resources(self) -> None:
        """Fail fast, before any work: the env and its data (read once) and the models, as the
        first cycle's stages will use them (see `IterativeTrainer.check_resources`).

        Raises:
            ConfigError: an unknown env id, bad env kwargs or missing data, or a missing model.
        """
        for stage in self._first_stages():
            stage.check_resources()

    def _first_stages(self) -> tuple[ISFTTrainer, IDPOTrainer]:
        cfg = self.config
        subs = cfg.sub_configs(0, start_model=cfg.model.name, base_model=cfg.model.name,
                               output_dir=str(self.run_dir.root))
        return (ISFTTrainer(subs["isft"], console=self.console),
                IDPOTrainer(subs["idpo"](cfg.model.name), console=self.console))

    def train(self) -> list[dict[str, Any]]:
        """Run every stage not finished yet; returns one row per stage iteration."""
        from optima_agents.models import resolve_model

        cfg = self.config
        base = resolve_model(cfg.model.name)
        rows: list[dict[str, Any]] = []
        with self.run_dir.lock():  # the stages lock their own folders too
            if self.run_dir.check_config(config_to_dict(cfg), may_change=ISFTDPOConfig.RESUMABLE):
                self.console.print(f"[bold]resuming[/] {self.run_dir.root}")
            model = base
            for cycle in range(cfg.cycles.count):
                subs = cfg.sub_configs(cycle, start_model=model, base_model=base, output_dir=str(self.run_dir.root))
                first_row = len(rows)
                isft = ISFTTrainer(subs["isft"], on_step_done=self._hook(cycle, "isft"), **self._kwargs)
                rows += [self._row(cycle, "isft", s) for s in isft.train()]
                self._share_reference(isft)
                model = isft.model_after(cfg.cycles.isft_iterations - 1)
                idpo = IDPOTrainer(subs["idpo"](model), on_step_done=self._hook(cycle, "idpo"), **self._kwargs)
                rows += [self._row(cycle, "idpo", s) for s in idpo.train()]
                self._share_reference(idpo)
                model = idpo.model_after(cfg.cycles.idpo_iterations - 1)
                self._write_summary(rows, first_row)
        return rows

    def _share_reference(self, stage: Any) -> None:
        """Close a finished stage's backend and hand its readability scorer (loaded model and
        in-memory cache) to the next stages: every stage scores against the same reference model."""
        stage.close()
        if self._kwargs["reference_loss"] is None:
            self._kwargs["reference_loss"] = stage.reference_loss

    def _hook(self, cycle: int, stage: str) -> Callable[[Any, str, Mapping[str, Any]], None]:
        def hook(sub_stage: Any, step: str, info: Mapping[str, Any]) -> None:
            label = f"cycle_{cycle:03d}/{stage}:{sub_stage}"
            self.steps_run.append((label, step))
            if self._on_step_done is not None:
                self._on_step_done(label, step, info)

        return hook

    @staticmethod
    def _row(cycle: int, stage: str, summary: Mapping[str, Any]) -> dict[str, Any]:
        keep = ("heldout_score", "heldout_score_ci", "heldout_tokens", "heldout_tokens_ci", "train_loss", "checkpoint",
                "kept_examples", "kept_pairs", "mean_gap", "seconds")
        return {"cycle": cycle, "stage": stage, "iteration": summary["iteration"],
                **{k: summary.get(k) for k in keep}}

    def _write_summary(self, rows: list[dict[str, Any]], first_new: int) -> None:
        baseline_dir = RunDir(stage_dir(str(self.run_dir.root), 0, "isft"))
        baseline = baseline_dir.done_info("baseline", "evaluation") if baseline_dir.is_done("baseline", "evaluation") \
            else None
        atomic_write_json(self.run_dir.summary_path, {"baseline": baseline, "stages": rows})
        log_scalars(self.run_dir.root, "isft_dpo", enumerate(rows[first_new:], start=first_new),
                    ("heldout_score", "heldout_tokens", "train_loss"))
