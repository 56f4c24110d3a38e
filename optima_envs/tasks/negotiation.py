"""`negotiation-game`: a mixed-motive game: two agents split a pool of items.

Each agent holds private values per item type (every item goes to one agent). Moves are read
from `<A>...</A>` (strictly, no fallbacks):

- `<A>propose book=2 hat=0 ball=1</A>`: the speaker takes these counts (every item type listed
  once, as `item=N` or `item: N`, names in any case, a plural `s` allowed) and the partner
  gets the rest. The latest proposal, as written, is the one on the table: a malformed one or
  one that asks for more than the pool stays there, unacceptable, until the next proposal.
- `<A>accept</A>`: accepts the partner's proposal on the table and ends the game.

Score (every agent's reward, so the team is rewarded, while each agent still sees only its own
values): `(u_1/U_1 + u_2/U_2) / max`, where `u_i` is what agent i's share is worth to it, `U_i`
what the whole pool is worth to it, and `max` the largest value of that sum over all splits
(give each item to whoever values it more, relative to its pool). 0 without a deal: running
out of turns, accepting with no partner proposal on the table (or one's own), or accepting an
invalid proposal. `infos` add `utilities` (each agent's points), `deal` and `deal_error`.

Instance `i` of a split comes from `np.random.default_rng([seed, split, i])`: counts 1 to
`max_count` per item type and, per agent, value vectors drawn uniformly among those that make the
whole pool worth `total_value` (as in Lewis et al. 2017, "Deal or No Deal?"), redrawn until the
two tables differ and every item is worth something to someone. `gold` is a best split written
as the first seat's proposal (what `metric`, which scores one proposal as the first seat's,
rates 1.0).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Literal, Mapping, Sequence

import numpy as np

from optima_envs.core.places import always_partner
from optima_envs.core.task import DialogueOutcome, Role, Task
from optima_envs.core.turn_patterns import escape
from optima_envs.core.types import Evidence, Message, TaskInstance
from optima_envs.errors import ConfigError
from optima_envs.scoring import extract_tag
from optima_envs.tasks.synth_hop import SPLITS, UNLIMITED

ITEM_NAMES = ("book", "hat", "ball", "lamp", "mug", "coin")
NEGOTIATOR = Role("negotiator", "You and your partner must agree on how to split a pool of items.")


@dataclass(frozen=True)
class NegotiationConfig:
    """Knobs: item_types (how many kinds of item), max_count (most items of one kind),
    total_value (what the whole pool is worth to each agent), and sampled_turns: what a
    constrained sampler may write (never read by unconstrained play or the score): "moves", one
    move a turn; "values_first", the opener states its own value table and makes no move, and
    every later turn is a move, optionally after the speaker's table (`values_first_pattern`);
    "values_then_split", a three-turn deal whose only sampled choice is the split: the opener states
    its table, the second speaker proposes a whole-item split, the opener accepts
    (`values_then_split_pattern`)."""

    item_types: int = 3
    max_count: int = 4
    total_value: int = 10
    split: Literal["train", "validation", "test"] = "train"
    seed: int = 0
    sampled_turns: Literal["moves", "values_first"] = "moves"

    def __post_init__(self) -> None:
        if not 2 <= self.item_types <= 4:
            raise ConfigError(f"negotiation-game: item_types must be in [2, 4], got {self.item_types}")
        if not 1 <= self.max_count <= 10:
            raise ConfigError(f"negotiation-game: max_count must be in [1, 10], got {self.max_count}")
        if not 2 <= self.total_value <= 30:
            raise ConfigError(f"negotiation-game: total_value must be in [2, 30], got {self.total_value}")
        if self.split not in SPLITS:
            raise ConfigError(f"negotiation-game: split must be one of {sorted(SPLITS)}, got {self.split!r}")
        if self.sampled_turns not in TURN_PATTERNS:
            raise ConfigError(f"negotiation-game: sampled_turns must be one of {list(TURN_PATTERNS)}, "
                              f"got {self.sampled_turns!r}")


@dataclass(frozen=True)
class Game:
    """One instance's pool and private values, read back from `TaskInstance.meta`."""

    items: tuple[str, ...]
    counts: tuple[int, ...]
    values: tuple[tuple[int, ...], tuple[int, ...]]

    @classmethod
    def of(cls, instance: TaskInstance) -> "Game":
        m = instance.meta
        return cls(tuple(m["items"]), tuple(m["counts"]), (tuple(m["values"][0]), tuple(m["values"][1])))

    def worth(self, seat: int, take: Sequence[int]) -> int:
        return sum(v * n for v, n in zip(self.values[seat], take))

    def rest(self, take: Sequence[int]) -> tuple[int, ...]:
        return tuple(c - n for c, n in zip(self.counts, take))

    def joint(self, take0: Sequence[int]) -> Fraction:
        """u_1/U_1 + u_2/U_2 when seat 0 takes `take0`."""
        shares = (take0, self.rest(take0))
        return sum((Fraction(self.worth(s, shares[s]), self.worth(s, self.counts)) for s in (0, 1)), Fraction(0))

    def best_take0(self) -> tuple[int, ...]:
        """A split that maximises `joint`: each item type to the seat that values it more
        relative to its pool (seat 0 on ties)."""
        pools = (self.worth(0, self.counts), self.worth(1, self.counts))
        return tuple(c if Fraction(v0, pools[0]) >= Fraction(v1, pools[1]) else 0
                     for c, v0, v1 in zip(self.counts, *self.values))

    def score(self, take0: Sequence[int]) -> float:
        return float(self.joint(take0) / self.joint(self.best_take0()))


