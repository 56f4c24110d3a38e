"""Re-scoring stored answers: new scores for outcomes and samples, failures kept apart."""

from __future__ import annotations

from optima_envs.errors import ScoringError
from optima_eval.leaderboard.rescore import rescore_outcomes
from optima_eval.systems import Outcome, Sample


def strict(answer: str, gold: str) -> float:
    if gold == "unscorable":
        raise ScoringError("gold cannot be read")
    return float(answer == gold)


def test_outcomes_and_samples_are_scored_again_and_changes_counted():
    outcomes = [
        Outcome(0, "q0", "2 * 3", 1.0, True, 9, samples=(Sample("2 * 3", 1.0, True, 4), Sample(None, 0.0, True, 5))),
        Outcome(1, "q1", "7", 1.0, True, 3),
        Outcome(2, "q2", None, None, False, 6, infra_failure=True, error="server down"),
        Outcome(3, "q3", "x", 0.0, True, 2),
    ]
    rescored, changed = rescore_outcomes(outcomes, {0: "6", 1: "7", 2: "1", 3: "unscorable"}, strict)
    assert changed == 2  # q0 right -> wrong; q3 scored -> scoring failure
    assert (rescored[0].score, [s.score for s in rescored[0].samples]) == (0.0, [0.0, 0.0])
    assert rescored[1] == outcomes[1]
    assert rescored[2] == outcomes[2]  # an infra failure stays one, never scored
    assert (rescored[3].score, rescored[3].score_ok) == (None, False)
    assert rescored[3].score_error == "ScoringError: gold cannot be read"


def test_a_sample_alone_can_change():
    outcome = Outcome(0, "q0", "6", 1.0, True, 9, samples=(Sample("6", 1.0, True, 4), Sample("2 * 3", 1.0, True, 5)))
    rescored, changed = rescore_outcomes([outcome], {0: "6"}, strict)
    assert changed == 0 and rescored != [outcome]  # the final score holds, a sample's does not
    assert [s.score for s in rescored[0].samples] == [1.0, 0.0]
