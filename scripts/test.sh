#!/usr/bin/env bash
# README command 2: set up, build, and run the whole test suite with ctest.
# 1. Release build with warnings as errors: every test (unit, install/consumer).
#    This includes the MPI suites (label mpi), run under mpiexec by ctest.
# 2. AddressSanitizer + UndefinedBehaviorSanitizer build of the ref, emu and mnist tests.
# 3. ThreadSanitizer build of the emu tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs="$(nproc)"

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DFUSEDCOLL_BUILD_TESTS=ON \
  -DFUSEDCOLL_BUILD_BENCH=ON -DFUSEDCOLL_WERROR=ON
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs"

# -O1 -g without -DNDEBUG: the debug-only invariants (FC_DASSERT) run under the sanitizers too.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DFUSEDCOLL_BUILD_TESTS=ON \
  -DFUSEDCOLL_BUILD_BENCH=OFF -DFUSEDCOLL_BUILD_EXAMPLES=OFF -DFUSEDCOLL_SANITIZE=address,undefined \
  -DFUSEDCOLL_ENABLE_MPI=OFF
cmake --build build-asan -j "$jobs"
ctest --test-dir build-asan --output-on-failure -j "$jobs" -L "ref|emu|mnist"

cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DFUSEDCOLL_BUILD_TESTS=ON \
  -DFUSEDCOLL_BUILD_BENCH=OFF -DFUSEDCOLL_BUILD_EXAMPLES=OFF -DFUSEDCOLL_SANITIZE=thread \
  -DFUSEDCOLL_ENABLE_MPI=OFF
cmake --build build-tsan -j "$jobs" --target emu_collectives_test emu_ops_test emu_runtime_test emu_link_test
ctest --test-dir build-tsan --output-on-failure -j "$jobs" -L emu
