"""The leaderboard runner on a scripted model: cells cached and resumed, scaling read off the
largest k, failures counted apart, reports written; and once on the real embedded model."""

from __future__ import annotations

import json

import pytest

from optima_agents.policies.base import Action, PolicyCapabilities, SamplingParams
from optima_envs.core.tokens import default_token_count
from optima_envs.errors import ConfigError
from optima_eval.leaderboard import LeaderboardConfig, plan_cells, run_leaderboard, write_reports
from tests.agents.conftest_servers import Reply, completion, stub_server  # noqa: F401  (fixture)


class Script:
    """Answers the synth-hop gold for even seeds and a wrong city for odd ones; fails when asked."""

    capabilities = PolicyCapabilities(with_sampling=True)

    def __init__(self, gold, sampling=None, calls=None, fail_after=None):
        self.gold, self.sampling = gold, sampling or SamplingParams()
        self.calls = calls if calls is not None else []
        self.fail_after = fail_after

    def with_sampling(self, sampling):
        return Script(self.gold, sampling, self.calls, self.fail_after)

    def act(self, requests):
        self.calls.append(len(requests))
        if self.fail_after is not None and len(self.calls) > self.fail_after:
            raise KeyboardInterrupt("killed")
        out = []
        for r in requests:
            text = r.observation["system_prompt"] + " ".join(m["text"] for m in r.observation["transcript"])
            gold = next(g for q, g in self.gold.items() if q in text)
            out.append(Action(text=f"<A>{gold if (r.seed or 0) % 2 == 0 else 'Nowhere'}</A>", token_ids=(1, 2, 3)))
        return out

    def identity(self):
        return {"backend": "scripted", "model": "script", "sampling": self.sampling.to_dict()}


@pytest.fixture
def gold():
    from optima_eval.heldout import HeldOut

    return {q.instance.question: q.instance.gold_text
            for q in HeldOut("synth-hop-ia", {"split": "validation"}, count=6).questions()}


def _config(tmp_path, **kwargs):
    base = dict(tasks=["synth-hop-ia"], systems=["cot", "sc:k=4", "mas"], models=["tiny=smollm2-135m"],
                questions=6, chunk=2, output_dir=str(tmp_path / "board"), max_new_tokens=16)
    return LeaderboardConfig(**{**base, **kwargs})


def _factory(gold, calls, fail_after=None):
    return lambda model: Script(gold, calls=calls, fail_after=fail_after)


@pytest.fixture(autouse=True)
def no_model_files(monkeypatch, request):
    """Scripted tests fingerprint the model by name only (no pull of the real model)."""
    from optima_eval.leaderboard import cells

    if request.node.get_closest_marker("model") is None:
        monkeypatch.setattr(cells.ModelSpec, "fingerprint",  # tuples, as real file lists have
                            lambda self: {"model": self.model, "backend": self.backend, "dtype": self.dtype,
                                          "files": [("w", 1, 2)]})


def test_second_run_computes_nothing(tmp_path, gold):
    calls: list[int] = []
    first = run_leaderboard(_config(tmp_path), policy_factory=_factory(gold, calls), log=lambda _: None)
    assert len(first.computed) == 3 and not first.cached
    made = len(calls)
    second = run_leaderboard(_config(tmp_path), policy_factory=_factory(gold, calls), log=lambda _: None)
    assert len(calls) == made and len(second.cached) == 3 and not second.computed
    assert [r.summary for r in first.results] == [r.summary for r in second.results]


