"""The board's communication diagnostics on scripted pairs: ablation cells keyed to the cells
they ablate, the solo no-talk ceiling, comm gain with a paired interval, partner-only scores,
and the columns in the tables."""

from __future__ import annotations

import json

import pytest

from optima_agents.policies import ScriptedPolicy
from optima_envs.tasks.referential import oracle_policies
from optima_eval.leaderboard import LeaderboardConfig, plan_cells, run_leaderboard, write_reports
from optima_eval.leaderboard.diagnostics import comm_gain, heldout_places, heldout_told, normalised_gain, place_scores
from optima_eval.systems import Outcome


@pytest.fixture(autouse=True)
def no_model_files(monkeypatch):
    """Scripted tests fingerprint the model by name only (no pull of the real model)."""
    from optima_eval.leaderboard import cells

    monkeypatch.setattr(cells.ModelSpec, "fingerprint",
                        lambda self: {"model": self.model, "backend": self.backend, "dtype": self.dtype})


def oracle_pair(model) -> ScriptedPolicy:
    """Scripted optimal play; a lone listener (no speaker to read) picks A."""
    seats = oracle_policies(("alice", "bob"))

    def reply(o):
        if o["agent"] == "solver":
            return "<A>A</A>"
        return seats[o["agent"]](o)

    return ScriptedPolicy(reply, name="oracle")


def config(tmp_path, **kwargs) -> LeaderboardConfig:
    base = dict(tasks=["referential-game"], systems=["mas"], models=["oracle=smollm2-135m"], questions=12, chunk=5,
                output_dir=str(tmp_path / "board"), diagnostics=True, max_new_tokens=16)
    return LeaderboardConfig(**{**base, **kwargs})


def outcome(position: int, score: float | None) -> Outcome:
    return Outcome(position, f"q{position}", "x", score, score is not None, 1)


class TestPure:
    def test_comm_gain_pairs_questions_scored_in_both(self):
        base = [outcome(0, 1.0), outcome(1, 1.0), outcome(2, 0.0), outcome(3, None)]
        ablated = [outcome(0, 0.0), outcome(1, 1.0), outcome(2, 0.0), outcome(3, 1.0)]
        gain = comm_gain(base, ablated)
        assert gain.n == 3 and gain.mean == pytest.approx(1 / 3)
        assert gain.low <= gain.mean <= gain.high

    def test_place_scores_split_by_where_the_answer_lies(self):
        outcomes = [outcome(0, 1.0), outcome(1, 0.0), outcome(2, 1.0)]
        split = place_scores(outcomes, {0: "alone", 1: "partner", 2: "partner"})
        assert (split["alone"].mean, split["partner"].mean, split["partner"].n, split["named"].n) == (1.0, 0.5, 2, 0)

    def test_normalised_gain(self):
        assert normalised_gain(0.6, 0.2, 1.0) == pytest.approx(0.5)
        assert normalised_gain(0.6, 0.5, 0.5) != normalised_gain(0.6, 0.5, 0.5)  # NaN: no room above no-talk

    def test_places_of_a_recorded_held_out_set(self):
        held = {"env_id": "synth-hop-ia", "env_version": 2, "count": 10, "seed": 1_000_000, "first_index": 0,
                "env_kwargs": {"split": "validation", "distractors": "0", "comparison_rate": "0.5"}}
        places = heldout_places(held)
        assert sorted(places) == list(range(10)) and set(places.values()) <= {"alone", "partner", "named"}
        assert heldout_places({**held, "env_id": "synth-arith-debate", "env_kwargs": {"split": "validation"}}) is None


