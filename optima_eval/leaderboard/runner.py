"""Run a leaderboard: systems x tasks x models, every cell cached on disk.

    from optima_eval.leaderboard import LeaderboardConfig, run_leaderboard
    results = run_leaderboard(LeaderboardConfig(tasks=["synth-hop-ia"], systems=["cot", "sc", "mas"],
                                                models=["smollm2-135m"]))

A cell found on disk is read, not recomputed, so a second identical call computes nothing; a
cell interrupted half-way resumes from its last finished chunk of questions. One model is loaded
at a time, only when one of its cells needs computing.

**Inference-time scaling.** With `scaling=(1, 2, 4, 8)`, every system with a `k` setting (`sc`,
`mas-sc`) is run once at its own k and the smaller ks of the list are read off its first samples
(`prefix_vote`): a sample's seed depends only on its position, so a k=2 run would draw exactly
the first two samples of the k=8 run. Each k is then a cell like any other.

**Communication diagnostics.** With `ablations=("swap", "remove")` every dialogue system that
plays one dialogue per question (`System.ablatable`: `mas`, `autoform`) gets, beside its cell,
one cell per ablation: the same questions played again with the partners' messages swapped for
the next question's (the base cell's own dialogues as donors) or removed from every agent's view
(`optima_eval.systems.ablation`). Each is its own cached cell, keyed by the base cell's identity
plus the ablation and recording the key it ablates. `diagnostics=True` asks for both ablations
and adds the `solo` system (the no-talk ceiling) on every task whose agents hold private
information (information-asymmetric QA and the games); the reports then show `no-talk`,
`comm gain [CI]` and the score on questions only the partner can answer (`partner-only`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from optima_agents.policies.base import capabilities_of
from optima_agents.policies.registry import backend_spec
from optima_envs.errors import ConfigError, OptimaError
from optima_eval.heldout import HELDOUT_SEED
from optima_eval.leaderboard.cells import (
    Cell,
    CellResult,
    HeldOut,
    describe_heldout,
    ModelSpec,
    append_partial,
    read_cell,
    read_partial,
    rewrite_cell,
    write_cell,
)
from optima_eval.leaderboard.rescore import rescore_outcomes
from optima_eval.systems import System, SystemContext, make_system
from optima_eval.systems.ablation import ABLATION_MODES, MessageAblation
from optima_eval.systems.base import prefix_vote

__all__ = ["LeaderboardConfig", "LeaderboardRun", "parse_model", "plan_cells", "run_leaderboard"]

PolicyFactory = Callable[[ModelSpec], Any]
"""Builds the policy of a model (tests pass scripted ones); default: `build_policy` on its backend."""


@dataclass
class LeaderboardConfig:
    """What to compare and on which questions.

    tasks: env ids, each played on its registered held-out split unless env_kwargs names
    another. systems: system specs (`cot`, `sc:k=4`, ...). models: `label=model` or a
    model (its own label); a model is a registry name, a folder (e.g. a trained checkpoint: a
    transfer cell is a checkpoint of one task on another task) or a hub id, or a served name on
    the openai backend. env_kwargs: per task, extra `optima_envs.make` kwargs (e.g. data_dir).
    rescore: run no model; score every cached cell's stored answers again with the task's
    current metric (after a metric is corrected) and skip the cells not on disk.
    ablations: message ablations ("swap", "remove") of every ablatable system's cells.
    diagnostics: both ablations, and the `solo` system on tasks whose agents hold private
    information (see the module doc).
    """

    tasks: Sequence[str]
    systems: Sequence[str]
    models: Sequence[str] = ("smollm2-135m",)
    backend: str = "hf"
    base_urls: Sequence[str] = ()
    dtype: str = "auto"
    questions: int = 200
    seed: int = HELDOUT_SEED  # the training loops' held-out seed, so `mas` cells match their evaluations
    first_index: int = 0
    max_new_tokens: int = 128
    max_turns: int | None = None
    env_kwargs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    scaling: Sequence[int] = ()
    output_dir: str = "benchmarks/results/leaderboard"
    chunk: int = 50
    progress: bool = False
    rescore: bool = False
    ablations: Sequence[str] = ()
    diagnostics: bool = False
    backend_choices: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    """With backend "auto": per model, the `BackendChoice` it resolved to (filled by `model_specs`)."""

    def __post_init__(self) -> None:
        import optima_envs

        if not self.tasks or not self.systems or not self.models:
            raise ConfigError("a leaderboard needs at least one task, one system and one model")
        known = optima_envs.list_envs()
        unknown = [t for t in self.tasks if t not in known]
        if unknown:
            raise ConfigError(f"unknown task(s) {unknown}; registered: {sorted(known)}")
        strangers = sorted(set(self.env_kwargs) - set(self.tasks))
        if strangers:
            raise ConfigError(f"env_kwargs for task(s) {strangers} that are not in tasks {list(self.tasks)}")
        for name, value in (("questions", self.questions), ("max_new_tokens", self.max_new_tokens),
                            ("chunk", self.chunk)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive int, got {value!r}")
        if any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in self.scaling):
            raise ConfigError(f"scaling must list positive ints (e.g. 1,2,4,8), got {list(self.scaling)}")
        takes_urls = "base_urls" in backend_spec(self.backend).options
        if takes_urls and not self.base_urls:
            raise ConfigError(f"backend {self.backend!r} needs at least one base URL (--base-url http://host:port/v1)")
        if self.base_urls and not takes_urls:
            raise ConfigError(f"backend {self.backend!r} takes no base URL; --base-url is for server backends (openai)")
        for spec in self.systems:
            make_system(spec)
        strange = [a for a in self.ablations if a not in ABLATION_MODES]
        if strange:
            raise ConfigError(f"unknown ablation(s) {strange}; the ablations are {list(ABLATION_MODES)}")
        if self.diagnostics:
            self.ablations = tuple(dict.fromkeys([*self.ablations, *ABLATION_MODES]))

    def task_kwargs(self, task: str) -> dict[str, Any]:
        """The task's `make()` kwargs: its registered held-out split (`EnvSpec.heldout_kwargs`),
        then this board's own settings over it."""
        import optima_envs

        kwargs = {**optima_envs.spec(task).heldout_kwargs, **self.env_kwargs.get(task, {})}
        if self.max_turns is not None:
            kwargs["max_turns"] = self.max_turns
        return kwargs

    def model_specs(self) -> list[ModelSpec]:
        from optima_agents.models.dtypes import resolve_dtype_here

        backend_kwargs = {"base_urls": list(self.base_urls)} if self.base_urls else {}
        # "auto" is resolved here, so a cell's identity names the dtype that actually ran.
        dtype = resolve_dtype_here(self.dtype)
        return [self._runs_as(parse_model(m, backend=self.backend, dtype=dtype, backend_kwargs=backend_kwargs))
                for m in self.models]

    def _runs_as(self, spec: ModelSpec) -> ModelSpec:
        """`spec` on the backend and weights that will run, so that a cell's identity and its row
        name them: backend "auto" resolved (`resolve_backend`: probed once per machine and model,
        then cached), and for llamacpp the GGUF weight type as the `dtype` and the `weights` option."""
        if spec.backend == "auto":
            from optima_agents.policies import auto

            if spec.model not in self.backend_choices:
                self.backend_choices[spec.model] = auto.resolve_backend(spec.model, dtype=spec.dtype)
            choice = self.backend_choices[spec.model]
            spec = dataclasses.replace(spec, backend=choice.backend, dtype=choice.runs_in,
                                       backend_kwargs={**spec.backend_kwargs, **choice.backend_kwargs})
        return spec.with_weight_type()