class NegotiationSource:
    """Indexed generator of games (len is effectively unlimited)."""

    def __init__(self, config: NegotiationConfig):
        self.config = config

    def __len__(self) -> int:
        return UNLIMITED

    def get(self, index: int) -> TaskInstance:
        c = self.config
        rng = np.random.default_rng([c.seed, SPLITS[c.split], index])
        picked = rng.choice(len(ITEM_NAMES), size=c.item_types, replace=False)
        items = tuple(ITEM_NAMES[int(k)] for k in sorted(picked))
        while True:
            counts = tuple(int(n) for n in rng.integers(1, c.max_count + 1, size=c.item_types))
            options = list(_value_vectors(counts, c.total_value))
            if not options:
                continue
            first, second = (options[int(k)] for k in rng.integers(len(options), size=2))
            if first != second and all(a or b for a, b in zip(first, second)):
                break
        game = Game(items, counts, (first, second))
        pool = ", ".join(f"{n} {item}" for item, n in zip(items, counts))
        return TaskInstance(instance_id=f"negotiation-{c.split}-{index}", question=f"Split the pool: {pool}.",
                            gold=f"propose {format_take(items, game.best_take0())}",
                            meta={"items": items, "counts": counts, "values": (first, second)})


def _value_vectors(counts: Sequence[int], total: int, prefix: tuple[int, ...] = ()):
    """Every vector of non-negative integer values with sum(count * value) == total, in order."""
    if len(prefix) == len(counts) - 1:
        if total % counts[-1] == 0:
            yield (*prefix, total // counts[-1])
        return
    for v in range(total // counts[len(prefix)] + 1):
        yield from _value_vectors(counts, total - v * counts[len(prefix)], (*prefix, v))


# --- reading moves -------------------------------------------------------------------------

@dataclass(frozen=True)
class Accept:
    """Accept the partner's proposal on the table."""


@dataclass(frozen=True)
class Proposal:
    """The speaker takes `take` (one count per item type, in the game's item order)."""

    take: tuple[int, ...]


@dataclass(frozen=True)
class InvalidMove:
    """A move that is neither: why it could not be read, or why the pool cannot honour it."""

    reason: str


Move = Accept | Proposal | InvalidMove

_ACCEPT = re.compile(r"[\s.!]*accept[\s.!]*", re.IGNORECASE)
_PROPOSE = re.compile(r"\s*propose\b[\s:]*(?P<body>.*)", re.IGNORECASE | re.DOTALL)
_PAIR = re.compile(r"(?P<item>[A-Za-z]+)\s*[=:]\s*(?P<count>[^\s,;]*)")
_SEPARATORS = re.compile(r"[\s,;]*")


def is_accept(move: str) -> bool:
    """"accept" alone (any case, with trailing punctuation): the one move that ends the game."""
    return _ACCEPT.fullmatch(move) is not None


def parse_move(move: str, items: Sequence[str], counts: Sequence[int]) -> Move:
    """Read one move (the content of `<A>...</A>`) against the game's items and pool.

    Returns Accept, a Proposal that the pool can honour, or an InvalidMove saying what is wrong:
    not a move, unreadable text, an unknown, repeated or missing item, a count that is not a
    whole number, or more of an item than the pool holds.
    """
    if is_accept(move):
        return Accept()
    match = _PROPOSE.fullmatch(move)
    if match is None:
        return InvalidMove(f"a move is 'accept' or 'propose {move_template(items)}', got {move!r}")
    body, position, take = match.group("body").rstrip(" \t\n."), 0, {}
    for pair in _PAIR.finditer(body):
        if not _SEPARATORS.fullmatch(body, position, pair.start()):
            return InvalidMove(f"unreadable text {body[position:pair.start()].strip()!r} in the proposal")
        position = pair.end()
        name, count = pair.group("item").casefold(), pair.group("count")
        if name not in items and name.endswith("s") and name[:-1] in items:
            name = name[:-1]
        if name not in items:
            return InvalidMove(f"unknown item {pair.group('item')!r}; the items are {', '.join(items)}")
        if name in take:
            return InvalidMove(f"item {name!r} is listed twice")
        if not count.isdecimal() or not count.isascii():
            return InvalidMove(f"{name}={count}: a count is a whole number >= 0")
        take[name] = int(count)
    if not _SEPARATORS.fullmatch(body, position):
        return InvalidMove(f"unreadable text {body[position:].strip()!r} in the proposal")
    missing = [item for item in items if item not in take]
    if missing:
        return InvalidMove(f"a proposal lists every item ({', '.join(items)}); missing: {', '.join(missing)}")
    for item, available in zip(items, counts):
        if take[item] > available:
            return InvalidMove(f"asks for {take[item]} {item} but the pool has {available}")
    return Proposal(tuple(take[item] for item in items))


def format_take(items: Sequence[str], counts: Sequence[int]) -> str:
    """"book=2 hat=0 ball=1", the proposal syntax."""
    return " ".join(f"{item}={n}" for item, n in zip(items, counts))


def move_template(items: Sequence[str]) -> str:
    """"book=N hat=N ball=N", for prompts and error messages."""
    return " ".join(f"{item}=N" for item in items)


def move_pattern(instance: TaskInstance, *, accept: bool = True, whole: bool = False) -> str:
    """A reply that is one well-formed move and nothing else: `<A>accept</A>` (unless `accept` is
    false), or a proposal listing every item once, in the game's order, with a count the pool can
    honour (with `whole`, 0 or the pool's count: each item type goes wholly to one side, the form
    of every best split, `Game.best_take0`)."""
    game = Game.of(instance)

    def count(n: int) -> str:
        if whole:
            return f"(0|{n})"
        return f"[0-{n}]" if n < 10 else "(10|[0-9])"

    counts = " ".join(f"{item}={count(n)}" for item, n in zip(game.items, game.counts))
    return f"<A>({'accept|' if accept else ''}propose {counts})</A>"


def values_statement(table: str) -> str:
    """"My values: book=2 hat=0 ball=1.", a speaker's own value table said to its partner."""
    return f"My values: {table}."


def values_first_pattern(instance: TaskInstance, evidence: Sequence[str], heard: Sequence[str] = ()) -> str:
    """A constrained turn that makes value tables part of the exploration: the opener (who has
    read nothing from its partner) states its own table verbatim and makes no move, so the
    second speaker's first move is sampled with both tables in view; every later turn is one
    move, optionally after the speaker's own table, and `accept` is offered only once the partner
    has made a valid proposal (an accept before that ends the game at 0, and the untrained model,
    offered it, takes it in most games). `evidence` is the speaker's rendered view
    (`Your value per item: book=2 ...`), whose table is the one it may state.

    Raises:
        ValueError: the evidence holds neither seat's value table.
    """
    game = Game.of(instance)
    statement = _stated_table(game, evidence)
    if not heard:
        return statement
    return f"({statement} )?{move_pattern(instance, accept=_partner_proposed(game, heard))}"


def values_then_split_pattern(instance: TaskInstance, evidence: Sequence[str], heard: Sequence[str] = ()) -> str:
    """A constrained turn whose only sampled choice is the split, so that every sampled dialogue
    is a deal and the search spends itself on which one: the opener states its own table verbatim
    (as in `values_first_pattern`), the second speaker, having read it, proposes a split that gives
    each item type wholly to one side (every best split has that form), and the opener accepts.
    Selection then keeps the dialogues whose split fits both tables, which the second speaker can
    only find by reading the first.

    Raises:
        ValueError: on the opener's turn, its evidence holds neither seat's value table.
    """
    game = Game.of(instance)
    if not heard:
        return _stated_table(game, evidence)
    if _partner_proposed(game, heard):
        return escape("<A>accept</A>")
    return move_pattern(instance, accept=False, whole=True)


def _stated_table(game: Game, evidence: Sequence[str]) -> str:
    """The regex of the speaker's own table said verbatim (`values_statement`)."""
    tables = [format_take(game.items, game.values[s]) for s in (0, 1)]
    own = next((t for t in tables if any(e.endswith(t) for e in evidence)), None)
    if own is None:
        raise ValueError(f"no value table of this game in the speaker's evidence {list(evidence)!r}")
    return escape(values_statement(own))


def _partner_proposed(game: Game, heard: Sequence[str]) -> bool:
    return any(isinstance(_tagged_move(text, game), Proposal) for text in heard)


def _tagged_move(text: str, game: Game) -> Move | None:
    answer = extract_tag(text, strict=True).answer
    return None if answer is None else parse_move(answer, game.items, game.counts)


# --- scoring the dialogue ------------------------------------------------------------------

def accept_ends(history: Sequence[Message], message: Message) -> str | None:
    """An accept always ends the game; whether it made a deal is for the score to say."""
    return "accepted" if message.answer is not None and is_accept(message.answer) else None


def score_negotiation(instance: TaskInstance, agents: Sequence[str], messages: Sequence[Message]) -> DialogueOutcome:
    """The deal the dialogue ended on (the proposal on the table when the partner accepted),
    scored as the module docstring says; no deal scores 0 and says why in `deal_error`."""
    game = Game.of(instance)
    table: tuple[int, Proposal | InvalidMove] | None = None
    for message in messages:
        if message.answer is None:
            continue
        seat = agents.index(message.speaker)
        move = parse_move(message.answer, game.items, game.counts)
        if not isinstance(move, Accept):
            table = (seat, move)
            continue
        if table is None:
            return _no_deal(agents, "accepted with no proposal on the table")
        if table[0] == seat:
            return _no_deal(agents, "accepted its own proposal; only the partner's can be accepted")
        if isinstance(table[1], InvalidMove):
            return _no_deal(agents, f"accepted an invalid proposal: {table[1].reason}")
        shares = {table[0]: table[1].take, 1 - table[0]: game.rest(table[1].take)}
        deal = {agents[s]: dict(zip(game.items, shares[s])) for s in (0, 1)}
        answer = "; ".join(f"{agents[s]}: {format_take(game.items, shares[s])}" for s in (0, 1))
        return DialogueOutcome(score=game.score(shares[0]), answer=answer, details={
            "utilities": {agents[s]: game.worth(s, shares[s]) for s in (0, 1)}, "deal": deal, "deal_error": None})
    return _no_deal(agents, "no proposal was accepted")


def _no_deal(agents: Sequence[str], reason: str) -> DialogueOutcome:
    return DialogueOutcome(score=0.0, answer=None, details={
        "utilities": {a: 0 for a in agents}, "deal": None, "deal_error": reason})


def score_proposal(answer: str, instance: TaskInstance) -> float:
    """One answer alone (a single agent playing seat 0): the score of the split it proposes."""
    return score_seat_proposal(answer, instance, 0)


def score_seat_proposal(answer: str, instance: TaskInstance, seat: int) -> float:
    """The score of the split seat `seat` proposes alone (it takes what it names, the partner the
    rest), as if the partner accepted it; anything but a valid proposal scores 0."""
    game = Game.of(instance)
    move = parse_move(answer, game.items, game.counts)
    if not isinstance(move, Proposal):
        return 0.0
    return game.score(move.take if seat == 0 else game.rest(move.take))


# --- what each seat sees -------------------------------------------------------------------

def deal_values(instance: TaskInstance, num_agents: int, rng: np.random.Generator) -> tuple[tuple[Evidence, ...], ...]:
    """Each seat its own value table (fixed by the instance; the RNG is not used)."""
    game = Game.of(instance)
    return tuple((Evidence(format_take(game.items, game.values[s]), title="Your value per item"),) for s in (0, 1))


@dataclass(frozen=True)
class NegotiationPrompts:
    def roles(self, num_agents: int) -> tuple[Role, ...]:
        if num_agents != 2:
            raise ConfigError(f"negotiation-game has two seats, got num_agents={num_agents}")
        return NEGOTIATOR, NEGOTIATOR

    def system_prompt(self, *, agent: str, agents: Sequence[str], role: Role, instance: TaskInstance,
                      evidence: Sequence[Evidence], format_instruction: str | None) -> str:
        game = Game.of(instance)
        partner = next(a for a in agents if a != agent).capitalize()
        seat = list(agents).index(agent)
        lines = [
            f"You are {agent.capitalize()}, negotiating with {partner}. {instance.question} Every item goes to one "
            "of you.",
            f"{evidence[0].render()} (the whole pool is worth {game.worth(seat, game.counts)} to you). {partner} has "
            "private values of their own.",
            f"You both get the same reward: the share of your pool's worth that you get plus the share of "
            f"{partner}'s that {partner} gets, compared with the best split possible.",
            f"To propose, write <A>propose {move_template(game.items)}</A> with how many of each item YOU take "
            f"({partner} gets the rest; list every item). To accept {partner}'s latest proposal, write "
            "<A>accept</A>: that ends the game. Accepting when there is no proposal from your partner, or one "
            "that is invalid, ends the game with reward 0; so does running out of turns.",
        ]
        if format_instruction:
            lines.append(format_instruction)
        return "\n".join(lines)


# --- a scripted oracle (for tests) ---------------------------------------------------------

def oracle_policy(instance: TaskInstance, agents: Sequence[str]) -> Callable[[Mapping[str, Any]], str]:
    """Optimal play for any seat, given the instance (so both value tables, which no real player
    has: a test oracle). It accepts a partner proposal that scores 1.0 and otherwise proposes
    its side of the best split; two of them agree in two turns."""
    game = Game.of(instance)
    best = game.best_take0()

    def policy(observation: Mapping[str, Any]) -> str:
        seat = list(agents).index(observation["agent"])
        for said in reversed(observation["transcript"]):
            move = extract_tag(said["text"], strict=True).answer
            if move is None or is_accept(move):
                continue
            offer = parse_move(move, game.items, game.counts)
            if said["speaker"] != observation["agent"] and isinstance(offer, Proposal):
                take0 = offer.take if seat == 1 else game.rest(offer.take)
                if game.score(take0) == 1.0:
                    return "Deal. <A>accept</A>"
            break
        mine = best if seat == 0 else game.rest(best)
        return f"I suggest this split. <A>propose {format_take(game.items, mine)}</A>"

    return policy


#: What each `sampled_turns` setting constrains a sampled turn to (None: one move, `answer_pattern`).
TURN_PATTERNS = {"moves": None, "values_first": values_first_pattern, "values_then_split": values_then_split_pattern}


def item_names(instance: TaskInstance) -> tuple[str, ...]:
    """The game's item names: its swap group, as every move and value table spells them out."""
    return tuple(instance.meta["items"])


def make_task(*, item_types: int = 3, max_count: int = 4, total_value: int = 10, split: str = "train",
              seed: int = 0, sampled_turns: str = "moves") -> Task:
    """Build the `negotiation-game` task; the keyword arguments are the `NegotiationConfig` knobs."""
    config = NegotiationConfig(item_types=item_types, max_count=max_count, total_value=total_value,
                               split=split, seed=seed, sampled_turns=sampled_turns)
    return Task(
        name="negotiation-game",
        family="game",
        source=NegotiationSource(config),
        split_evidence=deal_values,
        prompts=NegotiationPrompts(),
        extract=functools.partial(extract_tag, strict=True),
        metric=score_proposal,
        termination=accept_ends,
        answer_format="<A>propose item=N ...</A> or <A>accept</A>",
        max_turns=10,
        score_dialogue=score_negotiation,
        num_agents=2,
        answer_pattern=move_pattern,
        turn_pattern=TURN_PATTERNS[config.sampled_turns],
        answer_place=always_partner,
        solo_metric=score_seat_proposal,
        swap_group=item_names,
    )
