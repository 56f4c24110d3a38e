"""Leaderboard cells: a model's fingerprint is its weights' content, and a partial cell keeps what a kill left."""

from __future__ import annotations

import json
import os
from pathlib import Path

from optima_envs.data.identity import content_digest
from optima_eval.leaderboard.cells import ModelSpec, append_partial, read_cell, read_partial, store_cell
from optima_eval.systems import Outcome


def weights(folder: Path, payload: bytes = b"\x00\x01" * 1000, *, mtime_ns: int | None = None) -> Path:
    folder.mkdir(parents=True)
    for name, data in (("config.json", b'{"model_type": "llama"}'), ("model.safetensors", payload),
                       ("notes.txt", b"not part of the weights"),
                       ("optima_manifest.json", f'{{"created": "{folder}"}}'.encode())):  # differs per pull
        (folder / name).write_bytes(data)
        if mtime_ns is not None:
            os.utime(folder / name, ns=(mtime_ns, mtime_ns))
    return folder


def test_the_same_weights_pulled_again_elsewhere_keep_their_fingerprint(tmp_path):
    first = ModelSpec("m", str(weights(tmp_path / "a" / "ckpt", mtime_ns=1_000_000_000)), backend="hf").fingerprint()
    again = ModelSpec("m", str(weights(tmp_path / "b" / "ckpt", mtime_ns=9_000_000_000)), backend="hf").fingerprint()
    assert [f[0] for f in first["files"]] == ["config.json", "model.safetensors"]
    assert first["files"] == again["files"]
    assert "path" not in first


def test_retrained_weights_of_the_same_size_are_a_new_model(tmp_path):
    folder = weights(tmp_path / "ckpt")
    before = ModelSpec("m", str(folder), backend="hf").fingerprint()
    (folder / "model.safetensors").write_bytes(b"\x00\x02" * 1000)
    after = ModelSpec("m", str(folder), backend="hf").fingerprint()
    assert before["files"][1][1] == after["files"][1][1] == 2000
    assert before["files"][1][2] != after["files"][1][2]


def test_a_llamacpp_weight_type_is_part_of_the_cell_key(tmp_path):
    """The same folder on llama.cpp in two GGUF weight types, and on transformers, are three cells."""
    from optima_eval.heldout import HeldOut
    from optima_eval.leaderboard.cells import Cell
    from optima_eval.systems import make_system

    folder = str(weights(tmp_path / "ckpt"))
    specs = [ModelSpec("m", folder, backend="llamacpp", dtype=kind, backend_kwargs={"weights": kind})
             for kind in ("q8_0", "f16")] + [ModelSpec("m", folder, backend="hf", dtype="float32")]
    heldout = HeldOut("synth-hop-ia", {"split": "validation"}, count=2)
    cells = [Cell(heldout, make_system("cot"), spec) for spec in specs]
    assert len({cell.key for cell in cells}) == 3
    assert [(c.identity["model"]["backend"], c.identity["model"]["dtype"], c.identity["model"]["backend_kwargs"])
            for c in cells] == [("llamacpp", "q8_0", {"weights": "q8_0"}), ("llamacpp", "f16", {"weights": "f16"}),
                                ("hf", "float32", {})]


def test_a_digest_is_read_once_per_file_version(tmp_path, monkeypatch):
    path = weights(tmp_path / "ckpt") / "model.safetensors"
    digest = content_digest(path)
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda *a, **k: opened.append(a[0]) or real_open(*a, **k))
    assert content_digest(path) == digest and opened == []
    os.utime(path, ns=(5, 5))
    assert content_digest(path) == digest and opened == [str(path.resolve())]


def _outcome(position: int) -> Outcome:
    return Outcome(position, f"q{position}", "a", 1.0, True, 10)


def test_a_partial_file_keeps_each_chunk_and_its_seconds(tmp_path):
    path = tmp_path / "cell.partial.jsonl"
    append_partial(path, [_outcome(0), _outcome(1)], seconds=12.34)
    append_partial(path, [_outcome(2)], seconds=5.0)
    partial = read_partial(path)
    assert sorted(partial.outcomes) == [0, 1, 2] and partial.seconds == 17.3


def test_a_line_cut_by_a_kill_ends_the_partial_and_untimed_lines_still_count(tmp_path):
    path = tmp_path / "cell.partial.jsonl"
    untimed = [json.dumps(_outcome(i).to_dict()) for i in range(2)]
    cut = json.dumps(_outcome(2).to_dict())[:40]
    path.write_text("\n".join(untimed + [cut]) + "\n", encoding="utf-8")
    partial = read_partial(path)
    assert sorted(partial.outcomes) == [0, 1] and partial.seconds == 0.0
    assert read_partial(tmp_path / "missing.partial.jsonl").outcomes == {}


def test_a_cell_with_nothing_scored_is_strict_json_and_reads_back_as_nan(tmp_path):
    import math

    path = tmp_path / "cell.json"
    store_cell(path, {"model": "m"}, [Outcome(0, "q0", "a", 0.0, False, 10)])
    assert "NaN" not in path.read_text()
    result = read_cell(path)
    assert math.isnan(result.score.mean) and result.score.n == 0 and result.tokens.mean == 10.0


def test_a_swap_within_swap_groups_is_its_own_cell(tmp_path):
    """Negotiation's swap takes donors with the same items: its key says so, so no cell measured
    with any donor is read back for it; other tasks' swap cells keep their keys."""
    from optima_eval.heldout import HeldOut
    from optima_eval.leaderboard.cells import Cell
    from optima_eval.systems import make_system

    spec = ModelSpec("m", str(weights(tmp_path / "ckpt")), backend="hf", dtype="float32")
    game = Cell(HeldOut("negotiation-game", {"split": "validation"}, count=4), make_system("mas"), spec, ablation="swap")
    assert game.identity["swap_group"] == "item_names"
    assert "swap_group" not in Cell(game.heldout, make_system("mas"), spec, ablation="remove").identity
    other = Cell(HeldOut("referential-game", count=4), make_system("mas"), spec, ablation="swap")
    assert "swap_group" not in other.identity and other.identity["ablation"] == "swap"