class TestTold:
    """The told split separates a partner that does not say what is needed from an answerer that
    does not read it."""

    HELD = {"env_id": "referential-game", "env_version": 2, "count": 4, "seed": 1_000_000, "first_index": 0,
            "env_kwargs": {"split": "validation"}}

    def dialogue(self, position: int, said: str, score: float) -> Outcome:
        transcript = ({"speaker": "alice", "text": said}, {"speaker": "bob", "text": "<A>A</A>"})
        return Outcome(position, f"q{position}", "A", score, True, 5, transcript=transcript)

    def targets(self) -> list[str]:
        from optima_eval.heldout import HeldOut

        questions = HeldOut("referential-game", {"split": "validation"}, 4).questions()
        return [q.instance.meta["speaker_view"][q.instance.meta["speaker_target"] - 1] for q in questions]

    def test_the_share_told_and_the_score_on_each_part(self):
        targets = self.targets()
        outcomes = [self.dialogue(0, f"It is the {targets[0]}.", 1.0), self.dialogue(1, f"The {targets[1]}.", 0.0),
                    self.dialogue(2, "I cannot say.", 1.0), self.dialogue(3, "Pick any.", 0.0)]
        told = heldout_told(outcomes, self.HELD)
        assert (told["told"].mean, told["told"].n) == (0.5, 4)
        assert (told["score_told"].mean, told["score_not_told"].mean) == (0.5, 0.5)
        # Naming every object names none: the listener is told nothing, even when its pick is right.
        from optima_eval.heldout import HeldOut

        first = HeldOut("referential-game", {"split": "validation"}, 1).questions()[0]
        everything = ", ".join(first.instance.meta["listener_view"])
        assert heldout_told([self.dialogue(0, everything, 1.0)], {**self.HELD, "count": 1})["told"].mean == 0.0

    def test_no_dialogue_no_split(self):
        assert heldout_told([outcome(0, 1.0)], self.HELD) is None
        debate = {**self.HELD, "env_id": "synth-arith-debate"}
        assert heldout_told([self.dialogue(0, "x", 1.0)], debate) is None


class TestBoard:
    def test_diagnostics_add_solo_and_two_ablation_cells_keyed_to_their_base(self, tmp_path):
        cells = plan_cells(config(tmp_path))
        assert [(c.system.name, c.ablation) for c in cells] == [("mas", None), ("mas", "swap"), ("mas", "remove"),
                                                               ("solo", None)]
        base, swap = cells[0], cells[1]
        assert swap.base.key == base.key and swap.key != base.key
        assert swap.path(tmp_path).parent.name == "ablation-swap"
        # Debate tasks get no solo cell: their agents hold nothing private.
        debate = plan_cells(config(tmp_path, tasks=["synth-arith-debate"]))
        assert [c.system.name for c in debate] == ["mas", "mas", "mas"]

    def test_a_listener_that_uses_the_message_shows_its_whole_score_as_comm_gain(self, tmp_path):
        run = run_leaderboard(config(tmp_path), policy_factory=oracle_pair, log=lambda _: None)
        by = {(r.description["system"], r.description.get("ablation")): r for r in run.results}
        assert by["mas", None].score.mean == 1.0
        assert by["mas", "swap"].score.mean == 0.0 and by["mas", "remove"].score.mean == 0.0
        assert by["mas", "swap"].description["ablates"] == by["mas", None].description["key"]
        assert all(o.transcript for o in by["mas", None].outcomes)
        write_reports(run.results, tmp_path / "board", command="optima leaderboard --diagnostics")
        table = (tmp_path / "board" / "leaderboard_referential-game.md").read_text()
        assert "| no-talk | comm gain (swap) [95% CI] | comm gain (remove) [95% CI] | partner-only (n) |" in table
        solo = by["solo", None].score.mean
        assert f"| {solo:.3f} | +1.000 [+1.000, +1.000] | +1.000 [+1.000, +1.000] | 1.000 (12) | 1.00, 1.000 |" in table
        rows = [line for line in table.splitlines() if line.startswith("| mas") or line.startswith("| solo")]
        assert len(rows) == 2  # ablation cells are columns of their base row, not rows
        index = json.loads((tmp_path / "board" / "leaderboard.json").read_text())
        mas = next(c for c in index["cells"] if c["system"] == "mas" and "ablation" not in c)
        assert mas["diagnostics"]["comm_gain"]["swap"]["mean"] == 1.0
        assert mas["diagnostics"]["told"]["told"]["mean"] == 1.0
        assert {c.get("ablation") for c in index["cells"]} == {None, "swap", "remove"}
        # A second call finds every cell, ablations included, and computes nothing.
        again = run_leaderboard(config(tmp_path), policy_factory=oracle_pair, log=lambda _: None)
        assert not again.computed and len(again.cached) == 4

    def test_swap_donors_are_played_again_for_a_base_cell_without_dialogues(self, tmp_path):
        first = run_leaderboard(config(tmp_path, diagnostics=False), policy_factory=oracle_pair, log=lambda _: None)
        path = first.results[0].path
        data = json.loads(path.read_text())
        for o in data["outcomes"]:
            del o["transcript"]  # a cell computed before cells kept their dialogues
        path.write_text(json.dumps(data))
        lines: list[str] = []
        run = run_leaderboard(config(tmp_path, ablations=["swap"], diagnostics=False), policy_factory=oracle_pair,
                              log=lines.append)
        assert any("keeps no dialogues; playing them again" in line for line in lines)
        swap = next(r for r in run.results if r.description.get("ablation") == "swap")
        assert swap.score.mean == 0.0

    def test_unknown_ablations_are_refused(self, tmp_path):
        from optima_envs.errors import ConfigError

        with pytest.raises(ConfigError, match="unknown ablation"):
            config(tmp_path, ablations=["mute"])


