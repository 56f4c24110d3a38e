"""Format-diverse instructions for the first training iteration (docs/design.md section 2).

Iteration 0 samples dialogues with one of these added to the system prompt, then trains on the
plain prompt, so the model internalises compact formats instead of needing to be told.
"""

FORMAT_POOL: tuple[str, ...] = (
    "Write every message as a small Markdown table with columns 'fact' and 'value'.",
    "Write every message as key: value lines, one fact per line, no full sentences.",
    "Write every message as JSON, e.g. {\"facts\": [...], \"answer\": null}.",
    "Write every message as short pseudocode, e.g. founder(X) = Y; born(Y) = Z.",
    "Use abbreviations and drop articles and filler words; be telegraphic.",
    "Write every message as a bulleted list of at most three short bullets.",
    "Write every message as subject -> relation -> object triples, one per line.",
    "Keep every message under 15 words.",
    "Start every message with what you need ('NEED:') and what you know ('HAVE:').",
    "Write every message as a numbered list of facts, then a question if you still need one.",
    "Write every message as a YAML mapping with keys 'known' and 'ask'.",
    "Write every message as a single line of comma-separated facts.",
)

CONCISE_INSTRUCTION = "Be concise: share only what is needed, in as few words as possible."
