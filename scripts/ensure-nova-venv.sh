#!/usr/bin/env bash
# Make a virtual environment holding the real Nova 34 scheduler code (PyPI `nova`, exact pin in
# scripts/nova/requirements.txt) for the differential test (tests/nova/, docs/scheduling.md).
# It lives outside the repository, in ${BERTH_NOVA_HOME:-$HOME/.cache/berth-nova}; a stamp holding
# the requirements' checksum makes the script idempotent (a changed pin reinstalls). Prints the
# venv's python on stdout.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REQS="$HERE/nova/requirements.txt"
USER_HOME=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
HOME_DIR=${BERTH_NOVA_HOME:-$USER_HOME/.cache/berth-nova}
VENV="$HOME_DIR/venv"
PY=${PYTHON:-python3}

say() { echo "ensure-nova-venv: $*" >&2; }

want=$(sha256sum "$REQS" | cut -d' ' -f1)
stamp="$VENV/.berth-requirements"
if [ -x "$VENV/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "$VENV/bin/python"
  exit 0
fi

mkdir -p "$HOME_DIR"
# One installer at a time (parallel test workers may all ask).
exec 9>"$HOME_DIR/.lock"
flock 9
if [ -x "$VENV/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  echo "$VENV/bin/python"
  exit 0
fi
if ! "$PY" -m venv --help >/dev/null 2>&1 || ! "$PY" -c 'import ensurepip' 2>/dev/null; then
  say "python3 venv support missing; installing python3-venv from Debian's packages"
  apt-get update -qq && apt-get install -y -qq python3-venv >&2
fi
say "creating $VENV with $(tr '\n' ' ' <"$REQS" | sed 's/#[^=]*$//' | grep -o 'nova==[^ ]*')"
rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip >&2
"$VENV/bin/pip" install --quiet -r "$REQS" >&2
"$VENV/bin/python" -c 'import nova.scheduler.host_manager, nova.scheduler.filters' >&2
echo "$want" >"$stamp"
say "ready"
echo "$VENV/bin/python"
