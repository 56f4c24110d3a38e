"""Paths as results record them: the data folder as `$OPTIMA_DATA_DIR`, the checkout relative,
the home folder as `~`, a pulled model by its name; everything else as it was; and back."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from optima_envs.errors import ConfigError
from optima_eval.portable_paths import Roots, command_line, expand, portable, portable_command, portable_json, \
    portable_text


@pytest.fixture
def roots(tmp_path: Path) -> Roots:
    for name in ("data", "models", "project", "home"):
        (tmp_path / name).mkdir()
    return Roots(data=tmp_path / "data", models=tmp_path / "models", project=tmp_path / "project",
                 home=tmp_path / "home")


def test_a_path_in_the_data_folder_names_the_variable(roots):
    assert portable(roots.data / "hotpotqa" / "rpt", roots) == "$OPTIMA_DATA_DIR/hotpotqa/rpt"
    assert portable(str(roots.data / "gsm8k" / "test.jsonl"), roots) == "$OPTIMA_DATA_DIR/gsm8k/test.jsonl"
    assert portable(roots.data, roots) == "$OPTIMA_DATA_DIR"
    assert portable(f"{roots.data}/gsm8k/../math/x.jsonl", roots) == "$OPTIMA_DATA_DIR/math/x.jsonl"


def test_the_data_folder_is_also_found_through_a_symbolic_link(roots, tmp_path):
    (tmp_path / "link").symlink_to(roots.data, target_is_directory=True)
    assert portable(tmp_path / "link" / "gsm8k", roots) == "$OPTIMA_DATA_DIR/gsm8k"


def test_a_path_in_the_checkout_is_relative_to_it(roots):
    assert portable(roots.project / "runs" / "isft" / "checkpoint", roots) == "runs/isft/checkpoint"
    assert portable(roots.project, roots) == "."


def test_a_path_in_the_home_folder_starts_with_a_tilde(roots):
    assert portable(roots.home / "sets" / "a.json", roots) == "~/sets/a.json"
    assert portable(roots.home, roots) == "~"


def test_a_pulled_model_folder_is_its_name(roots):
    assert portable(roots.models / "smollm2-135m", roots) == "smollm2-135m"
    inside = roots.models / "smollm2-135m" / "config.json"  # not a model name: kept as it was given
    assert portable(inside, roots) == str(inside)


def test_the_data_folder_wins_over_the_checkout_that_holds_it(tmp_path):
    roots = Roots(data=tmp_path / "data", models=None, project=tmp_path, home=None)
    assert portable(tmp_path / "data" / "x", roots) == "$OPTIMA_DATA_DIR/x"
    assert portable(tmp_path / "runs", roots) == "runs"


def test_relative_and_foreign_paths_are_kept(roots):
    assert portable("runs/isft/checkpoint", roots) == "runs/isft/checkpoint"
    assert portable("/opt/elsewhere/x", roots) == "/opt/elsewhere/x"
    assert portable("smollm2-135m", roots) == "smollm2-135m"


def test_no_roots_keep_every_path():
    nothing = Roots(data=None, models=None, project=None, home=None)
    assert portable("/srv/data/gsm8k", nothing) == "/srv/data/gsm8k"


def test_paths_inside_text(roots):
    text = (f"files: {roots.data}/mmlu/a.csv, {roots.data}/mmlu/b.csv ... read from `{roots.project}/runs/x`. "
            f"Saved to {roots.home}/out.")
    assert portable_text(text, roots) == ("files: $OPTIMA_DATA_DIR/mmlu/a.csv, $OPTIMA_DATA_DIR/mmlu/b.csv ... "
                                          "read from `runs/x`. Saved to ~/out.")


def test_urls_relative_paths_and_fractions_are_not_paths(roots):
    text = ("http://127.0.0.1:8000/v1 https://huggingface.co/datasets/gsm8k runs/isft/iter_000 3/4 "
            "and/or file:///etc/x")
    assert portable_text(text, roots) == text


def test_json_strings_are_rewritten_and_nothing_else(roots):
    data = {"origin": f"files: {roots.data}/gsm8k/test.jsonl", "runs": [{"run_dir": str(roots.project / "runs/a"),
                                                                         "n": 3, "ok": True, "none": None}]}
    assert portable_json(data, roots) == {"origin": "files: $OPTIMA_DATA_DIR/gsm8k/test.jsonl",
                                          "runs": [{"run_dir": "runs/a", "n": 3, "ok": True, "none": None}]}


def test_expand_reads_a_recorded_path_back(roots, monkeypatch):
    monkeypatch.setenv("OPTIMA_DATA_DIR", str(roots.data))
    path = roots.data / "hotpotqa" / "rpt"
    assert expand(portable(path, roots)) == str(path)
    assert expand("$OPTIMA_DATA_DIR") == str(roots.data)
    assert expand("~/x") == os.path.expanduser("~/x")
    assert expand("runs/a") == "runs/a" and expand("$OPTIMA_DATA_DIRX/a") == "$OPTIMA_DATA_DIRX/a"


def test_expand_without_the_variable_says_how_to_fix_it(monkeypatch):
    monkeypatch.delenv("OPTIMA_DATA_DIR", raising=False)
    with pytest.raises(ConfigError, match=r"'\$OPTIMA_DATA_DIR/gsm8k' is under \$OPTIMA_DATA_DIR, which is not set "
                                          r"here: set OPTIMA_DATA_DIR to the folder"):
        expand("$OPTIMA_DATA_DIR/gsm8k")


def test_command_line_writes_paths_portably_and_quotes_what_the_shell_would_read(roots):
    words = ["optima", "leaderboard", "--model", f"trained={roots.project}/runs/ckpt", "--set",
             f"hotpotqa-ia.data_dir={roots.data}/hotpotqa/rpt", "--systems", "sc:k=4"]
    line = command_line(words, {"OPTIMA_DATA_DIR": str(roots.data), "EMPTY": ""}, roots)
    assert line == ("OPTIMA_DATA_DIR=$OPTIMA_DATA_DIR optima leaderboard --model trained=runs/ckpt --set "
                    "'hotpotqa-ia.data_dir=$OPTIMA_DATA_DIR/hotpotqa/rpt' --systems sc:k=4")
    assert command_line(["python", "x.py"], {"OPTIMA_DATA_DIR": "../shared/data"}, roots) == \
        "OPTIMA_DATA_DIR=../shared/data python x.py"


def test_a_recorded_command_runs_again_elsewhere(roots, tmp_path, monkeypatch):
    from optima_train.cli.leaderboard import _task_sets

    line = command_line(["optima", "leaderboard", "--set", f"gsm8k-debate.data_dir={roots.data}/gsm8k"],
                        roots=roots)
    elsewhere = tmp_path / "other machine's data"
    monkeypatch.setenv("OPTIMA_DATA_DIR", str(elsewhere))
    value = shlex.split(line)[-1]
    assert _task_sets([value], ["gsm8k-debate"]) == {"gsm8k-debate": {"data_dir": f"{elsewhere}/gsm8k"}}


def test_portable_command_keeps_a_command_without_paths_as_it_was(roots):
    command = "python benchmarks/training_repeats.py --runs 'runs/x_seed{seed}'  --seeds 1,2"
    assert portable_command(command, roots) == command
    recorded = f"OPTIMA_DATA_DIR={roots.data} optima leaderboard --out {roots.project}/benchmarks/results/lb"
    assert portable_command(recorded, roots) == \
        "OPTIMA_DATA_DIR=$OPTIMA_DATA_DIR optima leaderboard --out benchmarks/results/lb"
