#!/usr/bin/env bash
# README command 2: set up, build, and run the whole test suite with ctest.
# 1. Release build with warnings as errors: every test (unit, install/consumer).
# 2. AddressSanitizer + UndefinedBehaviorSanitizer build of the ref and emu tests.
# 3. ThreadSanitizer build of the emu tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs="$(nproc)"

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DFUSEDCOLL_BUILD_TESTS=ON \
  -DFUSEDCOLL_BUILD_BENCH=ON -DFUSEDCOLL_WERROR=ON
cmake --build build -j "$jobs"
# -LE long: the exhaustive 2^32-pattern codec test runs on request only (docs/testing.md).
ctest --test-dir build --output-on-failure -j "$jobs" -LE long

# -O1 -g without -DNDEBUG: the debug-only invariants (FC_DASSERT) run under the sanitizers too.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DFUSEDCOLL_BUILD_TESTS=ON \
  -DFUSEDCOLL_BUILD_BENCH=OFF -DFUSEDCOLL_BUILD_EXAMPLES=OFF -DFUSEDCOLL_SANITIZE=address,undefined
cmake --build build-asan -j "$jobs"
ctest --test-dir build-asan --output-on-failure -j "$jobs" -L "ref|emu"

cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DFUSEDCOLL_BUILD_TESTS=ON \
  -DFUSEDCOLL_BUILD_BENCH=OFF -DFUSEDCOLL_BUILD_EXAMPLES=OFF -DFUSEDCOLL_SANITIZE=thread
cmake --build build-tsan -j "$jobs" --target emu_collectives_test emu_compressed_test emu_ops_test \
  emu_runtime_test
ctest --test-dir build-tsan --output-on-failure -j "$jobs" -L emu
