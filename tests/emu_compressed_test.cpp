// The emulator's compressed collectives (wire = f16 / bf16 / E4M3 / E5M2; scaled per tensor or per
// block, pow2 scales, predivided avg) against ref/'s, bit for bit, with the harness of
// emu_collectives_test.cpp: every rank gets one poisoned block of memory holding its send and
// receive regions; emu runs on one copy, ref/ on another, and the whole blocks are compared with
// memcmp. Many calls run back to back in one World::run, so the scratch buffers and slots of
// compressed and plain calls are reused across calls; fuzz seeds shuffle the schedules.

#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "fusedcoll/collectives.hpp"
#include "fusedcoll/emu.hpp"
#include "fusedcoll/inputs.hpp"
#include "fusedcoll/ref.hpp"

#include "common/collective_cases.hpp"

namespace {

using namespace fctest::collectives;  // Case, add_case, run_cases, uneven
using fusedcoll::emu::World;
using fusedcoll::emu::WorldOptions;


// --- Case builders ------------------------------------------------------------------------------

using fusedcoll::CompressionOptions;
using fusedcoll::Scaling;
using fusedcoll::WireFormat;

std::string wire_str(const CompressionOptions& w) {
  std::ostringstream os;
  os << to_string(w.format) << "/" << to_string(w.scaling);
  if (w.scaling == Scaling::per_block) os << w.block;
  if (w.pow2_scale) os << "/pow2";
  if (w.predivide) os << "/predivide";
  if (w.overflow == fusedcoll::Overflow::ieee) os << "/ieee";
  return os.str();
}

/// The wire options every collective is run with.
std::vector<CompressionOptions> wires() {
  return {
      {.format = WireFormat::f16},
      {.format = WireFormat::bf16, .overflow = fusedcoll::Overflow::ieee},
      {.format = WireFormat::fp8_e4m3},
      {.format = WireFormat::fp8_e4m3, .scaling = Scaling::per_block, .block = 100},
      {.format = WireFormat::fp8_e5m2, .scaling = Scaling::per_block, .block = 256,
       .pow2_scale = true},
      {.format = WireFormat::fp8_e5m2, .scaling = Scaling::none},
  };
}

void add_all_reduce(Cases& cases, int P, std::int64_t count, ReduceOp op, AllReduceAlgo algo,
                    CompressionOptions w, bool in_place, std::uint64_t seed) {
  const std::size_t bytes = count * 4;
  Layout L;
  const std::size_t send_at = L.add(bytes), recv_at = in_place ? send_at : L.add(bytes);
  std::ostringstream what;
  what << "all_reduce P=" << P << " count=" << count << " " << to_string(op) << " "
       << to_string(algo) << " " << wire_str(w) << (in_place ? " in-place" : "")
       << " seed=" << seed;
  add_case<AllReduceArgs>(
      cases, what.str(), std::vector<std::size_t>(P, L.size),
      [=](int r, unsigned char* m) {
        fusedcoll::fill_values(m + send_at, count, DType::f32, seed, 1, r, ValueMode::random);
      },
      [=](int, unsigned char* m) {
        return AllReduceArgs{m + send_at, m + recv_at, count, DType::f32, op, algo, w};
      });
}


std::int64_t offset_of(const std::vector<std::int64_t>& n, int rank) {
  std::int64_t at = 0;
  for (int q = 0; q < rank; ++q) at += n[q];
  return at;
}

void add_reduce_scatter(Cases& cases, const std::vector<std::int64_t>& n, ReduceOp op,
                        CompressionOptions w, bool in_place, std::uint64_t seed) {
  const int P = static_cast<int>(n.size());
  const std::int64_t total = offset_of(n, P);
  std::vector<std::size_t> sizes(P), recv_at(P);
  Layout base;
  const std::size_t send_at = base.add(total * 4);
  for (int r = 0; r < P; ++r) {
    Layout L = base;
    recv_at[r] = in_place ? send_at + offset_of(n, r) * 4 : L.add(n[r] * 4);
    sizes[r] = L.size;
  }
  std::ostringstream what;
  what << "reduce_scatter P=" << P << " total=" << total << " " << to_string(op) << " "
       << wire_str(w) << (in_place ? " in-place" : "") << " seed=" << seed;
  add_case<ReduceScatterArgs>(
      cases, what.str(), sizes,
      [=](int r, unsigned char* m) {
        fusedcoll::fill_values(m + send_at, total, DType::f32, seed, 3, r, ValueMode::random);
      },
      [=](int r, unsigned char* m) {
        return ReduceScatterArgs{m + send_at, m + recv_at[r], n, DType::f32, op, w};
      });
}

void add_all_gather(Cases& cases, const std::vector<std::int64_t>& n, CompressionOptions w,
                    bool in_place, std::uint64_t seed) {
  const int P = static_cast<int>(n.size());
  const std::int64_t total = offset_of(n, P);
  std::vector<std::size_t> sizes(P), send_at(P);
  Layout base;
  const std::size_t recv_at = base.add(total * 4);
  for (int r = 0; r < P; ++r) {
    Layout L = base;
    send_at[r] = in_place ? recv_at + offset_of(n, r) * 4 : L.add(n[r] * 4);
    sizes[r] = L.size;
  }
  std::ostringstream what;
  what << "all_gather P=" << P << " total=" << total << " " << wire_str(w)
       << (in_place ? " in-place" : "") << " seed=" << seed;
  add_case<AllGatherArgs>(
      cases, what.str(), sizes,
      [=](int r, unsigned char* m) {
        fusedcoll::fill_values(m + send_at[r], n[r], DType::f32, seed, 4, r, ValueMode::random);
      },
      [=](int r, unsigned char* m) {
        return AllGatherArgs{m + send_at[r], m + recv_at, n, DType::f32, w};
      });
}

/// All-to-All(v) with uneven counts (zeros included), send segments in reverse peer order and
/// receive segments rotated, with gaps.
void add_all_to_allv(Cases& cases, int P, std::int64_t scale, CompressionOptions w,
                     std::uint64_t seed) {
  std::vector<std::vector<std::int64_t>> c(P, std::vector<std::int64_t>(P));
  for (int r = 0; r < P; ++r)
    for (int q = 0; q < P; ++q) {
      const std::uint64_t h = fusedcoll::hash_draw(seed, 7, r, q);
      c[r][q] = (h % 4 == 0) ? 0 : static_cast<std::int64_t>(h >> 8) % 37 * scale + (h >> 20) % 3;
    }
  std::vector<std::vector<std::int64_t>> sdispl(P), rdispl(P);
  std::vector<std::size_t> sizes(P), send_at(P), recv_at(P);
  for (int r = 0; r < P; ++r) {
    std::int64_t at = 0;
    sdispl[r].assign(P, 0);
    for (int q = P - 1; q >= 0; --q) {
      sdispl[r][q] = at;
      at += c[r][q] + 3;
    }
    const std::int64_t send_elems = at;
    at = 0;
    rdispl[r].assign(P, 0);
    for (int i = 0; i < P; ++i) {
      const int p = (r + i) % P;
      rdispl[r][p] = at;
      at += c[p][r] + 1;
    }
    Layout L;
    send_at[r] = L.add(send_elems * 4);
    recv_at[r] = L.add(at * 4);
    sizes[r] = L.size;
  }
  std::ostringstream what;
  what << "all_to_allv P=" << P << " scale=" << scale << " " << wire_str(w) << " seed=" << seed;
  add_case<AllToAllvArgs>(
      cases, what.str(), sizes,
      [=](int r, unsigned char* m) {
        for (int q = 0; q < P; ++q)
          fusedcoll::fill_values(m + send_at[r] + sdispl[r][q] * 4, c[r][q], DType::f32, seed,
                                 2 + q, r, ValueMode::random);
      },
      [=](int r, unsigned char* m) {
        AllToAllvArgs a;
        a.send = m + send_at[r];
        a.recv = m + recv_at[r];
        a.dtype = DType::f32;
        for (int q = 0; q < P; ++q) {
          a.send_counts.push_back(c[r][q]);
          a.recv_counts.push_back(c[q][r]);
        }
        a.send_displs = sdispl[r];
        a.recv_displs = rdispl[r];
        a.wire = w;
        return a;
      });
}

/// Every compressed collective of one world, with every wire option.
void add_all(Cases& cases, int P, std::uint64_t seed) {
  for (const CompressionOptions& w0 : wires()) {
    for (std::int64_t count : {std::int64_t{0}, std::int64_t{1}, std::int64_t{7}, std::int64_t{1000}})
      for (AllReduceAlgo algo : {AllReduceAlgo::direct, AllReduceAlgo::ring})
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max})
          for (bool predivide : {false, true}) {
            if (predivide && op != ReduceOp::avg) continue;
            CompressionOptions w = w0;
            w.predivide = predivide;
            add_all_reduce(cases, P, count, op, algo, w, count == 7, ++seed);
          }
    for (int kind : {0, 1, 2}) {
      ++seed;
      add_reduce_scatter(cases, uneven(P, kind, 300, seed), ReduceOp::sum, w0, kind == 2, seed);
      add_reduce_scatter(cases, uneven(P, kind, 300, seed), ReduceOp::avg, w0, false, seed);
      add_all_gather(cases, uneven(P, kind, 300, seed), w0, kind == 1, seed);
    }
    add_all_to_allv(cases, P, 1, w0, ++seed);
    add_all_to_allv(cases, P, 30, w0, ++seed);
  }
}

