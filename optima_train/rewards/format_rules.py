"""Format-violation rules: defined in `optima_envs.rewards.format_rules` (pure, usable below the trainers); kept
importable from here."""

from optima_envs.rewards.format_rules import (
    FORMAT_RULES,
    FormatReport,
    FormatRule,
    Utterance,
    Violation,
    check_format,
    empty_violations,
    normalize_for_repeat,
    repeat_violations,
    speaks_for_other_violations,
)

__all__ = ["FORMAT_RULES", "FormatReport", "FormatRule", "Utterance", "Violation", "check_format", "empty_violations", "normalize_for_repeat", "repeat_violations", "speaks_for_other_violations"]