def parse_model(text: str, **spec: Any) -> ModelSpec:
    """`"label=model"` or `"model"` (labelled by its last path part)."""
    label, eq, model = text.partition("=")
    if not eq:
        model, label = text, Path(text.rstrip("/")).name or text
    if not model.strip() or not label.strip():
        raise ConfigError(f"a model is 'label=model' or 'model', got {text!r}")
    return ModelSpec(label=label.strip(), model=model.strip(), **spec)


def _systems(config: LeaderboardConfig) -> list[System]:
    """The configured systems, plus, for each system with a `k` setting, one per scaling k up
    to its own k (`sc` at k=8 with scaling 1,2,4,8 gives k = 1, 2, 4, 8; `mas-sc:k=4` gives 1, 2, 4)."""
    out: list[System] = []
    for spec in config.systems:
        system = make_system(spec)
        variants = [system]
        if config.scaling and "k" in {f.name for f in dataclasses.fields(system)}:
            ks = {k for k in config.scaling if k <= system.k} | {system.k}
            variants = [system.with_settings(k=k) for k in sorted(ks)]
        out.extend(v for v in variants if v not in out)
    return out


def plan_cells(config: LeaderboardConfig) -> list[Cell]:
    """Every cell of the board, grouped by model (so each model loads once); an ablation cell
    right after the cell it ablates."""
    import optima_envs

    systems = _systems(config)
    cells = []
    for model in config.model_specs():
        for task in config.tasks:
            heldout = HeldOut(task, config.task_kwargs(task), config.questions, config.seed, config.first_index)
            chosen = list(systems)
            if config.diagnostics and optima_envs.spec(task).family in PRIVATE_INFORMATION:
                solo = make_system("solo")
                chosen += [solo] if solo not in chosen else []
            for system in chosen:
                cells.append(Cell(heldout, system, model, config.max_new_tokens))
                if system.ablatable:
                    cells.extend(Cell(heldout, system, model, config.max_new_tokens, ablation=mode)
                                 for mode in config.ablations)
    return cells


