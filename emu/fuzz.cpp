// Schedule fuzzing (FUSEDCOLL_FUZZ_SEED; docs/emulator.md, "Debugging"): workgroups start in a
// seeded random order, and a quarter of puts and signals are preceded by a seeded random sleep.
// Every decision comes from the seed, the rank, the launch index and the workgroup, so a seed
// replays the same injected schedule (the OS's own interleaving stays free).

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "emu/state.hpp"

namespace fusedcoll::emu {

void World::State::fuzz_sleep(impl::WgState* wg) {
  const std::uint64_t r = wg->rng();
  if (r % 4 != 0) return;  // a quarter of puts and signals get a delay of up to 200 us
  std::this_thread::sleep_for(std::chrono::microseconds((r >> 8) % 200));
}

void World::State::fuzz_kernel(impl::Kernel& k, int rank) {
  for (int i = 0; i < k.num_wgs; ++i)
    k.wgs[i]->rng.seed(fuzz_seed * 0x9E3779B97F4A7C15ull + (std::uint64_t(rank) << 40) +
                       (k.launch_index << 20) + std::uint64_t(i));
  std::mt19937_64 rng(fuzz_seed ^ (std::uint64_t(rank) << 32) ^ k.launch_index);
  std::shuffle(k.order.begin(), k.order.end(), rng);
}

}  // namespace fusedcoll::emu
