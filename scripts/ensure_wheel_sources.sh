#!/usr/bin/env bash
# Put one package's Python files (only the .py files of its wheel, nothing compiled, nothing
# installed) in $KVLAB_CACHE/PACKAGE-VERSION (default cache ~/.cache/kvlab), for the tests that
# run an engine's own code on CPU. Downloads the wheel once with `pip download --no-deps`,
# extracts, deletes the wheel; does nothing when MARKER (a file under the package) is there.
# Never writes into the repository. Usage: ensure_wheel_sources.sh PACKAGE VERSION MARKER
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGE=$1 VERSION=$2 MARKER=$3
CACHE=${KVLAB_CACHE:-$HOME/.cache/kvlab}
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
if [ -f "$CACHE/$PACKAGE-$VERSION/$MARKER" ]; then
    echo "ensure_sources: $PACKAGE $VERSION sources are in $CACHE/$PACKAGE-$VERSION"
    exit 0
fi
"$PY" - "$PACKAGE" "$VERSION" "$CACHE" "$MARKER" <<'PY'
import sys
from pathlib import Path
sys.path.insert(0, "scripts")
from stub_importer import wheel_sources
package, version, cache, marker = sys.argv[1:]
print("ensure_sources: extracted to", wheel_sources(package, version, Path(cache), marker))
PY
