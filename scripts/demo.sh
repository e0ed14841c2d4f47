#!/usr/bin/env bash
# README command 1: set up, build, and run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)" --target fusedcoll-demo
./build/examples/fusedcoll-demo "$@"