def test_a_killed_run_resumes_from_its_last_chunk(tmp_path, gold):
    calls: list[int] = []
    with pytest.raises(KeyboardInterrupt):
        run_leaderboard(_config(tmp_path, systems=["cot"]), policy_factory=_factory(gold, calls, fail_after=2),
                        log=lambda _: None)
    partial = list((tmp_path / "board" / "cells").rglob("*.partial.jsonl"))
    lines = partial[0].read_text().splitlines() if len(partial) == 1 else []
    assert len(lines) == 6  # two chunks of two outcomes, each followed by its seconds
    timings = [json.loads(line) for line in lines[2::3]]
    assert all(set(t) == {"chunk_seconds"} for t in timings)
    # Pretend the killed run was slow: the resumed cell must report that time too.
    partial[0].write_text("".join(line + "\n" for line in lines[:2] + ['{"chunk_seconds": 600.0}'] + lines[3:5]
                                  + ['{"chunk_seconds": 60.0}']))
    resumed: list[int] = []
    lines: list[str] = []
    run = run_leaderboard(_config(tmp_path, systems=["cot"]), policy_factory=_factory(gold, resumed),
                          log=lines.append)
    assert resumed == [2] and run.results[0].summary["questions"] == 6
    progress = [line for line in lines if line.startswith("  ")]
    assert len(progress) == 2 and ": resuming: 4 of 6 questions already in " in progress[0]
    assert ": 6 of 6 questions done, " in progress[1]
    assert not list((tmp_path / "board" / "cells").rglob("*.partial.jsonl"))
    assert 660.0 <= run.results[0].description["seconds"] < 700.0
    fresh = run_leaderboard(_config(tmp_path / "fresh", systems=["cot"]), policy_factory=_factory(gold, []),
                            log=lambda _: None)
    assert [o.to_dict() for o in fresh.results[0].outcomes] == [o.to_dict() for o in run.results[0].outcomes]


def test_scaling_reads_smaller_k_off_the_largest(tmp_path, gold):
    calls: list[int] = []
    run = run_leaderboard(_config(tmp_path, systems=["sc"], scaling=[1, 2, 4, 8]),
                          policy_factory=_factory(gold, calls), log=lambda _: None)
    assert len(run.computed) == 1 and len(run.derived) == 3  # k=8 computed; 1, 2, 4 derived
    by_k = {r.description["settings"]["k"]: r for r in run.results}
    assert set(by_k) == {1, 2, 4, 8}
    assert all(len(o.samples) == 0 or len(o.samples) == 8 for o in by_k[8].outcomes)
    direct = run_leaderboard(_config(tmp_path / "direct", systems=["sc:k=2"]), policy_factory=_factory(gold, []),
                             log=lambda _: None)
    assert direct.results[0].summary == by_k[2].summary
    assert by_k[2].summary["tokens"]["mean"] == 2 * 3


def test_reports(tmp_path, gold):
    run = run_leaderboard(_config(tmp_path, systems=["cot", "sc:k=2", "mas"], scaling=[1, 2]),
                          policy_factory=_factory(gold, []), log=lambda _: None)
    paths = write_reports(run.results, tmp_path / "board", command="optima leaderboard ...")
    names = {p.name for p in paths}
    assert {"leaderboard_synth-hop-ia.md", "plot_synth-hop-ia.png", "leaderboard.md", "leaderboard.json"} <= names
    table = (tmp_path / "board" / "leaderboard_synth-hop-ia.md").read_text()
    dtype = run.results[0].description["model"]["dtype"]
    assert dtype and f"| cot | tiny | hf | {dtype} |" in table and f"| sc:k=2 | tiny | hf | {dtype} |" in table
    assert "Pareto" in table and "answered" in table
    assert (tmp_path / "board" / "plot_synth-hop-ia.png").read_bytes()[:4] == b"\x89PNG"
    index = json.loads((tmp_path / "board" / "leaderboard.json").read_text())
    assert len(index["cells"]) == len(run.results)
    assert {c["command"] for c in index["cells"]} == {"optima leaderboard ..."}


