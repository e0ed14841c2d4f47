// fusedcoll-codec-bench: throughput of the batch codecs (compression.hpp), one thread, in bytes of
// f32 per second (input f32 for encode, output f32 for decode; the `bytes_per_second` counter).
// The buffer (1 Mi elements: 4 MiB of f32) fits the L2/L3 of a server core but not L1, which is
// the size a collective's tile pipeline hands the codec. The instruction set is the dispatched one
// (FUSEDCOLL_KERNEL_ISA caps it). Results and the command: docs/results.md, "Codec throughput".
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

constexpr std::int64_t kElems = 1 << 20;

std::vector<float> gradients() {
  // Gradient-like magnitudes: random mantissas over several binades, both signs.
  std::vector<float> x(kElems);
  fusedcoll::fill_values(x.data(), kElems, fusedcoll::DType::f32, 42, 0, 0,
                         fusedcoll::ValueMode::random);
  return x;
}

void BM_Encode(benchmark::State& state, WireFormat f, bool scaled) {
  const std::vector<float> x = gradients();
  std::vector<std::byte> out(kElems * fusedcoll::wire_size(f));
  for (auto _ : state) {
    if (scaled)
      fusedcoll::encode_scaled(f, x.data(), out.data(), kElems, 64.0f);
    else
      fusedcoll::encode(f, x.data(), out.data(), kElems);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kElems * 4);
}

void BM_Decode(benchmark::State& state, WireFormat f, bool scaled) {
  const std::vector<float> x = gradients();
  std::vector<std::byte> codes(kElems * fusedcoll::wire_size(f));
  fusedcoll::encode(f, x.data(), codes.data(), kElems);
  std::vector<float> out(kElems);
  for (auto _ : state) {
    if (scaled)
      fusedcoll::decode_scaled(f, codes.data(), out.data(), kElems, 64.0f);
    else
      fusedcoll::decode(f, codes.data(), out.data(), kElems);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kElems * 4);
}

/// The fp8 wire's amax scan (max |x|, NaN-propagating) over the same buffer: bytes read per second.
void BM_Amax(benchmark::State& state) {
  const std::vector<float> x = gradients();
  for (auto _ : state) {
    std::vector<float> m = fusedcoll::block_amax(x, 0);
    benchmark::DoNotOptimize(m.data());
  }
  state.SetBytesProcessed(state.iterations() * kElems * 4);
}

/// The copy the codecs compete with: memcpy of the same f32 buffer.
void BM_Memcpy(benchmark::State& state) {
  const std::vector<float> x = gradients();
  std::vector<float> out(kElems);
  for (auto _ : state) {
    std::memcpy(out.data(), x.data(), kElems * 4);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * kElems * 4);
}

const std::pair<const char*, WireFormat> kFormats[] = {{"f16", WireFormat::f16},
                                                       {"bf16", WireFormat::bf16},
                                                       {"fp8_e4m3", WireFormat::fp8_e4m3},
                                                       {"fp8_e5m2", WireFormat::fp8_e5m2}};

int register_all() {
  for (const auto& [name, f] : kFormats) {
    benchmark::RegisterBenchmark(("encode/" + std::string(name)).c_str(), BM_Encode, f, false);
    benchmark::RegisterBenchmark(("decode/" + std::string(name)).c_str(), BM_Decode, f, false);
  }
  for (const auto& [name, f] : kFormats) {
    if (f == WireFormat::f16 || f == WireFormat::bf16) continue;
    benchmark::RegisterBenchmark(("encode_scaled/" + std::string(name)).c_str(), BM_Encode, f, true);
    benchmark::RegisterBenchmark(("decode_scaled/" + std::string(name)).c_str(), BM_Decode, f, true);
  }
  benchmark::RegisterBenchmark("amax/f32", BM_Amax);
  benchmark::RegisterBenchmark("memcpy/f32", BM_Memcpy);
  return 0;
}
const int kRegistered = register_all();

}  // namespace

BENCHMARK_MAIN();