// --- Tests --------------------------------------------------------------------------------------

class EmuCompressed : public ::testing::TestWithParam<int> {};

TEST_P(EmuCompressed, EveryCollectiveMatchesRef) {
  const int P = GetParam();
  WorldOptions o;
  o.world_size = P;
  o.device.compute_units = 2;
  World world(o);
  SCOPED_TRACE(name_of(world.options()));
  Cases cases;
  add_all(cases, P, 1000 + P);
  run_cases(world, cases);
}

TEST_P(EmuCompressed, SeveralTilesPerChunk) {
  const int P = GetParam();
  WorldOptions o;
  o.world_size = P;
  o.device.compute_units = 2;
  World world(o);
  SCOPED_TRACE(name_of(world.options()));
  Cases cases;
  std::uint64_t seed = 2000;
  const std::int64_t count = 2 * 16384 * P + 5;  // several 64 KiB tiles per chunk, uneven
  const CompressionOptions w{.format = WireFormat::fp8_e4m3, .scaling = Scaling::per_block,
                             .block = 1000, .pow2_scale = true};
  for (AllReduceAlgo algo : {AllReduceAlgo::direct, AllReduceAlgo::ring}) {
    add_all_reduce(cases, P, count, ReduceOp::sum, algo, w, algo == AllReduceAlgo::ring, ++seed);
    add_all_reduce(cases, P, count, ReduceOp::avg, algo, {.format = WireFormat::f16}, false, ++seed);
  }
  seed += 1;
  add_reduce_scatter(cases, uneven(P, 2, 40000, seed), ReduceOp::sum, w, true, seed);
  seed += 1;
  add_all_gather(cases, uneven(P, 2, 40000, seed), {.format = WireFormat::bf16}, false, seed);
  add_all_to_allv(cases, P, 1000, w, ++seed);
  run_cases(world, cases);
}

