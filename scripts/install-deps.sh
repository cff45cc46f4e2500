#!/bin/sh
# Installs the Debian packages llmkit's build and tests need.  Idempotent: packages
# already present are left alone.
#   scripts/install-deps.sh           install what is missing (root, or via sudo)
#   scripts/install-deps.sh --check   exit 0 when nothing is missing, 1 otherwise
#   scripts/install-deps.sh --ref     also python3-torch (regenerates tests/ref fixtures)
set -u
PKGS="make gcc g++ libyaml-dev zlib1g-dev libopenblas-dev libcmocka-dev libpcre2-dev libjansson-dev mandoc python3 openmpi-bin libopenmpi-dev clang gnuplot-nox"
case "${1:-}" in --ref) PKGS="$PKGS python3-torch python3-numpy";; esac

missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
  [ "${1:-}" = --check ] || echo "install-deps: all packages present"
  exit 0
fi
[ "${1:-}" = --check ] && { echo "missing:$missing"; exit 1; }

echo "install-deps: installing:$missing"
if [ "$(id -u)" = 0 ]; then SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo"
else
  echo "install-deps: not root and no password-less sudo; run as root:" >&2
  echo "  apt-get update && apt-get install -y$missing" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq || { echo "install-deps: apt-get update failed (offline?)" >&2; exit 1; }
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null ||
  { echo "install-deps: apt-get install failed for:$missing" >&2; exit 1; }
echo "install-deps: done"
