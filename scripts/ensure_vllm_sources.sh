#!/usr/bin/env bash
# Put vLLM 0.33.0's Python files (only the .py files of its wheel, nothing compiled, nothing
# installed) in ~/.cache/kvlab/vllm-0.33.0, for the tests that run vLLM's own scheduler and
# allocator on CPU (tests/test_engine_vllm_equal.py; scripts/stub_importer.py). Downloads
# the wheel once with `pip download --no-deps` (about 330 MB), extracts, deletes the wheel.
# Cache folder: $KVLAB_CACHE, default ~/.cache/kvlab. Version: $1, default 0.33.0.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${1:-0.33.0}
CACHE=${KVLAB_CACHE:-$HOME/.cache/kvlab}
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
if [ -f "$CACHE/vllm-$VERSION/vllm/v1/core/sched/scheduler.py" ]; then
    echo "ensure_vllm_sources: vLLM $VERSION sources are in $CACHE/vllm-$VERSION"
    exit 0
fi
"$PY" - "$VERSION" "$CACHE" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, "scripts")
from stub_importer import vllm_sources
print("ensure_vllm_sources: extracted to", vllm_sources(sys.argv[1], Path(sys.argv[2])))
PY
