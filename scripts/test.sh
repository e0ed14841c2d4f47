#!/usr/bin/env bash
# README command 2: set up, build, and run the whole test suite with ctest.
# 1. The GPU backend, compiled and linked for NVIDIA (nvcc, sm_90) and AMD (hipcc, gfx90a + gfx940):
#    CI machines have no GPU, so `ctest -L gpu` must report every GPU test as skipped. It runs
#    first: a compile break shows within minutes, and the log ends with the runs that test.
# 2. AddressSanitizer + UndefinedBehaviorSanitizer build of the ref, model, emu and mnist tests.
# 3. ThreadSanitizer build of the emu tests and the GPU proxy's queue (host threads).
# 4. Release build with warnings as errors: every test (unit, install/consumer), including the
#    MPI suites (label mpi), run under mpiexec by ctest, the SimGrid scale-out simulator (label
#    sim; required: setup installs libsimgrid-dev), and the PyTorch component (label torch)
#    when Debian's PyTorch is installed (setup --torch installs it as root; without it the
#    component is skipped with a message).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --hip --torch
jobs="$(nproc)"

# The GPU builds need no oneTBB, Eigen or benchmark: only ref/, the backend, its tests and bench.
gpu_config=(-DCMAKE_BUILD_TYPE=Release -DFUSEDCOLL_BUILD_EMU=OFF -DFUSEDCOLL_ENABLE_MPI=OFF
            -DFUSEDCOLL_BUILD_TESTS=OFF
            -DFUSEDCOLL_BUILD_BENCH=OFF -DFUSEDCOLL_BUILD_EXAMPLES=OFF -DFUSEDCOLL_WERROR=ON)
gpu_targets=(fusedcoll_gpu fusedcoll_gpu_test fusedcoll-gpu-bench fusedcoll-perf)
# Process mode (one rank per MPI process, docs/gpu.md) is built where MPI is found, as here: its
# suite runs under mpiexec and must skip too.
gpu_process_target() {
  if grep -q '^FUSEDCOLL_GPU_PROCESS:BOOL=ON' "$1/CMakeCache.txt"; then echo fusedcoll_gpu_process_test; fi
}
if [ -x /usr/local/cuda/bin/nvcc ]; then
  cmake -S . -B build-cuda "${gpu_config[@]}" -DFUSEDCOLL_ENABLE_CUDA=ON \
    -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DFUSEDCOLL_CUDA_ARCHITECTURES=90
  cmake --build build-cuda -j "$jobs" --target "${gpu_targets[@]}" $(gpu_process_target build-cuda)
  ctest --test-dir build-cuda --output-on-failure -L gpu
else
  echo "test.sh: /usr/local/cuda/bin/nvcc not found: the CUDA compile step is skipped"
fi
if command -v hipcc >/dev/null; then
  # Debian's hipcc (clang 15) predates the gfx942 target id; gfx940 is the same MI300 ISA family.
  cmake -S . -B build-hip "${gpu_config[@]}" -DFUSEDCOLL_ENABLE_HIP=ON \
    -DFUSEDCOLL_HIP_ARCHITECTURES="gfx90a;gfx940"
  cmake --build build-hip -j "$jobs" --target "${gpu_targets[@]}" $(gpu_process_target build-hip)
  ctest --test-dir build-hip --output-on-failure -L gpu
else
  echo "test.sh: hipcc not found: the HIP compile step is skipped"
fi

# -O1 -g without -DNDEBUG: the debug-only invariants (FC_DASSERT) run under the sanitizers too.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DFUSEDCOLL_BUILD_TESTS=ON \
  -DFUSEDCOLL_BUILD_BENCH=OFF -DFUSEDCOLL_BUILD_EXAMPLES=OFF -DFUSEDCOLL_SANITIZE=address,undefined \
  -DFUSEDCOLL_ENABLE_MPI=OFF
cmake --build build-asan -j "$jobs"
ctest --test-dir build-asan --output-on-failure -j "$jobs" -L "ref|model|emu|mnist"

cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DFUSEDCOLL_BUILD_TESTS=ON \
  -DFUSEDCOLL_BUILD_BENCH=OFF -DFUSEDCOLL_BUILD_EXAMPLES=OFF -DFUSEDCOLL_SANITIZE=thread \
  -DFUSEDCOLL_ENABLE_MPI=OFF
cmake --build build-tsan -j "$jobs" --target emu_collectives_test emu_compressed_test emu_errors_test \
  emu_ops_test emu_runtime_test emu_link_test emu_vtime_test gpu_proxy_queue_test kernel_api_test \
  kernel_tutorial_test kernel_ag_gemm_test
ctest --test-dir build-tsan --output-on-failure -j "$jobs" -L emu
# The GPU proxy's queue: host threads as the device's producers, one as the proxy.
ctest --test-dir build-tsan --output-on-failure -R '^GpuProxyQueue\.'

# The PyTorch component is required once its packages are there, so that a break in it fails CI
# instead of skipping it quietly.
torch_component=AUTO
if dpkg-query -W -f='${Status}' python3-torch libtorch-dev 2>/dev/null |
    grep -c "install ok installed" | grep -qx 2; then
  torch_component=ON
else
  echo "test.sh: python3-torch / libtorch-dev are not installed: the PyTorch component (label torch) is skipped"
fi
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DFUSEDCOLL_BUILD_TESTS=ON \
  -DFUSEDCOLL_BUILD_BENCH=ON -DFUSEDCOLL_WERROR=ON -DFUSEDCOLL_ENABLE_TORCH="$torch_component" \
  -DFUSEDCOLL_ENABLE_SIM=ON
cmake --build build -j "$jobs"
# -LE long: the exhaustive 2^32-pattern codec test runs on request only (docs/testing.md).
ctest --test-dir build --output-on-failure -j "$jobs" -LE long
