#!/usr/bin/env bash
# Install llama-cpp-python[server]==0.3.36 (llama.cpp's Python binding and its
# OpenAI-compatible server) into .venv, for `python -m pipeline measure --local-engine` and the
# integration test. A wheel already in the cache folder is used when pip finds it compatible;
# otherwise the wheel is built from source (about 5 minutes on 2 cores; -DGGML_NATIVE=OFF keeps
# it portable across x86-64 machines) and kept in the cache for the next run.
# Cache folder: $KVLAB_WHEEL_CACHE, default ~/.cache/kvlab-wheels.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.3.36
PY=.venv/bin/python
CACHE=${KVLAB_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kvlab-wheels}

if "$PY" -c "import sys, llama_cpp, llama_cpp.server.app; sys.exit(llama_cpp.__version__ != '$VERSION')" 2>/dev/null; then
    echo "ensure_llamacpp: llama-cpp-python $VERSION is installed"
    exit 0
fi
mkdir -p "$CACHE"
install_cached() {
    "$PY" -m pip install -q --find-links "$CACHE" --only-binary llama-cpp-python \
        "llama-cpp-python[server]==$VERSION"
}
if install_cached 2>/dev/null; then
    echo "ensure_llamacpp: installed llama-cpp-python $VERSION from a wheel in $CACHE"
    exit 0
fi
echo "ensure_llamacpp: building llama-cpp-python $VERSION from source (about 5 minutes on 2 cores)" >&2
CMAKE_ARGS="-DGGML_NATIVE=OFF" "$PY" -m pip wheel -q --no-deps -w "$CACHE" "llama-cpp-python==$VERSION"
install_cached
echo "ensure_llamacpp: built and installed llama-cpp-python $VERSION (wheel kept in $CACHE)"
