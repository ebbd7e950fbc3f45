#!/usr/bin/env bash
# Test setup: make sure a headless Chromium exists for the report's browser test.
# Installs Debian's `chromium` when it is missing and we may use apt-get (root);
# otherwise the browser test skips and says why.
set -u
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure_chromium: installing Debian's chromium for the report's browser test" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends chromium >/dev/null \
    || echo "ensure_chromium: apt-get could not install chromium; the browser test will skip" >&2
else
  echo "ensure_chromium: chromium missing and not root; the browser test will skip" >&2
fi
exit 0
