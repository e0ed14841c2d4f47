#!/usr/bin/env bash
# Installs the Debian 12 packages fusedcoll needs to build and test. Idempotent: installs only
# what is missing. When not root, prints the exact command to run instead and fails.
#   --hip   also Debian's hipcc (HIP 5.2 on clang 15, ~400 MB, ~20 s), to compile the GPU backend
#           for AMD (scripts/test.sh; no AMD GPU needed to compile and link)
#   --torch also Debian's PyTorch 1.13 (python3-torch, libtorch-dev; ~150 MB of archives, ~680 MB
#           installed), NumPy, and venv + pip (python3 -m pip install . into a virtual
#           environment), for the PyTorch component (docs/pytorch.md; scripts/test.sh).
#           Optional: when they are missing and this is not root, setup says so and succeeds,
#           and the build skips the component with a message.
# Always optional: python3-matplotlib, for the plots of docs/results.md (scripts/results,
# scripts/plot-results.py); without it they say so and the CSVs are still written.
set -euo pipefail

packages=(
  g++ cmake make pkg-config
  libtbb-dev libeigen3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  zlib1g-dev
  libopenmpi-dev openmpi-bin
  libsimgrid-dev
  python3
)
optional=(python3-matplotlib)
for arg in "$@"; do
  case "$arg" in
    --hip) packages+=(hipcc) ;;
    --torch) optional+=(python3-torch libtorch-dev python3-numpy python3-venv python3-pip) ;;
    *) echo "setup: unknown argument '$arg' (expected --hip or --torch)" >&2; exit 2 ;;
  esac
done

absent() {
  local p
  for p in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      echo "$p"
    fi
  done
}
mapfile -t missing < <(absent "${packages[@]}")
mapfile -t missing_optional < <(absent "${optional[@]}")

if [ ${#missing[@]} -eq 0 ] && [ ${#missing_optional[@]} -eq 0 ]; then
  echo "setup: all $(( ${#packages[@]} + ${#optional[@]} )) packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  if [ ${#missing_optional[@]} -gt 0 ]; then
    echo "setup: optional packages missing (the PyTorch component is skipped without python3-torch, the results plots without python3-matplotlib): ${missing_optional[*]}" >&2
    echo "setup: to build it, as root:  apt-get update && apt-get install -y --no-install-recommends ${missing_optional[*]}" >&2
  fi
  if [ ${#missing[@]} -eq 0 ]; then
    exit 0
  fi
  echo "setup: missing packages: ${missing[*]}" >&2
  echo "setup: run as root:  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
missing+=("${missing_optional[@]}")

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