class TestEvalDiagnostics:
    """`optima eval --diagnostics` (`diagnose`) on the scripted oracle pair: all of the score is
    comm gain, the lone listener is at its fixed pick, and every partner-only game was told."""

    def test_the_oracle_pair_talks_for_its_whole_score(self):
        from optima_eval.evaluation import evaluate
        from optima_eval.leaderboard.diagnostics import diagnose

        kwargs = {"split": "validation"}
        policy = oracle_pair("oracle")
        result, records = evaluate(policy, "referential-game", env_kwargs=kwargs, episodes=10, progress=False)
        found = diagnose("referential-game", kwargs, policy, records, seed=1_000_000, first_index=0,
                         max_new_tokens=16)
        assert result.score.mean == 1.0
        assert found["comm_gain"]["swap"]["mean"] == 1.0 and found["comm_gain"]["remove"]["mean"] == 1.0
        assert found["no_talk"]["mean"] < 1.0
        assert found["places"]["partner"]["n"] == 10
        assert (found["told"]["told"]["mean"], found["told"]["score_told"]["mean"]) == (1.0, 1.0)
        assert found["told"]["score_not_told"]["n"] == 0
        from optima_train.cli.eval import _diagnostic_rows

        rows = dict(_diagnostic_rows(found))
        assert rows["partner told what was needed (partner-only questions)"].startswith("1.000")
        assert "score when told" in rows and "score when not told" not in rows


def test_published_negotiation_swaps_say_which_donors_they_took():
    """On the published board, the negotiation pairs re-measured with donors of the same items show
    their swap gain plain; the cells measured before (any next game's messages) are marked."""
    from pathlib import Path

    from optima_eval.leaderboard.cells import read_cell
    from optima_eval.leaderboard.report import _diagnostic_cells, attach_diagnostics, rows_of

    board = Path(__file__).resolve().parents[3] / "benchmarks" / "results" / "leaderboard" / "cells" / "negotiation-game"
    results = [read_cell(p) for p in sorted((board / "mas").rglob("neg-*.json"))]
    rows = {r.model: r for r in attach_diagnostics(rows_of(results))}
    grouped = {r.description["ablates"] for r in results if r.description.get("swap_group") == "item_names"}
    grouped = {label for label, r in rows.items() if r.key in grouped}
    assert grouped and all(not rows[label].diagnostics.any_donor for label in grouped)
    older = [r for label, r in rows.items() if label not in grouped and "swap" in r.diagnostics.gains]
    assert older and all(r.diagnostics.any_donor for r in older)
    assert "(any donor)" in _diagnostic_cells(older[0].diagnostics)
    assert "(any donor)" not in _diagnostic_cells(rows[next(iter(grouped))].diagnostics)
