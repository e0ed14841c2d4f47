// fusedcoll-codec-bench: throughput of the batch codecs (compression.hpp), one thread, in bytes of
// f32 per second (input f32 for encode, output f32 for decode; the `bytes_per_second` counter).
// The buffer (1 Mi elements: 4 MiB of f32) fits the L2/L3 of a server core but not L1, which is
// the size a collective's tile pipeline hands the codec. The `/dram` variants run on 16 Mi elements
// (64 MiB of f32): the passes of a large collective over buffers in memory, which is what the
// cost model prices (scripts/calibrate-host-preset). The instruction set is the dispatched one
// (FUSEDCOLL_KERNEL_ISA caps it). Results and the command: docs/results/kernels.md, "Codec throughput".
//
//   fusedcoll-codec-bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fusedcoll/compression.hpp"
#include "fusedcoll/inputs.hpp"

namespace {

using fusedcoll::WireFormat;

constexpr std::int64_t kCacheElems = 1 << 20, kDramElems = 1 << 24;

std::vector<float> gradients(std::int64_t n) {
  // Gradient-like magnitudes: random mantissas over several binades, both signs.
  std::vector<float> x(static_cast<std::size_t>(n));
  fusedcoll::fill_values(x.data(), n, fusedcoll::DType::f32, 42, 0, 0,
                         fusedcoll::ValueMode::random);
  return x;
}

void BM_Encode(benchmark::State& state, std::int64_t n, WireFormat f, bool scaled) {
  const std::vector<float> x = gradients(n);
  std::vector<std::byte> out(n * fusedcoll::wire_size(f));
  for (auto _ : state) {
    if (scaled)
      fusedcoll::encode_scaled(f, x.data(), out.data(), n, 64.0f);
    else
      fusedcoll::encode(f, x.data(), out.data(), n);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 4);
}

void BM_Decode(benchmark::State& state, std::int64_t n, WireFormat f, bool scaled) {
  const std::vector<float> x = gradients(n);
  std::vector<std::byte> codes(n * fusedcoll::wire_size(f));
  fusedcoll::encode(f, x.data(), codes.data(), n);
  std::vector<float> out(n);
  for (auto _ : state) {
    if (scaled)
      fusedcoll::decode_scaled(f, codes.data(), out.data(), n, 64.0f);
    else
      fusedcoll::decode(f, codes.data(), out.data(), n);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 4);
}

/// The fp8 wire's amax scan (max |x|, NaN-propagating) over the same buffer: bytes read per second.
void BM_Amax(benchmark::State& state, std::int64_t n) {
  const std::vector<float> x = gradients(n);
  for (auto _ : state) {
    std::vector<float> m = fusedcoll::block_amax(x, 0);
    benchmark::DoNotOptimize(m.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 4);
}

/// The copy the codecs compete with: memcpy of the same f32 buffer.
void BM_Memcpy(benchmark::State& state, std::int64_t n) {
  const std::vector<float> x = gradients(n);
  std::vector<float> out(n);
  for (auto _ : state) {
    std::memcpy(out.data(), x.data(), n * 4);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * 4);
}

const std::pair<const char*, WireFormat> kFormats[] = {{"f16", WireFormat::f16},
                                                       {"bf16", WireFormat::bf16},
                                                       {"fp8_e4m3", WireFormat::fp8_e4m3},
                                                       {"fp8_e5m2", WireFormat::fp8_e5m2}};

int register_all() {
  for (const auto& [suffix, elems] : {std::pair<const char*, std::int64_t>{"", kCacheElems},
                                      std::pair<const char*, std::int64_t>{"/dram", kDramElems}}) {
    auto named = [&, suffix = suffix](const char* base, const char* fmt) {
      return std::string(base) + "/" + fmt + suffix;
    };
    for (const auto& [name, f] : kFormats) {
      benchmark::RegisterBenchmark(named("encode", name).c_str(), BM_Encode, elems, f, false);
      benchmark::RegisterBenchmark(named("decode", name).c_str(), BM_Decode, elems, f, false);
    }
    for (const auto& [name, f] : kFormats) {
      if (f == WireFormat::f16 || f == WireFormat::bf16) continue;
      benchmark::RegisterBenchmark(named("encode_scaled", name).c_str(), BM_Encode, elems, f, true);
      benchmark::RegisterBenchmark(named("decode_scaled", name).c_str(), BM_Decode, elems, f, true);
    }
    benchmark::RegisterBenchmark(named("amax", "f32").c_str(), BM_Amax, elems);
    benchmark::RegisterBenchmark(named("memcpy", "f32").c_str(), BM_Memcpy, elems);
  }
  return 0;
}
const int kRegistered = register_all();

}  // namespace

BENCHMARK_MAIN();
