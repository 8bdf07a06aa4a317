#!/usr/bin/env bash
# The operator console's browser tests (tests/console): Playwright for Python driving Debian's
# chromium through executable_path (Playwright's own browser download is not used).
set -euo pipefail
cd "$(dirname "$0")/../.."
.venv/bin/pip install -q -e '.[service,console-test]'
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
  else
    echo "setup 70-console: not root or no apt-get; the browser tests will be skipped" >&2
  fi
fi
