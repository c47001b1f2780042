#!/usr/bin/env bash
# Make Debian's Chromium available at /usr/bin/chromium for the dashboard's browser tests
# (tests/dashboard/test_browser.py drives it with Playwright's `executable_path`; Playwright's
# own browser download is never used). Installs the `chromium` package when it is missing
# (as root, or through sudo); does nothing when it is there. Idempotent.
set -euo pipefail

BROWSER=/usr/bin/chromium

say() { echo "ensure-chromium: $*" >&2; }

if [ -x "$BROWSER" ]; then
  exit 0
fi

SUDO=
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 || { say "not root and no sudo: install the chromium package"; exit 1; }
  SUDO=sudo
fi

# apt holds a lock: a second `make test` waits for the first one's install.
say "installing Debian's chromium"
export DEBIAN_FRONTEND=noninteractive
if ! $SUDO apt-get install -y -o DPkg::Lock::Timeout=600 chromium >/dev/null; then
  $SUDO apt-get update -o DPkg::Lock::Timeout=600 >/dev/null
  $SUDO apt-get install -y -o DPkg::Lock::Timeout=600 chromium >/dev/null
fi
[ -x "$BROWSER" ] || { say "chromium installed but $BROWSER is missing"; exit 1; }
say "$("$BROWSER" --version 2>/dev/null || echo chromium) ready"
