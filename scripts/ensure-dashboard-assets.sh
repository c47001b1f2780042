#!/usr/bin/env bash
# Install the dashboard's browser assets (Chart.js, pinned in package.json and
# package-lock.json) into node_modules with `npm ci`; installs Debian's npm first when it is
# missing. `berth serve` serves them from there (src/berth/service/dashboard/assets.py).
# Idempotent: `npm ci` reinstalls exactly the locked versions.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "ensure-dashboard-assets: $*" >&2; }

if ! command -v npm >/dev/null 2>&1; then
  SUDO=
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  say "installing Debian's npm"
  export DEBIAN_FRONTEND=noninteractive
  if ! $SUDO apt-get install -y -o DPkg::Lock::Timeout=600 npm >/dev/null; then
    $SUDO apt-get update -o DPkg::Lock::Timeout=600 >/dev/null
    $SUDO apt-get install -y -o DPkg::Lock::Timeout=600 npm >/dev/null
  fi
fi
npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