#: Task families whose agents hold private information, where no-talk differs from talking.
PRIVATE_INFORMATION = ("ia", "game")


@dataclass
class LeaderboardRun:
    """What a run did: every cell's result, and which were computed, derived or read from disk."""

    results: list[CellResult] = field(default_factory=list)
    computed: list[str] = field(default_factory=list)
    derived: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    rescored: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def run_leaderboard(config: LeaderboardConfig, *, policy_factory: PolicyFactory | None = None,
                    log: Callable[[str], None] = print) -> LeaderboardRun:
    """Compute every missing cell (see the module doc); returns all cells' results."""
    root = Path(config.output_dir)
    run = LeaderboardRun()
    questions: dict[str, list] = {}
    golds: dict[str, tuple[Mapping[int, Any], Any]] = {}
    cells = plan_cells(config)
    if not config.rescore:
        refuse_unplayable(cells)
    for model, model_cells in _by_model(cells):
        policy = None
        try:
            for cell in _largest_k_first(model_cells):
                path = cell.path(root)
                name = f"{cell.heldout.env_id} / {cell.system.name} {cell.system.settings()} / {model.label}"
                name += f" / ablation {cell.ablation}" if cell.ablation else ""
                if path.exists():
                    result = read_cell(path)
                    if config.rescore:
                        result = _rescore_cell(result, cell, golds, run, name, log)
                    run.results.append(result)
                    run.cached.append(name)
                    continue
                if config.rescore:
                    run.skipped.append(name)
                    log(f"not on disk, not computed (rescore only): {name}")
                    continue
                source = _prefix_source(cell, root)
                if source is not None:
                    k = cell.system.k  # type: ignore[attr-defined]
                    outcomes = [prefix_vote(o, k) for o in source.outcomes]
                    run.results.append(write_cell(cell, root, outcomes, seconds=0.0,
                                                  derived_from=source.description["key"]))
                    run.derived.append(name)
                    continue
                if policy is None:
                    policy = (policy_factory or _default_policy)(model)
                h = cell.heldout
                where = json.dumps(describe_heldout(h), sort_keys=True)
                if where not in questions:
                    questions[where] = h.questions()
                ablation = None
                if cell.ablation is not None:
                    ablation = _ablation(cell, root, questions[where], policy, config, log)
                log(f"computing {name}")
                run.results.append(_compute(cell, root, questions[where], policy, config,
                                            lambda line, name=name: log(f"  {name}: {line}"), ablation))
                run.computed.append(name)
        finally:
            if policy is not None and capabilities_of(policy).close:
                policy.close()
    return run


def refuse_unplayable(cells: Sequence[Cell]) -> None:
    """Raise one `ConfigError` naming every system that a task refuses (e.g. `mad` seats three
    debaters and a game has two seats), before any model loads or any cell is computed, so a
    long board never stops half-way on a combination that could not run."""
    import optima_envs

    tried: dict[str, str | None] = {}
    problems = []
    for cell in cells:
        overrides = cell.system.env_overrides()
        kwargs = {**cell.heldout.env_kwargs, **overrides}
        key = json.dumps([cell.heldout.env_id, kwargs], sort_keys=True, default=str)
        if key not in tried:
            try:
                optima_envs.make(cell.heldout.env_id, **kwargs)
                tried[key] = None
            except OptimaError as error:
                tried[key] = str(error)
        if tried[key] is not None:
            problem = f"{cell.system.name} on {cell.heldout.env_id} ({overrides or 'no settings of its own'}): {tried[key]}"
            problems += [problem] if problem not in problems else []
    if problems:
        raise ConfigError("nothing was computed; these systems cannot play these tasks:\n  " + "\n  ".join(problems)
                          + "\nDrop them from --systems, or run those tasks in a call of their own.")


def _rescore_cell(result: CellResult, cell: Cell, golds: dict[str, tuple[Mapping[int, Any], Any]],
                  run: LeaderboardRun, name: str, log: Callable[[str], None]) -> CellResult:
    """`result` with its answers scored again by the task's metric; rewritten only if a score
    moved (a sample's too: smaller-k cells are read off the samples)."""
    import optima_envs

    h = cell.heldout
    where = json.dumps(describe_heldout(h), sort_keys=True)
    if where not in golds:
        held = h.questions()
        golds[where] = ({q.position: q.instance for q in held}, optima_envs.make(h.env_id, **h.env_kwargs).task.metric)
    instances, metric = golds[where]
    outcomes, changed = rescore_outcomes(result.outcomes, instances, metric)
    if outcomes == list(result.outcomes):
        return result
    run.rescored.append(name)
    log(f"rescored {name}: {changed} question(s) changed final score")
    return rewrite_cell(result, outcomes)


