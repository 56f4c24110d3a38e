#!/usr/bin/env bash
# The main job on the embedded default: play a few episodes and show transcripts and token costs.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/venv.sh" ""
exec optima demo "$@"