def test_separate_calls_share_one_board(tmp_path, gold):
    """A call replaces the rows of its own task, held-out set, system and model and keeps the
    others, each with the command that made it; a new held-out set for a task gets its own section
    beside the old one."""
    def index():
        data = json.loads((tmp_path / "board" / "leaderboard.json").read_text())
        return sorted((c["task"], c["system"], c["command"]) for c in data["cells"])

    hop = run_leaderboard(_config(tmp_path, systems=["cot", "mas"]), policy_factory=_factory(gold, []),
                          log=lambda _: None)
    write_reports(hop.results, tmp_path / "board", command="hop call")
    arith = run_leaderboard(_config(tmp_path, tasks=["synth-arith-debate"], systems=["cot"], questions=3),
                            policy_factory=lambda m: _Anything(), log=lambda _: None)
    write_reports(arith.results, tmp_path / "board", command="arith call")
    overview = (tmp_path / "board" / "leaderboard.md").read_text()
    assert "| system | model | backend | dtype | synth-arith-debate | synth-hop-ia |" in overview
    assert f"| mas | tiny | hf | {hop.results[0].description['model']['dtype']} |" in overview
    assert "- synth-hop-ia: `hop call`" in overview and "- synth-arith-debate: `arith call`" in overview
    assert index() == [("synth-arith-debate", "cot", "arith call"), ("synth-hop-ia", "cot", "hop call"),
                       ("synth-hop-ia", "mas", "hop call")]

    again = run_leaderboard(_config(tmp_path, systems=["cot"]), policy_factory=_factory(gold, []), log=lambda _: None)
    write_reports(again.results, tmp_path / "board", command="hop again")
    assert index() == [("synth-arith-debate", "cot", "arith call"), ("synth-hop-ia", "cot", "hop again"),
                       ("synth-hop-ia", "mas", "hop call")]
    table = (tmp_path / "board" / "leaderboard_synth-hop-ia.md").read_text()
    assert "| mas | tiny |" in table and "`hop call`; `hop again`" in table

    fewer = run_leaderboard(_config(tmp_path, systems=["cot"], questions=4), policy_factory=_factory(gold, []),
                            log=lambda _: None)
    write_reports(fewer.results, tmp_path / "board", command="hop on 4")
    assert index() == [("synth-arith-debate", "cot", "arith call"), ("synth-hop-ia", "cot", "hop again"),
                       ("synth-hop-ia", "cot", "hop on 4"), ("synth-hop-ia", "mas", "hop call")]
    table = (tmp_path / "board" / "leaderboard_synth-hop-ia.md").read_text()
    first, second = table.split("## Set 2")
    assert "## Set 1" in first and "`hop call`; `hop again`" in first and "| mas | tiny |" in first
    assert "`hop on 4`" in second and "4 questions from index 0" in second and "| mas | tiny |" not in second
    assert (tmp_path / "board" / "plot_synth-hop-ia_set2.png").read_bytes()[:4] == b"\x89PNG"
    overview = (tmp_path / "board" / "leaderboard.md").read_text()
    assert "synth-hop-ia: the held-out set with the most rows" in overview
    assert "`hop on 4`" not in overview  # the cross-task table shows the task's first set only


def test_every_task_rerenders_the_board_from_a_corrected_index(tmp_path, gold):
    """A command corrected by hand in `leaderboard.json` reaches every task's table, not only the
    tables of the call's own tasks."""
    hop = run_leaderboard(_config(tmp_path, systems=["cot"]), policy_factory=_factory(gold, []), log=lambda _: None)
    write_reports(hop.results, tmp_path / "board", command="hop call")
    index_path = tmp_path / "board" / "leaderboard.json"
    index = json.loads(index_path.read_text())
    index["cells"][0]["command"] = "DATA=here hop call"
    index_path.write_text(json.dumps(index))
    hop_table = tmp_path / "board" / "leaderboard_synth-hop-ia.md"

    write_reports([], tmp_path / "board")
    assert "`hop call`" in hop_table.read_text()
    paths = write_reports([], tmp_path / "board", every_task=True)
    assert hop_table in paths and "`DATA=here hop call`" in hop_table.read_text()
    assert "- synth-hop-ia: `DATA=here hop call`" in (tmp_path / "board" / "leaderboard.md").read_text()


def test_another_dtype_is_another_row(tmp_path, gold):
    """A rerun of a model in another dtype adds a row beside the old one instead of replacing it."""
    for dtype in ("bfloat16", "float32", "bfloat16"):
        run = run_leaderboard(_config(tmp_path, systems=["cot"], dtype=dtype), policy_factory=_factory(gold, []),
                              log=lambda _: None)
        write_reports(run.results, tmp_path / "board", command=f"cot in {dtype}")
    cells = json.loads((tmp_path / "board" / "leaderboard.json").read_text())["cells"]
    assert sorted((c["dtype"], c["command"]) for c in cells) == [("bfloat16", "cot in bfloat16"),
                                                                 ("float32", "cot in float32")]
    table = (tmp_path / "board" / "leaderboard_synth-hop-ia.md").read_text()
    assert "| cot | tiny | hf | bfloat16 |" in table and "| cot | tiny | hf | float32 |" in table


def _choose(monkeypatch, *kinds):
    """`--backend auto` resolving to llamacpp in each of `kinds` in turn (no probe); returns the calls."""
    from optima_agents.policies import auto
    from optima_agents.policies.auto_choice import BackendChoice, Candidate, ProbeResult

    calls = []

    def resolve(model, **kwargs):
        calls.append(model)
        kind = kinds[min(len(calls), len(kinds)) - 1]
        return BackendChoice(ProbeResult(Candidate("llamacpp", kind, weights=kind), tokens_per_s=100.0))

    monkeypatch.setattr(auto, "resolve_backend", resolve)
    return calls