def _ablation(cell: Cell, root: Path, questions: list, policy: Any, config: LeaderboardConfig,
              log: Callable[[str], None]) -> MessageAblation:
    """The ablation a cell plays: for a swap, the donors are the base cell's dialogues (played
    again here, without storing them, when the base cell was computed before cells kept them)."""
    if cell.ablation != "swap":
        return MessageAblation(cell.ablation)
    base_path = cell.base.path(root)
    outcomes = list(read_cell(base_path).outcomes) if base_path.exists() else []
    if len(outcomes) != len(questions) or not all(o.transcript for o in outcomes):
        log(f"the base cell of {cell.heldout.env_id} / {cell.system.name} / {cell.model.label} keeps no dialogues; "
            "playing them again for the swap's donors")
        context = SystemContext(cell.heldout.env_id, cell.heldout.env_kwargs, questions, policy,
                                max_new_tokens=cell.max_new_tokens, progress=config.progress)
        outcomes = cell.system.run(context)
    return MessageAblation.swap(outcomes, cell.heldout.task, questions)


def _compute(cell: Cell, root: Path, questions: list, policy: Any, config: LeaderboardConfig,
             log: Callable[[str], None], ablation: MessageAblation | None = None) -> CellResult:
    """Run one cell chunk by chunk, appending each finished chunk to its partial file and logging
    it, so an hour-long cell shows how far it is and what a kill would keep."""
    partial = read_partial(cell.partial_path(root))
    done = partial.outcomes
    todo = [q for q in questions if q.position not in done]
    if done:
        log(f"resuming: {len(done)} of {len(questions)} questions already in {cell.partial_path(root).name}")
    seconds = partial.seconds
    for first in range(0, len(todo), config.chunk):
        chunk = todo[first:first + config.chunk]
        start = time.perf_counter()
        context = SystemContext(cell.heldout.env_id, cell.heldout.env_kwargs, chunk, policy,
                                max_new_tokens=cell.max_new_tokens, progress=config.progress, ablation=ablation)
        outcomes = cell.system.run(context)
        if [o.position for o in outcomes] != [q.position for q in chunk]:
            raise RuntimeError(f"system {cell.system.name!r} returned outcomes for positions "
                               f"{[o.position for o in outcomes]}, expected {[q.position for q in chunk]}")
        took = time.perf_counter() - start
        append_partial(cell.partial_path(root), outcomes, seconds=took)
        seconds += took
        done.update((o.position, o) for o in outcomes)
        log(f"{len(done)} of {len(questions)} questions done, {seconds:.0f} s")
    return write_cell(cell, root, list(done.values()), seconds=seconds)


def _prefix_source(cell: Cell, root: Path) -> CellResult | None:
    """A finished cell of the same system with a larger k and otherwise the same settings."""
    system = cell.system
    if "k" not in {f.name for f in dataclasses.fields(system)}:
        return None
    folder = cell.path(root).parent
    if not folder.is_dir():
        return None
    best = None
    wanted = _as_stored(cell.identity)
    for path in sorted(folder.glob("*.json")):
        result = read_cell(path)
        other = result.description
        settings = dict(other["settings"])
        if settings.get("k", 0) <= system.k:  # type: ignore[attr-defined]
            continue
        same_but_k = {key: other[key] for key in wanted}
        same_but_k["settings"] = {**settings, "k": system.k}  # type: ignore[attr-defined]
        if same_but_k != wanted:
            continue
        if best is None or settings["k"] < best.description["settings"]["k"]:
            best = result
    return best


def _as_stored(data: Any) -> Any:
    """`data` as it reads back from a cell's JSON (tuples become lists)."""
    return json.loads(json.dumps(data, default=str))


def _largest_k_first(cells: Sequence[Cell]) -> list[Cell]:
    return sorted(cells, key=lambda c: -getattr(c.system, "k", 0))


def _by_model(cells: Sequence[Cell]) -> Iterator[tuple[ModelSpec, list[Cell]]]:
    seen: dict[tuple[str, str], list[Cell]] = {}
    for cell in cells:
        seen.setdefault((cell.model.label, cell.model.model), []).append(cell)
    for group in seen.values():
        yield group[0].model, group


def _default_policy(model: ModelSpec) -> Any:
    from optima_agents.models import resolve_model
    from optima_agents.policies import SamplingParams
    from optima_eval.evaluation import build_policy

    path = resolve_model(model.model) if backend_spec(model.backend).loads_weights else model.model
    return build_policy(model.backend, path, SamplingParams(), dtype=model.dtype,
                        backend_kwargs=dict(model.backend_kwargs))
