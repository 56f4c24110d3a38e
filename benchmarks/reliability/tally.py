"""One row of the reliability table: how many cases a probe tried, how many held, how many failed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Failure descriptions kept per row (the first ones), so the report shows what went wrong.
MAX_EXAMPLES = 5


@dataclass
class Tally:
    """Cases of one kind: each either held (the contract was kept) or failed (with why)."""

    probe: str
    case: str
    tried: int = 0
    held: int = 0
    failed: int = 0
    examples: list[str] = field(default_factory=list)
    notes: dict[str, Any] = field(default_factory=dict)

    def ok(self) -> None:
        self.tried += 1
        self.held += 1

    def fail(self, why: str) -> None:
        self.tried += 1
        self.failed += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(why[:500])

    def check(self, passed: bool, why: str) -> None:
        self.ok() if passed else self.fail(why)

    def to_dict(self) -> dict[str, Any]:
        return {"probe": self.probe, "case": self.case, "tried": self.tried, "held": self.held,
                "failed": self.failed, "examples": self.examples, "notes": self.notes}
