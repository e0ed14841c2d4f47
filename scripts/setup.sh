#!/usr/bin/env bash
# Installs the Debian 12 packages fusedcoll needs to build and test. Idempotent: installs only
# what is missing. When not root, prints the exact command to run instead and fails.
#   --hip   also Debian's hipcc (HIP 5.2 on clang 15, ~400 MB, ~20 s), to compile the GPU backend
#           for AMD (scripts/test.sh; no AMD GPU needed to compile and link)
set -euo pipefail

packages=(
  g++ cmake make pkg-config
  libtbb-dev libeigen3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  zlib1g-dev
  libopenmpi-dev openmpi-bin
)
for arg in "$@"; do
  case "$arg" in
    --hip) packages+=(hipcc) ;;
    *) echo "setup: unknown argument '$arg' (expected --hip)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: missing packages: ${missing[*]}" >&2
  echo "setup: run as root:  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
