#!/usr/bin/env bash
# apt-get install the Debian packages named as arguments, as root or through sudo (nothing to do without any).
set -euo pipefail
[ $# -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ]; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1; then
  SUDO="sudo"
else
  echo "error: $* missing and neither root nor sudo is available to install it" >&2
  exit 1
fi
echo "installing $* (apt)"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
