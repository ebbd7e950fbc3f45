#!/usr/bin/env bash
# Regenerate docs/img/simulate-report.png and docs/img/fleet-report.png: run `simulate
# --gpu CAPS --report` and `fleet` on small patterns (about 20 s on 2 cores), then
# screenshot each page in headless Chromium (scripts/ensure_chromium.sh installs it).
# Usage: scripts/screenshot_reports.sh [PYTHON]   (default .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
python=${1:-.venv/bin/python}
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "screenshot_reports: no chromium (scripts/ensure_chromium.sh installs it)" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pattern=(--pattern multi-tenant --users 8 --num-documents 4 --document-length 1000
         --system-prompt-length 500 --repeat-count 2 --output-tokens 64
         --latency roofline --gpu-type L4)
"$python" -m pipeline simulate "${pattern[@]}" --model qwen2.5-7b --gpu 2000,40000 \
  --gpu-steps 6 --rate 1,4,16 --cpu 16000 --out "$work/simulate" \
  --report "$work/simulate.html" >/dev/null
"$python" -m pipeline fleet "${pattern[@]}" --router round-robin,kv-cost --instances 2 \
  --model qwen2.5-7b --gpu 200blocks,800blocks,2000blocks --speed 1,4,16,64 --jobs 2 \
  --out "$work/fleet" >/dev/null
shot() {   # shot PAGE PNG: the first 1400 x 1700 pixels of PAGE
  "$browser" --headless --no-sandbox --disable-gpu --disable-background-networking \
    --disable-component-update --user-data-dir="$work/profile" --virtual-time-budget=5000 \
    --hide-scrollbars --window-size=1400,1700 --screenshot="$2" "file://$1" \
    >/dev/null 2>&1
  echo "wrote $2 ($(wc -c <"$2") bytes)"
}
mkdir -p docs/img
shot "$work/simulate.html" docs/img/simulate-report.png
shot "$work/fleet/report.html" docs/img/fleet-report.png
