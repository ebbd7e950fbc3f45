#!/usr/bin/env bash
# Put SGLang 0.5.23's Python files (only the .py files of its wheel, nothing compiled, nothing
# installed) in ~/.cache/kvlab/sglang-0.5.23, for the tests that run SGLang's own RadixCache on
# CPU (tests/test_sglang_radix.py; scripts/sglang_reference.py; scripts/stub_importer.py).
# Downloads the wheel once with `pip download --no-deps`, extracts its sglang/*.py files,
# deletes the wheel. Idempotent: does nothing when the sources are there. Never writes into
# the repository. Cache folder: $KVLAB_CACHE, default ~/.cache/kvlab. Version: $1, default 0.5.23.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${1:-0.5.23}
CACHE=${KVLAB_CACHE:-$HOME/.cache/kvlab}
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
if [ -f "$CACHE/sglang-$VERSION/sglang/srt/mem_cache/radix_cache.py" ]; then
    echo "ensure_sglang_sources: SGLang $VERSION sources are in $CACHE/sglang-$VERSION"
    exit 0
fi
"$PY" - "$VERSION" "$CACHE" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, "scripts")
from stub_importer import wheel_sources
target = wheel_sources("sglang", sys.argv[1], Path(sys.argv[2]),
                       "sglang/srt/mem_cache/radix_cache.py")
print("ensure_sglang_sources: extracted to", target)
PY