INSTANTIATE_TEST_SUITE_P(Worlds, EmuCompressed, ::testing::Values(1, 2, 3, 4, 8),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return fusedcoll::detail::make_string("P", i.param);
                         });

// Schedule fuzzing must not change a bit.
TEST(EmuCompressedFuzz, SeedsBitExact) {
  for (std::uint64_t fuzz = 1; fuzz <= 4; ++fuzz) {
    WorldOptions o;
    o.world_size = fuzz % 2 ? 3 : 4;
    o.device.compute_units = 2;
    o.device.max_resident_wgs = fuzz == 4 ? 1 : 0;
    o.fuzz_seed = fuzz * 7919;
    World world(o);
    SCOPED_TRACE(name_of(o));
    Cases cases;
    add_all(cases, o.world_size, 3000 + fuzz);
    run_cases(world, cases);
  }
}

// A NaN in the data with a scaled fp8 wire is rejected on every rank, as ref/ rejects it.
TEST(EmuCompressedErrors, NanAmaxIsInvalidOnEveryRank) {
  WorldOptions o;
  o.world_size = 3;
  o.device.compute_units = 1;
  World world(o);
  std::vector<std::vector<float>> send(3, std::vector<float>(10, 1.0f)), recv = send;
  send[2][4] = NAN;
  std::atomic<int> rejected{0};
  EXPECT_THROW(world.run([&](Communicator& comm) {
    const int r = comm.rank();
    try {
      fusedcoll::all_reduce(comm, {send[r].data(), recv[r].data(), 10, DType::f32, ReduceOp::sum,
                                   AllReduceAlgo::ring, {.format = WireFormat::fp8_e4m3}});
    } catch (const fusedcoll::InvalidArgument&) {
      ++rejected;
      throw;
    }
  }),
               fusedcoll::InvalidArgument);
  EXPECT_EQ(rejected.load(), 3);
  send[2][4] = 2.0f;
  World fresh(o);  // a World that saw a failure stays aborted
  fresh.run([&](Communicator& comm) {
    const int r = comm.rank();
    // pow2 scale 64: every value and partial sum (64 .. 256) is exact in E4M3.
    fusedcoll::all_reduce(comm, {send[r].data(), recv[r].data(), 10, DType::f32, ReduceOp::sum,
                                 AllReduceAlgo::ring,
                                 {.format = WireFormat::fp8_e4m3, .pow2_scale = true}});
  });
  EXPECT_EQ(recv[0][4], 4.0f);
  EXPECT_EQ(recv[1][0], 3.0f);
}

// Ranks that disagree on the wire options fail on every rank before anything moves.
TEST(EmuCompressedErrors, MismatchedWireIsInvalid) {
  WorldOptions o;
  o.world_size = 2;
  o.device.compute_units = 1;
  World world(o);
  std::vector<std::vector<float>> send(2, std::vector<float>(10, 1.0f)), recv = send;
  EXPECT_THROW(world.run([&](Communicator& comm) {
    const int r = comm.rank();
    CompressionOptions w{.format = r == 0 ? WireFormat::f16 : WireFormat::bf16};
    fusedcoll::all_reduce(comm, {send[r].data(), recv[r].data(), 10, DType::f32, ReduceOp::sum,
                                 AllReduceAlgo::direct, w});
  }),
               fusedcoll::InvalidArgument);
  EXPECT_EQ(recv[0], send[0]);
}

}  // namespace
