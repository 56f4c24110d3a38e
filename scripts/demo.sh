#!/usr/bin/env bash
# The main job on the embedded default: the untrained and the trained pair (a shipped adapter) play
# the same held-out referential games side by side; transcripts, per-turn tokens, scores.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/venv.sh" ""
exec optima demo "$@"
