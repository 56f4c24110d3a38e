"""The negotiation no-talk ceiling (blind proposals) and the proposal fit against both tables."""

from __future__ import annotations

import itertools
import statistics

import numpy as np
import pytest

from benchmarks.negotiation_ceiling import blind_score, blind_take, partner_tables
from benchmarks.negotiation_proposals import first_proposal, fit, item_rows
from optima_envs.tasks.negotiation import Game, NegotiationConfig, NegotiationSource, _value_vectors

# Alice: 3*2 + 1*2 + 2*1 = 10; Bob: 0 + 1*4 + 2*3 = 10. Best: books to Alice, hat and balls to Bob.
GAME = Game(("book", "hat", "ball"), (3, 1, 2), ((2, 2, 1), (0, 4, 3)))


def test_partner_tables_are_the_ones_the_game_draws():
    tables = partner_tables(GAME.counts, 10, GAME.values[0])
    assert GAME.values[1] in tables and GAME.values[0] not in tables
    assert all(sum(c * v for c, v in zip(GAME.counts, t)) == 10 for t in tables)
    assert all(a or b for t in tables for a, b in zip(GAME.values[0], t))
    assert len(tables) < len(list(_value_vectors(GAME.counts, 10)))


def test_the_blind_take_maximises_the_expected_score_over_those_tables():
    own = GAME.values[0]
    worlds = [Game(GAME.items, GAME.counts, (own, v)) for v in partner_tables(GAME.counts, 10, own)]
    expected = {t: statistics.fmean(w.score(t) for w in worlds)
                for t in itertools.product(*(range(c + 1) for c in GAME.counts))}
    assert expected[blind_take(GAME, 0)] == max(expected.values())
    assert blind_score(GAME, 0) == GAME.score(blind_take(GAME, 0))
    assert blind_score(GAME, 1) == GAME.score(GAME.rest(blind_take(GAME, 1)))
    assert 0 < blind_score(GAME, 0) <= 1


def test_the_first_valid_proposal_says_who_made_it_and_whether_it_had_read_the_partner():
    transcript = [{"speaker": "alice", "text": "My values: book=2 hat=2 ball=1."},
                  {"speaker": "bob", "text": "<A>propose book=9 hat=0 ball=0</A>"},
                  {"speaker": "alice", "text": "<A>propose book=3 hat=0 ball=0</A>"},
                  {"speaker": "bob", "text": "<A>accept</A>"}]
    assert first_proposal(transcript, ["alice", "bob"], GAME) == (0, (3, 0, 0), True)
    assert first_proposal(transcript[1:], ["alice", "bob"], GAME) == (0, (3, 0, 0), True)
    assert first_proposal(transcript[2:], ["alice", "bob"], GAME) == (0, (3, 0, 0), False)
    assert first_proposal(transcript[:2], ["alice", "bob"], GAME) is None


def test_item_rows_are_from_the_proposers_seat():
    assert item_rows(GAME, 1, (0, 1, 2)) == [(1 / 3, 0, 2, 0.0), (1.0, 4, 2, 1.0), (0.5, 3, 1, 1.0)]


def test_the_fit_recovers_known_weights_and_separates_informed_from_blind():
    rng = np.random.default_rng(0)
    games = [[(1 / c, o, p, 0.1 + 0.2 / c + 0.05 * o - 0.08 * p) for c, o, p in
              zip(rng.integers(1, 5, 3), rng.integers(0, 10, 3), rng.integers(0, 10, 3))] for _ in range(50)]
    assert fit(games) == pytest.approx([0.1, 0.2, 0.05, -0.08], abs=1e-9)


def test_on_real_games_the_best_split_weighs_the_partner_and_a_blind_proposal_hardly_does():
    source = NegotiationSource(NegotiationConfig(split="validation"))
    games = [Game.of(source.get(i)) for i in range(60)]
    best = fit([item_rows(g, 1, g.rest(g.best_take0())) for g in games])
    blind = fit([item_rows(g, 1, blind_take(g, 1)) for g in games])
    assert best[2] > 0 and best[3] < 0
    assert blind[2] > 0 and abs(blind[3]) < abs(best[3]) / 2