def test_auto_is_resolved_once_per_model_and_never_recorded(tmp_path, gold, monkeypatch):
    calls = _choose(monkeypatch, "q8_0")
    config = _config(tmp_path, systems=["cot"], backend="auto", models=["tiny=smollm2-135m", "again=smollm2-135m"])
    specs = config.model_specs()
    assert [(s.backend, s.dtype, dict(s.backend_kwargs)) for s in specs] == [
        ("llamacpp", "q8_0", {"weights": "q8_0"})] * 2
    built = []
    run = run_leaderboard(config, policy_factory=lambda m: built.append(m) or Script(gold), log=lambda _: None)
    assert calls == ["smollm2-135m"] and {m.backend for m in built} == {"llamacpp"}
    stored = json.dumps([r.description for r in run.results])
    assert '"auto"' not in stored and '"dtype": "q8_0"' in stored
    assert set(config.backend_choices) == {"smollm2-135m"}


def test_a_llamacpp_model_names_its_weight_type(tmp_path):
    """What weights="auto" runs: the shipped Q4_1 for a pulled registry base, F16 for another folder."""
    for name, manifest in (("base", {"name": "smollm2-135m"}), ("trained", None)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
        if manifest:
            (tmp_path / name / "optima_manifest.json").write_text(json.dumps(manifest))
    config = _config(tmp_path, systems=["cot"], backend="llamacpp",
                     models=[f"base={tmp_path / 'base'}", f"trained={tmp_path / 'trained'}"])
    assert [(s.dtype, dict(s.backend_kwargs)) for s in config.model_specs()] == [
        ("q4_1", {"weights": "q4_1"}), ("f16", {"weights": "f16"})]


def test_weight_types_and_backends_are_never_mixed_in_one_row(tmp_path, gold, monkeypatch):
    """Cells of one model label in two GGUF weight types and on transformers: separate rows in the
    task's table and across tasks, none replacing another."""
    _choose(monkeypatch, "q8_0", "f16")
    board = tmp_path / "board"
    hop = run_leaderboard(_config(tmp_path, systems=["cot"], backend="auto"), policy_factory=_factory(gold, []),
                          log=lambda _: None)
    write_reports(hop.results, board, command="hop on q8_0")
    arith = run_leaderboard(_config(tmp_path, tasks=["synth-arith-debate"], systems=["cot"], questions=3,
                                    backend="auto"), policy_factory=lambda m: _Anything(), log=lambda _: None)
    write_reports(arith.results, board, command="arith on f16")
    hf = run_leaderboard(_config(tmp_path, systems=["cot"], dtype="float32"), policy_factory=_factory(gold, []),
                         log=lambda _: None)
    write_reports(hf.results, board, command="hop on hf")
    cells = json.loads((board / "leaderboard.json").read_text())["cells"]
    assert sorted((c["task"], c["backend"], c["dtype"]) for c in cells) == [
        ("synth-arith-debate", "llamacpp", "f16"), ("synth-hop-ia", "hf", "float32"),
        ("synth-hop-ia", "llamacpp", "q8_0")]
    table = (board / "leaderboard_synth-hop-ia.md").read_text()
    assert "| cot | tiny | llamacpp | q8_0 |" in table and "| cot | tiny | hf | float32 |" in table
    overview = (board / "leaderboard.md").read_text().splitlines()
    rows = [[part.strip() for part in line.strip("|").split("|")] for line in overview if line.startswith("| cot |")]
    filled = {(backend, dtype): (arith != "", hop != "") for _, _, backend, dtype, arith, hop in rows}
    assert filled == {("llamacpp", "f16"): (True, False), ("llamacpp", "q8_0"): (False, True),
                      ("hf", "float32"): (False, True)}


class _Anything:
    """Answers 7 to everything (the arithmetic board only needs some scored reply)."""

    capabilities = PolicyCapabilities(with_sampling=True)

    def with_sampling(self, sampling):
        return self

    def act(self, requests):
        return [Action(text="<A>7</A>", token_ids=(1,)) for _ in requests]

    def identity(self):
        return {"backend": "scripted", "model": "seven"}


def test_infra_failures_are_counted_apart(tmp_path, gold):
    class Down(Script):
        def with_sampling(self, sampling):
            return self

        def act(self, requests):
            return [Action(text="", finish_reason="error", error="HTTP 503") for _ in requests]

    run = run_leaderboard(_config(tmp_path, systems=["cot"]), policy_factory=lambda m: Down(gold),
                          log=lambda _: None)
    summary = run.results[0].summary
    assert summary["infra_failures"] == 6 and summary["scored"] == 0 and summary["score"]["n"] == 0


@pytest.mark.parametrize("kwargs, message", [
    ({"tasks": ["nope-ia"]}, "unknown task(s) ['nope-ia']"),
    ({"systems": ["sc:k=0"]}, "k must be a positive int"),
    ({"backend": "openai"}, "needs at least one base URL"),
    ({"env_kwargs": {"gsm8k-debate": {"split": "test"}}}, "env_kwargs for task(s) ['gsm8k-debate']"),
    ({"scaling": [0]}, "scaling must list positive ints"),
])
def test_bad_configs(tmp_path, kwargs, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        _config(tmp_path, **kwargs)


def test_plan_lists_every_cell(tmp_path):
    cells = plan_cells(_config(tmp_path, tasks=["synth-hop-ia", "synth-arith-debate"], scaling=[1, 2, 8]))
    assert len(cells) == 2 * (1 + 3 + 1)  # cot, sc at k=1, 2, 4 (8 is above its own k), mas; per task
    ks = sorted(c.system.k for c in cells if c.system.name == "sc" and c.heldout.env_id == "synth-hop-ia")
    assert ks == [1, 2, 4]


@pytest.mark.model
def test_the_command_on_the_embedded_model(tmp_path, embedded_model_dir):
    from typer.testing import CliRunner

    from optima_train.cli import app

    args = ["leaderboard", "--tasks", "synth-hop-ia", "--systems", "cot,mas", "--questions", "2",
            "--max-new-tokens", "8", "--max-turns", "2", "--out", str(tmp_path / "board")]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "2 computed, 0 derived (scaling), 0 cached" in first.output
    second = CliRunner().invoke(app, args)
    assert second.exit_code == 0 and "0 computed, 0 derived (scaling), 2 cached" in second.output
    board = json.loads((tmp_path / "board" / "leaderboard.json").read_text())
    assert {c["system"] for c in board["cells"]} == {"cot", "mas"}
    assert all(c["counts"]["questions"] == 2 and c["tokens"]["mean"] > 0 for c in board["cells"])
    rescore = CliRunner().invoke(app, [*args, "--rescore"])
    assert rescore.exit_code == 0 and "0 of 2 cached re-scored with a changed score, 0 not on disk" in rescore.output
    assert json.loads((tmp_path / "board" / "leaderboard.json").read_text()) == board  # commands kept


def test_tasks_are_played_on_their_heldout_split(tmp_path):
    """A board never plays a task's training split unless told to."""

    cells = plan_cells(_config(tmp_path, tasks=["synth-hop-ia", "gsm8k-debate"], systems=["cot"]))
    assert {c.heldout.env_id: c.heldout.env_kwargs["split"] for c in cells} == {
        "synth-hop-ia": "validation", "gsm8k-debate": "test"}
    told = plan_cells(_config(tmp_path, systems=["cot"], env_kwargs={"synth-hop-ia": {"split": "train"}}))
    assert told[0].heldout.env_kwargs["split"] == "train"


def test_the_recorded_command_names_the_data_variable_it_ran_with_not_its_folder():
    from optima_train.cli.leaderboard import made_by

    argv = ["leaderboard", "--tasks", "arc-debate", "--systems", "mad", "--set", "arc-debate.split=test"]
    assert made_by(argv, {}) == "optima leaderboard --tasks arc-debate --systems mad --set arc-debate.split=test"
    assert made_by(argv, {"OPTIMA_DATA_DIR": "/data/my sets", "HOME": "/root"}) == (
        "OPTIMA_DATA_DIR=$OPTIMA_DATA_DIR optima leaderboard --tasks arc-debate --systems mad "
        "--set arc-debate.split=test")


def test_an_api_model_takes_part_through_an_openai_compatible_server(tmp_path, stub_server):
    """An API model (a served name with no local tokenizer) on the board: every request goes to the
    server under that name, replies without token ids are counted by the env's counter (as every
    system counts them), and a second call reads the cells back."""
    from typer.testing import CliRunner

    from optima_train.cli import app

    stub = stub_server(default=Reply(body=completion("<A>Paris</A>")))
    args = ["leaderboard", "--tasks", "synth-hop-ia", "--systems", "cot,sc:k=2", "--questions", "2",
            "--model", "api=served-model", "--backend", "openai", "--base-url", stub.base_url,
            "--max-new-tokens", "8", "--out", str(tmp_path / "board")]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "2 computed, 0 derived (scaling), 0 cached" in first.output
    assert len(stub.received) == 2 + 2 * 2 and {body["model"] for body in stub.received} == {"served-model"}
    board = json.loads((tmp_path / "board" / "leaderboard.json").read_text())
    reply = default_token_count("<A>Paris</A>")  # no ids from the server: the env's counter counts the text
    assert {c["system"]: c["tokens"]["mean"] for c in board["cells"]} == {"cot": reply, "sc:k=2": 2 * reply}
    assert all(c["model"] == "api" and c["counts"]["infra_failures"] == 0 for c in board["cells"])
    cells = [json.loads((tmp_path / "board" / c["cell"]).read_text()) for c in board["cells"]]
    assert all(c["cell"]["model"]["backend"] == "openai" and c["cell"]["model"]["model"] == "served-model"
               for c in cells)
    assert all(o["answer"] == "Paris" for c in cells for o in c["outcomes"])
    second = CliRunner().invoke(app, args)
    assert second.exit_code == 0 and "0 computed, 0 derived (scaling), 2 cached" in second.output
    assert len(stub.received) == 6


def _no_model(model):
    raise AssertionError("a rescore must run no model")


def test_rescore_rewrites_stale_scores_from_the_stored_answers(tmp_path, gold):
    first = run_leaderboard(_config(tmp_path, systems=["cot", "sc:k=4"]), policy_factory=_factory(gold, []),
                            log=lambda _: None)
    for result in first.results:  # as an older, lenient metric would have scored them: all right
        data = json.loads(result.path.read_text())
        for outcome in data["outcomes"]:
            for item in [outcome, *outcome["samples"]]:
                item["score"] = 1.0
        data["summary"]["score"]["mean"] = 1.0
        result.path.write_text(json.dumps(data))
    lines: list[str] = []
    run = run_leaderboard(_config(tmp_path, systems=["cot", "sc:k=4", "mas"], rescore=True),
                          policy_factory=_no_model, log=lines.append)
    assert len(run.rescored) == 2 and len(run.skipped) == 1 and not run.computed
    assert any(line.startswith("not on disk, not computed (rescore only): synth-hop-ia / mas") for line in lines)
    assert [r.summary for r in run.results] == [r.summary for r in first.results]
    assert [o.to_dict() for r in run.results for o in r.outcomes] == \
        [o.to_dict() for r in first.results for o in r.outcomes]
    assert all("rescored" in r.description and r.description["key"] == f.description["key"]
               for r, f in zip(run.results, first.results))
    again = run_leaderboard(_config(tmp_path, systems=["cot", "sc:k=4"], rescore=True),
                            policy_factory=_no_model, log=lambda _: None)
    assert not again.rescored and len(again.cached) == 2


def test_a_system_the_task_refuses_stops_the_board_before_anything_runs(tmp_path):
    """`mad` seats three debaters and the referential game has two seats: the whole call is
    refused up front, naming the pair, and no model loads and no cell is written."""
    loaded = []
    config = _config(tmp_path, tasks=["referential-game", "synth-hop-ia"], systems=["cot", "mad"], questions=2)
    with pytest.raises(ConfigError) as refused:
        run_leaderboard(config, policy_factory=lambda m: loaded.append(m), log=lambda _: None)
    message = str(refused.value)
    assert "mad on referential-game ({'num_agents': 3})" in message and "exactly 2 agents" in message
    assert "synth-hop-ia" not in message and "cot" not in message
    assert loaded == [] and not (tmp_path / "board").exists()
    two_seats = run_leaderboard(_config(tmp_path, tasks=["referential-game"], systems=["mad:agents=2"], questions=2),
                                policy_factory=lambda m: _Anything(), log=lambda _: None)
    assert len(two_seats.computed) == 1
